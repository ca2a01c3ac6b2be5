"""The active check's judgement (health/allreduce.py): thresholds, gloo's own failure words out of
a launcher's output (captured from a real launch with GLOO_SOCKET_IFNAME=nosuch0), the check
skipped where no torch python is configured, and real launches of the ranks (a python without torch,
a store only root can reach). The runs on Slurm are tests/integration/test_health_allreduce.py."""

from __future__ import annotations

from pathlib import Path

from slurmctl.ops.health import agent, allreduce
from slurmctl.ops.health.checks import MOMENTS, SITE_CONFIG, Subject, check_allreduce, first_failure
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.slurm.client import SlurmClient

from .fakes import ReplayRunner

# torchrun 2.13's stderr, two ranks, a gloo interface that does not exist (shortened in the middle)
NOSUCH_IFACE = """\
Traceback (most recent call last):
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2169, in _new_process_group_helper
    backend_class = ProcessGroupGloo(
                    ^^^^^^^^^^^^^^^^^
RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] ifa != nullptr. Unable to find address for: nosuch0
Traceback (most recent call last):
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
"""  # noqa: E501, W291


def test_gloos_own_words_not_torchruns_summary():
    assert allreduce.failure_line(NOSUCH_IFACE) == "Unable to find address for: nosuch0"
    assert allreduce.failure_line("") == "no output"


def test_thresholds_name_the_number_and_the_limit():
    limits = allreduce.Thresholds(min_busbw_mbps=100, max_latency_us=20000)
    assert allreduce.judge(allreduce.Measured(2, 595.0, 646.0), limits) == \
        (True, "gloo all-reduce over 2 ranks: bus bandwidth 595 MB/s, latency 646 us")
    ok, why = allreduce.judge(allreduce.Measured(2, 40.0, 646.0), limits)
    assert not ok and why.endswith("bus bandwidth 40 MB/s, latency 646 us: too slow, the site minimum is 100 MB/s")
    ok, why = allreduce.judge(allreduce.Measured(2, 595.0, 25000.0), limits)
    assert not ok and why.endswith(": too slow, the site maximum latency is 20000 us")


def test_skipped_without_a_torch_python_and_part_of_verify_and_active(tmp_path):
    cfg = HookConfig(node="n1", gpu_map_dir=tmp_path, scratch_root=tmp_path, cost_spool=tmp_path)
    assert check_allreduce(Subject(cfg, moment="verify")) is None
    assert "allreduce" in MOMENTS["verify"] and MOMENTS["active"] == ("allreduce",)
    assert "allreduce" not in MOMENTS["prolog"] + MOMENTS["periodic"]


def test_a_python_without_torch_is_the_sites_configuration_error_never_a_drain(tmp_path, capsys):
    """Real launches with the system python3 (no torch) and a path that does not exist: the check
    says why, blamed on the site's setting; the active check drains nothing and says so loudly."""
    cfg = HookConfig(node="n1", gpu_map_dir=tmp_path, scratch_root=tmp_path, cost_spool=tmp_path,
                     torch_python="/usr/bin/python3", allreduce_timeout=30)
    assert Path("/usr/bin/python3").exists()
    finding = check_allreduce(Subject(cfg, moment="verify"))
    assert finding is not None and not finding.ok and finding.blame == SITE_CONFIG
    assert finding.detail == ("configuration error (SLURMCTL_HEALTH_TORCH_PYTHON): /usr/bin/python3 cannot "
                              "import torch: No module named 'torch'"), finding
    assert first_failure([finding]) is None
    runner = ReplayRunner({})
    cfg.torch_python, cfg.slurm = str(tmp_path / "no-such-python"), SlurmClient(runner)
    outcome = agent.active(cfg)
    assert outcome.action == "config_error" and "no-such-python" in outcome.detail, outcome
    assert runner.calls == []  # not even a look at the node: nothing to drain
    agent.log_outcome(cfg, {"SLURMCTL_HOOKS_LOG": str(tmp_path / "hooks.jsonl")}, "active", outcome, 0.0)
    assert "CONFIGURATION ERROR on n1" in capsys.readouterr().err
    assert '"action": "config_error"' in (tmp_path / "hooks.jsonl").read_text()
    # inside its job, the outcome goes into the job's AdminComment: what the exporter's alert reads
    agent.note_in_job(cfg, {"SLURM_JOB_ID": "5065"}, "active", outcome)
    assert runner.calls == [["scontrol", "update", "JobId=5065", "AdminComment=slurmctl:health active config_error n1"]]
    agent.note_in_job(cfg, {}, "active", outcome)  # run by hand, outside a job: nothing to note
    cfg.node = "n1 Reason=x"  # never a node name: no note rather than one Slurm would read otherwise
    agent.note_in_job(cfg, {"SLURM_JOB_ID": "5065"}, "active", outcome)
    assert len(runner.calls) == 1


def test_the_ranks_meet_through_a_private_file_store_never_a_network_store(tmp_path):
    """No TCPStore (torchrun's, whose dynamic rendezvous unpickles what anyone writes into it, ran
    as root here before): the ranks are started directly, under -I, with a FileStore in a 0700
    directory; gloo on loopback unless the site names an interface. A real launch measures."""
    argv = allreduce.rank_argv("/venv/bin/python", 1, 2, Path("/tmp/x/store"))
    assert argv == ["/venv/bin/python", "-I", allreduce._WORKER, "1", "2", "/tmp/x/store"]
    assert "torch.distributed.run" not in " ".join(argv)
    python = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
    measured, why = allreduce.measure(str(python), 2, "", 120)
    assert measured is not None and measured.ranks == 2 and measured.busbw_mbps > 0, why


def test_on_loopback_the_ranks_share_a_network_namespace_no_other_process_can_reach():
    """gloo's handshake is an unauthenticated 8-byte sequence number: whoever connects first to a
    rank's listener takes its peer's place (an independent check failed the check, and drained a
    healthy node, that way). Rank 0 gets a namespace of its own with loopback up; the others join it."""
    import os
    import subprocess
    import sys

    import pytest

    if os.geteuid() != 0:
        pytest.skip("namespaces need root, as the health program has")
    assert allreduce._namespaces_allowed()
    host = os.readlink("/proc/self/ns/net")
    first = subprocess.Popen(["sleep", "30"], preexec_fn=allreduce._private_loopback)
    try:
        inside = os.readlink(f"/proc/{first.pid}/ns/net")
        assert inside != host
        probe = ("import os, socket; s = socket.create_server(('127.0.0.1', 0)); "
                 "c = socket.create_connection(s.getsockname()); print('lo up', os.readlink('/proc/self/ns/net'))")
        second = subprocess.run([sys.executable, "-I", "-c", probe],
                                capture_output=True, text=True, timeout=30,
                                preexec_fn=allreduce._join_network_of(first.pid))
        assert second.stdout.split() == ["lo", "up", inside], second.stderr
    finally:
        first.kill()
        first.wait()


def test_without_a_namespace_a_failure_says_the_ranks_were_on_the_nodes_loopback(tmp_path, monkeypatch):
    """Where the kernel refuses a namespace the check runs on the node's loopback, which any local
    user can reach (SECURITY.md): a drain from that check says so, for the operator to weigh."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'RuntimeError: Connection closed by peer'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(allreduce, "_namespaces_allowed", lambda: False)
    measured, why = allreduce.measure(str(fake), 2, "", 30)
    assert measured is None and why == ("gloo all-reduce over 2 ranks failed (no private network namespace here: "
                                        "on the node's loopback): Connection closed by peer")
    measured, why = allreduce.measure(str(fake), 2, "eth0", 30)  # a fabric the site names: its own choice
    assert why == "gloo all-reduce over 2 ranks failed: Connection closed by peer"
