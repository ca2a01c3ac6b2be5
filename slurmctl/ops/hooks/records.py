"""The per-attempt cost record: the epilog's output and the cost ledger's (issue 7) input.

One JSON file per attempt, ``<spool>/<job_id>.<restart_count>.json``, written atomically
(unique tmp sibling + fsync + rename): no locks, safe on NFS/Lustre/GCS-fuse, and a reader sees
a whole record or none. Every node of a multi-node job writes the same name with the same
job-level content, so losing one node's epilog loses nothing; the last rename wins.

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

    @property
    def filename(self) -> str:
        return f"{self.job_id}.{self.restart_count}.json"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CostRecord":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def write_record(spool: Path, record: CostRecord) -> Path:
    """Atomically publish `record` into `spool`; returns the final path."""
    spool.mkdir(parents=True, exist_ok=True)
    final = spool / record.filename
    tmp = spool / f".{record.filename}.{record.written_by}.{os.getpid()}.tmp"
    data = (json.dumps(record.to_dict(), sort_keys=True) + "\n").encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    dir_fd = os.open(spool, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash of the node
    finally:
        os.close(dir_fd)
    return final


def read_records(spool: Path) -> list[CostRecord]:
    """Every published record (tmp files and unreadable ones are skipped)."""
    out = []
    if not spool.is_dir():
        return out
    for entry in sorted(spool.iterdir()):
        if entry.name.startswith(".") or not entry.name.endswith(".json"):
            continue
        try:
            out.append(CostRecord.from_dict(json.loads(entry.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return out
