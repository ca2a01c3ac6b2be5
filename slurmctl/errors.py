"""Every error class, stable error code and exit code of slurmctl, in one place.

Core code raises these; only the CLI boundary turns them into an exit code and one paragraph of
text (or ``to_dict()`` with --json). A code is a stable kebab-case name scripts may match on; a
class has one default code, and a raise may pick a more precise one with ``code=`` — but only one
registered in ``CODES`` below (an unknown code is a programming error, caught by the unit tests).

This module imports nothing else from the package so every layer can use it, down to the
root-run node hooks (standard library only).
"""

from __future__ import annotations

import errno
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
    141: "the reader of the output went away (`| head`): stopped quietly, as a tool killed by SIGPIPE",
}
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 70, 130
EXIT_CLOSED_PIPE = 141

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


class PreflightFailed(PreflightError):
    """Every preflight error at once (not one per try); carries the checklist (a PreflightReport) for
    display and --json."""

    def __init__(self, report):  # a submit.preflight.PreflightReport
        errors = report.errors
        super().__init__("nothing was submitted; preflight found "
                         f"{len(errors)} problem{'s' if len(errors) != 1 else ''}: "
                         + " ".join(f"({i}) {f.message}" for i, f in enumerate(errors, 1)),
                         " ".join(f.hint for f in errors)
                         + (" (`--force` does not override a credential in the job script.)" if report.unforceable
                            else " (`--force` submits anyway and records that it did.)"))
        self.report = report

    def to_dict(self) -> dict:
        return {**super().to_dict(), "findings": [f.to_dict() for f in self.report.findings],
                "checks": self.report.to_dict()["checks"]}


class MergeError(SlurmctlError):
    """`slurmctl merge` cannot merge a run's LoRA adapter into its base model, or the result differs."""

    code = "merge-failed"


# --- errors the core handles itself; they reach a user only inside one of the above ---------------

class YAMLTooLarge(ValueError):
    """A YAML document over the size, node or nesting caps (see ``bounded_safe_load``)."""


class CheckpointError(RuntimeError):
    """A save could not finish (a rank never wrote its shard, or a background save failed)."""


# errno values that mean the filesystem is full, not broken.
_FULL = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EFBIG: "file size limit reached"}


class CheckpointSaveFailed(CheckpointError, OSError):
    """The filesystem refused a save; nothing of it is left, `previous` is still the latest. An
    OSError too (errno, strerror, filename of the refused write), as a failed save always was."""

    def __init__(self, step: int, error: OSError, previous):  # previous: a runtime.checkpoint.Checkpoint or None
        self.step, self.error, self.previous = step, error, previous
        self.disk_full = error.errno in _FULL
        self.reason = _FULL.get(error.errno, "filesystem error")
        where = f" ({error.filename})" if error.filename else ""
        kept = (f"checkpoint step {previous.step} is still the latest" if previous
                else "there is no valid checkpoint yet")
        super().__init__(f"checkpoint of step {step} failed: {self.reason}: {error.strerror or error}{where}; {kept}. "
                         "Free space (or raise the quota) and the next save will succeed; catch "
                         "CheckpointSaveFailed to keep training meanwhile.")
        self.errno, self.strerror, self.filename = error.errno, error.strerror, error.filename

    def __str__(self) -> str:  # the whole sentence, not OSError's "[Errno N] strerror"
        return str(self.args[0])


class UnsafeDirectory(OSError):
    """A directory root was about to write into is a symlink, not a directory, or writable by others."""

    def __init__(self, path: str | os.PathLike, why: str):
        super().__init__(errno.EPERM, f"{os.fspath(path)} {why}; refusing to use it as root")
        self.path, self.why = os.fspath(path), why

    def __str__(self) -> str:
        return self.strerror


class AsUserError(Exception):
    """The child did not answer in time, died, or raised; the message says which."""


class HealthError(Exception):
    """One-line reason why this node must not run jobs."""


class NotAllowed(Exception):
    """403: no valid session, a missing CSRF value, or an operator-only page."""
