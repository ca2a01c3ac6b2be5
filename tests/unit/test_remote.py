"""SSH transport argv and host validation, and what an SSH submission uploads (ignore rules, size cap).

The transfers themselves run against a real sshd in tests/integration/test_ssh.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmctl.errors import SlurmctlError
from slurmctl.rundir.remote import UploadLimits, plan_upload
from slurmctl.slurm.ssh import SSHRunner, SSHTarget


@pytest.mark.parametrize("text", ["-oProxyCommand=touch /tmp/x", "alice@-oProxyCommand=x", "-l@host", "a b",
                                  "host\n", "host:22x", "host:0", "host:70000", "al ice@host", "", "h;id"])
def test_login_hosts_that_could_be_options_or_split_are_refused(text):
    with pytest.raises(SlurmctlError) as refused:
        SSHTarget.parse(text)
    assert refused.value.code == "invalid-login-host" and refused.value.exit_code == 2


@pytest.mark.parametrize("text, target", [
    ("alice@login.example.org:2222", SSHTarget("login.example.org", "alice", 2222)),
    ("127.0.0.1", SSHTarget("127.0.0.1", None, 22)), ("bob.smith@l-1", SSHTarget("l-1", "bob.smith", 22)),
])
def test_login_hosts(text, target):
    assert SSHTarget.parse(text) == target


def test_openssh_argv_ends_options_before_the_destination():
    argv = SSHRunner(SSHTarget("login", "alice", 2222), known_hosts=Path("/kh")).openssh_argv(["srun", "--pty", "bash"])
    assert argv[-3:] == ["--", "alice@login", "srun --pty bash"]


def test_a_hostile_destination_is_inert_even_if_validation_were_bypassed(tmp_path):
    marker = tmp_path / "pwned"
    target = SSHTarget(f"-oProxyCommand=touch {marker}", None, 22)  # built directly: parse() refuses it
    argv = SSHRunner(target, known_hosts=tmp_path / "kh", connect_timeout=1).openssh_argv(["true"])
    argv = [a for a in argv if a != "-t"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert result.returncode != 0 and not marker.exists()
    # the same argv without `--` is the attack this guards against
    unguarded = [a for a in argv if a != "--"]
    subprocess.run(unguarded, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert marker.exists()


def test_cli_refuses_a_host_option_in_host(tmp_path):
    marker = tmp_path / "pwned"
    env = {**os.environ, "SLURMCTL_USER_CONFIG": str(tmp_path / "none.yaml"), "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "slurmctl.cli", "--host", f"-oProxyCommand=touch {marker}",
                             "ls"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2 and "error (invalid-login-host)" in result.stderr and not marker.exists()


def _tree(root: Path, files: dict[str, int | str]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * content if isinstance(content, int) else content.encode())
    return root


def test_upload_honours_gitignore_slurmctlignore_and_skips_vcs_and_symlinks(tmp_path):
    root = _tree(tmp_path / "code", {
        "train.py": 10, "conf/a.yaml": 5, "data/big.bin": 100, "ckpt/model.pt": 50, "keep.pt": 7,
        "sub/notes.log": 3, "sub/.gitignore": "*.log\n", ".git/objects/x": 9, "__pycache__/m.pyc": 4,
        ".gitignore": "# data stays on the cluster\ndata/\n*.pt\n!keep.pt\n", ".slurmctlignore": "/ckpt\n",
        ".env": 2,
    })
    (root / "link.py").symlink_to("/etc/passwd")
    plan = plan_upload(root)
    assert sorted(p for p, _ in plan.files) == [".env", ".gitignore", ".slurmctlignore", "conf/a.yaml", "keep.pt",
                                               "sub/.gitignore", "train.py"]
    assert plan.total_bytes == sum(size for _, size in plan.files) and plan.skipped == 5


def test_upload_over_the_cap_names_the_largest_files_and_the_ignore_file(tmp_path):
    root = _tree(tmp_path / "code", {"train.py": 10, "data/a.bin": 3 * 1024 * 1024, "out/b.bin": 2 * 1024 * 1024})
    with pytest.raises(SlurmctlError) as refused:
        plan_upload(root, UploadLimits(max_bytes=1024 * 1024))
    exc = refused.value
    assert exc.code == "upload-too-large" and exc.exit_code == 2
    assert "data/a.bin (3.0 MB), out/b.bin (2.0 MB)" in exc.message and "5.0 MB" in exc.message
    assert str(root / ".slurmctlignore") in exc.hint
    (root / ".slurmctlignore").write_text("data/\nout/\n")
    kept = [p for p, _ in plan_upload(root, UploadLimits(max_bytes=1024 * 1024)).files]
    assert kept == [".slurmctlignore", "train.py"]
