"""GPU-hours lost per node (health/lost.py) from accounting lines captured on the local cluster
(sacct --duplicates attempts, sacctmgr node events of 2026-12-01): which attempts are the node's
loss, which node of a multi-node NODE_FAIL is charged, which drained time counts."""

from __future__ import annotations

from datetime import datetime

import pytest

from slurmctl.ops.health.lost import gpu_hours_lost
from slurmctl.slurm.client import SlurmClient

from .fakes import ReplayRunner, pin_seal, sacct_output

ATTEMPTS = [  # JobIDRaw State NodeList ElapsedRaw AllocTRES Start End UID
    ["1007", "NODE_FAIL", "h100-[1-2]", "182", "billing=16,cpu=16,gres/gpu:h100=16,gres/gpu=16,mem=16000M,node=2",
     "2026-12-01T15:30:59", "2026-12-01T15:34:01", "1001"],  # h100-2 went down at its end: h100-2's loss alone
    ["14", "FAILED", "h100-[1-2]", "3600", "billing=2,cpu=2,gres/gpu:h100=16,gres/gpu=16,mem=2000M,node=2",
     "2026-12-01T14:48:28", "2026-12-01T15:48:28", "1001"],  # nccl_timeout: h100-2 (it went down) takes it all
    ["15", "FAILED", "h100-1", "3600", "billing=1,cpu=1,gres/gpu=8,mem=1000M,node=1",
     "2026-12-01T14:48:28", "2026-12-01T15:48:28", "1001"],  # diagnosed import_error: the user's, not the node's
    ["9", "FAILED", "l4-1", "1", "billing=1,cpu=1,mem=1000M,node=1", "2026-12-01T14:48:12", "2026-12-01T14:48:13",
     "1001"],
    ["16", "COMPLETED", "h100-1", "3600", "billing=1,cpu=1,gres/gpu=8,mem=1000M,node=1",
     "2026-12-01T14:48:28", "2026-12-01T15:48:28", "1001"],
]
EVENTS = "\n".join([
    "|2026-12-01T14:47:16|Unknown||Cluster Registered TRES",
    "h100-2|2026-12-01T15:34:01|2026-12-01T15:35:25|DOWN*|Not responding",  # 84 s x 8 GPUs
    "h100-3|2026-12-01T19:17:19|2026-12-01T19:47:19|DRAIN|maint",  # an operator's: not the node's loss
    "h100-3|2026-12-01T20:00:00|Unknown|DRAIN|slurmctl:[node_problem] disk: /scratch has 3 MB free",  # open: to now
    "h100-1|2026-12-01T20:00:00|2026-12-01T21:00:00|DRAIN|slurmctl:[user_problem] shm: uid 1001 holds 90%",
]) + "\n"


def replaying(attempts, events) -> SlurmClient:
    hosts = {"h100-[1-2]": "h100-1\nh100-2\n", "h100-[2-3]": "h100-2\nh100-3\n", "h100-1": "h100-1\n",
             "h100-2": "h100-2\n", "h100-3": "h100-3\n", "l4-1": "l4-1\n"}

    class Runner(ReplayRunner):
        def run(self, argv, timeout=60.0):
            if argv[:3] == ["scontrol", "show", "hostnames"]:
                self.outputs = {**self.outputs, "scontrol": hosts[argv[3]]}
            return super().run(argv, timeout)

    return SlurmClient(Runner({"sacct": sacct_output(*attempts), "sacctmgr": events}))


@pytest.fixture
def client(monkeypatch):
    pin_seal(monkeypatch)
    return replaying(ATTEMPTS, EVENTS)


def test_the_nodes_own_losses_only(client):
    categories = {(14, "2026-12-01T14:48:28"): "nccl_timeout", (15, "2026-12-01T14:48:28"): "import_error"}
    lost = gpu_hours_lost(client, {"h100-1": 8, "h100-2": 8, "h100-3": 8, "l4-1": 1}, categories,
                          datetime(2026, 12, 1, 22, 0, 0))
    node_fail = 16 * 182 / 3600
    # job 14's NCCL failure on h100-[1-2]: h100-2 went down (a suspect), h100-1 has no evidence against it
    assert lost["h100-2"].failed_jobs == pytest.approx(node_fail + 16.0) and lost["h100-2"].jobs == 2
    assert lost["h100-1"].failed_jobs == 0 and lost["h100-1"].jobs == 0
    assert lost["h100-2"].drained == pytest.approx(84 / 3600 * 8)
    assert lost["h100-1"].drained == 0  # a [user_problem] drain is the user's doing
    assert lost["h100-3"].drained == pytest.approx(2 * 8)  # ours, still open at 22:00; maint not counted
    assert lost["l4-1"].total == 0
    argv = client.runner.calls
    assert argv[0][:5] == ["sacctmgr", "-n", "-P", "show", "event"]
    assert argv[0][5:] == ["start=2026-11-24T22:00:00", "end=2026-12-01T22:00:00",
                           "format=NodeName,TimeStart,TimeEnd,State,Reason"]
    assert argv[1][:5] == ["sacct", "-a", "-X", "--duplicates", "-n"]
    assert argv[1][8] == "JobIDRaw,State,NodeList,ElapsedRaw,AllocTRES,Start,End,UID,JobIDRaw"


def test_no_diagnosis_no_charge_for_a_failed_job(client):
    lost = gpu_hours_lost(client, {"h100-1": 8, "h100-2": 8}, {}, datetime(2026, 12, 1, 22, 0, 0))
    assert lost["h100-1"].failed_jobs == 0 and lost["h100-2"].jobs == 1


GPU2 = "billing=2,cpu=2,gres/gpu=2,mem=2000M,node=1"
GPU4 = "billing=4,cpu=4,gres/gpu=4,mem=4000M,node=2"
NOW = datetime(2026, 12, 1, 23, 0, 0)


def nccl(job, node, uid, state="FAILED", tres=GPU2, start="2026-12-01T22:38:00", end="2026-12-01T22:38:31"):
    return [str(job), state, node, "31", tres, start, end, str(uid)], ((job, start), "nccl_error")


def lost_of(monkeypatch, rows, events="") -> dict:
    pin_seal(monkeypatch)
    client = replaying([r for r, _ in rows], events)
    nodes = {"h100-1": 2, "h100-2": 2, "h100-3": 2}
    return gpu_hours_lost(client, nodes, dict(c for _, c in rows), NOW)


def test_one_users_printed_nccl_lines_charge_no_node(monkeypatch):
    """bob's two jobs on h100-1 that echo an NCCL line and exit 1: a diagnosis is what the job
    printed; the same user on the same node again and again is no evidence against the node."""
    lost = lost_of(monkeypatch, [nccl(9, "h100-1", 1002), nccl(10, "h100-1", 1002)])
    assert lost["h100-1"].failed_jobs == 0 and lost["h100-1"].jobs == 0


def test_two_users_failures_charge_the_common_node_only(monkeypatch):
    lost = lost_of(monkeypatch, [nccl(8, "h100-1", 1001), nccl(9, "h100-1", 1002)])
    assert lost["h100-1"].failed_jobs == pytest.approx(2 * 2 * 31 / 3600) and lost["h100-1"].jobs == 2
    # a two-node job shared with the suspect: charged to the suspect alone, never its healthy peer
    lost = lost_of(monkeypatch, [nccl(8, "h100-1", 1001), nccl(9, "h100-1", 1002),
                                 nccl(11, "h100-[1-2]", 1001, tres=GPU4)])
    assert lost["h100-1"].failed_jobs == pytest.approx((2 + 2 + 4) * 31 / 3600)
    assert lost["h100-2"].failed_jobs == 0


def test_a_requeued_attempt_with_a_gpu_diagnosis_is_charged(monkeypatch):
    """A slurmctl run's `end` requeues its failed attempt: sacct says REQUEUED, the cost record says nccl_error."""
    lost = lost_of(monkeypatch, [nccl(8, "h100-1", 1001), nccl(89, "h100-1", 1002, state="REQUEUED")])
    assert lost["h100-1"].failed_jobs == pytest.approx(2 * 2 * 31 / 3600) and lost["h100-1"].jobs == 2
    alone = lost_of(monkeypatch, [nccl(89, "h100-1", 1002, state="REQUEUED")],
                    "h100-1|2026-12-01T22:39:00|2026-12-01T22:40:00|DRAIN|slurmctl:[node_problem] verify: "
                    "allreduce: too slow\n")
    assert alone["h100-1"].failed_jobs == pytest.approx(2 * 31 / 3600)  # a failed verification is evidence


def test_one_users_jobs_on_different_node_sets_charge_the_common_node(monkeypatch):
    """The documented residual, the same rule as blame: one user's failures on {1}, {1,2} and {1,3}."""
    lost = lost_of(monkeypatch, [nccl(9, "h100-1", 1002), nccl(13, "h100-[1-2]", 1002, tres=GPU4)])
    assert lost["h100-1"].jobs == 2 and lost["h100-2"].jobs == 0


def test_an_operators_down_is_no_loss_and_moves_no_node_fail_charge(monkeypatch):
    node_fail = ["90", "NODE_FAIL", "h100-[2-3]", "59", GPU4, "2026-12-01T22:52:27", "2026-12-01T22:53:26", "1001"]
    events = "\n".join([
        "h100-3|2026-12-01T22:54:01|Unknown|DOWN*|Not responding",
        "h100-2|2026-12-01T22:54:37|2026-12-01T22:56:37|DOWN|maint-down",  # the operator's, within 120 s
        "h100-1|2026-12-01T22:00:00|2026-12-01T22:30:00|FAIL|maint-fail",
    ]) + "\n"
    lost = lost_of(monkeypatch, [(node_fail, ((90, "x"), ""))], events)
    assert lost["h100-3"].failed_jobs == pytest.approx(4 * 59 / 3600) and lost["h100-2"].failed_jobs == 0
    assert lost["h100-2"].drained == 0 and lost["h100-1"].drained == 0
    assert lost["h100-3"].drained == pytest.approx(2 * (6 * 60 - 1) / 3600)


def test_the_table_shows_a_small_loss_as_a_loss():
    from slurmctl.cli.ops import gpu_hours_text

    assert [gpu_hours_text(h) for h in (0.0, 0.001, 0.017, 0.0656, 16.0)] == ["0", "<0.01", "0.02", "0.07", "16.00"]


def test_records_without_a_uid_are_no_second_user_and_no_gpu_is_the_jobs_own():
    from slurmctl.ops.health.blame import Failure, suspect

    now = 1_000_000.0
    one_user = [Failure(1, "nccl_error", now - 60, uid=1001), Failure(2, "nccl_error", now - 30, uid=-1)]
    assert not suspect("l4-1", one_user, now).suspect  # alice plus an old record is still one user
    two_users = [Failure(1, "no_gpu", now - 60, uid=1001), Failure(2, "no_gpu", now - 30, uid=1002)]
    assert not suspect("l4-1", two_users, now).suspect  # a CPU-only torch build is not the node's fault
