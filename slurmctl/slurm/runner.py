"""Runners execute one Slurm command (an argv list) and return its result.

A runner never builds shell strings from user input: LocalRunner passes argv straight to
exec. The client only sees the ``Runner`` interface, so tests can assert exact argv.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Protocol

from ..errors import SlurmUnreachable


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult: ...


class LocalRunner:
    """Runs Slurm commands on this host (login node or inside a job)."""

    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except FileNotFoundError:
            raise SlurmUnreachable(
                f"`{argv[0]}` is not installed on this machine, so Slurm cannot be reached.",
                "Run slurmctl on the cluster's login node, or install the Slurm client tools "
                "(on the local dev cluster: deploy/local/up).",
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(
                f"`{argv[0]}` did not answer within {timeout:.0f} s.",
                "The Slurm controller may be overloaded or down; try again in a minute, then tell your admin.",
            ) from None
        return CommandResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
