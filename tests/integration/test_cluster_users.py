"""What deploy/local/up promises about the cluster's users, checked as those users: their accounts,
default QOS and per-user GPU cap (enforced by Slurm), private homes, secrets and runs directories,
and root-only places they cannot write to or list."""

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import USERS, as_user

STATE = Path(os.environ.get("SLURMCTL_LOCAL_DIR", "/var/lib/slurmctl-local"))
GPU_CAP = 16


def _mode(path: Path) -> tuple[int, int]:
    st = path.lstat()
    return st.st_uid, stat.S_IMODE(st.st_mode)


def test_associations_give_each_user_their_account_default_qos_and_gpu_cap():
    out = subprocess.run(["sacctmgr", "-n", "-P", "list", "assoc", "format=account,user,grptres,defaultqos"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    rows = {tuple(line.split("|")[:2]): line.split("|")[2:] for line in out.splitlines()}
    for name, account in USERS.items():
        assert rows[(account, name)] == [f"gres/gpu={GPU_CAP}", "normal"], (name, rows.get((account, name)))
        user = as_user(name)
        assert subprocess.run(["id", "-gn", name], capture_output=True, text=True).stdout.strip() == account
        # a job with no --account goes to the user's own account
        job = user.sbatch("--hold", "-p", "l4-dev", "-o", "/dev/null", "--wrap", "true")
        try:
            assert user.squeue("-h", "-j", str(job), "-o", "%a %u").split() == [account, name]
        finally:
            user.scancel(job)


def test_the_per_user_gpu_cap_is_enforced_by_slurm():
    """24 GPUs (3 nodes x 8) exceed carol's 16: Slurm keeps the job pending for her association's limit."""
    carol = as_user("carol")
    job = carol.sbatch("-p", "h100-ondemand", "-N", "3", "--gres=gpu:h100:8", "-t", "1", "-o", "/dev/null",
                       "--wrap", "true")
    try:
        reason = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and reason != "AssocGrpGRES":
            state, _, reason = carol.squeue("-h", "-j", str(job), "-o", "%T %r").strip().partition(" ")
            assert state == "PENDING", (state, reason)
            time.sleep(1)
        assert reason == "AssocGrpGRES"
    finally:
        carol.scancel(job)


def test_homes_secrets_and_runs_are_private_and_root_places_are_not_writable(cluster):
    runs_root = cluster.runs_root_path
    assert _mode(runs_root) == (0, 0o755)  # not 1777: nobody but root creates entries here
    bob = as_user("bob")
    for name in USERS:
        user = as_user(name)
        assert _mode(user.home) == (user.uid, 0o700)
        assert _mode(user.home / ".config" / "slurmctl" / "secrets.env") == (user.uid, 0o600)
        assert _mode(runs_root / name) == (user.uid, 0o700)
    assert _mode(STATE / "cost-records") == (0, 0o700)
    for path in (STATE / "scratch", STATE / "gpu-job-map", STATE / "test-triggers"):
        assert _mode(path) == (0, 0o755), path

    # tried as bob: alice's things, and places only root may write
    denied = {
        "list alice's runs": ["ls", str(runs_root / "alice")],
        "read alice's secrets": ["cat", str(as_user("alice").home / ".config/slurmctl/secrets.env")],
        "list alice's home": ["ls", str(as_user("alice").home)],
        "create a run outside his own dir": ["mkdir", str(runs_root / "planted-run")],
        "plant a scratch dir": ["mkdir", str(STATE / "scratch" / "h100-1" / "999999")],
        "plant a prolog trigger": ["mkdir", str(STATE / "test-triggers" / f"planted-{os.getpid()}")],
        "list the cost records": ["ls", str(STATE / "cost-records")],
    }
    for what, argv in denied.items():
        result = bob.run(argv)
        assert result.returncode != 0 and "Permission denied" in result.stderr, (what, result)
    assert not (runs_root / "planted-run").exists()
    mine = bob.run(["touch", str(runs_root / "bob" / ".probe")])
    assert mine.returncode == 0, mine.stderr
    (runs_root / "bob" / ".probe").unlink()


@pytest.mark.parametrize("name", sorted(USERS))
def test_every_user_can_run_the_job_python(cluster, name):
    result = as_user(name).run([cluster.python, "-c", "import torch, slurmctl; print(torch.__version__)"],
                               timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("2."), result.stderr
