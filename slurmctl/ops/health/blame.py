"""Blame from diagnosis: which nodes are suspects, from the failures their own epilogs classified.

A failed job's epilog, on each of its nodes, classifies the job's log with `diagnose` (read as the
job's user, bounded) and leaves one record in that node's root-owned failure spool. The node's
periodic health program scores them: the number of distinct jobs with a GPU- or NCCL-class
failure on this node within the window. A score of SUSPECT_SCORE or more drains the node
`slurmctl:[node_problem] suspect: ...`; its verification job then decides whether it returns, and
a passed verification clears the records it answered (else the same failures would drain it again).

User-code failures (import errors, OOM, NaN loss, data shapes ...) never count, wherever they
happen. Multi-node jobs count on every node they ran on: the bad node collects failures of jobs
with different peers, each peer only the one it shared. A user can print NCCL-like lines on
purpose; the worst that buys is one verification cycle of the node.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from slurmctl.ops.hooks.rootfs import open_trusted_dir, publish_file, read_small, remove_entry

GPU_CLASS = frozenset({"nccl_timeout", "nccl_error", "nccl_setup", "gpu_hardware", "cuda_illegal_access", "no_gpu"})
WINDOW_SECONDS = 24 * 3600
SUSPECT_SCORE = 2
MAX_RECORDS = 1000  # a node's spool is read whole by every periodic run: older records past this are skipped


@dataclass(frozen=True)
class Failure:
    job_id: int
    category: str
    end_time: float

    def to_dict(self) -> dict:
        return {"job_id": self.job_id, "category": self.category, "end_time": self.end_time}


def score(failures: list[Failure], now: float, window: float = WINDOW_SECONDS) -> int:
    """Distinct jobs with a GPU/NCCL-class failure within `window` before `now`."""
    return len({f.job_id for f in failures if f.category in GPU_CLASS and now - window <= f.end_time <= now + 60})


def record(spool, failure: Failure) -> None:
    """<spool>/<job id>.json, root's (a job's epilog on this node writes its own once)."""
    fd = open_trusted_dir(spool, create_mode=0o755)
    try:
        publish_file(fd, f"{failure.job_id}.json", (json.dumps(failure.to_dict()) + "\n").encode(), mode=0o644,
                     durable=False)
    finally:
        os.close(fd)


def read(spool) -> list[Failure]:
    try:
        fd = open_trusted_dir(spool)
    except OSError:
        return []
    found = []
    try:
        for name in sorted(os.listdir(fd), reverse=True)[:MAX_RECORDS]:
            if not name.endswith(".json"):
                continue
            try:
                data = json.loads(read_small(fd, name, 4096))
                found.append(Failure(int(data["job_id"]), str(data["category"]), float(data["end_time"])))
            except (OSError, ValueError, KeyError, TypeError):
                continue
    finally:
        os.close(fd)
    return found


def clear(spool, answered: list[Failure]) -> None:
    """Forget the failures a passed verification answered."""
    try:
        fd = open_trusted_dir(spool)
    except OSError:
        return
    try:
        for failure in answered:
            remove_entry(fd, f"{failure.job_id}.json")
    finally:
        os.close(fd)
