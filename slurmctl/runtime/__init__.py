"""What runs inside the training: progress heartbeat, metrics, drain flag + ACK, checkpoints.

    rt = Runtime.from_env()
    ck = rt.checkpoints.latest()          # resume from the newest valid checkpoint
    for step in ...:
        rt.log(step, loss=loss)           # rank 0: metrics.jsonl + heartbeat.json
        if rt.should_stop():              # drain requested (time limit, preemption, cancel)
            rt.checkpoints.save(step, write)   # rank 0
            rt.ack_drain(step)
            break

Standard library only (torch is used if it is importable and initialised), so the runtime works
in any training image that has slurmctl installed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..checkpoint import CheckpointManager
from ..fsutil import append_jsonl, write_atomic

__all__ = ["Runtime"]


@dataclass
class Runtime:
    run_dir: Path
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    checkpoint_interval: int = 100
    checkpoints: CheckpointManager | None = None

    @classmethod
    def from_env(cls, default_run_dir: str | os.PathLike = "slurmctl-run") -> "Runtime":
        run_dir = Path(os.environ.get("SLURMCTL_RUN_DIR", default_run_dir))
        ckpt_dir = Path(os.environ.get("SLURMCTL_CHECKPOINT_DIR", run_dir / "checkpoints"))
        rt = cls(
            run_dir=run_dir,
            rank=int(os.environ.get("RANK", "0")),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            world_size=int(os.environ.get("WORLD_SIZE", "1")),
            checkpoint_interval=int(os.environ.get("SLURMCTL_CHECKPOINT_INTERVAL", "100")),
            checkpoints=CheckpointManager(ckpt_dir, keep_last=int(os.environ.get("SLURMCTL_CHECKPOINT_KEEP", "3"))),
        )
        if rt.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
        return rt

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def log(self, step: int, **metrics: float) -> None:
        """Rank 0 appends to metrics.jsonl and rewrites heartbeat.json (the watchdog's signal)."""
        if not self.is_main:
            return
        now = time.time()
        record = {"step": step, "time": now, **{k: float(v) for k, v in metrics.items()}}
        append_jsonl(self.run_dir / "metrics.jsonl", record)
        heartbeat = {"step": step, "time": now, "job_id": os.environ.get("SLURM_JOB_ID"),
                     "world_size": self.world_size, "metrics": record}
        write_atomic(self.run_dir / "heartbeat.json", json.dumps(heartbeat))

    def drain_requested(self) -> bool:
        return (self.run_dir / "drain.request").exists()

    def should_stop(self) -> bool:
        """True on every rank once any rank sees drain.request (one tiny all-reduce)."""
        flag = self.drain_requested()
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            return flag
        if not (dist.is_available() and dist.is_initialized()):
            return flag
        tensor = torch.tensor([1 if flag else 0], dtype=torch.int32)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return bool(tensor.item())

    def ack_drain(self, step: int, checkpoint_path: Path | None = None) -> None:
        """Rank 0 writes drain.ack: the batch shell and `slurmctl cancel` wait for it."""
        if not self.is_main:
            return
        ack = {"step": step, "time": time.time(), "job_id": os.environ.get("SLURM_JOB_ID"),
               "checkpoint": str(checkpoint_path) if checkpoint_path else None}
        write_atomic(self.run_dir / "drain.ack", json.dumps(ack))
