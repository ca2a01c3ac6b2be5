"""What the exporter knows about one active run, read from its run directory.

The run is found as ``<runs_root>/<job's user>/<run id>`` only for a valid run id in the job's comment
(so run labels stay bounded by the queue and no comment names a path), and only when that directory
belongs to the job's user: heartbeat.json, metrics.jsonl (its tail only), attempts.jsonl, drain.request /
drain.ack and the checkpoints through ``CheckpointManager``. Watchdog interventions
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
from slurmctl.errors import YAMLTooLarge
from slurmctl.fsutil import read_json, read_text_capped
from slurmctl.ops.hooks import asuser
from slurmctl.rundir import Run, run_id_from_comment, run_path, step_rate
from slurmctl.runtime.checkpoint import COMPLETE_MARKER, CheckpointManager
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


def _save_timing(ckpt_root: Path, latest, now: float) -> tuple[float | None, float | None, float]:
    """(last checkpoint time, its save duration, seconds the save in progress has run)."""
    ck_time = save_seconds = None
    if latest is not None:
        try:
            marker = read_json(latest.path / COMPLETE_MARKER)
            ck_time = float(marker["time"])
            started = marker.get("started")
            if started is None:  # no start recorded: earliest file mtime is a lower bound
                mtimes = [p.stat().st_mtime for p in latest.path.rglob("*") if p.name != COMPLETE_MARKER]
                started = min(mtimes, default=ck_time)
            save_seconds = max(0.0, ck_time - float(started))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    in_progress = 0.0
    for tmp in ckpt_root.glob("checkpoint-*.tmp") if ckpt_root.is_dir() else []:
        try:  # the directory's mtime is when its newest entry was created: at or after the start
            times = [tmp.stat().st_mtime] + [p.stat().st_mtime for p in tmp.iterdir()]
            in_progress = max(in_progress, now - min(times))
        except OSError:
            continue
    return ck_time, save_seconds, in_progress


def _checkpoint_facts(ckpt_root: str, now: float) -> list:
    """[newest valid step, its time, its save duration, seconds the save in progress has run]."""
    latest = CheckpointManager(Path(ckpt_root)).latest()
    return [latest.step if latest else None, *_save_timing(Path(ckpt_root), latest, now)]


def _checkpoint_facts_of(run: Run, now: float) -> list:
    """The run's checkpoint facts. The checkpoint dir is named by run.json, a file the user writes:
    inside the run dir root reads it (no symlinks followed out of it); anywhere else (a scratch disk,
    a relative `checkpoint.dir`) only as the run's owner, in a child with the owner's uid and a
    deadline, so a run.json naming another user's directory reads nothing of it."""
    ckpt_root = run.checkpoint_dir
    try:
        inside = Path(os.path.realpath(ckpt_root)).is_relative_to(os.path.realpath(run.path))
        if inside:
            return _checkpoint_facts(str(ckpt_root), now)
        owner = os.lstat(run.path).st_uid
        gid = asuser.user_gid(owner)
        if gid is None:
            return [None, None, None, 0.0]
        return asuser.run_as(owner, gid, _checkpoint_facts, str(ckpt_root), now, timeout=2.0)
    except (OSError, ValueError, asuser.AsUserError):
        return [None, None, None, 0.0]


def read_run(run: Run, job: QueueEntry, site: SiteConfig, now: float) -> RunSample:
    """One active run's sample, read through slurmctl.rundir (capped, non-blocking, no symlinks)."""
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
        spec = bounded_safe_load(read_text_capped(run.spec_path)) or {}
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
    events = run.recent_events()
    starts = [e["time"] for e in events if e.get("event") == "start" and isinstance(e.get("time"), (int, float))]
    rate = step_rate(run.metrics_tail(), since=starts[-1] if starts else None)
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
    sample.starts = len(starts)
    scenes = [p for p in run.watchdog_dir.iterdir() if p.is_dir() and not p.is_symlink()] \
        if run.watchdog_dir.is_dir() and not run.watchdog_dir.is_symlink() else []
    request = run.drain_request()
    if request is not None:
        sample.drain_requested = True
        try:
            sample.drain_requested_time = os.lstat(run.drain_request_path).st_mtime
        except OSError:
            pass
    by_watchdog = isinstance(request, dict) and request.get("reason") == "watchdog"
    sample.watchdog_interventions = len(scenes) + by_watchdog
    sample.drain_acknowledged = run.drain_acked()
    return sample


def run_of_job(site: SiteConfig, job: QueueEntry) -> Run | None:
    """The run directory of an active job, or None. Its label comes only from a valid run id in the
    job's comment (any other comment, e.g. ``slurmctl:..``, creates no series and no path); the
    directory must be a real directory of the job's user, owned by that user."""
    run_id = run_id_from_comment(job.comment)
    if run_id is None or not job.user or not _USER_RE.fullmatch(job.user):
        return None
    try:
        uid = pwd.getpwnam(job.user).pw_uid
    except KeyError:
        return None
    path = run_path(site.runs_root_path, job.user, run_id)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        return None
    return Run(run_id, path)
