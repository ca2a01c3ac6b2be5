"""What runs inside the training: progress heartbeat, metrics, drain flag + ACK, checkpoints.

    rt = Runtime.from_env()
    ck = rt.checkpoints.latest()          # resume from the newest valid checkpoint
    for step, batch in enumerate(rt.data(loader)):   # measures the time spent waiting for batches
        rt.log(step, loss=loss)           # rank 0: metrics.jsonl + heartbeat.json
        if rt.should_stop():              # drain requested (time limit, preemption, cancel)
            rt.checkpoints.save(step, write)   # rank 0 (rt.sharded_checkpoints: every rank its shard)
            rt.ack_drain(step)
            break

Live health (slurmctl/runtime/health.py): every rank writes health/rank-<N>.json at most every
SLURMCTL_HEALTH_INTERVAL (30 s) from log() and data(): the network transport its collectives use
and the share of step time it waited for data; `slurmctl status` and the exporter report them.

Module-level shortcuts over one default Runtime: `drain_requested()`, `ack_drain(step)`,
`heartbeat(step=..., **metrics)`.

Drain requests arrive two ways: the file `drain.request` in the run dir (written by the batch
shell's USR1 trap or by `slurmctl cancel`), and SIGTERM to the training process (slurmstepd sends
it to every step process at preemption and torchrun forwards it, then waits ~30 s before SIGKILL).
Both end up in should_stop(), so the training checkpoints and acknowledges either way.

Standard library only (torch is used if it is importable and initialised), so the runtime works
in any training image that has slurmctl installed.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slurmctl import rundir
from slurmctl.errors import CheckpointSaveFailed
from slurmctl.fsutil import append_jsonl, write_atomic
from slurmctl.runtime.checkpoint import CheckpointManager
from slurmctl.runtime.health import RankHealth

if TYPE_CHECKING:  # imported where used: status and ls read checkpoints through this package, never track
    from slurmctl.runtime.tracking import TrackerBridge

__all__ = ["Runtime", "ack_drain", "drain_requested", "heartbeat", "read_drain_request", "write_drain_request"]

DRAIN_REQUEST = rundir.DRAIN_REQUEST
DRAIN_ACK = rundir.DRAIN_ACK


def checkpoint_dir(run_dir: Path) -> Path:
    """Where this job's checkpoints go: SLURMCTL_CHECKPOINT_DIR (the job script exports the absolute
    path recorded in run.json at submit), else run.json's own record, else <run dir>/checkpoints."""
    configured = os.environ.get("SLURMCTL_CHECKPOINT_DIR")
    if configured:
        return Path(configured)
    return rundir.Run(Path(run_dir).name, Path(run_dir)).checkpoint_dir


def write_drain_request(run_dir: Path, reason: str, **fields) -> dict:
    """reason: time-limit | preemption | cancel | signal. Atomic, so a poller never reads half."""
    request = {"reason": reason, "time": time.time(), "job_id": os.environ.get("SLURM_JOB_ID"), **fields}
    write_atomic(Path(run_dir) / DRAIN_REQUEST, json.dumps(request))
    return request


def read_drain_request(run_dir: Path) -> dict | None:
    return rundir.Run(Path(run_dir).name, Path(run_dir)).drain_request()


def _sigusr2_caught_at_c_level() -> bool:
    """A handler Python's signal module does not know about (faulthandler, a C library)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGUSR2 - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return False


def install_stack_dump_handler() -> bool:
    """SIGUSR2 -> every thread's stack on stderr (the job log): the watchdog's fallback when py-spy
    cannot attach. Leaves any SIGUSR2 handler the training already has alone, and never raises
    (faulthandler.register works from any thread, unlike signal.signal). SLURMCTL_FAULTHANDLER=0 opts out."""
    if os.environ.get("SLURMCTL_FAULTHANDLER") == "0":
        return False
    try:
        if signal.getsignal(signal.SIGUSR2) is not signal.SIG_DFL or _sigusr2_caught_at_c_level():
            return False
        faulthandler.register(signal.SIGUSR2, all_threads=True)
    except (AttributeError, OSError, RuntimeError, ValueError):  # e.g. sys.stderr is None or has no fileno
        return False
    return True


@dataclass
class Runtime:
    run_dir: Path
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    checkpoint_interval: int = 100
    checkpoints: CheckpointManager | None = None
    signalled: bool = False  # SIGTERM seen by this process (preemption / scancel of the step)
    health: RankHealth | None = None  # this rank's live-health record (made on first use)
    tracker: TrackerBridge | None = None  # rank 0: the run's MLflow / W&B run (runtime/tracking.py)
    _tracker_checked: bool = False

    @classmethod
    def from_env(cls, default_run_dir: str | os.PathLike = "slurmctl-run",
                 handle_sigterm: bool = True) -> Runtime:
        run_dir = Path(os.environ.get("SLURMCTL_RUN_DIR", default_run_dir))
        ckpt_dir = checkpoint_dir(run_dir)
        rt = cls(
            run_dir=run_dir,
            rank=int(os.environ.get("RANK", "0")),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            world_size=int(os.environ.get("WORLD_SIZE", "1")),
            checkpoint_interval=int(os.environ.get("SLURMCTL_CHECKPOINT_INTERVAL", "100")),
            checkpoints=CheckpointManager(ckpt_dir, keep_last=int(os.environ.get("SLURMCTL_CHECKPOINT_KEEP", "3"))),
        )
        rt.checkpoints.on_failure = rt.checkpoint_failed
        if rt.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
        if handle_sigterm:
            rt.install_sigterm_handler()
        install_stack_dump_handler()
        return rt

    def install_sigterm_handler(self) -> None:
        """Turn SIGTERM into a drain request instead of death (main thread only, as Python requires)."""
        if threading.current_thread() is not threading.main_thread():
            return

        def on_sigterm(signum, frame):
            self.signalled = True
        signal.signal(signal.SIGTERM, on_sigterm)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def rank_health(self) -> RankHealth:
        if self.health is None:
            self.health = RankHealth(self.run_dir, self.rank, self.world_size)
        return self.health

    def data(self, loader, prefetch: int = 0):
        """`for batch in rt.data(loader)`: the same batches, plus the time spent waiting for each one
        vs the rest of the step (two clock reads per batch; `benchmarks/health_data_wrapper.py`).
        Host time: a loop that never synchronises with the GPU (no .item(), no logging) can count
        time the GPU is still busy with queued work as waiting. `prefetch=N`: a background thread reads
        up to N batches ahead (runtime/prefetch.py), so the transfer overlaps the step."""
        from slurmctl.runtime.prefetch import prefetched  # why: see TYPE_CHECKING above

        health = self.rank_health()
        # flushed again when the pass ends: a run shorter than the flush interval, or its last stretch,
        # would otherwise never reach the record status reads once the run ended
        return health.meter.wrap(prefetched(loader, prefetch) if prefetch else loader, health.tick, health.flush)

    def log(self, step: int, **metrics: float) -> None:
        """Rank 0 appends to metrics.jsonl and rewrites heartbeat.json (the watchdog's signal).
        Every rank that calls it also keeps its health record current (at most every 30 s)."""
        self.rank_health().tick()
        if not self.is_main:
            return
        if not self._tracker_checked:  # before this step reaches metrics.jsonl: it reads the steps logged so far
            self._tracker_checked = True
            from slurmctl.runtime.tracking import TrackerBridge  # why: see TYPE_CHECKING above

            self.tracker = TrackerBridge.from_env(self.run_dir)
        now = time.time()
        record = {"step": step, "time": now, **{k: float(v) for k, v in metrics.items()}}
        append_jsonl(self.run_dir / rundir.METRICS, record)
        heartbeat = {"step": step, "time": now, "job_id": os.environ.get("SLURM_JOB_ID"),
                     "world_size": self.world_size, "metrics": record}
        write_atomic(self.run_dir / rundir.HEARTBEAT, json.dumps(heartbeat))
        if self.tracker is not None:
            self.tracker.log(step, metrics)
        if self.smoke:  # `submit --smoke` stops after one step via the normal drain path
            write_drain_request(self.run_dir, "smoke")

    heartbeat = log

    # --- smoke test ----------------------------------------------------------------------------
    @property
    def smoke(self) -> bool:
        """SLURMCTL_SMOKE=1 (`slurmctl submit --smoke`): one step, a checkpoint round-trip, exit.
        Training code may also shrink its batch when this is true."""
        return os.environ.get("SLURMCTL_SMOKE") == "1"

    @property
    def sharded_checkpoints(self) -> CheckpointManager:
        """Same directory, but every rank saves its shard (FSDP, DCP); rank 0 finalizes."""
        mgr = CheckpointManager(self.checkpoints.root, keep_last=self.checkpoints.keep_last, distributed=True)
        mgr.on_failure = self.checkpoint_failed
        return mgr

    def checkpoint_failed(self, failure: CheckpointSaveFailed) -> None:
        """Rank 0 notes a refused save in attempts.jsonl (`slurmctl status` shows it). Best effort: the
        disk may be full for this small line too; the training gets the exception either way."""
        if not self.is_main:
            return
        try:
            append_jsonl(self.run_dir / rundir.ATTEMPTS, {
                "event": "checkpoint-failed", "time": time.time(), "job_id": int(os.environ.get("SLURM_JOB_ID") or 0),
                "restart_count": int(os.environ.get("SLURM_RESTART_COUNT") or 0), "step": failure.step,
                "reason": failure.reason, "error": failure.error.strerror or str(failure.error),
                "previous_step": failure.previous.step if failure.previous else None})
        except OSError:
            pass

    def drain_requested(self) -> bool:
        """Cheap enough for every step: one flag and one stat()."""
        return self.signalled or (self.run_dir / DRAIN_REQUEST).exists()

    def should_stop(self) -> bool:
        """True on every rank once any rank sees drain.request (one tiny all-reduce)."""
        stop = self._should_stop()
        if stop and self.tracker is not None:
            # Close the tracked run now, while the checkpoint is written: at a preemption or requeue Slurm
            # kills whatever is left of the step KillWait/GraceTime after its SIGTERM, W&B's writer included.
            self.tracker.close()
        return stop

    def _should_stop(self) -> bool:
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
        write_atomic(self.run_dir / DRAIN_ACK, json.dumps(ack))


_default: Runtime | None = None


def _runtime() -> Runtime:
    global _default
    if _default is None:
        _default = Runtime.from_env()
    return _default


def drain_requested() -> bool:
    return _runtime().drain_requested()


def ack_drain(step: int, checkpoint_path: Path | None = None) -> None:
    _runtime().ack_drain(step, checkpoint_path)


def heartbeat(step: int, **metrics: float) -> None:
    _runtime().log(step, **metrics)
