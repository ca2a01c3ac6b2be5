"""`slurmctl status RUN | head -1` and friends, as alice on the real cluster: a reader that goes away
ends the command quietly (exit 141, nothing on stderr), for status, ls, queue and cost, with --json too.
The same for commands that need no Slurm: tests/unit/test_closed_pipe.py."""

from __future__ import annotations

import os
import subprocess

import pytest

from slurmctl.errors import EXIT_CLOSED_PIPE

from .conftest import REPO, SLURMCTL, as_user

CODE = {"PYTHONPATH": str(REPO)}  # this checkout's slurmctl, whatever the venv installed


@pytest.fixture(scope="module")
def held_run(tmp_path_factory):
    """A held run of alice's: status has a whole story to print, ls and queue have a row."""
    alice = as_user("alice")
    directory = alice.make_dir("closed-pipe")
    alice.slurmctl("init", "closed-pipe", "--dir", directory / "run", env=CODE)
    run_id = alice.slurmctl_json("submit", directory / "run" / "run.yaml", "--", "--hold", env=CODE)["run_id"]
    yield run_id
    alice.slurmctl("cancel", run_id, "--now", check=False, env=CODE)
    subprocess.run(["rm", "-rf", str(directory)], check=False)


def into_closed_pipe(*args) -> subprocess.CompletedProcess:
    alice = as_user("alice")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader left before the first byte: every write fails
    try:
        return subprocess.run(alice.argv([*SLURMCTL, *args], CODE), stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120, cwd=str(alice.home))
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [("status", "{run}"), ("status", "{run}", "--json"), ("ls",), ("ls", "--json"),
                                  ("queue",), ("cost", "{run}")])
def test_closed_pipe_is_a_normal_end(held_run, args):
    done = into_closed_pipe(*(a.format(run=held_run) for a in args))
    assert done.stderr == "" and done.returncode == EXIT_CLOSED_PIPE, (done.returncode, done.stderr)


def test_status_through_head(held_run):
    alice = as_user("alice")
    shell = f'{" ".join(SLURMCTL)} status "$0" | head -1; echo "exit ${{PIPESTATUS[0]}}"'
    done = alice.run(["bash", "-c", shell, held_run], env=CODE, timeout=120)
    first, exit_line = done.stdout.splitlines()
    assert first.startswith(f"Run: {held_run}") and done.stderr == "", done
    assert exit_line in ("exit 0", f"exit {EXIT_CLOSED_PIPE}")
