"""Every error class, stable error code and exit code of slurmctl, in one place.

Core code raises these; only the CLI boundary turns them into an exit code and one paragraph of
text (or ``to_dict()`` with --json). A code is a stable kebab-case name scripts may match on; a
class has one default code, and a raise may pick a more precise one with ``code=`` — but only one
registered in ``CODES`` below (an unknown code is a programming error, caught by the unit tests).

This module imports nothing else from the package so every layer can use it, down to the
root-run node hooks (standard library only).
"""

from __future__ import annotations

import os

# Exit codes of the `slurmctl` command. Scripts and CI may rely on them; never reuse a number.
EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "the command ran and reports a failure (e.g. a cancel whose drain was not acknowledged)",
    2: "bad input: run.yaml, site config, options, preflight, placement, image; nothing was done",
    3: "Slurm or the login node cannot be reached",
    4: "a Slurm command ran and refused the request",
    5: "no such run (or not yours)",
    6: "the run cannot be resumed or forked",
    7: "a file is not what it must be (a symlink, FIFO or device where a regular file belongs)",
    70: "internal error (a bug: rerun with --debug and report it)",
    130: "interrupted (Ctrl-C) or aborted at a prompt",
}
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 70, 130

# Every error code, with the exit code it ends the command with. Subclass defaults first.
CODES: dict[str, int] = {
    "error": 1, "operators-only": 1,
    # bad input (2)
    "invalid-spec": 2, "invalid-duration": 2, "invalid-date": 2, "invalid-login-host": 2, "init-exists": 2,
    "site-config": 2, "preflight-failed": 2, "cost-not-confirmed": 2, "no-placement": 2,
    "unknown-partition": 2, "too-many-gpus": 2, "upload-too-large": 2, "merge-failed": 2,
    "image": 2, "image-reference": 2, "image-not-found": 2, "image-build": 2, "image-build-failed": 2,
    "image-push-failed": 2, "image-arch-mismatch": 2, "image-mutable-tag": 2, "image-runtime": 2,
    "registry-auth": 2, "registry-unreachable": 2, "engine-unreachable": 2,
    "registry-no-credentials": 2, "registry-token-expired": 2, "registry-access-denied": 2, "skopeo-missing": 2,
    # cannot reach Slurm (3)
    "slurm-unreachable": 3, "slurm-busy": 3, "ssh-failed": 3, "ssh-auth-failed": 3,
    "ssh-host-key-refused": 3, "ssh-upload-failed": 3, "ssh-mirror-failed": 3,
    # Slurm refused (4)
    "slurm-command-failed": 4, "slurm-output-forged": 4, "dev-failed": 4, "dev-timeout": 4,
    # runs (5, 6)
    "run-not-found": 5, "run-not-yours": 5, "cannot-resume": 6,
    # files (7)
    "unsafe-file": 7,
}


class SlurmctlError(Exception):
    """An error a user can act on: a stable kebab-case ``code``, a message and a hint."""

    code = "error"

    def __init__(self, message: str, hint: str = "", *, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code:
            if code not in CODES:
                raise ValueError(f"unregistered error code {code!r}: add it to CODES in slurmctl/errors.py")
            self.code = code

    @property
    def exit_code(self) -> int:
        return CODES.get(self.code, 1)

    def to_dict(self) -> dict:
        return {"error": self.code, "exit_code": self.exit_code, "message": self.message, "hint": self.hint}


class SpecError(SlurmctlError):
    """run.yaml, a command-line value or the user config is malformed or inconsistent."""

    code = "invalid-spec"


class ConfigError(SlurmctlError):
    """The site configuration is missing or wrong (an admin's problem)."""

    code = "site-config"


class PreflightError(SlurmctlError):
    """Checks before submission found problems; nothing was submitted."""

    code = "preflight-failed"


class CostNotConfirmed(SlurmctlError):
    """The estimated cost is above the confirmation threshold and the user did not confirm."""

    code = "cost-not-confirmed"


class NoPlacement(SlurmctlError):
    """No allowed partition can run the job."""

    code = "no-placement"


class ImageError(SlurmctlError):
    """The training image cannot be built, pushed, resolved or run on the chosen nodes."""

    code = "image"


class SlurmUnreachable(SlurmctlError):
    """Slurm commands are missing or the controller does not answer."""

    code = "slurm-unreachable"


class SSHError(SlurmUnreachable):
    """The SSH login node cannot be reached, refuses us, or a transfer through it failed."""

    code = "ssh-failed"


class HostKeyRefused(SSHError):
    """The login node's host key is unknown or changed: never auto-accepted."""

    code = "ssh-host-key-refused"


class SlurmCommandError(SlurmctlError):
    """A Slurm command ran and refused the request."""

    code = "slurm-command-failed"


class ForgedSlurmOutput(SlurmCommandError):
    """Slurm's answer lists one job twice: a user-written field carried a forged record."""

    code = "slurm-output-forged"


class RunNotFound(SlurmctlError):
    """No run of the caller's matches the name or id (another user's runs are never matched)."""

    code = "run-not-found"


class RunNotOwned(SlurmctlError):
    """A run directory (or runs directory) that is not the caller's own, real, private directory."""

    code = "run-not-yours"


class ResumeError(SlurmctlError):
    """The run cannot be resumed or forked (no checkpoint, still running, ...)."""

    code = "cannot-resume"


class UnsafeFile(SlurmctlError, OSError):
    """A path that must be a regular file is a symlink, FIFO, device or directory.

    Also an OSError, so code that already handles unreadable files (the node hooks) stays safe."""

    code = "unsafe-file"

    def __new__(cls, path: str | os.PathLike, kind: str):
        return OSError.__new__(cls)

    def __init__(self, path: str | os.PathLike, kind: str):
        self.path, self.kind = os.fspath(path), kind
        SlurmctlError.__init__(
            self, f"{self.path} is {kind}; slurmctl only reads regular files there.",
            "Remove or replace it with a regular file; slurmctl never follows links or reads pipes or devices "
            "in run directories.")
        self.args = (self.message,)
        self.filename = self.path

    def __str__(self) -> str:  # OSError's would print "[Errno None] None: path"
        return self.message
