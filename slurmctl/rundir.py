"""The ONE owner of the run directory: its file names, where its checkpoints are, its readers, and
who may open it.

Layout: ``<runs_root>/<user>/<run id>/``

    run.yaml         the frozen spec (workdir made absolute)
    run.json         metadata, incl. ``checkpoint_dir`` (absolute, fixed at submit)
    preflight.json   the preflight report of the submission
    job.sbatch       the rendered job script (no secret values)
    attempts.jsonl   one line per event: submitted / start / end / forked ...
    logs/<job id>.out  every attempt of a job, appended
    heartbeat.json   the training's last step (rewritten atomically)
    metrics.jsonl    one line per logged step (grows forever: read its tail)
    drain.request / drain.ack   the drain handshake
    checkpoints/     the default checkpoint dir (see ``resolve_checkpoint_dir``)
    watchdog/        the progress watchdog's state and scenes
    health/          live health: rank-<N>.json per rank (transport, data wait), idle.json (idle policy)

Standard library only at import (the job, the root node hooks and the CLI share this module);
pydantic/yaml are imported inside the one method that parses run.yaml. Every file read goes
through the non-blocking, size-capped readers of ``slurmctl.fsutil`` (a FIFO or /dev/zero planted
in a run dir never hangs a reader). The tail reader for logs is ``slurmctl.fsutil.tail_text_lines``.

Ownership: a run belongs to the user whose directory it is in. ``RunRegistry`` resolves names, ids
and explicit paths only among the caller's runs and refuses (``RunNotOwned``) a directory that is a
symlink, is not owned by the caller, or is writable by group/others.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from slurmctl.errors import ConfigError, RunNotFound, RunNotOwned
from slurmctl.fsutil import append_jsonl, read_json, read_jsonl, read_text_capped, tail_jsonl

# --- the layout ------------------------------------------------------------------------------
RUN_YAML = "run.yaml"
RUN_JSON = "run.json"
PREFLIGHT_JSON = "preflight.json"
JOB_SCRIPT = "job.sbatch"
ATTEMPTS = "attempts.jsonl"
LOGS_DIR = "logs"
HEARTBEAT = "heartbeat.json"
METRICS = "metrics.jsonl"
DRAIN_REQUEST = "drain.request"
DRAIN_ACK = "drain.ack"
CHECKPOINTS_DIR = "checkpoints"
WATCHDOG_DIR = "watchdog"
HEALTH_DIR = "health"
HEALTH_RANK = "rank-{rank}.json"  # in health/: one per rank
HEALTH_IDLE = "idle.json"  # in health/: the idle policy's view (the watchdog sidecar)
# The epilog's per-attempt cost records, copied here as the job's user for the user's own `cost`
# (the authoritative copies sit in root's spool, which users cannot read).
COST_RECORDS_DIR = "cost-records"
# What a training leaves for after the run besides checkpoints (hf-lora: adapter/, base-model/,
# and merged/ from `slurmctl merge`).
ARTIFACTS_DIR = "artifacts"

# <name>-<YYYYMMDD>-<4 hex>; the name part is RunSpec's name rule. A run id is one path component
# (no '/', never '.' or '..'), so it is safe as a directory name and as a metric label.
RUN_ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,47}-\d{8}-[0-9a-f]{4}")
COMMENT_PREFIX = "slurmctl:"
# #SBATCH lines are not parsed by a shell, so paths in them must not need quoting.
_SAFE_PATH_RE = re.compile(r"[A-Za-z0-9/._+@-]+")
_STEP_WINDOW = 50  # metrics.jsonl records used for the current step rate


def is_run_id(text: str) -> bool:
    return isinstance(text, str) and RUN_ID_RE.fullmatch(text) is not None


def run_id_from_comment(comment: str | None) -> str | None:
    """The run id of a job's ``--comment=slurmctl:<run id>``; None for anything else (a comment is
    user-controlled text: ``slurmctl:..`` or ``slurmctl:a/b`` names no run)."""
    if not comment or not comment.startswith(COMMENT_PREFIX):
        return None
    candidate = comment[len(COMMENT_PREFIX):].strip()
    return candidate if is_run_id(candidate) else None


def new_run_id(name: str, now: datetime | None = None) -> str:
    import secrets  # hashlib and hmac: a few ms every read command would pay for nothing

    now = now or datetime.now(UTC)
    return f"{name}-{now:%Y%m%d}-{secrets.token_hex(2)}"


def sweep_element_id(sweep_id: str, index: int | str) -> str:
    """The run id of element `index` of sweep `<name>-<day>-<hex>`: `<name>-<index>-<day>-<hex>`.

    The elements of a sweep are one Slurm array, whose single `#SBATCH --output=` line must name each
    element's own run dir: with `index` = "%a" (sbatch's array task id) this is that line's directory.
    `%j` in the same line is the task's own job id (Slurm 22.05: also SLURM_JOB_ID inside the task)."""
    if not is_run_id(sweep_id):
        raise ValueError(f"not a sweep id: {sweep_id!r}")
    return f"{sweep_id[:-14]}-{index}-{sweep_id[-13:]}"


def current_user() -> str:
    """The caller's login name, from the effective uid (not $USER, which any caller can set)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _user_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def resolve_checkpoint_dir(configured: str | None, workdir: str | os.PathLike, run_dir: str | os.PathLike) -> Path:
    """THE checkpoint-dir rule, applied once at submit and recorded in run.json (``checkpoint_dir``).

    Unset: ``<run dir>/checkpoints``. Relative: against the run's workdir, which is the job's
    working directory (``#SBATCH --chdir``), so it names the directory the training writes to.
    Absolute: as given. Everyone else (status, cost, exporter, resume, fork, smoke, cleanup, the
    runtime, the SSH mirror, the hooks) reads the recorded absolute path: ``Run.checkpoint_dir``.
    """
    if not configured:
        return Path(run_dir) / CHECKPOINTS_DIR
    path = Path(os.path.expanduser(configured))
    return Path(os.path.normpath(path if path.is_absolute() else Path(workdir) / path))


def step_rate(records: list[dict], since: float | None = None, window: int = _STEP_WINDOW) -> float | None:
    """THE step rate (steps per second) of the current attempt, from metrics records.

    Only records at or after `since` (the attempt's start) count, and only the last run of strictly
    increasing steps (a resume restarts from the checkpoint's step), over the newest `window` records;
    so a queue wait or a replayed step range between attempts never enters the rate.
    """
    points = [(r["step"], r["time"]) for r in records
              if isinstance(r.get("step"), (int, float)) and isinstance(r.get("time"), (int, float))
              and not isinstance(r.get("step"), bool)
              and (since is None or r["time"] >= since)]
    for i in range(len(points) - 1, 0, -1):
        if points[i][0] <= points[i - 1][0]:
            points = points[i:]
            break
    points = points[-window:]
    if len(points) < 2 or points[-1][1] <= points[0][1] or points[-1][0] == points[0][0]:
        return None
    return (points[-1][0] - points[0][0]) / (points[-1][1] - points[0][1])


@dataclass
class Run:
    """One run directory. Every path and reader of a run is here; nothing else spells a file name."""

    run_id: str
    path: Path

    # --- paths ---------------------------------------------------------------------------------
    @property
    def spec_path(self) -> Path:
        return self.path / RUN_YAML

    @property
    def meta_path(self) -> Path:
        return self.path / RUN_JSON

    @property
    def preflight_path(self) -> Path:
        return self.path / PREFLIGHT_JSON

    @property
    def script_path(self) -> Path:
        return self.path / JOB_SCRIPT

    @property
    def attempts_path(self) -> Path:
        return self.path / ATTEMPTS

    @property
    def logs_dir(self) -> Path:
        return self.path / LOGS_DIR

    @property
    def heartbeat_path(self) -> Path:
        return self.path / HEARTBEAT

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    @property
    def drain_request_path(self) -> Path:
        return self.path / DRAIN_REQUEST

    @property
    def drain_ack_path(self) -> Path:
        return self.path / DRAIN_ACK

    @property
    def default_checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    @property
    def watchdog_dir(self) -> Path:
        return self.path / WATCHDOG_DIR

    @property
    def health_dir(self) -> Path:
        return self.path / HEALTH_DIR

    @property
    def cost_records_dir(self) -> Path:
        return self.path / COST_RECORDS_DIR

    def log_path(self, job_id: int) -> Path:
        return self.logs_dir / f"{int(job_id)}.out"

    def refresh(self, path: Path) -> Path:
        """Make a file of this run current before reading it again (a growing log): a no-op on the
        shared filesystem; a run read through an SSH login node re-fetches it (slurm/ssh.py)."""
        return path

    # --- readers -------------------------------------------------------------------------------
    @property
    def meta(self) -> dict:
        data = read_json(self.meta_path)
        return data if isinstance(data, dict) else {}

    def spec(self):
        """The frozen RunSpec (pydantic and yaml are imported here only: the job and hooks never need them)."""
        from slurmctl.safe_yaml import bounded_safe_load
        from slurmctl.submit.spec import RunSpec

        # bounded: an alias bomb planted in run.yaml must not expand while pydantic walks it
        return RunSpec.model_validate(bounded_safe_load(read_text_capped(self.spec_path)))

    @property
    def artifacts_dir(self) -> Path:
        return self.path / ARTIFACTS_DIR

    @property
    def checkpoint_dir(self) -> Path:
        """Where this run's checkpoints are: run.json's ``checkpoint_dir`` (absolute, set at submit).
        Runs submitted before it was recorded: run.yaml's ``checkpoint.dir`` by the same rule."""
        recorded = self.meta.get("checkpoint_dir")
        if isinstance(recorded, str) and os.path.isabs(recorded):
            return Path(recorded)
        try:
            from slurmctl.safe_yaml import bounded_safe_load  # old runs only: no record in run.json

            frozen = bounded_safe_load(read_text_capped(self.spec_path)) or {}
            configured = (frozen.get("checkpoint") or {}).get("dir")
            return resolve_checkpoint_dir(configured, frozen.get("workdir") or self.path, self.path)
        except Exception:  # noqa: BLE001 - unreadable or malformed (YAMLError too): the default place
            return self.default_checkpoint_dir

    def checkpoints(self, **kwargs):
        from slurmctl.runtime.checkpoint import CheckpointManager

        return CheckpointManager(self.checkpoint_dir, **kwargs)

    def events(self) -> list[dict]:
        return read_jsonl(self.attempts_path)

    def job_ids(self) -> list[int]:
        """Job ids in submission order. A sweep element is submitted as task `array_task_id` of the
        array `job_id` and gets a job id of its own when it starts (Slurm 22.05 splits a task off the
        array then; the last task to start keeps the array's id), which its `start` events carry;
        until then the array's id finds it (squeue %A shows the still-pending tasks under it)."""
        ids, element = [], False
        for e in self.events():
            kind = e.get("event")
            if kind == "submitted":
                element = "array_task_id" in e
            elif kind != "start" or not element:
                continue
            try:
                ids.append(int(e["job_id"]))
            except (KeyError, TypeError, ValueError):
                continue
        return list(dict.fromkeys(i for i in ids if i > 0))

    def array_task(self) -> tuple[int, int] | None:
        """(array job id, task index) when this run's latest submission is a sweep element's array
        task: '<array>_<index>' reaches that task alone (slurmctl.slurm.client.job_ref)."""
        task = None
        for e in self.events():
            if e.get("event") == "submitted":
                index, array = e.get("array_task_id"), e.get("job_id")
                task = (array, index) if isinstance(index, int) and isinstance(array, int) else None
        return task

    def waiting_array_task(self) -> tuple[int, int] | None:
        """``array_task()`` while the task has not started since that submission: it has no job id of its
        own yet, and its array's id is every task's."""
        task = None
        for e in self.events():
            if e.get("event") == "submitted":
                index, array = e.get("array_task_id"), e.get("job_id")
                task = (array, index) if isinstance(index, int) and isinstance(array, int) else None
            elif e.get("event") == "start":
                task = None
        return task

    def latest_job_id(self) -> int | None:
        ids = self.job_ids()
        return ids[-1] if ids else None

    def heartbeat(self) -> dict | None:
        data = read_json(self.heartbeat_path)
        return data if isinstance(data, dict) else None

    def metrics_tail(self, records: int = _STEP_WINDOW, max_bytes: int = 64 * 1024) -> list[dict]:
        return tail_jsonl(self.metrics_path, records, max_bytes)

    def attempt_start(self) -> float | None:
        starts = [e.get("time") for e in self.events() if e.get("event") == "start"]
        starts = [t for t in starts if isinstance(t, (int, float))]
        return starts[-1] if starts else None

    def step_rate(self) -> float | None:
        """Steps per second of the current attempt (status and the exporter both show this)."""
        return step_rate(self.metrics_tail(), since=self.attempt_start())

    def drain_request(self) -> dict | None:
        """The pending drain request; {"reason": "unknown"} when present but unreadable."""
        if not os.path.lexists(self.drain_request_path):
            return None
        data = read_json(self.drain_request_path)
        return data if isinstance(data, dict) else {"reason": "unknown"}

    def drain_requested(self) -> bool:
        return os.path.lexists(self.drain_request_path)

    def drain_ack(self) -> dict | None:
        if not os.path.lexists(self.drain_ack_path):
            return None
        data = read_json(self.drain_ack_path)
        return data if isinstance(data, dict) else {}

    def drain_acked(self) -> bool:
        return os.path.lexists(self.drain_ack_path)

    # --- writers -------------------------------------------------------------------------------
    def use_umask(self) -> None:
        """Files this process creates for the run (and the job's log, which Slurm creates with the
        submitter's umask) get the run dir's privacy: owner only, or group-readable when the run dir
        is shared (0750). Call before writing into a run or submitting one of its jobs."""
        try:
            shared = bool(os.lstat(self.path).st_mode & 0o050)
        except OSError:
            shared = False
        os.umask(0o027 if shared else 0o077)

    def record(self, event: str, **fields) -> None:
        append_jsonl(self.attempts_path, {"event": event, "time": time.time(), **fields})


def _check_owned_dir(path: Path, what: str, uid: int) -> os.stat_result:
    """lstat, never stat: a real directory, owned by `uid`, not writable by group or others."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise RunNotOwned(f"{what} {path} is a symbolic link; slurmctl does not follow it.",
                          "Run directories are real directories in your own runs directory; "
                          "ask the operator to fix it if you did not create the link.")
    if not stat.S_ISDIR(st.st_mode):
        raise RunNotOwned(f"{what} {path} is not a directory.", "Give a run id, a run name or a run directory.")
    if st.st_uid != uid:
        raise RunNotOwned(f"{what} {path} belongs to {_user_of(st.st_uid)}, not to you ({_user_of(uid)}).",
                          "slurmctl only acts on your own runs; `slurmctl ls` lists them.")
    if st.st_mode & 0o022:
        raise RunNotOwned(f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}), "
                          "so anyone could plant files in it.",
                          f"Remove the write bits (`chmod go-w {path}`) or ask the operator.")
    return st


class RunRegistry:
    """The caller's runs: ``<runs_root>/<user>/<run id>``.

    ``root`` is the caller's own runs directory. The operator creates it (mode 0700, owned by the
    user); when it is missing and the caller may create it, it is created 0700.
    """

    def __init__(self, runs_root: Path, user: str | None = None, *, uid: int | None = None):
        self.runs_root = Path(runs_root).expanduser()
        self.user = user or current_user()
        self.uid = os.geteuid() if uid is None else uid
        self.root = self.runs_root / self.user

    # --- the caller's runs directory -------------------------------------------------------------
    def user_dir(self, create: bool = False) -> Path | None:
        """The caller's verified runs directory; None when it does not exist (and not `create`)."""
        try:
            _check_owned_dir(self.root, "your runs directory", self.uid)
            return self.root
        except FileNotFoundError:
            if not create:
                return None
        except PermissionError:
            raise ConfigError(f"the runs root {self.runs_root} cannot be read by you.",
                              "Ask the operator: the runs root must be 0755 with a private 0700 directory "
                              "per user.") from None
        try:
            self.root.mkdir(mode=0o700)
        except FileExistsError:
            pass  # created meanwhile: verified below
        except OSError as exc:
            raise ConfigError(
                f"your runs directory {self.root} does not exist and cannot be created ({exc.strerror}).",
                f"Ask the operator to create it: `install -d -m 0700 -o {self.user} {self.root}` "
                "(deploy/local/up does this for the local cluster's users).") from None
        _check_owned_dir(self.root, "your runs directory", self.uid)
        return self.root

    def create(self, spec, share_with_group: bool = False, run_id: str | None = None) -> Run:
        """A fresh run dir: 0700, or 0750 when the site shares runs with a team group (the group is
        the user dir's, inherited through its setgid bit, which the operator sets). `run_id`: a
        sweep element's id (``sweep_element_id``); an existing directory raises FileExistsError."""
        if not _SAFE_PATH_RE.fullmatch(str(self.root)):
            raise ConfigError(
                f"runs_root {self.runs_root} contains characters (spaces, quotes, ...) that #SBATCH lines "
                "cannot carry.",
                "Set runs_root in site.yaml to a path of letters, digits, '/', '.', '_' or '-'.",
            )
        os.umask(0o027 if share_with_group else 0o077)  # every file the CLI writes into the run
        self.user_dir(create=True)
        run_id = run_id or new_run_id(spec.name)
        if not is_run_id(run_id):
            raise ValueError(f"not a run id: {run_id!r}")
        path = self.root / run_id
        mode = 0o750 if share_with_group else 0o700
        path.mkdir(mode=mode)
        (path / LOGS_DIR).mkdir(mode=mode)
        (path / CHECKPOINTS_DIR).mkdir(mode=mode)
        return Run(run_id, path)

    # --- lookups: only the caller's runs -------------------------------------------------------
    @staticmethod
    def _entries(directory: Path) -> list[os.DirEntry]:
        try:
            return list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return []

    @staticmethod
    def _owned_dirs(entries, uid: int | None) -> list[os.DirEntry]:
        """Real directories owned by `uid` (symlinks, files and anything not the owner's are no runs)."""
        found = []
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and (uid is None or st.st_uid == uid):
                found.append(entry)
        return found

    @staticmethod
    def _sorted_runs(entries) -> list[Run]:
        runs = [Run(e.name, Path(e.path)) for e in entries if os.path.isfile(os.path.join(e.path, RUN_JSON))]
        return sorted(runs, key=lambda r: (r.meta.get("created") or 0, r.run_id))

    def _runs_in(self, directory: Path, uid: int | None) -> list[Run]:
        return self._sorted_runs(self._owned_dirs(self._entries(directory), uid))

    def list(self) -> list[Run]:
        directory = self.user_dir()
        return self._runs_in(directory, self.uid) if directory else []

    def recent(self, limit: int | None = None, since: float | None = None) -> list[Run]:
        """``list()`` cut to runs created at or after `since` (Unix time) and then to the newest
        `limit`, oldest first, at a cost that does not grow with older runs: a run id ends with its
        creation day (UTC), so only the newest days' directories are stat'ed and their run.json read
        (one day more than needed, for a run created just after midnight of its id's day), plus the
        rare directory whose name is no run id."""
        directory = self.user_dir()
        if directory is None:
            return []
        by_day: dict[str, list[os.DirEntry]] = {}
        undated: list[os.DirEntry] = []
        for entry in self._entries(directory):
            if is_run_id(entry.name):  # <name>-YYYYMMDD-xxxx
                by_day.setdefault(entry.name[-13:-5], []).append(entry)
            else:
                undated.append(entry)
        first_day = "" if since is None else f"{datetime.fromtimestamp(since, UTC):%Y%m%d}"
        chosen, found, extra_days = self._owned_dirs(undated, self.uid), 0, 1
        for day in sorted(by_day, reverse=True):
            if day < first_day or (limit is not None and found >= limit):
                if extra_days == 0:
                    break
                extra_days -= 1
            runs_of_day = [e for e in self._owned_dirs(by_day[day], self.uid)
                           if os.path.isfile(os.path.join(e.path, RUN_JSON))]
            chosen += runs_of_day
            found += len(runs_of_day)
        runs = self._sorted_runs(chosen)
        if since is not None:
            runs = [r for r in runs if (r.meta.get("created") or 0) >= since]
        return runs[-limit:] if limit else runs

    def list_all_users(self) -> list[tuple[str, Run]]:
        """(user, run) for every user's runs: the operator's read-only view (root only)."""
        if os.geteuid() != 0:
            raise RunNotOwned("only the operator (root) can list every user's runs.",
                              "Drop --all-users to list your own runs.")
        found = []
        try:
            users = sorted(os.scandir(self.runs_root), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        for entry in users:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):  # a symlinked user dir is skipped, never followed
                found += [(entry.name, run) for run in self._runs_in(Path(entry.path), st.st_uid)]
        return sorted(found, key=lambda ur: (ur[1].meta.get("created") or 0, ur[1].run_id))

    def get(self, ref: str) -> Run:
        """One of the caller's runs by id, unique id prefix, name (its newest run) or run dir path.

        A path is accepted only when it is a real directory owned by the caller; a name or id is
        only ever looked up in the caller's own runs directory.
        """
        if "/" in ref or ref in {".", ".."}:
            return self._get_path(Path(ref).expanduser())
        directory = self.user_dir()
        if directory is None:
            raise RunNotFound(f"you have no runs yet ({self.root} does not exist).",
                              "Submit one with `slurmctl submit run.yaml`.")
        candidate = directory / ref
        if os.path.lexists(candidate):
            _check_owned_dir(candidate, "run directory", self.uid)
            if (candidate / RUN_JSON).is_file():
                return Run(ref, candidate)
        runs = self._runs_in(directory, self.uid)
        by_name = [r for r in runs if r.meta.get("name") == ref]
        if by_name:
            return by_name[-1]
        prefixed = [r for r in runs if r.run_id.startswith(ref)]
        if len(prefixed) == 1:
            return prefixed[0]
        if len(prefixed) > 1:
            names = ", ".join(r.run_id for r in prefixed[:5])
            raise RunNotFound(f"'{ref}' matches several runs: {names}.", "Give more of the run id.")
        raise RunNotFound(f"no run '{ref}' among your runs in {self.root}.", "`slurmctl ls` lists your runs.")

    def _get_path(self, path: Path) -> Run:
        try:
            _check_owned_dir(path, "run directory", self.uid)
        except FileNotFoundError:
            raise RunNotFound(f"no run directory at {path}.", "`slurmctl ls` lists your runs.") from None
        except PermissionError:  # inside another user's private runs directory
            raise RunNotOwned(f"run directory {path} is not yours (you cannot even look into it).",
                              "slurmctl only acts on your own runs; `slurmctl ls` lists them.") from None
        if not (path / RUN_JSON).is_file():
            raise RunNotFound(f"{path} is not a run directory (it has no {RUN_JSON}).",
                              "Give a run id, a run name or a run directory.")
        return Run(path.name, Path(os.path.abspath(path)))
