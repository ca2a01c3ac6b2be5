"""The exception hierarchy. Core code raises these; only the CLI turns them into exit codes.

This module imports nothing else from the package so every layer can use it.
"""

from __future__ import annotations


class SlurmctlError(Exception):
    """An error a user can act on: a stable kebab-case ``code``, a message and a hint."""

    code = "error"
    exit_code = 1

    def __init__(self, message: str, hint: str = "", *, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code:
            self.code = code

    def to_dict(self) -> dict:
        return {"error": self.code, "message": self.message, "hint": self.hint}


class SpecError(SlurmctlError):
    """run.yaml or site config is malformed or inconsistent."""

    code = "invalid-spec"
    exit_code = 2


class ConfigError(SlurmctlError):
    """The site configuration is missing or wrong (an admin's problem)."""

    code = "site-config"
    exit_code = 2


class PreflightError(SlurmctlError):
    """Checks before submission found problems; nothing was submitted."""

    code = "preflight-failed"
    exit_code = 2


class SlurmUnreachable(SlurmctlError):
    """Slurm commands are missing or the controller does not answer."""

    code = "slurm-unreachable"
    exit_code = 3


class SlurmCommandError(SlurmctlError):
    """A Slurm command ran and refused the request."""

    code = "slurm-command-failed"
    exit_code = 4


class RunNotFound(SlurmctlError):
    code = "run-not-found"
    exit_code = 5
