"""`slurmctl dev` on the real cluster, driven through tmux: a real TTY on l4-dev that ends itself.

Both sessions run at once to keep the wall time near one Slurm minute: one ends by its TTL
(--time 1m: Slurm kills it), the other by its idle timeout (--idle 10s, no GPU, so both fit l4-1).
The sessions are alice's: tmux (root's private server) runs the CLI through runuser.
"""

import re
import shlex
import subprocess
import time

import pytest

from .conftest import REPO, SLURMCTL, as_user

TMUX = ["tmux", "-L", "slurmctl-test-dev"]  # a private tmux server: never touch anyone else's


def _tmux(*args: str) -> str:
    return subprocess.run([*TMUX, *args], capture_output=True, text=True, check=True).stdout


def _pane(session: str) -> str:
    return _tmux("capture-pane", "-p", "-S", "-200", "-t", session)


def _wait_for(session: str, pattern: str, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = _pane(session)
        match = re.search(pattern, text)
        if match:
            return match
        time.sleep(0.5)
    raise AssertionError(f"{session}: no /{pattern}/ within {timeout} s; the pane shows:\n{_pane(session)}")


def _start(session: str, *dev_args: str) -> None:
    cli = shlex.join(as_user("alice").argv([*SLURMCTL, "dev", *dev_args]))
    # keep the pane open after the CLI exits so the test can read its last words
    _tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50",
          f"cd {shlex.quote(str(REPO))} && {cli}; echo DEV-EXIT=$?; sleep 600")


def _sacct_state(job_id: str) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,Timelimit"],
                         capture_output=True, text=True).stdout.strip()
    return out.splitlines()[0] if out else ""


@pytest.fixture
def tmux_server():
    if subprocess.run(["which", "tmux"], capture_output=True).returncode != 0:
        pytest.fail("tmux is missing: apt-get install tmux (listed in deploy/local/apt-extras.txt)")
    yield
    subprocess.run([*TMUX, "kill-server"], capture_output=True)


def test_dev_shell_runs_on_l4_dev_and_ends_by_ttl_and_by_idle_timeout(tmux_server):
    started = time.monotonic()
    _start("ttl", "--time", "1m", "--idle", "10m")
    _start("idle", "--time", "5m", "--idle", "10s", "--gpus", "0")
    jobs = {}
    try:
        for session in ("ttl", "idle"):
            _wait_for(session, r"@l4-1", timeout=90)  # the prompt of a shell on the node
            _tmux("send-keys", "-t", session,
                  "echo JOB=$SLURM_JOB_ID NODE=$SLURMD_NODENAME GPU=${CUDA_VISIBLE_DEVICES-none}",
                  "Enter")
            match = _wait_for(session, r"JOB=(\d+) NODE=(\S+) GPU=(\S+)", timeout=10)
            jobs[session] = match.group(1)
            assert match.group(2) == "l4-1"
        assert _wait_for("ttl", r"JOB=\d+ NODE=\S+ GPU=(\S+)", 1).group(1) == "0"  # the L4 is ours
        # the TTL is the job's Slurm time limit
        limits = subprocess.run(["squeue", "-h", "-j", jobs["ttl"], "-o", "%l %j %P %u"],
                                capture_output=True, text=True)
        assert limits.stdout.split() == ["1:00", "slurmctl-dev", "l4-dev", "alice"]

        _wait_for("idle", r"auto-logout", timeout=30)
        _wait_for("idle", r"session ended after .*\nDEV-EXIT=0", timeout=15)
        idle_state = _sacct_state(jobs["idle"])

        _wait_for("ttl", r"session ended after .*\nDEV-EXIT=", timeout=150 - (time.monotonic() - started))
        ttl_seconds = time.monotonic() - started
    finally:
        for job_id in jobs.values():
            as_user("alice").scancel(job_id)
    assert idle_state.startswith("COMPLETED"), idle_state
    assert _sacct_state(jobs["ttl"]).split("|")[0] == "TIMEOUT"
    assert 55 < ttl_seconds < 150
    print(f"TTL session ended {ttl_seconds:.0f} s after start (limit 60 s)")
