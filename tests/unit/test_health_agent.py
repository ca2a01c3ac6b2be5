"""The health program's hands-off rule, through SlurmClient and the controller's own lines (as
sinfo -O and scontrol show node print them on the local cluster): a node whose reason is not ours,
in any state, is never drained over, resumed or verified by us, even when our slurmd check fails
because of that very state."""

from __future__ import annotations

import pytest

from slurmctl.ops.health import agent
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.parsing import SEP

from .fakes import ReplayRunner

NODE_LINE = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=4 Gres=gpu:2 NodeAddr=127.0.0.1 "
             "State={state} SlurmdStartTime=2026-12-01T20:00:00 Partitions=main "
             "Reason={reason} [root@2026-12-01T22:54:36]")


def runner(sinfo_state: str, show_state: str, reason: str, user: str = "root(0)") -> ReplayRunner:
    row = SEP.join(["n1", sinfo_state, user, "2026-12-01T22:54:36", "gpu:2", reason]) + SEP + "\n"
    return ReplayRunner({"sinfo": row, "squeue": "",
                         "scontrol": NODE_LINE.format(state=show_state, reason=reason or "(null)")})


def cfg(tmp_path, client) -> HookConfig:
    c = HookConfig.from_env({"SLURMD_NODENAME": "n1", "SLURMCTL_LOCAL_DIR": str(tmp_path),
                             "SLURMCTL_SLURM_BIN_DIR": "/nonexistent", "SLURMCTL_DATA_CACHE_DIRS": "",
                             "SLURMCTL_MIN_FREE_SCRATCH_MB": "1", "SLURMCTL_MIN_FREE_SHM_MB": "1"})
    c.slurm, c.nvidia_smi = client, None
    return c


def changes(r: ReplayRunner) -> list[list[str]]:
    return [a for a in r.calls if a[:2] in (["scontrol", "update"], ["scontrol", "create"], ["sbatch"])
            or a[0] == "sbatch"]


@pytest.mark.parametrize("sinfo_state,show_state,reason", [
    ("idle+fail", "IDLE+FAIL", "maint-fail"),  # an operator's state=fail
    ("down", "DOWN", "maint-down"),  # an operator's state=down
    ("idle*", "IDLE*+NOT_RESPONDING", "Not responding"),  # slurmctld's own
    ("down*", "DOWN*", "Not responding"),
    ("idle+drain", "IDLE+DRAIN", "maint"),  # an operator's drain
])
def test_someone_elses_node_is_never_drained_over_resumed_or_verified(tmp_path, sinfo_state, show_state, reason):
    r = runner(sinfo_state, show_state, reason)
    c = cfg(tmp_path, SlurmClient(r))
    outcome = agent.periodic(c, now=1_000_000.0)
    assert outcome.action == "left_alone", outcome
    assert reason in outcome.detail
    assert changes(r) == []
    # the active check and the verification job's own failure are bound by the same rule
    assert agent.drain(c, agent.reasons.DrainReason("node_problem", "allreduce", "too slow")) == "left_alone"
    assert agent.replace_reason(c, agent.reasons.DrainReason("node_problem", "verify", "x")) is False
    assert agent.resume_if_ours(c) is False
    assert changes(r) == []


def test_our_drain_on_a_node_slurm_marked_down_is_not_resumed(tmp_path):
    ours = "slurmctl:[node_problem] disk: full"
    r = runner("down*+drain", "DOWN*+DRAIN", ours)
    c = cfg(tmp_path, SlurmClient(r))
    assert agent.resume_if_ours(c) is False
    assert agent.periodic(c, now=1_000_000.0).action in ("none", "left_alone")
    assert changes(r) == []


def test_a_healthy_node_in_service_is_still_drained_by_a_failed_check(tmp_path):
    r = runner("idle", "IDLE", "")
    c = HookConfig.from_env({"SLURMD_NODENAME": "n1", "SLURMCTL_LOCAL_DIR": str(tmp_path),
                             "SLURMCTL_SLURM_BIN_DIR": "/nonexistent", "SLURMCTL_DATA_CACHE_DIRS": "",
                             "SLURMCTL_HEALTH_FAULTS": "disk"})
    c.slurm, c.nvidia_smi = SlurmClient(r), None
    assert agent.periodic(c, now=1_000_000.0).action == "drained"
    assert changes(r) == [["scontrol", "update", "nodename=n1", "state=drain",
                           "reason=slurmctl:[node_problem] disk: injected fault (SLURMCTL_HEALTH_FAULTS)"]]


def test_nodes_reads_the_suspect_score_out_of_our_suspect_drain(monkeypatch):
    from slurmctl.ops.health import blame
    from slurmctl.ops.health.view import node_views

    from .fakes import pin_seal

    pin_seal(monkeypatch)
    why = blame.suspect("n1", [blame.Failure(9, "nccl_error", 990.0, 1002, ("n1",)),
                               blame.Failure(14, "nccl_error", 995.0, 1002, ("n1", "n3"))], 1000.0).why
    reason = agent.reasons.DrainReason("node_problem", "suspect", why).text()
    row = SEP.join(["n1", "idle+drain", "root(0)", "2026-12-01T22:40:00", "gpu:2", reason]) + SEP + "\n"
    views = node_views(SlurmClient(ReplayRunner({"sinfo": row})), state_dir=None, now=1000.0)
    assert views[0].check == "suspect" and views[0].suspect_score == 2, views[0]
