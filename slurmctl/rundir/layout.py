"""The run directory's layout (every file name), run ids, and ``Run``: the paths and readers of one run.

Standard library only at import (the job, the root node hooks and the CLI share it). See the package
docstring for the layout and the ownership rules."""

from __future__ import annotations

import json
import os
import pwd
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from slurmctl.fsutil import (
    append_jsonl,
    read_json,
    read_jsonl,
    read_text_capped,
    tail_jsonl,
    tail_text_lines,
    write_atomic,
)
from slurmctl.rundir.pinned import PinnedDir

# About 100 bytes per event: the newest ~80 events (some 25 attempts: submitted, start, end).
RECENT_EVENTS_BYTES = 8 * 1024
# What a reader who does not own a run reads of its ever-growing files (root's `ls --all-users`,
# status and web view of another user's run, a teammate): only the newest bytes, so one user's
# 64 MiB (or hard-linked) file costs everyone else one bounded read. The owner reads the whole file
# (up to read_jsonl's cap): a huge file of their own slows only them.
OTHERS_EVENTS_BYTES = 64 * 1024  # ~600 events: every attempt of any real run
OTHERS_METRICS_BYTES = 1024 * 1024  # ~10,000 steps for a chart

# --- the layout ------------------------------------------------------------------------------
RUN_YAML = "run.yaml"
RUN_JSON = "run.json"
PREFLIGHT_JSON = "preflight.json"
JOB_SCRIPT = "job.sbatch"
ADOPTED_SCRIPT = "adopted.sh"  # `slurmctl adopt`: the original script, byte for byte (job.sbatch runs it)
ATTEMPTS = "attempts.jsonl"
LOGS_DIR = "logs"
HEARTBEAT = "heartbeat.json"
METRICS = "metrics.jsonl"
DRAIN_REQUEST = "drain.request"
DRAIN_ACK = "drain.ack"
CHECKPOINTS_DIR = "checkpoints"
WATCHDOG_DIR = "watchdog"
WATCHDOG_STATE = "state.json"  # in watchdog/: what the progress watchdog did last
# in watchdog/<job>-<time>/ (a "scene" the watchdog captured before it acted):
SCENE_STACKS, SCENE_LOG_TAIL, SCENE_GPUS = "stacks.txt", "log_tail.txt", "nvidia-smi.txt"
JOB_LOG = "{job_id}.out"  # in logs/: every attempt of a job, appended (the job script passes %j)
HEALTH_DIR = "health"
HEALTH_RANK = "rank-{rank}.json"  # in health/: one per rank
HEALTH_IDLE = "idle.json"  # in health/: the idle policy's view (the watchdog sidecar)
# The epilog's per-attempt cost records, copied here as the job's user for the user's own `cost`
# (the authoritative copies sit in root's spool, which users cannot read).
COST_RECORDS_DIR = "cost-records"
# What a training leaves for after the run besides checkpoints (hf-lora: adapter/, base-model/,
# and merged/ from `slurmctl merge`).
ARTIFACTS_DIR = "artifacts"
# Messages sent about the run (slurmctl/notify): event, channel key and kind, delivered or why not.
NOTIFICATIONS = "notifications.jsonl"
# Object-store datasets (run.yaml `data: [{src: ...}]`): the plan submit writes, and one record per
# (job, node) of what the staging step did (hits, bytes, seconds; slurmctl/runtime/datastage.py).
DATA_PLAN = "data-plan.json"
# The latest ended job's diagnosis, with what it was read from (observe.status): `ls` and `status` of
# a failed run read it instead of scanning the log with every rule again.
DIAGNOSIS_CACHE = "diagnosis.cache.json"
DATA_DIR = "data-stage"
DATA_STAGE = "stage-{job_id}-{node}.json"  # in data-stage/

# <name>-<YYYYMMDD>-<4 hex>; the name part is RunSpec's name rule. A run id is one path component
# (no '/', never '.' or '..'), so it is safe as a directory name and as a metric label.
RUN_ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,47}-\d{8}-[0-9a-f]{4}")
COMMENT_PREFIX = "slurmctl:"
# #SBATCH lines are not parsed by a shell, so paths in them must not need quoting.
SAFE_PATH_RE = re.compile(r"[A-Za-z0-9/._+@-]+")
_START_MARK = '"event": "start"'  # a start event's line as Run.record writes it (json.dumps, keys sorted)
_STEP_WINDOW = 50  # metrics.jsonl records used for the current step rate


def _owned_by_caller(path: Path) -> bool:
    """The file is the caller's own (a missing one too: the reader then finds nothing)."""
    try:
        return os.stat(path, follow_symlinks=False).st_uid == os.geteuid()
    except OSError:
        return True


def _lstat_or_none(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


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


def user_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def user_runs_dir(runs_root: str | os.PathLike, user: str) -> Path:
    """``<runs_root>/<user>``: one user's runs (and sweeps)."""
    return Path(runs_root) / user


def run_path(runs_root: str | os.PathLike, user: str, run_id: str) -> Path:
    """``<runs_root>/<user>/<run id>``; only a checked run id names a directory."""
    if not is_run_id(run_id):
        raise ValueError(f"not a run id: {run_id!r}")
    return user_runs_dir(runs_root, user) / run_id


def run_dir_of_log(log_path: str | os.PathLike) -> Path:
    """The run dir a job's log (``<run dir>/logs/<job>.out``) sits in."""
    return Path(log_path).parent.parent


def job_log_path(run_dir: str | os.PathLike, job_id: int | str) -> Path:
    """``<run dir>/logs/<job id>.out``; `job_id` "%j" gives the job script's --output pattern."""
    return Path(run_dir) / LOGS_DIR / JOB_LOG.format(job_id=job_id)


def write_stage_record(run_dir: str | os.PathLike, job_id: str | None, node: str, record: dict) -> Path:
    directory = Path(run_dir) / DATA_DIR
    directory.mkdir(exist_ok=True)
    safe_node = re.sub(r"[^A-Za-z0-9._-]", "_", node)[:64]
    path = directory / DATA_STAGE.format(job_id=int(job_id or 0), node=safe_node)
    write_atomic(path, json.dumps(record))
    return path


def _is_stage_record(name: str) -> bool:
    return name.startswith("stage-") and name.endswith(".json")


def is_health_rank_file(name: str) -> bool:
    """A file name of health/ that one rank writes (``rank-<N>.json``)."""
    prefix, suffix = HEALTH_RANK.split("{rank}")
    return name.startswith(prefix) and name.endswith(suffix) and name[len(prefix):-len(suffix)].isdigit()


def watchdog_state_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / WATCHDOG_DIR / WATCHDOG_STATE


def watchdog_scene_dir(run_dir: str | os.PathLike, job_id: str | None, when: float) -> Path:
    """``<run dir>/watchdog/<job id>-<epoch>/``: one capture of stacks, log tail and GPUs."""
    return Path(run_dir) / WATCHDOG_DIR / f"{job_id or 'local'}-{int(when)}"


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


# The line the job's log starts each attempt with: the run-wide attempt number (as status and `logs
# --attempt` count, 1 = the first) and which Slurm attempt it is. Logs written before the Slurm restart
# was added carry the restart count as the number.
ATTEMPT_HEADER = re.compile(r"^slurmctl: attempt (\d+) of job (\d+)(?: \(Slurm restart (\d+)\))?")


def attempt_header(number: int, job_id: int | None, restart_count: int | None) -> str:
    return f"slurmctl: attempt {number} of job {job_id} (Slurm restart {restart_count or 0})"


def header_restart_count(match: re.Match) -> int:
    """The Slurm restart count of an ATTEMPT_HEADER match (old headers: their number)."""
    return int(match[3] if match[3] is not None else match[1])


def attempt_ids(events: list[dict]) -> list[tuple[int, int]]:
    """(job id, Slurm restart count) of every attempt of a run that started, oldest first, across all
    its submissions (a resume is a new job whose restart count starts at 0 again). Attempt N (1 = the
    first) is the N-th: status, its story, diagnose and `logs --attempt N` number them so."""
    found: list[tuple[int, int]] = []
    for e in events:
        if e.get("event") != "start":
            continue
        try:
            key = (int(e.get("job_id")), int(e.get("restart_count") or 0))
        except (TypeError, ValueError):
            continue
        if key not in found:
            found.append(key)
    return found


@dataclass
class Run:
    """One run directory. Every path and reader of a run is here; nothing else spells a file name.

    A Run from ``pinned_as`` reads through its directory's open fd (slurmctl.rundir.pinned): what
    root uses for another user's run, so a directory swapped after the check is never read."""

    run_id: str
    path: Path
    pinned: PinnedDir | None = field(default=None, repr=False, compare=False)
    # The uid whose run this is, for a reader who is not that user (root): every read then opens the
    # run dir afresh through PinnedDir, so a directory swapped for a symlink is never read through.
    owner: int | None = field(default=None, repr=False, compare=False)

    @contextmanager
    def pinned_as(self, owner: int) -> Iterator[Run]:
        """This run, its directory opened once and owned by `owner`: every reader below reads
        relative to that fd, files and subdirectories of `owner` only, no symlinks. UnsafeFile
        (an OSError) when the directory is not a real directory of `owner`."""
        with PinnedDir.open(self.path, owner) as pinned:
            yield Run(self.run_id, self.path, pinned, owner)

    # --- reading a file of the run, by its name in the layout -----------------------------------
    def _read(self, through_fd, by_path, refused):
        """`through_fd(PinnedDir)` for a pinned run or one read for another user (`refused` when its
        directory is not that user's real directory), else `by_path()`."""
        if self.pinned is not None:
            return through_fd(self.pinned)
        if self.owner is None:
            return by_path()
        try:
            with PinnedDir.open(self.path, self.owner) as pinned:
                return through_fd(pinned)
        except OSError:
            return refused

    def _json(self, name: str):
        return self._read(lambda d: d.read_json(name), lambda: read_json(self.path / name), None)

    def _text(self, name: str) -> str:
        if self.pinned is None and self.owner is not None:
            with PinnedDir.open(self.path, self.owner) as pinned:
                return pinned.read_text(name)
        return self.pinned.read_text(name) if self.pinned else read_text_capped(self.path / name)

    def _all_jsonl(self, name: str, cap: int = 64 * 1024 * 1024) -> list[dict]:
        return self._read(lambda d: d.read_jsonl(name, cap), lambda: read_jsonl(self.path / name, cap), [])

    def _tail_jsonl(self, name: str, records: int, max_bytes: int) -> list[dict]:
        return self._read(lambda d: d.tail_jsonl(name, records, max_bytes),
                          lambda: tail_jsonl(self.path / name, records, max_bytes), [])

    def _tail_lines(self, name: str, max_bytes: int) -> list[str]:
        """The whole lines within the newest `max_bytes` of a file (an unsafe or missing file: none)."""
        try:
            return self._read(lambda d: d.tail_lines(name, max_bytes),
                              lambda: tail_text_lines(self.path / name, 0, max_bytes), [])
        except OSError:
            return []

    def _exists(self, name: str) -> bool:
        return self._read(lambda d: d.exists(name), lambda: os.path.lexists(self.path / name), False)

    def _lstat(self, name: str) -> os.stat_result | None:
        return self._read(lambda d: d.lstat(name), lambda: _lstat_or_none(self.path / name), None)

    def _owned_by_caller(self, name: str) -> bool:
        if self.pinned is not None or self.owner is not None:
            return (self.owner if self.owner is not None else self.pinned.owner) == os.geteuid()
        return _owned_by_caller(self.path / name)

    def spec_text(self) -> str:
        """run.yaml's text (capped)."""
        return self._text(RUN_YAML)

    def watchdog_scenes(self) -> list[str]:
        """The scene directories the progress watchdog captured (one per hung step it ended)."""
        def by_path() -> list[str]:
            folder = self.watchdog_dir
            if not folder.is_dir() or folder.is_symlink():
                return []
            return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.is_symlink())
        return self._read(lambda d: d.subdirs(WATCHDOG_DIR), by_path, [])

    def health_records(self, limit: int) -> list[dict]:
        """The parsed rank-<N>.json files of health/ (at most `limit`, by name)."""
        def by_path() -> list[str]:
            try:
                return os.listdir(self.health_dir)
            except OSError:
                return []
        names = self._read(lambda d: [n for n, _ in d.entries(HEALTH_DIR)], by_path, [])
        records = []
        for name in sorted(n for n in names if is_health_rank_file(n))[:limit]:
            data = self._json(f"{HEALTH_DIR}/{name}")
            if isinstance(data, dict):
                records.append(data)
        return records

    def health_idle(self) -> dict | None:
        data = self._json(f"{HEALTH_DIR}/{HEALTH_IDLE}")
        return data if isinstance(data, dict) else None

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

    @property
    def notifications_path(self) -> Path:
        return self.path / NOTIFICATIONS

    def notifications(self) -> list[dict]:
        """The messages sent about this run, oldest first (slurmctl/notify/journal.py writes them)."""
        return self._all_jsonl(NOTIFICATIONS, 4 * 1024 * 1024)

    def log_path(self, job_id: int) -> Path:
        return job_log_path(self.path, int(job_id))

    def refresh(self, path: Path) -> Path:
        """Make a file of this run current before reading it again (a growing log): a no-op on the
        shared filesystem; a run read through an SSH login node re-fetches it (slurm/ssh.py)."""
        return path

    # --- readers -------------------------------------------------------------------------------
    @property
    def meta(self) -> dict:
        data = self._json(RUN_JSON)
        return data if isinstance(data, dict) else {}

    def spec(self):
        """The frozen RunSpec (pydantic and yaml are imported here only: the job and hooks never need them)."""
        from slurmctl.config.models import RunSpec  # why: pydantic only here (the job and hooks never parse run.yaml)
        from slurmctl.safe_yaml import bounded_safe_load  # why: yaml only here, as above

        # bounded: an alias bomb planted in run.yaml must not expand while pydantic walks it
        return RunSpec.model_validate(bounded_safe_load(self.spec_text()))

    @property
    def artifacts_dir(self) -> Path:
        return self.path / ARTIFACTS_DIR

    @property
    def watchdog_state_path(self) -> Path:
        return watchdog_state_path(self.path)

    @property
    def checkpoint_dir(self) -> Path:
        """Where this run's checkpoints are: run.json's ``checkpoint_dir`` (absolute, set at submit).
        Runs submitted before it was recorded: run.yaml's ``checkpoint.dir`` by the same rule."""
        recorded = self.meta.get("checkpoint_dir")
        if isinstance(recorded, str) and os.path.isabs(recorded):
            return Path(recorded)
        if not os.path.lexists(self.spec_path):  # an adopted script's run: no run.yaml, no yaml to import
            return self.default_checkpoint_dir
        try:
            from slurmctl.safe_yaml import bounded_safe_load  # why: yaml for old runs only (no record in run.json)

            frozen = bounded_safe_load(self.spec_text()) or {}
            configured = (frozen.get("checkpoint") or {}).get("dir")
            return resolve_checkpoint_dir(configured, frozen.get("workdir") or self.path, self.path)
        except Exception:  # noqa: BLE001 - unreadable or malformed (YAMLError too): the default place
            return self.default_checkpoint_dir

    def events(self) -> list[dict]:
        """attempts.jsonl: all of it for its owner, the newest OTHERS_EVENTS_BYTES for anyone else."""
        if self._owned_by_caller(ATTEMPTS):
            return self._all_jsonl(ATTEMPTS)
        return self._tail_jsonl(ATTEMPTS, 0, OTHERS_EVENTS_BYTES)

    def metrics_records(self) -> list[dict]:
        """metrics.jsonl: all of it for its owner, the newest OTHERS_METRICS_BYTES for anyone else."""
        if self._owned_by_caller(METRICS):
            return self._all_jsonl(METRICS)
        return self._tail_jsonl(METRICS, 0, OTHERS_METRICS_BYTES)

    def recent_events(self, max_bytes: int = RECENT_EVENTS_BYTES) -> list[dict]:
        """The newest events only, within `max_bytes` of attempts.jsonl's end: what readers of a run
        they do not own need (root's exporter and cleanup), so a huge (or hard-linked 64 MiB) file
        costs them one bounded read, not a parse of the whole file."""
        return self._tail_jsonl(ATTEMPTS, 0, max_bytes)

    def recent_starts(self, max_bytes: int = RECENT_EVENTS_BYTES) -> tuple[int, float | None]:
        """(how many start events the newest `max_bytes` of attempts.jsonl hold, the newest one's
        time): the exporter's restart count and attempt start, at the cost of one JSON parse per run
        instead of one per event. Lines are counted in the form ``record`` writes them
        (``"event": "start"``, keys sorted); the newest start is the last line that parses as one.
        A line written another way is the run owner's own and changes only their own count."""
        lines = self._tail_lines(ATTEMPTS, max_bytes)
        count = sum(_START_MARK in line and line.rstrip().endswith("}") for line in lines)  # not a torn line
        for line in reversed(lines):
            if '"start"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == "start" and \
                    isinstance(event.get("time"), (int, float)) and not isinstance(event.get("time"), bool):
                return count, float(event["time"])
        return count, None

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

    def priced_job_ids(self) -> list[int]:
        """Every job the run was paid for: ``job_ids()`` and, for an array submitted whole (an adopted
        script with --array), each task's own id from its start event: a task is a job of its own,
        priced for itself, not an attempt of the array's job."""
        ids = self.job_ids()
        starts = [e.get("job_id") for e in self.events() if e.get("event") == "start"]
        return list(dict.fromkeys([*ids, *(i for i in starts if isinstance(i, int) and i > 0)]))

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

    def attempt_ids(self) -> list[tuple[int, int]]:
        """(job id, Slurm restart count) of each attempt that started; attempt N is the N-th: see
        ``attempt_ids``."""
        return attempt_ids(self.events())

    def latest_job_id(self) -> int | None:
        ids = self.job_ids()
        return ids[-1] if ids else None

    def stage_records(self, limit: int = 256) -> list[dict]:
        """The staging steps' records of the run (newest last), at most `limit`, each capped in size;
        for another user's run, read through its pinned directory (no symlink, that user's files only)."""
        def pinned(d: PinnedDir) -> list[dict]:
            names = [n for n, st in d.entries(DATA_DIR) if stat.S_ISREG(st.st_mode) and _is_stage_record(n)]
            return [d.read_json(f"{DATA_DIR}/{n}") for n in sorted(names)[-limit:]]

        def by_path() -> list[dict]:
            try:
                names = sorted(n for n in os.listdir(self.path / DATA_DIR) if _is_stage_record(n))
            except OSError:
                return []
            return [read_json(self.path / DATA_DIR / n) for n in names[-limit:]]

        records = [r for r in self._read(pinned, by_path, []) if isinstance(r, dict)]
        return sorted(records, key=lambda r: r.get("time") if isinstance(r.get("time"), int | float) else 0)

    def heartbeat(self) -> dict | None:
        data = self._json(HEARTBEAT)
        return data if isinstance(data, dict) else None

    def metrics_tail(self, records: int = _STEP_WINDOW, max_bytes: int = 64 * 1024) -> list[dict]:
        return self._tail_jsonl(METRICS, records, max_bytes)

    def attempt_start(self) -> float | None:
        starts = [e.get("time") for e in self.recent_events() if e.get("event") == "start"]
        starts = [t for t in starts if isinstance(t, (int, float))]
        return starts[-1] if starts else None

    def step_rate(self) -> float | None:
        """Steps per second of the current attempt (status and the exporter both show this)."""
        return step_rate(self.metrics_tail(), since=self.attempt_start())

    def drain_request(self) -> dict | None:
        """The pending drain request; {"reason": "unknown"} when present but unreadable."""
        if not self._exists(DRAIN_REQUEST):
            return None
        data = self._json(DRAIN_REQUEST)
        return data if isinstance(data, dict) else {"reason": "unknown"}

    def drain_requested(self) -> bool:
        return self._exists(DRAIN_REQUEST)

    def drain_requested_time(self) -> float | None:
        """When the pending drain request was written (its mtime), or None."""
        st = self._lstat(DRAIN_REQUEST)
        return st.st_mtime if st is not None else None

    def drain_ack(self) -> dict | None:
        if not self._exists(DRAIN_ACK):
            return None
        data = self._json(DRAIN_ACK)
        return data if isinstance(data, dict) else {}

    def drain_acked(self) -> bool:
        return self._exists(DRAIN_ACK)

    def drain_acknowledged_attempts(self) -> set[tuple[int, int]]:
        """(job id, restart count) of the attempts whose drain the run's own story records as
        acknowledged: the attempt's end record (drain.ack, or an adopted program's own new checkpoint)
        or cancel's `drain-acknowledged`. The epilog sees drain.ack alone, which an adopted program
        never writes."""
        def acknowledged(e: dict, restart: int) -> int | None:
            if e.get("event") == "end" and e.get("drain_acked"):
                return int(e.get("restart_count") or 0)
            return restart if e.get("event") == "drain-acknowledged" else None

        return self._attempts_where(acknowledged)

    def lost_on_cancel_attempts(self) -> set[tuple[int, int]]:
        """(job id, restart count) of the attempts a cancel ended with work lost: `cancel --now`, or a
        cancel whose drain never came, recorded steps lost since the checkpoint the next start restores."""
        return self._attempts_where(lambda e, restart: restart if e.get("event") == "cancel-result"
                                    and (e.get("steps_lost") or 0) > 0 else None)

    def attempt_ends(self) -> dict[tuple[int, int], dict]:
        """The run's own end record of each attempt, by (job id, restart count): how the job saw it end
        (its outcome, its batch script's exit status, steps lost since the checkpoint), which Slurm's
        record of an attempt it ended itself (REQUEUED, PREEMPTED: exit code 0:0) does not keep."""
        return {(job, restart): e for e, job, restart in self._events_by_attempt() if e.get("event") == "end"}

    def _attempts_where(self, attempt_of) -> set[tuple[int, int]]:
        """(job id, restart count) of the attempts `attempt_of(event, restart)` names: it is given every
        event of a numeric job id with the restart count of that job's latest start so far, and returns
        the restart count of the attempt the event marks, or None."""
        return {(job, restart) for e, job, latest in self._events_by_attempt()
                if (restart := attempt_of(e, latest)) is not None}

    def _events_by_attempt(self) -> Iterator[tuple[dict, int, int]]:
        """(event, job id, restart count of that job's latest start so far) for every event of a numeric
        job id but the starts themselves."""
        restarts: dict[int, int] = {}
        for e in self.events():
            job = str(e.get("job_id") or "")
            if not job.isdigit():
                continue
            if e.get("event") == "start":
                restarts[int(job)] = int(e.get("restart_count") or 0)
            else:
                yield e, int(job), restarts.get(int(job), 0)

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
