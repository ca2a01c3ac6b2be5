"""A closed pipe is a normal end: `slurmctl X | head -1` stops quietly, exit status 141 (what a tool
that SIGPIPE ended gives), for every command, --json included. Whole processes, the reader closed
before the command writes a byte. With Slurm: tests/integration/test_closed_pipe_real.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmctl.errors import EXIT_CLOSED_PIPE, EXIT_INTERNAL

REPO = Path(__file__).resolve().parents[2]
MAIN = "import sys; from slurmctl.cli.main import main; sys.exit(main(sys.argv[1:]))"


def run_into_closed_pipe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`slurmctl ARGS` whose stdout is a pipe nobody reads any more."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command starts: its first write fails
    try:
        return subprocess.run([sys.executable, "-c", MAIN, *args], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, cwd=cwd, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [
    ("--help",),
    ("explain", "Resources"),
    ("explain", "Resources", "--json"),
    ("explain", "QOSMaxGRESPerUser"),
])
def test_a_closed_pipe_ends_the_command_quietly(args):
    done = run_into_closed_pipe(*args)
    assert done.stderr == "" and done.returncode == EXIT_CLOSED_PIPE, (done.returncode, done.stderr)


@pytest.mark.parametrize("as_json", [(), ("--json",)])
def test_init_finishes_its_work_and_ends_quietly(tmp_path, as_json):
    done = run_into_closed_pipe("init", "piped", "--template", "fsdp", "--dir", str(tmp_path / "piped"), *as_json)
    assert done.stderr == "" and done.returncode == EXIT_CLOSED_PIPE, (done.returncode, done.stderr)
    assert (tmp_path / "piped" / "run.yaml").is_file()  # written before the first line was printed


def test_an_error_into_a_closed_pipe_keeps_its_exit_code(tmp_path):
    done = run_into_closed_pipe("init", "Bad Name", "--dir", str(tmp_path / "x"), "--json")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_through_head_as_a_user_types_it():
    done = subprocess.run(["bash", "-o", "pipefail", "-c", f'"{sys.executable}" -c "$0" explain Resources | head -1',
                           MAIN], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stderr == "" and done.stdout.count("\n") == 1
    assert done.returncode in (0, EXIT_CLOSED_PIPE)  # 0 when every line was written before head left


def test_a_broken_pipe_elsewhere_is_still_an_internal_error():
    """Only stdout's reader leaving is a normal end: a BrokenPipeError from anything else (here a
    child's stdin; an SSH channel alike) while stdout is fine stays a reported bug."""
    code = ("import subprocess, sys\n"
            "from slurmctl.cli.main import cli, main\n"
            "@cli.command('feed-a-dead-child')\n"
            "def feed():\n"
            "    child = subprocess.Popen(['true'], stdin=subprocess.PIPE)\n"
            "    child.wait()\n"
            "    child.stdin.write(b'x' * 200000)\n"
            "    child.stdin.flush()\n"
            "sys.exit(main(['feed-a-dead-child']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == EXIT_INTERNAL, (done.returncode, done.stderr)
    assert "internal error: BrokenPipeError" in done.stderr
