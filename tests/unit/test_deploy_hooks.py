"""The GKE hook wrappers (deploy/slurm/hooks/*.sh) and plugins/*.py never fail closed for our own
reasons, and still pass the prolog's deliberate deny (exit 1) to slurmd. Run as slurmd would: /bin/sh,
an environment with no PATH, the system python3."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOKS = REPO / "deploy" / "slurm" / "hooks"


def run_hook(hook: str, home: Path, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    """The wrapper as slurmd runs it: no PATH, SLURM_* only (plus the test's redirections)."""
    base = {"SLURM_JOB_ID": "7", "SLURM_JOB_UID": str(os.getuid()), "SLURMD_NODENAME": "n1",
            "SLURMCTL_HOME": str(home), "SLURMCTL_LOCAL_DIR": str(tmp_path / "state"),
            "SLURMCTL_SLURM_BIN_DIR": "/nonexistent", "SLURMCTL_MIN_FREE_SHM_MB": "1",
            "SLURMCTL_MIN_FREE_SCRATCH_MB": "1", "SLURMCTL_HOOKS_ENV": str(tmp_path / "hooks.env")}
    return subprocess.run(["/bin/sh", str(HOOKS / f"{hook}.sh")], env={**base, **env}, capture_output=True,
                          text=True, timeout=60)


def broken_install(tmp_path: Path, how: str) -> Path:
    """A copy of plugins/ beside a slurmctl package that is missing, fails to import, or has a bug."""
    home = tmp_path / "opt"
    shutil.copytree(REPO / "plugins", home / "plugins", ignore=shutil.ignore_patterns("__pycache__"))
    if how == "import-error":
        (home / "slurmctl").mkdir()
        (home / "slurmctl" / "__init__.py").write_text("raise ImportError('half-installed image')\n")
    elif how == "syntax-error":
        (home / "slurmctl").mkdir()
        (home / "slurmctl" / "__init__.py").write_text("def (:\n")
    elif how == "exit-in-import":
        (home / "slurmctl").mkdir()
        (home / "slurmctl" / "__init__.py").write_text("import sys\nsys.exit(3)\n")
    return home


@pytest.mark.parametrize("hook", ["prolog", "epilog"])
def test_no_slurmctl_in_the_image_is_a_no_op(hook, tmp_path):
    out = run_hook(hook, tmp_path / "absent", tmp_path)
    assert (out.returncode, out.stderr) == (0, "")


@pytest.mark.parametrize("how", ["missing-package", "import-error", "syntax-error", "exit-in-import"])
@pytest.mark.parametrize("hook", ["prolog", "epilog"])
def test_a_broken_slurmctl_never_fails_the_hook(hook, how, tmp_path):
    if how == "missing-package" and not Path("/usr/bin/python3").exists():
        pytest.fail("/usr/bin/python3 is what slurmd runs the hooks with")
    home = broken_install(tmp_path, how)
    out = run_hook(hook, home, tmp_path, PYTHONPATH=str(home))  # the copy's package, not the checkout's
    assert out.returncode == 0, out.stderr
    assert "internal error" in out.stderr


def test_the_prolog_deny_still_reaches_slurmd(tmp_path):
    """A failed health check (the local cluster's test trigger here) exits 1 through the wrapper, even
    though setting the drain reason fails (no scontrol)."""
    trigger = tmp_path / "state" / "test-triggers" / "prolog-fail" / "slurmctl:r1"
    trigger.parent.mkdir(parents=True)
    trigger.touch()
    out = run_hook("prolog", REPO, tmp_path, SLURM_JOB_COMMENT="slurmctl:r1")
    assert out.returncode == 1, out.stderr
    assert "test trigger prolog-fail/slurmctl:r1" in out.stderr


def test_a_healthy_prolog_passes_and_a_broken_settings_file_is_ignored(tmp_path):
    (tmp_path / "hooks.env").write_text("SLURMCTL_MIN_FREE_SHM_MB='1\n")  # unterminated quote
    out = run_hook("prolog", REPO, tmp_path)
    assert out.returncode == 0, out.stderr


def test_the_settings_file_reaches_the_hook(tmp_path):
    (tmp_path / "hooks.env").write_text(f"SLURMCTL_MIN_FREE_SHM_MB='{10**9}'\n")
    out = run_hook("prolog", REPO, tmp_path, SLURMCTL_MIN_FREE_SHM_MB="")
    assert out.returncode == 1 and "needs 1000000000 MB" in out.stderr, out.stderr


# --- accounting.sh: every user gets an association, bad input changes nothing ----------------------------
def run_accounting(tmp_path: Path, users: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """accounting.sh with a sacctmgr that records its argv (the real one is the shared cluster's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "sacctmgr.log"
    (bin_dir / "sacctmgr").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        # `show assoc where user=U`: the association added, and one bound to h100-ondemand (what an
        # earlier accounting.sh made) until it is deleted
        'case "$*" in\n'
        '  *"show assoc"*)\n'
        '    u=$(echo "$*" | sed -n "s/.*user=\\([^ ]*\\).*/\\1/p")\n'
        f'    a=$(sed -n "s/^--immediate add user $u Account=\\([^ ]*\\).*/\\1/p" {log} | head -1)\n'
        '    echo "$a|"\n'
        f'    grep -q "delete user where name=$u " {log} || echo "$a|h100-ondemand";;\n'
        'esac\n')
    (bin_dir / "sacctmgr").chmod(0o755)
    out = subprocess.run(["bash", str(REPO / "deploy" / "slurm" / "accounting.sh")], capture_output=True, text=True,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURMCTL_USERS": users}, timeout=30)
    return out, (log.read_text().splitlines() if log.exists() else [])


def test_accounting_creates_each_user_with_a_default_account(tmp_path):
    out, calls = run_accounting(tmp_path, "alice ml-research\nbob ml-applied\n")
    assert out.returncode == 0, out.stderr
    assert "--immediate add user alice Account=ml-research DefaultAccount=ml-research" in calls
    assert "--immediate add user bob Account=ml-applied DefaultAccount=ml-applied" in calls
    # one association per user (fair share in one place, multi-partition jobs allowed): none bound to
    # a partition is made, and one left by an earlier run is removed
    assert not [c for c in calls if "Partition=" in c or "partition=" in c and "delete" not in c], calls
    assert "--immediate delete user where name=alice account=ml-research partition=h100-ondemand" in calls
    assert "--immediate delete user where name=bob account=ml-applied partition=h100-ondemand" in calls


@pytest.mark.parametrize("users", ["", "alice", "alice nlp", "al;ce ml-research", "alice ml-research extra"])
def test_accounting_refuses_missing_or_bad_users_before_changing_anything(users, tmp_path):
    out, calls = run_accounting(tmp_path, users)
    assert out.returncode == 2 and "SLURMCTL_USERS" in out.stderr, out.stderr
    assert calls == []
