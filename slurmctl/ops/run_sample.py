"""What the exporter knows about one active run, read from its run directory.

The run is found as ``<runs_root>/<job's user>/<run id>`` only for a valid run id in the job's comment
(so run labels stay bounded by the queue and no comment names a path). Root reads it through the
directory's fd (``Run.pinned_as``, slurmctl.rundir.pinned): the directory must be a real one of the
job's user when it is opened, and every file is opened relative to that fd and must be the same
user's, so swapping the directory for a symlink to another user's run (even atomically, with
``renameat2(RENAME_EXCHANGE)``) reads nothing of that run: heartbeat.json, metrics.jsonl (its tail
only), attempts.jsonl (its tail), drain.request / drain.ack and the checkpoints. Watchdog interventions
(slurmctl.runtime.watchdog) = its drain request in force (drain.request with reason "watchdog") + each
hung step it ended (one scene directory per kill under watchdog/).
"""

from __future__ import annotations

import os
import pwd
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from slurmctl.config.models import SiteConfig
from slurmctl.errors import UnsafeFile, YAMLTooLarge
from slurmctl.fsutil import read_json
from slurmctl.ops.hooks import asuser
from slurmctl.rundir import Run, run_id_from_comment, run_path, step_rate
from slurmctl.runtime.checkpoint import CHECKPOINT_NAME_RE, COMPLETE_MARKER, CheckpointManager
from slurmctl.safe_yaml import bounded_safe_load
from slurmctl.slurm.client import QueueEntry

_USER_RE = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")  # a Unix login name: one safe path component


@dataclass
class RunSample:
    """What the exporter knows about one active run."""

    run_id: str
    job_id: int
    state: str
    partition: str
    user: str
    gpus: int
    burn_dollars_per_hour: float = 0.0
    attempt_start: float | None = None
    step: int | None = None
    last_step_time: float | None = None
    loss: float | None = None
    step_seconds: float | None = None
    samples_per_second: float | None = None
    checkpoint_step: int | None = None
    checkpoint_time: float | None = None
    checkpoint_age_seconds: float | None = None
    checkpoint_interval_seconds: float | None = None
    checkpoint_save_seconds: float | None = None
    checkpoint_save_in_progress_seconds: float = 0.0
    starts: int = 0  # attempts started (start events), the first included
    watchdog_interventions: int = 0
    drain_requested: bool = False
    drain_requested_time: float | None = None
    drain_acknowledged: bool = False
    acceptable_partitions: list[str] = field(default_factory=list)


def step_seconds(records: list[dict], since: float | None = None) -> float | None:
    """Mean seconds per step of the current attempt: the inverse of slurmctl.rundir.step_rate, the
    one rate `slurmctl status` shows too."""
    rate = step_rate(records, since=since)
    return 1.0 / rate if rate else None


def _checkpoint_facts_pinned(run: Run, relative: str, now: float) -> list:
    """[newest valid step, its time, its save duration, seconds the save in progress has run] of the
    checkpoint dir `relative` inside a pinned run dir: the same rules as CheckpointManager (a valid
    checkpoint is a ``checkpoint-<step>`` directory with its completion marker), read through the run
    dir's fd, so nothing outside the run dir, and nothing not the owner's, is read."""
    pinned = run.pinned
    prefix = "" if relative == "." else relative + "/"
    entries = pinned.entries("" if relative == "." else relative)
    steps = sorted(int(m.group(1)) for name, st in entries
                   if (m := CHECKPOINT_NAME_RE.match(name)) and stat.S_ISDIR(st.st_mode))
    latest = next((step for step in reversed(steps)
                   if (marker := pinned.lstat(f"{prefix}checkpoint-{step}/{COMPLETE_MARKER}")) is not None
                   and stat.S_ISREG(marker.st_mode)), None)
    ck_time = save_seconds = None
    if latest is not None:
        folder = f"{prefix}checkpoint-{latest}"
        try:
            marker = pinned.read_json(f"{folder}/{COMPLETE_MARKER}")
            ck_time = float(marker["time"])
            started = marker.get("started")
            if started is None:  # no start recorded: the earliest entry's mtime is a lower bound
                mtimes = [st.st_mtime for name, st in pinned.entries(folder) if name != COMPLETE_MARKER]
                started = min(mtimes, default=ck_time)
            save_seconds = max(0.0, ck_time - float(started))
        except (ValueError, KeyError, TypeError):
            pass
    in_progress = 0.0
    for name, st in entries:
        if name.startswith("checkpoint-") and name.endswith(".tmp") and stat.S_ISDIR(st.st_mode):
            # the directory's mtime is when its newest entry was created: at or after the start
            times = [st.st_mtime] + [inner.st_mtime for _, inner in pinned.entries(prefix + name)]
            in_progress = max(in_progress, now - min(times))
    return [latest, ck_time, save_seconds, in_progress]


def _checkpoint_facts_as_owner(ckpt_root: str, now: float) -> list:
    """The same facts of a checkpoint dir outside the run dir, by path: run only in a child with the
    run owner's uid (asuser), where the kernel's permissions are the owner's."""
    root = Path(ckpt_root)
    latest = CheckpointManager(root).latest()
    ck_time = save_seconds = None
    if latest is not None:
        try:
            marker = read_json(latest.path / COMPLETE_MARKER)
            ck_time = float(marker["time"])
            started = marker.get("started")
            if started is None:
                mtimes = [p.stat().st_mtime for p in latest.path.iterdir() if p.name != COMPLETE_MARKER]
                started = min(mtimes, default=ck_time)
            save_seconds = max(0.0, ck_time - float(started))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    in_progress = 0.0
    for tmp in root.glob("checkpoint-*.tmp") if root.is_dir() else []:
        try:
            times = [tmp.stat().st_mtime] + [p.stat().st_mtime for p in tmp.iterdir()]
            in_progress = max(in_progress, now - min(times))
        except OSError:
            continue
    return [latest.step if latest else None, ck_time, save_seconds, in_progress]


def _checkpoint_facts_of(run: Run, now: float) -> list:
    """The run's checkpoint facts. The checkpoint dir is named by run.json, a file the user writes.
    A dir lexically inside the run dir is read through the pinned run dir's fd; anywhere else (a
    scratch disk, a relative `checkpoint.dir`) only as the run's owner, in a child with the owner's
    uid and a deadline, so a run.json naming another user's directory reads nothing of it."""
    ckpt_root = os.path.normpath(run.checkpoint_dir)
    relative = os.path.relpath(ckpt_root, os.path.normpath(run.path))
    try:
        if relative != ".." and not relative.startswith("../") and not os.path.isabs(relative):
            return _checkpoint_facts_pinned(run, relative, now)
        owner = run.pinned.owner
        gid = asuser.user_gid(owner)
        if gid is None:
            return [None, None, None, 0.0]
        return asuser.run_as(owner, gid, _checkpoint_facts_as_owner, ckpt_root, now, timeout=2.0)
    except (OSError, ValueError, asuser.AsUserError):
        return [None, None, None, 0.0]


def owner_uid(user: str) -> int | None:
    """The uid of a job's user, for a login name that is one safe path component; else None."""
    if not user or not _USER_RE.fullmatch(user):
        return None
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def read_run(run: Run, job: QueueEntry, site: SiteConfig, now: float) -> RunSample:
    """One active run's sample, read through slurmctl.rundir (capped, non-blocking, no symlinks),
    relative to the run dir's fd: a run not yet pinned is pinned here to the job user's uid (an
    OSError when its directory is not a real directory of that user)."""
    if run.pinned is None:
        uid = owner_uid(job.user)
        if uid is None:
            raise UnsafeFile(run.path, f"the run of a job of {job.user!r}, not a known user")
        with run.pinned_as(uid) as pinned:
            return read_run(pinned, job, site, now)
    price = site.partitions[job.partitions[0]].price_per_gpu_hour if job.partitions and \
        job.partitions[0] in site.partitions else 0.0
    running = job.state == "RUNNING"
    sample = RunSample(run_id=run.run_id, job_id=job.job_id, state=job.state,
                       partition=job.partitions[0] if job.partitions else "", user=job.user, gpus=job.gpus,
                       burn_dollars_per_hour=job.gpus * price if running else 0.0,
                       attempt_start=job.start_time.timestamp() if running and job.start_time else None,
                       acceptable_partitions=list(job.partitions))
    interval_steps = None
    try:
        spec = bounded_safe_load(run.spec_text()) or {}
        partitions = spec.get("partition") or []
        sample.acceptable_partitions += [p for p in ([partitions] if isinstance(partitions, str) else partitions)
                                         if p not in sample.acceptable_partitions]
        interval_steps = int((spec.get("checkpoint") or {}).get("interval_steps", 100))
    except (OSError, yaml.YAMLError, YAMLTooLarge, ValueError, TypeError, AttributeError):
        pass
    heartbeat = run.heartbeat() or {}
    metrics = heartbeat.get("metrics") if isinstance(heartbeat.get("metrics"), dict) else {}
    try:
        sample.step, sample.last_step_time = int(heartbeat["step"]), float(heartbeat["time"])
    except (KeyError, TypeError, ValueError):
        pass
    if isinstance(metrics.get("loss"), (int, float)):
        sample.loss = float(metrics["loss"])
    # bounded: root reads a user's file once (restarts are counted within its newest events)
    started, last_start = run.recent_starts()
    rate = step_rate(run.metrics_tail(), since=last_start)
    sample.step_seconds = 1.0 / rate if rate else None
    if isinstance(metrics.get("samples_per_second"), (int, float)):
        sample.samples_per_second = float(metrics["samples_per_second"])
    elif isinstance(metrics.get("batch_size"), (int, float)) and sample.step_seconds:
        sample.samples_per_second = metrics["batch_size"] / sample.step_seconds
    (sample.checkpoint_step, sample.checkpoint_time, sample.checkpoint_save_seconds,
     sample.checkpoint_save_in_progress_seconds) = _checkpoint_facts_of(run, now)
    if running:
        since = max(t for t in (sample.checkpoint_time, sample.attempt_start, 0.0) if t is not None)
        sample.checkpoint_age_seconds = now - since if since else None
    if interval_steps and sample.step_seconds:
        sample.checkpoint_interval_seconds = interval_steps * sample.step_seconds
    sample.starts = started
    scenes = run.watchdog_scenes()
    request = run.drain_request()
    if request is not None:
        sample.drain_requested = True
        sample.drain_requested_time = run.drain_requested_time()
    by_watchdog = isinstance(request, dict) and request.get("reason") == "watchdog"
    sample.watchdog_interventions = len(scenes) + by_watchdog
    sample.drain_acknowledged = run.drain_acked()
    return sample


def run_of_job(site: SiteConfig, job: QueueEntry) -> Run | None:
    """The run directory of an active job, or None. Its label comes only from a valid run id in the
    job's comment (any other comment, e.g. ``slurmctl:..``, creates no series and no path), of a job
    whose user is a known login name. Whether the directory is a real one of that user is checked
    when it is read (``read_run`` pins it), not here: a check by name now says nothing of later."""
    run_id = run_id_from_comment(job.comment)
    if run_id is None or owner_uid(job.user) is None:
        return None
    return Run(run_id, run_path(site.runs_root_path, job.user, run_id))
