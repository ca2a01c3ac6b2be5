"""`slurmctl dev` on the real cluster, driven through tmux: a real TTY on l4-dev that ends itself.

Both sessions run at once to keep the wall time near one Slurm minute: one ends by its TTL
(--time 1m: Slurm kills it), the other by its idle timeout (--idle 10s, no GPU, so both fit l4-1).
The sessions are alice's: tmux (root's private server) runs the CLI through runuser.
"""

import os
import re
import shlex
import subprocess
import sys
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


JUPYTER_PYTHON = os.environ.get("SLURMCTL_TEST_JUPYTER_PYTHON", sys.executable)


def _listeners(port: int) -> list[tuple[str, int]]:
    """(local address, uid) of every listening TCP socket on `port` (IPv4 and IPv6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            next(fh)
            for line in fh:
                fields = line.split()
                address, hex_port = fields[1].rsplit(":", 1)
                if int(hex_port, 16) == port and fields[3] == "0A":  # LISTEN
                    found.append((address, int(fields[7])))
    return found


@pytest.fixture
def jupyter_python():
    if subprocess.run([JUPYTER_PYTHON, "-c", "import jupyterlab"], capture_output=True).returncode != 0:
        pytest.fail(f"{JUPYTER_PYTHON} has no jupyterlab: scripts/setup installs slurmctl[jupyter] "
                    "(or point SLURMCTL_TEST_JUPYTER_PYTHON at a python that has it)")
    return JUPYTER_PYTHON


def test_jupyter_listens_on_a_free_loopback_port_and_the_url_is_the_one_it_started(jupyter_python, user_dir):
    """bob holds 127.0.0.1:8888 with a plain HTTP server. Before: alice's `dev --jupyter` started
    JupyterLab on 0.0.0.0 and printed `localhost:8888/?token=...` while Jupyter had moved to 8889,
    so her tunnel would have handed her token to bob's server. After: Jupyter listens on the
    node's 127.0.0.1 only, on a free port, and the printed URL names that port and opens it."""
    import json
    import urllib.error
    import urllib.request

    import yaml

    alice, bob = as_user("alice"), as_user("bob")
    held = None
    if not _listeners(8888):
        held = subprocess.Popen(bob.argv(["python3", "-m", "http.server", "8888", "--bind", "127.0.0.1"]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while not _listeners(8888) and time.monotonic() < deadline:
            time.sleep(0.2)
    work = user_dir("alice")
    site = yaml.safe_load(open("/etc/slurmctl/site.yaml").read())
    (work / "site.yaml").write_text(yaml.safe_dump({**site, "python": jupyter_python}))
    os.chown(work / "site.yaml", alice.uid, alice.gid)
    env = {"SLURMCTL_SITE_CONFIG": str(work / "site.yaml"), "PYTHONPATH": str(REPO)}
    session = None
    try:
        started = alice.slurmctl("dev", "--jupyter", "--json", "--time", "4m", "--idle", "3m", "--gpus", "0",
                                 env=env, cwd=work, timeout=400)
        session = json.loads(started.stdout)
        port = session["port"]
        assert port != 8888
        assert session["url"] == f"http://localhost:{port}/lab?token={session['token']}"
        assert session["tunnel"].endswith(f"-L {port}:127.0.0.1:{port} -J {session['tunnel'].split(' -J ')[1]}")
        listeners = _listeners(port)
        assert listeners == [("0100007F", alice.uid)], listeners  # 127.0.0.1 only, alice's process
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/status",
                                         headers={"Authorization": f"token {session['token']}"})
        with urllib.request.urlopen(request, timeout=20) as answer:
            assert answer.status == 200 and "started" in json.loads(answer.read())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=20)
        assert refused.value.code == 403
    finally:
        if session is not None:
            alice.scancel(session["job_id"])
        if held is not None:
            held.terminate()
            log = held.communicate(timeout=10)[1]
            assert "token" not in log  # nothing of alice's reached bob's server


def test_jupyter_given_a_taken_port_fails_instead_of_moving(jupyter_python, user_dir):
    """The launcher's exact argv with a port bob holds: Jupyter exits, it never serves elsewhere."""
    from slurmctl.runtime.jupyter import jupyter_argv

    alice, bob = as_user("alice"), as_user("bob")
    held = subprocess.Popen(bob.argv(["python3", "-c", "import socket, time; s = socket.socket(); "
                                      "s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); "
                                      "time.sleep(120)"]), stdout=subprocess.PIPE, text=True)
    try:
        port = int(held.stdout.readline())
        work = user_dir("alice")
        ran = alice.run(jupyter_argv(jupyter_python, port, 60), env={"JUPYTER_RUNTIME_DIR": str(work)},
                        cwd=work, timeout=120)
        assert ran.returncode != 0 and "already in use" in ran.stderr, ran.stderr[-2000:]
        assert not list(work.glob("jpserver-*.json"))
    finally:
        held.kill()
