"""The checkpoint protocol, importable inside training code (standard library only; torch optional).

A checkpoint is valid if and only if its directory holds `.complete`. Saving:
  1. write everything into `checkpoint-<step>.tmp/` (the caller's write_fn; with several ranks,
     every rank writes its shard there and drops `.rank-<r>.done` after fsyncing its files),
  2. rank 0 waits for every rank, fsyncs the tree, renames it to `checkpoint-<step>/`, fsyncs the parent,
  3. writes `.complete` last and fsyncs it and the directory,
  4. atomically repoints `latest` (a pointer file: works where symlinks do not, e.g. gcsfuse).
Loading walks back from the highest step to the newest valid checkpoint; `latest` is only a
convenience for humans and tools, never trusted for validity. The files are the caller's (e.g.
torch.distributed.checkpoint's): the marker is the only file of ours left in a checkpoint.

    mgr = CheckpointManager(root, keep_last=3)
    mgr.save(step, write_fn)                 # write_fn(tmp_dir) writes this rank's files
    mgr.save_async(step, write_fn)           # same, in a background thread (at most one in flight);
                                             # snapshot your state first, e.g. with snapshot_state()
    ck = mgr.latest()                        # newest VALID checkpoint (.step, .path) or None

A save that the filesystem refuses (disk full, quota, file size limit, I/O error) raises
CheckpointSaveFailed after removing what it wrote: the previous checkpoint stays the latest, and the
training may catch it and go on (the next interval tries again) or stop. `on_failure` (the Runtime
sets it) is told first, so `slurmctl status` can show the failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurmctl.errors import CheckpointError, CheckpointSaveFailed

COMPLETE_MARKER = ".complete"
LATEST_POINTER = "latest"
CHECKPOINT_NAME_RE = re.compile(r"^checkpoint-(\d+)$")
_RANK_DONE = ".rank-{rank}.done"

WriteFn = Callable[[Path], None]


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path

    @property
    def valid(self) -> bool:
        return (self.path / COMPLETE_MARKER).is_file()


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            _fsync_path(Path(dirpath) / name)
        _fsync_path(Path(dirpath))


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def _torch_dist():
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


class CheckpointManager:
    """Saves and finds checkpoints under `root`.

    By default one process (rank 0 of a replicated DDP job) saves. With distributed=True every
    rank must call save()/save_async() for the same steps, writes its own shard, and rank 0
    finalizes; rank/world_size/barrier then come from torch.distributed unless given.
    """

    def __init__(self, root: str | os.PathLike, keep_last: int = 3, *, keep_every: int | None = None,
                 distributed: bool = False, rank: int | None = None, world_size: int | None = None,
                 barrier: Callable[[], None] | None = None, shard_timeout: float = 600.0):
        if keep_last < 1:
            raise ValueError("keep_last must be at least 1")
        if keep_every is not None and keep_every < 1:
            raise ValueError("keep_every must be at least 1 (or None)")
        self.root = Path(root)
        self.keep_last = keep_last
        self.keep_every = keep_every
        self.shard_timeout = shard_timeout
        if not distributed:
            rank, world_size = (0 if rank is None else rank), (1 if world_size is None else world_size)
        self._rank, self._world_size, self._barrier = rank, world_size, barrier
        self.on_failure: Callable[[CheckpointSaveFailed], None] | None = None
        self._in_flight: threading.Thread | None = None
        self._in_flight_error: BaseException | None = None
        self._snapshot = None

    # --- distributed context (resolved lazily: the manager is often built before init_process_group)
    @property
    def rank(self) -> int:
        if self._rank is not None:
            return self._rank
        dist = _torch_dist()
        return dist.get_rank() if dist else 0

    @property
    def world_size(self) -> int:
        if self._world_size is not None:
            return self._world_size
        dist = _torch_dist()
        return dist.get_world_size() if dist else 1

    def _sync(self) -> None:
        if self.world_size == 1:
            return
        if self._barrier is not None:
            self._barrier()
            return
        dist = _torch_dist()
        if dist is None:
            raise CheckpointError("world_size > 1 but no barrier and torch.distributed is not initialised")
        dist.barrier()

    # --- finding ------------------------------------------------------------------------------
    def path_for(self, step: int) -> Path:
        return self.root / f"checkpoint-{step}"

    def all(self) -> list[Checkpoint]:
        """Every finished-rename checkpoint directory (valid or not), by step."""
        if not self.root.is_dir():
            return []
        found = []
        for entry in self.root.iterdir():
            m = CHECKPOINT_NAME_RE.match(entry.name)
            if m and entry.is_dir():
                found.append(Checkpoint(int(m.group(1)), entry))
        return sorted(found, key=lambda c: c.step)

    def valid(self) -> list[Checkpoint]:
        return [c for c in self.all() if c.valid]

    def latest(self) -> Checkpoint | None:
        """The newest VALID checkpoint, or None."""
        for ck in reversed(self.all()):
            if ck.valid:
                return ck
        return None

    def get(self, step: int) -> Checkpoint | None:
        """The valid checkpoint of exactly this step, or None."""
        ck = Checkpoint(step, self.path_for(step))
        return ck if ck.valid else None

    # --- saving -------------------------------------------------------------------------------
    def save(self, step: int, write_fn: WriteFn) -> Checkpoint:
        """Write, fsync, rename, mark, repoint latest, prune. Returns when the checkpoint is valid."""
        self.wait()
        previous = self.latest()
        failed = None
        try:
            tmp = self._prepare(step)
            self._write_shard(tmp, write_fn)
            if self.rank == 0:
                self._finalize(step, tmp)
        except OSError as exc:
            failed = self._failed(step, exc, previous)
        self._sync()  # nobody continues (or reads latest) before rank 0 has finalized (or given up)
        if failed is not None:
            raise failed from failed.error
        return Checkpoint(step, self.path_for(step))

    def _failed(self, step: int, exc: OSError, previous: Checkpoint | None) -> CheckpointSaveFailed | None:
        """Remove what the failed save left (a half-written tmp dir fills the disk further, and status
        would show it as a save in progress); None when the checkpoint did become valid (only the
        `latest` pointer failed, and it is never trusted for validity)."""
        if Checkpoint(step, self.path_for(step)).valid:
            return None
        if self.rank == 0:
            shutil.rmtree(self.root / f"checkpoint-{step}.tmp", ignore_errors=True)
            shutil.rmtree(self.path_for(step), ignore_errors=True)  # renamed, never marked complete
        failure = CheckpointSaveFailed(step, exc, previous)
        if self.on_failure is not None:
            try:
                self.on_failure(failure)
            except Exception:  # noqa: BLE001 - reporting must not hide the failure itself
                pass
        return failure

    def save_async(self, step: int, write_fn: WriteFn) -> None:
        """Like save(), but the write and finalize happen in a background thread.

        The caller must hand in a write_fn over a SNAPSHOT (e.g. snapshot_state(state)): training
        keeps mutating the live tensors. At most one save is in flight: this first waits for the
        previous one. Uses no collectives in the background (ranks meet through `.rank-N.done`
        files), so it is safe next to NCCL/gloo traffic of the step loop.
        """
        self.wait()
        previous = self.latest()
        try:
            tmp = self._prepare(step)
        except OSError as exc:
            failed = self._failed(step, exc, previous)
            if failed is not None:
                raise failed from exc
            return

        def work() -> None:
            try:
                self._write_shard(tmp, write_fn)
                if self.rank == 0:
                    self._finalize(step, tmp)
            except OSError as exc:
                self._in_flight_error = self._failed(step, exc, previous)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread by wait()
                self._in_flight_error = exc

        self._in_flight = threading.Thread(target=work, name=f"checkpoint-{step}", daemon=False)
        self._in_flight.start()

    def save_state_async(self, step: int, state, filename: str = "state.pt") -> None:
        """torch state dict -> snapshot -> background torch.save, reusing the snapshot buffers.

        Reuse makes the snapshot a plain copy into memory that is already mapped (a fresh copy
        page-faults every byte in); it is safe because at most one save is in flight.
        """
        self.wait()
        self._snapshot = snapshot_state(state, into=self._snapshot)
        self.save_async(step, torch_writer(self._snapshot, filename))

    def wait(self) -> None:
        """Block until the in-flight async save (if any) is done; raise its error here."""
        if self._in_flight is not None:
            self._in_flight.join()
            self._in_flight = None
        if self._in_flight_error is not None:
            error, self._in_flight_error = self._in_flight_error, None
            if isinstance(error, CheckpointSaveFailed):
                raise error from error.error
            raise CheckpointError(f"background checkpoint save failed: {error!r}") from error

    def _prepare(self, step: int) -> Path:
        if step < 0:
            raise ValueError("step must be >= 0")
        tmp = self.root / f"checkpoint-{step}.tmp"
        if self.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)  # a previous attempt died mid-write
            tmp.mkdir()
        self._sync()  # every rank writes only after rank 0 has a clean tmp dir
        return tmp

    def _write_shard(self, tmp: Path, write_fn: WriteFn) -> None:
        write_fn(tmp)
        # fsync from the writing rank: on network filesystems only the writer can flush its pages.
        # The tree may hold other ranks' files too; fsync of an already-clean file is cheap.
        _fsync_tree(tmp)
        if self.world_size > 1:
            _write_synced(tmp / _RANK_DONE.format(rank=self.rank), "")

    def _wait_for_shards(self, tmp: Path) -> None:
        deadline = time.monotonic() + self.shard_timeout
        markers = [tmp / _RANK_DONE.format(rank=r) for r in range(self.world_size)]
        while not all(m.exists() for m in markers):
            if time.monotonic() > deadline:
                missing = [r for r, m in enumerate(markers) if not m.exists()]
                raise CheckpointError(f"ranks {missing} did not finish writing {tmp} "
                                      f"within {self.shard_timeout:.0f} s")
            time.sleep(0.01)
        for marker in markers:
            marker.unlink()

    def _finalize(self, step: int, tmp: Path) -> None:
        if self.world_size > 1:
            self._wait_for_shards(tmp)
        _fsync_path(tmp)
        final = self.path_for(step)
        if final.exists():
            shutil.rmtree(final)  # same step saved again after a restart; the new one wins
        os.rename(tmp, final)
        _fsync_path(self.root)
        _write_synced(final / COMPLETE_MARKER, json.dumps({"step": step, "time": time.time(),
                                                           "world_size": self.world_size}))
        _fsync_path(final)
        self._point_latest(final.name)
        self._prune()

    def _point_latest(self, name: str) -> None:
        pointer_tmp = self.root / f".{LATEST_POINTER}.tmp"
        _write_synced(pointer_tmp, name + "\n")
        os.replace(pointer_tmp, self.root / LATEST_POINTER)
        _fsync_path(self.root)

    def _prune(self) -> None:
        valid = self.valid()
        newest = valid[-1].step if valid else -1
        for ck in valid[: -self.keep_last]:
            if self.keep_every and ck.step % self.keep_every == 0:
                continue  # a milestone kept for evaluation or forks
            shutil.rmtree(ck.path, ignore_errors=True)
        # Invalid directories older than the newest valid one can never be resumed from.
        for ck in self.all():
            if not ck.valid and ck.step < newest:
                shutil.rmtree(ck.path, ignore_errors=True)


# --- torch helpers (imported lazily so the module stays usable without torch) -----------------
def snapshot_state(state, into=None):
    """A detached CPU copy of a (nested) state dict: the step loop pays only for this copy.

    `into`: a previous snapshot of the same structure whose tensors are overwritten in place.
    GPU tensors are copied into pinned host buffers without blocking per tensor, then one
    synchronize: pageable copies stage through a bounce buffer and serialise on every tensor.
    """
    import torch

    snapshot = _snapshot(state, into, torch)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # the writer thread reads the buffers: every copy must have landed
    return snapshot


def _snapshot(state, into, torch):
    if isinstance(state, torch.Tensor):
        source = state.detach()
        if isinstance(into, torch.Tensor) and into.shape == source.shape and into.dtype == source.dtype:
            return into.copy_(source, non_blocking=source.is_cuda)
        if source.is_cuda:
            return torch.empty(source.shape, dtype=source.dtype, pin_memory=True).copy_(source, non_blocking=True)
        return source.to("cpu", copy=True)
    if isinstance(state, dict):
        into = into if isinstance(into, dict) else {}
        return {k: _snapshot(v, into.get(k), torch) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        into = into if isinstance(into, (list, tuple)) and len(into) == len(state) else [None] * len(state)
        return type(state)(_snapshot(v, i, torch) for v, i in zip(state, into))
    return state


def torch_writer(state, filename: str | None = None) -> WriteFn:
    """write_fn that torch.save()s `state` as state.pt (single writer) or state-rank<R>.pt (shards)."""
    import torch

    def write(directory: Path) -> None:
        torch.save(state, directory / (filename or "state.pt"))
    return write


def load_torch(ck: Checkpoint, filename: str = "state.pt", map_location="cpu", *, weights_only: bool = True):
    """Load a torch.save'd file of a checkpoint. weights_only=True (the default) unpickles only
    tensors and plain containers, so a checkpoint file someone else wrote cannot run code in the
    training; pass weights_only=False only for files you wrote yourself and trust."""
    import torch

    return torch.load(ck.path / filename, map_location=map_location, weights_only=weights_only)


def dcp_writer(state_dict) -> WriteFn:
    """write_fn that saves with torch.distributed.checkpoint (distributed=True: every rank calls save(); not async).

    The result is a plain DCP directory: `dcp.load(state_dict, checkpoint_id=ck.path)` reads it.
    """
    import torch.distributed.checkpoint as dcp

    def write(directory: Path) -> None:
        dcp.save(state_dict, checkpoint_id=str(directory))
    return write
