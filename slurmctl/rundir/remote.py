"""Working from a laptop through the cluster's SSH login node: submissions copy the run and the
code there, and run directories are read back as local mirrors.

The SSH transport (connection, host keys, SFTP transfers) is slurmctl.slurm.ssh. This module
decides WHAT travels: the run directory and the workdir at submit (minus what .gitignore and
.slurmctlignore exclude, under the site's size cap), and the few small files each reading command
needs (see RunMirror). Paths are the same on both sides: the site's shared ``runs_root`` and the
workdir live at the same absolute paths, so the rendered sbatch script is valid on the cluster.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from slurmctl import rundir
from slurmctl.errors import SlurmctlError, SSHError
from slurmctl.rundir import Run, RunRegistry
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.ssh import SSHRunner

IGNORE_FILES = (".gitignore", ".slurmctlignore")
ALWAYS_IGNORED = (".git/", "__pycache__/", ".venv/", ".mypy_cache/", ".pytest_cache/")
DEFAULT_UPLOAD_MAX_BYTES = 200 * 1024 * 1024


# --- what a submission uploads ---------------------------------------------------------------

@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern
    negate: bool
    dir_only: bool


def _glob(piece: str) -> str:
    """One path segment of a gitignore pattern -> regex: '*' and '?' never cross a '/'."""
    out, i = [], 0
    while i < len(piece):
        c = piece[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in piece[i + 1:]:
            end = piece.index("]", i + 1)
            body = piece[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end
        elif c == "\\" and i + 1 < len(piece):
            i += 1
            out.append(re.escape(piece[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _rule(line: str) -> _Rule | None:
    """One .gitignore line: '#' comments, '!' negation, a trailing '/' for directories only, a '/'
    elsewhere anchors the pattern to the ignore file's directory, '**' spans directories."""
    line = line.rstrip("\n").rstrip(" ")
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    line = line[1:] if negate else line
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line
    segments = line.lstrip("/").split("/")
    if segments == [""]:
        return None
    regex = ""
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == "**":
            regex += ".*" if last else "(?:.*/)?"
        else:
            regex += _glob(seg) + ("" if last else "/")
    return _Rule(re.compile(("" if anchored else "(?:.*/)?") + regex + r"\Z", re.S), negate, dir_only)


@dataclass
class IgnoreRules:
    """The rules of every ignore file met on the way down; the last matching rule decides."""

    rules: list[tuple[str, _Rule]] = field(default_factory=list)  # (directory of the file, rule)

    @classmethod
    def defaults(cls) -> IgnoreRules:
        return cls([("", r) for r in map(_rule, ALWAYS_IGNORED) if r])

    def read(self, directory: Path, rel_dir: str) -> IgnoreRules:
        """These rules plus those of `directory`'s ignore files (rel_dir: its path from the root)."""
        added = []
        for name in IGNORE_FILES:
            try:
                lines = (directory / name).read_text(errors="replace").splitlines()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                continue
            added += [(rel_dir, r) for r in map(_rule, lines) if r]
        return IgnoreRules(self.rules + added) if added else self

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        verdict = False
        for base, rule in self.rules:
            if base:
                if not rel_path.startswith(base + "/"):
                    continue
                path = rel_path[len(base) + 1:]
            else:
                path = rel_path
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(path):
                verdict = not rule.negate
        return verdict


@dataclass
class UploadPlan:
    root: Path
    files: list[tuple[str, int]]  # (relative posix path, size)
    skipped: int = 0  # files and directories left out by the ignore rules

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)


@dataclass(frozen=True)
class UploadLimits:
    max_bytes: int = DEFAULT_UPLOAD_MAX_BYTES


def plan_upload(root: Path, limits: UploadLimits = UploadLimits()) -> UploadPlan:
    """The workdir's files that travel to the cluster: not ignored, no symlinks (they would point at
    this machine), at most `limits.max_bytes` in all; over the cap is an error naming the largest."""
    files: list[tuple[str, int]] = []
    skipped = 0

    def walk(directory: Path, rel: str, rules: IgnoreRules) -> None:
        nonlocal skipped
        rules = rules.read(directory, rel)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink():
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if rules.ignored(path, is_dir):
                skipped += 1
                continue
            if is_dir:
                walk(Path(entry.path), path, rules)
            elif entry.is_file(follow_symlinks=False):
                files.append((path, entry.stat(follow_symlinks=False).st_size))

    walk(root, "", IgnoreRules.defaults())
    plan = UploadPlan(root, files, skipped)
    if plan.total_bytes > limits.max_bytes:
        largest = sorted(files, key=lambda f: -f[1])[:5]
        named = ", ".join(f"{p} ({_mb(s)})" for p, s in largest)
        raise SlurmctlError(
            f"the workdir {root} holds {_mb(plan.total_bytes)} to upload to the login node, above the site's "
            f"cap of {_mb(limits.max_bytes)}; the largest files: {named}.",
            f"List data, checkpoints and outputs in {root / '.slurmctlignore'} (same syntax as .gitignore; "
            ".gitignore is honoured too) and keep data on the cluster's filesystem, or ask the operator about "
            "ssh_upload_max_mb in the site config.",
            code="upload-too-large")
    return plan


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):,.1f} MB"


# --- the client: submissions copy the run and the code first ------------------------------------

class RemoteSlurmClient(SlurmClient):
    """SlurmClient over an SSHRunner whose submissions first copy the run dir and the workdir to
    the login node, and whose run directories are read through a RunMirror (``registry``)."""

    runner: SSHRunner

    def __init__(self, runner: SSHRunner, limits: UploadLimits = UploadLimits()):
        super().__init__(runner)
        self.limits = limits
        self.uploaded_files = 0
        self._run_dirs: list[Path] = []
        self._mirror: RunMirror | None = None

    def submit(self, script: Path, extra_args=()) -> int:
        run_dir = script.parent
        workdir = _frozen_workdir(run_dir)
        plan = plan_upload(workdir, self.limits) if workdir is not None and workdir.is_dir() \
            and workdir != run_dir else None  # checked before anything is copied
        self._run_dirs.append(run_dir)
        self.uploaded_files += self.runner.upload_tree(run_dir, str(run_dir))
        if plan is not None:
            self.uploaded_files += self.runner.upload_files(plan.root, str(plan.root), [p for p, _ in plan.files])
        return super().submit(script, extra_args)

    def registry(self, runs_root: Path) -> RunRegistry:
        """The caller's runs as the cluster has them, mirrored on demand; one mirror per command."""
        user = self.runner.target.user or rundir.current_user()  # ssh logs in as the local user by default
        root = Path(runs_root).expanduser() / user
        if self._mirror is None or self._mirror.root != root:
            self._mirror = RunMirror(self.runner, root)
        return MirroredRunRegistry(Path(runs_root).expanduser(), user, self._mirror)

    def close(self) -> None:
        """Push what was written after sbatch (the `submitted` line of attempts.jsonl), then hang up."""
        try:
            for run_dir in self._run_dirs:
                if run_dir.is_dir():  # a failed submission removes its run dir
                    self.uploaded_files += self.runner.upload_tree(run_dir, str(run_dir))
        finally:
            self.runner.close()


def _frozen_workdir(run_dir: Path) -> Path | None:
    import yaml

    try:
        workdir = (yaml.safe_load((run_dir / rundir.RUN_YAML).read_text()) or {}).get("workdir")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return Path(workdir) if workdir else None


# --- reading run directories that live on the cluster ------------------------------------------
# Mirroring, not a read abstraction: status, ls, logs, cost, diagnose and compare read a Run's
# files through rundir and pathlib. Copying the few small files they read to the same local path,
# right before they read them, leaves all of that code unchanged; a read abstraction would have
# to be threaded through every one of them.

_LISTING_FILES = (rundir.RUN_JSON, rundir.ATTEMPTS, rundir.HEARTBEAT)  # what `ls` and `cost` read per run
_STATUS_FILES = (*_LISTING_FILES, rundir.RUN_YAML, rundir.METRICS, rundir.DRAIN_REQUEST, rundir.DRAIN_ACK)
_COMPLETE_MARKER = ".complete"


class RunMirror:
    """Copies the small files of the caller's remote run dirs to the same local paths, only when
    they changed. Never checkpoint payloads: of the run's checkpoint directory (run.json's
    ``checkpoint_dir``, wherever it is) only the `.complete` markers (their mtime is the
    checkpoint's age) and `latest`; of logs/ only the log a command actually reads."""

    def __init__(self, runner: SSHRunner, root: Path):
        self.runner = runner
        self.root = root  # <runs_root>/<user>
        self._shared: bool | None = None
        self._listed = False

    def _active(self) -> bool:
        """False when the login node sees this machine's runs directory (a shared filesystem): then
        the files are already here, and copying a file onto itself could truncate a live log."""
        if self._shared is None:
            try:
                self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
                probe = self.root / f".slurmctl-probe-{secrets.token_hex(4)}"
                probe.touch()
            except OSError as exc:
                raise SSHError(f"Cannot keep a local copy of your runs directory {self.root}: {exc}.",
                               "Make runs_root writable here (slurmctl mirrors run files from the login node "
                               "to the same path).", code="ssh-mirror-failed") from None
            try:
                self.runner.sftp().stat(str(probe))
                self._shared = True
            except FileNotFoundError:
                self._shared = False
            finally:
                probe.unlink(missing_ok=True)
        return not self._shared

    def _guard(self, what: str, action) -> int:
        try:
            return action()
        except (OSError, paramiko.SSHException) as exc:
            raise SSHError(f"Reading {what} from the login node {self.runner.target} failed: {exc}.",
                           "Retry; check that your runs directory on the cluster is readable by you.",
                           code="ssh-mirror-failed") from None

    def sync_listing(self) -> None:
        """run.json, attempts.jsonl and heartbeat.json of every run on the cluster (once per command)."""
        if self._listed or not self._active():
            return
        self._listed = True

        def sync() -> int:
            try:
                entries = self.runner.sftp().listdir_attr(str(self.root))
            except FileNotFoundError:
                return 0
            return sum(self._sync_files(self.root / e.filename, _LISTING_FILES) is not None
                       for e in entries if stat.S_ISDIR(e.st_mode or 0))
        self._guard(f"the runs in {self.root}", sync)

    def sync_run(self, path: Path) -> bool:
        """What `status` reads of one run; False when the cluster has no such run dir."""
        if not self._active():
            return (path / rundir.RUN_JSON).exists()
        return bool(self._guard(f"run {path.name}", lambda: self._sync_run(path)))

    def fetch(self, path: Path) -> Path:
        """One file (a log) read now: re-fetched on every call, so a followed log keeps growing."""
        if self._active():
            self._guard(str(path), lambda: self.runner.fetch_if_changed(str(path), path))
        return path

    def _sync_files(self, run_dir: Path, names: tuple[str, ...]) -> set[str] | None:
        """`names` of one run dir (one listing, then only what changed); None if it is no run."""
        try:
            present = {a.filename: a for a in self.runner.sftp().listdir_attr(str(run_dir))}
        except FileNotFoundError:
            return None
        if rundir.RUN_JSON not in present:
            return None
        run_dir.mkdir(mode=0o700, exist_ok=True)
        for name in names:
            if name in present:
                self.runner.fetch_if_changed(str(run_dir / name), run_dir / name, present[name])
            else:  # gone on the cluster (a handled drain.request)
                (run_dir / name).unlink(missing_ok=True)
        return set(present)

    def _sync_run(self, run_dir: Path) -> int:
        present = self._sync_files(run_dir, _STATUS_FILES)
        if present is None:
            return 0
        run = Run(run_dir.name, run_dir)
        self._sync_checkpoints(run.checkpoint_dir)
        if rundir.WATCHDOG_DIR in present:
            state = run.watchdog_state_path
            self.runner.fetch_if_changed(str(state), state)
        return 1

    def _sync_checkpoints(self, checkpoints: Path) -> None:
        try:
            remote_entries = self.runner.sftp().listdir_attr(str(checkpoints))
        except FileNotFoundError:
            remote_entries = []
        checkpoints.mkdir(mode=0o700, parents=True, exist_ok=True)
        names = set()
        for entry in remote_entries:
            names.add(entry.filename)
            if entry.filename == "latest":
                self.runner.fetch_if_changed(str(checkpoints / "latest"), checkpoints / "latest", entry)
            elif stat.S_ISDIR(entry.st_mode or 0):  # empty here but for its marker: that is all status needs
                (checkpoints / entry.filename).mkdir(exist_ok=True)
                marker = checkpoints / entry.filename / _COMPLETE_MARKER
                self.runner.fetch_if_changed(str(marker), marker)
        for stale in checkpoints.iterdir():  # pruned or renamed (.tmp) on the cluster
            if stale.name not in names and stale.is_dir() and not stale.is_symlink():
                (stale / _COMPLETE_MARKER).unlink(missing_ok=True)
                try:
                    stale.rmdir()
                except OSError:
                    pass  # holds more than a mirrored marker: not ours to delete


class MirroredRun(Run):
    """A Run whose logs are fetched from the login node when they are read."""

    def __init__(self, run: Run, mirror: RunMirror):
        super().__init__(run.run_id, run.path)
        self._mirror = mirror

    def log_path(self, job_id: int) -> Path:
        return self.refresh(super().log_path(job_id))

    def refresh(self, path: Path) -> Path:
        return self._mirror.fetch(path)


class MirroredRunRegistry(RunRegistry):
    """The caller's runs as the cluster sees them: listing and lookup first mirror the remote run dirs."""

    def __init__(self, runs_root: Path, user: str, mirror: RunMirror):
        super().__init__(runs_root, user)
        self.mirror = mirror

    def list(self) -> list[Run]:
        self.mirror.sync_listing()
        return [MirroredRun(r, self.mirror) for r in super().list()]

    def recent(self, limit: int | None = None, since: float | None = None) -> list[Run]:
        self.mirror.sync_listing()
        return [MirroredRun(r, self.mirror) for r in super().recent(limit, since)]

    def get(self, ref: str) -> Run:
        by_id = "/" not in ref and rundir.is_run_id(ref) and self.mirror.sync_run(self.root / ref)
        if not by_id:  # a run name, an id prefix or a path: resolve it against every run
            self.mirror.sync_listing()
        run = super().get(ref)
        if not by_id:
            self.mirror.sync_run(run.path)
        return MirroredRun(run, self.mirror)

