"""Runners execute one Slurm command (an argv list) and return its result.

A runner never builds shell strings from user input: LocalRunner passes argv straight to
exec. The client only sees the ``Runner`` interface, so tests can assert exact argv.
Standard library only: the Prolog/Epilog (system python3, no venv) use it too.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from slurmctl.errors import SlurmUnreachable


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult: ...

    def attach(self, argv: list[str]) -> int: ...


def _text(output: bytes) -> str:
    """Slurm's output as text, byte for byte: a job name may hold any byte, so bytes that are not
    UTF-8 become U+FFFD instead of failing every caller's squeue, and a carriage return stays one
    (text mode would turn it into a newline)."""
    return output.decode("utf-8", errors="replace")


class LocalRunner:
    """Runs Slurm commands on this host (login node, inside a job, or a node's Prolog/Epilog).

    ``bin_dir``: run bare command names from this directory (slurmd starts the hooks with no PATH).
    ``env``: the commands' whole environment instead of this process's (hooks pass LC_ALL=C).
    ``max_timeout``: no command waits longer than this, whatever its caller asked (see answer_within).
    """

    def __init__(self, bin_dir: str | None = None, env: dict[str, str] | None = None,
                 max_timeout: float | None = None):
        self.bin_dir = bin_dir
        self.env = env
        self.max_timeout = max_timeout

    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        if self.max_timeout is not None:
            timeout = min(timeout, self.max_timeout)
        if self.bin_dir and "/" not in argv[0]:
            argv = [os.path.join(self.bin_dir, argv[0]), *argv[1:]]
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=timeout, check=False, env=self.env)
        except FileNotFoundError:
            raise SlurmUnreachable(
                f"`{argv[0]}` is not installed on this machine, so Slurm cannot be reached.",
                "Run slurmctl on the cluster's login node, or install the Slurm client tools "
                "(on the local dev cluster: deploy/local/up).",
            ) from None
        except OSError as exc:  # e.g. not executable
            raise SlurmUnreachable(f"`{argv[0]}` could not be started: {exc.strerror or exc}.",
                                   "Check the Slurm client tools' installation on this machine.") from None
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(
                f"`{argv[0]}` did not answer within {timeout:.0f} s.",
                "The Slurm controller may be overloaded or down; try again in a minute, then tell your admin.",
            ) from None
        return CommandResult(tuple(argv), proc.returncode, _text(proc.stdout), _text(proc.stderr))

    def attach(self, argv: list[str]) -> int:
        """Run an interactive command (srun --pty) on this terminal; returns its exit code."""
        if self.bin_dir and "/" not in argv[0]:
            argv = [os.path.join(self.bin_dir, argv[0]), *argv[1:]]
        try:
            return subprocess.call(argv, env=self.env)
        except FileNotFoundError:
            raise SlurmUnreachable(f"`{argv[0]}` is not installed on this machine.",
                                   "Run this on the cluster's login node, or pass --host to reach it over SSH.",
                                   ) from None


@contextmanager
def answer_within(runner: object, seconds: float):
    """Within the block, every command of `runner` (a LocalRunner, or a wrapper holding one as
    ``inner``) is killed after `seconds` and raises SlurmUnreachable. A hung slurmctld makes squeue
    wait its MessageTimeout (10 s and more) before failing; read commands that can answer from the
    run directory instead use this to answer within a few seconds. Other runners (SSH) are left as
    they are: their own connect timeout applies."""
    local = runner
    while not isinstance(local, LocalRunner) and hasattr(local, "inner"):
        local = local.inner
    if not isinstance(local, LocalRunner):
        yield
        return
    before = local.max_timeout
    local.max_timeout = seconds if before is None else min(before, seconds)
    try:
        yield
    finally:
        local.max_timeout = before
