"""SlurmClient calls of the node-side hooks (job_info, node_job_ids, drain_node): exact argv,
parsing, and LocalRunner's bin_dir/env for hooks that slurmd starts with no PATH.
Job 20's sealed squeue record is test_plugins.JOB_20; the "Invalid job id" stderr and the squeue %A
output were captured on the local cluster (Slurm 22.05.8)."""

import os
import stat

import pytest

from slurmctl.errors import SlurmCommandError, SlurmUnreachable
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.runner import LocalRunner

from .fakes import ReplayRunner
from .test_plugins import JOB_20_OUTPUT

INVALID_JOB = "slurm_load_jobs error: Invalid job id specified\n"


def test_job_info_argv_and_parse():
    runner = ReplayRunner({"squeue": JOB_20_OUTPUT})
    info = SlurmClient(runner).job_info(20, timeout=5)
    assert runner.calls[0][:7] == ["squeue", "-h", "-t", "all", "-j", "20", "-O"]
    assert (info.job_id, info.state, info.exit_code, info.gpu_model, info.gpu_count) == (20, "FAILED", "3:0", "l4", 1)


def test_job_info_is_none_for_a_job_the_controller_forgot_and_raises_when_slurm_is_down():
    assert SlurmClient(ReplayRunner({}, returncode=1, stderr=INVALID_JOB)).job_info(20) is None
    assert SlurmClient(ReplayRunner({"squeue": JOB_20_OUTPUT})).job_info(21) is None  # another job's record
    down = ReplayRunner({}, returncode=1, stderr="slurm_load_jobs error: Unable to contact slurm controller")
    with pytest.raises(SlurmUnreachable):
        SlurmClient(down).job_info(20)


def test_node_job_ids_asks_for_the_raw_job_id_of_live_jobs_on_one_node():
    runner = ReplayRunner({"squeue": "12514\n12520\n"})
    assert SlurmClient(runner).node_job_ids("l4-1") == {12514, 12520}
    assert runner.calls == [["squeue", "-h", "-o", "%A", "-w", "l4-1", "-t", "R,CG,CF,S"]]


def test_drain_node_argv_keeps_the_reason_as_one_argument():
    runner = ReplayRunner({"scontrol": ""})
    SlurmClient(runner).drain_node("h100-3", "slurmctl prolog: /dev/shm has 3 MB free; needs 256 MB")
    assert runner.calls == [["scontrol", "update", "nodename=h100-3", "state=drain",
                             "reason=slurmctl prolog: /dev/shm has 3 MB free; needs 256 MB"]]
    with pytest.raises(SlurmCommandError):
        SlurmClient(ReplayRunner({}, returncode=1, stderr="Invalid node name specified")).drain_node("x", "r")


def _fake_tool(directory, name: str, script: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_local_runner_runs_bare_names_from_bin_dir_with_only_the_given_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PARENT_ONLY", "leaked")
    _fake_tool(tmp_path, "squeue", 'echo "$0 $* PARENT_ONLY=${PARENT_ONLY:-unset} LC_ALL=$LC_ALL"\n')
    result = LocalRunner(bin_dir=str(tmp_path), env={"LC_ALL": "C"}).run(["squeue", "-h"])
    assert result.stdout.strip() == f"{tmp_path}/squeue -h PARENT_ONLY=unset LC_ALL=C"
    assert result.argv == (f"{tmp_path}/squeue", "-h")


def test_local_runner_without_the_tool_is_unreachable_not_a_crash(tmp_path):
    with pytest.raises(SlurmUnreachable, match="not installed"):
        LocalRunner(bin_dir=str(tmp_path)).run(["scontrol", "ping"])
    (tmp_path / "sinfo").write_text("not executable")
    os.chmod(tmp_path / "sinfo", 0o644)
    with pytest.raises(SlurmUnreachable, match="could not be started"):
        LocalRunner(bin_dir=str(tmp_path)).run(["sinfo"])
