"""The per-attempt cost record: the epilog's output and the cost ledger's input (ops/accounting.py).

One JSON file per attempt, ``<spool>/<job_id>.<restart_count>.<start epoch>.json``: keyed by the
attempt's identity (job id + restart count + the attempt's start time), so a requeued job's second
attempt never overwrites the first's record even when the restart count was not yet bumped.
Written atomically (fresh O_EXCL|O_NOFOLLOW tmp sibling + fsync + rename): no locks, safe on
NFS/Lustre/GCS-fuse, and a reader sees a whole record or none. Every node of a multi-node job
writes the same name with the same job-level content, so losing one node's epilog loses nothing;
the last rename wins.

The spool is root's: owned by root, mode 0700 (records name users, accounts and runs). The epilog
refuses a spool that is a symlink or writable by anyone else, and never falls back to a
world-writable place like /var/tmp: a record it cannot write safely is logged and skipped (the
ledger still costs the attempt from sacct).

Schema (``schema_version`` 1; add fields, never rename; bump the version on incompatible change):
  job_id, restart_count        the attempt: Slurm job id and SLURM_JOB_RESTART_COUNT
  run_id                       from the job comment ``slurmctl:<run id>``; None for foreign jobs
  user, account, partition
  gpu_model, gpu_count         from the job's TRES (gres/gpu:<model>=<n>), whole job
  num_nodes, nodelist
  start_time, end_time         epoch seconds (end: the epilog's clock if Slurm has none yet)
  elapsed_seconds, gpu_seconds end - start, x gpu_count
  state, state_final, exit_code  Slurm's state (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...) and
                               "code:signal". The epilog often runs while the controller still says
                               COMPLETING: a non-zero exit is recorded FAILED (final); a clean exit
                               stays COMPLETING with state_final=false (a cancel also exits 0 there)
                               and the ledger settles it with `sacct --duplicates`.
  drain_requested, drain_acknowledged   drain.request / drain.ack present in the run dir
  last_checkpoint_step, last_checkpoint_time   newest VALID checkpoint at the end of the attempt
  written_by, written_at       node that wrote this copy, epoch seconds
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from slurmctl.ops.hooks.rootfs import open_trusted_dir, publish_file, read_small

SCHEMA_VERSION = 1


@dataclass
class CostRecord:
    job_id: int
    restart_count: int
    run_id: str | None
    user: str | None
    account: str | None
    partition: str | None
    gpu_model: str | None
    gpu_count: int
    num_nodes: int
    nodelist: str | None
    start_time: float | None
    end_time: float | None
    elapsed_seconds: float | None
    gpu_seconds: float | None
    state: str | None
    state_final: bool
    exit_code: str | None
    drain_requested: bool
    drain_acknowledged: bool
    last_checkpoint_step: int | None
    last_checkpoint_time: float | None
    written_by: str
    written_at: float
    schema_version: int = SCHEMA_VERSION
    failure_category: str | None = None  # a failed attempt's `diagnose` category (epilog.classify_failure)

    @property
    def filename(self) -> str:
        start = int(self.start_time) if self.start_time else 0  # 0: Slurm did not say (controller down)
        return f"{self.job_id}.{self.restart_count}.{start}.json"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CostRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def write_record(spool: Path, record: CostRecord) -> Path:
    """Atomically publish `record` into the root-owned 0700 `spool` (created if missing); returns the
    final path. Raises UnsafeDirectory (an OSError) when the spool is a symlink, not root's, or
    writable by others, and OSError when the filesystem fails."""
    data = (json.dumps(record.to_dict(), sort_keys=True) + "\n").encode()
    dir_fd = open_trusted_dir(spool, create_mode=0o700, private=True)
    try:
        publish_file(dir_fd, record.filename, data, mode=0o600)
    finally:
        os.close(dir_fd)
    return spool / record.filename


MAX_RECORD_BYTES = 64 * 1024  # a record is ~600 bytes


# The attempt as the prolog saw it. In the epilog of an attempt that is being requeued (preemption,
# `scontrol requeue`, a crash the runtime requeues) scontrol already describes the NEXT attempt:
# StartTime is the requeue time and the restart count is one up, so a record built from them alone
# has the wrong start (the ledger then matches it to no sacct attempt) and the next attempt's
# count. The prolog runs at the attempt's start with the right count; it leaves both here, in the
# root-only spool, under a dot name that read_records skips.
def _marker_name(job_id: int) -> str:
    return f".attempt-{int(job_id)}"


def mark_attempt_start(spool: Path, job_id: int, restart_count: int, start: float) -> None:
    """The prolog: this node's view of the attempt that starts now (overwrites the previous one)."""
    dir_fd = open_trusted_dir(spool, create_mode=0o700, private=True)
    try:
        publish_file(dir_fd, _marker_name(job_id), f"{int(restart_count)} {start:.3f}\n".encode(), mode=0o600,
                     durable=False)
    finally:
        os.close(dir_fd)


def attempt_start(spool: Path, job_id: int) -> tuple[int, float] | None:
    """(restart count, start epoch) the prolog recorded for the job's current attempt, if any."""
    try:
        dir_fd = os.open(spool, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        count, start = read_small(dir_fd, _marker_name(job_id), 256).decode().split()
        return int(count), float(start)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    finally:
        os.close(dir_fd)


def read_records(spool: Path) -> list[CostRecord]:
    """Every published record (tmp files and unreadable ones are skipped). A spool we may not read
    (a user's `slurmctl cost`: the spool is root's) reads as empty; only regular files are read,
    capped, through the spool's directory fd."""
    out: list[CostRecord] = []
    try:
        dir_fd = os.open(spool, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return out
    try:
        names = sorted(os.listdir(dir_fd))
    except OSError:
        names = []
    try:
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue
            try:
                data = json.loads(read_small(dir_fd, name, MAX_RECORD_BYTES))
                out.append(CostRecord.from_dict(data))
            except (OSError, ValueError, TypeError, AttributeError):
                continue
    finally:
        os.close(dir_fd)
    return out
