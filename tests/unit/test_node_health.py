"""Node health's pure parts: the drain-reason contract, the blame score, the fault stub's trust
rule, the verification job's command line (run through a real shell)."""

from __future__ import annotations

import os
import subprocess

from slurmctl.ops.health import blame, checks, reasons
from slurmctl.ops.health.agent import verify_command
from slurmctl.ops.hooks.config import HookConfig


def test_only_our_prefix_is_ours():
    ours = reasons.DrainReason(reasons.NODE_PROBLEM, "shm", "full\nof\x1b[31m junk").text()
    assert ours == "slurmctl:[node_problem] shm: full of [31m junk"
    assert reasons.parse(ours) == reasons.DrainReason("node_problem", "shm", "full of [31m junk")
    for theirs in ("maint", "Prolog error", "slurmctl prolog: old style", "slurmctl:[other] x: y",
                   "Kill task failed", "", "slurmctl:[node_problem]shm: no space"):
        assert not reasons.is_ours(theirs), theirs
    assert len(reasons.DrainReason("user_problem", "disk", "x" * 1000).text()) == reasons.MAX_REASON


def test_user_code_failures_never_make_a_suspect():
    now = 1_000_000.0
    user_code = [blame.Failure(i, c, now - 60) for i, c in
                 enumerate(["import_error", "cuda_oom", "nan_loss", "data_shape", "host_oom", "unknown"])]
    assert blame.score(user_code, now) == 0
    nccl = [blame.Failure(7, "nccl_error", now - 60), blame.Failure(7, "nccl_timeout", now - 50)]
    assert blame.score(nccl, now) == 1  # one job, however many records
    two = nccl + [blame.Failure(8, "gpu_hardware", now - 10)]
    assert blame.score(two, now) == 2 >= blame.SUSPECT_SCORE
    old = [blame.Failure(9, "nccl_error", now - blame.WINDOW_SECONDS - 1), blame.Failure(8, "gpu_hardware", now)]
    assert blame.score(old, now) == 1


def test_failure_records_round_trip_and_clear(tmp_path):
    spool = tmp_path / "failures"
    blame.record(spool, blame.Failure(12, "nccl_error", 5.0))
    (spool / "junk.json").write_text("{not json")
    assert blame.read(spool) == [blame.Failure(12, "nccl_error", 5.0)]
    blame.clear(spool, blame.read(spool))
    assert blame.read(spool) == []


def cfg(tmp_path, **env) -> HookConfig:
    c = HookConfig.from_env({"SLURMD_NODENAME": "n1", "SLURMCTL_LOCAL_DIR": str(tmp_path),
                             "SLURMCTL_SLURM_BIN_DIR": "/nonexistent", "SLURMCTL_DATA_CACHE_DIRS": "", **env})
    c.slurm, c.nvidia_smi = None, None
    return c


def test_fault_stub_counts_only_in_a_directory_only_root_can_write(tmp_path):
    c = cfg(tmp_path)
    faults = tmp_path / "health-faults"
    (faults / "n1").mkdir(parents=True)
    faults.chmod(0o755)
    (faults / "n1").chmod(0o755)
    (faults / "n1" / "shm").write_text("simulated\n")
    (faults / "disk").write_text("")
    assert checks.injected_fault(c, "shm") == "injected fault: simulated"
    assert checks.injected_fault(c, "disk") == "injected fault"  # every node of this host
    assert checks.injected_fault(c, "gpu") is None
    (faults / "n1" / "gpu").symlink_to("/etc/hostname")
    assert checks.injected_fault(c, "gpu") is None  # a symlink is no fault file
    faults.chmod(0o777)  # anyone could plant a fault: none counts
    assert checks.injected_fault(c, "shm") is None
    assert checks.injected_fault(cfg(tmp_path, SLURMCTL_HEALTH_FAULTS="clock,shm"), "clock").startswith("injected")


def test_periodic_checks_report_every_check_and_the_first_failure(tmp_path):
    c = cfg(tmp_path, SLURMCTL_MIN_FREE_SCRATCH_MB="1", SLURMCTL_MIN_FREE_SHM_MB="1", SLURMCTL_HEALTH_FAULTS="disk")
    found = checks.run_checks(checks.Subject(c, moment="periodic"))
    assert [f.check for f in found] == ["shm", "disk", "leftovers"]  # no Slurm, no nvidia-smi: no verdict there
    expected = "slurmctl:[node_problem] disk: injected fault (SLURMCTL_HEALTH_FAULTS)"
    assert checks.first_failure(found).reason().text() == expected


def test_verify_command_survives_a_shell_with_awkward_settings(tmp_path):
    env = {"SLURM_CONF": str(tmp_path / "a b'c$(touch x)"), "SLURMCTL_LOCAL_DIR": "/x;y", "HOME": "/nope",
           "SLURMCTL_BAD": "two\nlines"}
    show = ("import os; e = os.environ; print(e['SLURM_CONF']); print(e['SLURMCTL_LOCAL_DIR']); "
            "print('SLURMCTL_BAD' in e, 'HOME' in e)")
    line = verify_command(env).replace(" -m slurmctl.ops.health verify", f' -c "{show}"')
    out = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, env={}, cwd=tmp_path)
    assert out.stdout.splitlines() == [env["SLURM_CONF"], "/x;y", "False False"], out.stderr
    assert not os.path.exists(tmp_path / "x")
