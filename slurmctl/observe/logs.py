"""Read and follow a run's log (logs/<job id>.out holds every attempt of that job, appended)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from slurmctl.errors import RunNotFound
from slurmctl.fsutil import open_regular, tail_text_lines
from slurmctl.rundir import ATTEMPT_HEADER, Run, header_restart_count
from slurmctl.slurm.client import SlurmClient


def log_file(run: Run, job_id: int | None = None) -> Path:
    job_id = job_id or run.latest_job_id()
    if job_id is None:
        raise RunNotFound(f"run {run.run_id} was never submitted, so it has no log.",
                          "Submit it with `slurmctl submit`.")
    return run.log_path(job_id)


LOG_TAIL_BYTES = 256 * 1024  # `logs` and the smoke verdict show the end of a log, never all of it
FOLLOW_CHUNK_BYTES = 1024 * 1024  # most text `logs -f` takes from a log per poll


def tail_lines(path: Path, lines: int, *, nofollow: bool = True) -> list[str]:
    """The last `lines` lines (0: all within the last LOG_TAIL_BYTES). A FIFO, device or symlink
    where the log should be raises UnsafeFile at once instead of blocking (fsutil's reader)."""
    return tail_text_lines(path, lines, LOG_TAIL_BYTES, nofollow=nofollow)


def follow(run: Run, client: SlurmClient, emit: Callable[[str], None], poll_seconds: float = 2.0,
           timeout: float | None = None) -> str:
    """Stream new log text until the job is no longer active; returns the final Slurm state."""
    job_id = run.latest_job_id()
    path = log_file(run, job_id)
    offset = 0
    deadline = time.monotonic() + timeout if timeout else None
    state = "UNKNOWN"
    while True:
        offset = _emit_new(run.refresh(path), offset, emit)
        job = client.jobs([job_id]).get(job_id)
        state = job.state if job else "UNKNOWN"
        if job is None or not job.active:
            time.sleep(0.5)  # the last lines may land just after the state changes
            _emit_new(run.refresh(path), offset, emit)
            return state
        if deadline and time.monotonic() > deadline:
            return state
        time.sleep(poll_seconds)


def _emit_new(path: Path, offset: int, emit: Callable[[str], None]) -> int:
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return offset
    try:
        size = os.fstat(fd).st_size
        if size < offset:  # truncated or replaced: start over rather than print nothing forever
            offset = 0
        os.lseek(fd, offset, os.SEEK_SET)
        data = os.read(fd, FOLLOW_CHUNK_BYTES)
    finally:
        os.close(fd)
    if data:
        emit(data.decode(errors="replace"))
    return offset + len(data)


_RANK_PREFIX = re.compile(r"^\s*(?:\[(?:rank|default)(\d+)\]:|(\d+): )")


def split_attempts(lines: list[str]) -> dict[int, list[str]]:
    """logs/<job>.out holds every attempt behind a 'slurmctl: attempt N of job J (Slurm restart R)'
    header (rundir.ATTEMPT_HEADER): its lines by Slurm restart count."""
    attempts: dict[int, list[str]] = {}
    current = 0
    for line in lines:
        m = ATTEMPT_HEADER.match(line)
        if m:
            current = header_restart_count(m)
        attempts.setdefault(current, []).append(line)
    return attempts


def attempt_log(run: Run, number: int) -> tuple[Path, list[str]]:
    """Attempt `number` of the run (1 = the first, numbered across its jobs as status and its story
    number them: rundir.attempt_ids): its job's log and that attempt's part of it (every line within
    the log's last LOG_TAIL_BYTES). SpecError naming the attempts there are."""
    ids = run.attempt_ids()
    if not 1 <= number <= len(ids):
        from slurmctl.errors import SpecError  # why: only a wrong --attempt gets here

        have = f"attempts 1 to {len(ids)}" if len(ids) > 1 else ("attempt 1" if ids else "no attempt yet")
        raise SpecError(f"--attempt {number}: run {run.run_id} has {have}.",
                        "`slurmctl status RUN` lists them (History); omit --attempt for the newest output.")
    job_id, restart = ids[number - 1]
    path = run.log_path(job_id)
    # a job's log holds each of its Slurm attempts behind a header with the restart count
    return path, split_attempts(tail_lines(path, 0)).get(restart, [])


def training_lines(lines: list[str], rank: int | None = 0) -> list[str]:
    """Training output of one rank (None = all): lines tagged with another rank are dropped;
    untagged lines (batch shell, rank-0-only prints) are kept."""
    kept = []
    for line in lines:
        m = _RANK_PREFIX.match(line)
        if m and rank is not None and int(m.group(1) or m.group(2)) != rank:
            continue
        kept.append(line)
    return kept
