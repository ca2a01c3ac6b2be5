"""Checkpoint protocol cost, measured in one run:

1. save throughput of CheckpointManager.save() vs a raw write + fsync of the same bytes (goal >= 0.9);
2. step-loop stall of save_async() (snapshot + hand-off) vs save() (goal <= 5%), and the
   wall-clock overhead each adds to a training-like loop.

    .venv/bin/python benchmarks/checkpoint_throughput.py [--mb 128] [--dir /var/lib/...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from slurmctl.runtime.checkpoint import CheckpointManager, torch_writer


def raw_write(directory: Path, blobs: list[bytes]) -> None:
    """The floor: write every file, fsync every file, fsync the directory (same order as save())."""
    directory.mkdir(parents=True)
    for i, blob in enumerate(blobs):
        (directory / f"part-{i}.bin").write_bytes(blob)
    for path in [*directory.iterdir(), directory]:
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def blob_writer(blobs: list[bytes]):
    def write(directory: Path) -> None:
        for i, blob in enumerate(blobs):
            (directory / f"part-{i}.bin").write_bytes(blob)
    return write


def throughput(root: Path, mb: int, repeats: int) -> dict:
    blobs = [os.urandom(mb * 1024 * 1024 // 4) for _ in range(4)]
    raw_times, ckpt_times = [], []
    # keep_last=repeats: retention (deleting old checkpoints) is not part of the write being compared.
    mgr = CheckpointManager(root / "ckpt", keep_last=repeats)
    for i in range(repeats):  # interleaved, so drift in the disk affects both alike
        target = root / f"raw-{i}"
        t = time.perf_counter()
        raw_write(target, blobs)
        raw_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        mgr.save(i, blob_writer(blobs))
        ckpt_times.append(time.perf_counter() - t)
    raw, ckpt = statistics.median(raw_times), statistics.median(ckpt_times)
    return {"bytes": mb * 1024 * 1024, "raw_seconds": round(raw, 4), "checkpoint_seconds": round(ckpt, 4),
            "raw_MBps": round(mb / raw, 1), "checkpoint_MBps": round(mb / ckpt, 1),
            "throughput_ratio": round(raw / ckpt, 3)}


def step_loop(root: Path, mode: str, state: dict, steps: int, every: int) -> tuple[float, float]:
    """Returns (loop seconds, seconds the loop spent inside save calls)."""
    mgr = CheckpointManager(root / f"loop-{mode}", keep_last=1)
    a = torch.randn(192, 192)
    in_save = 0.0
    started = time.perf_counter()
    for step in range(steps):
        for _ in range(20):  # the "training step"
            a = torch.tanh(a @ a.T / 192)
        state["step"] = torch.tensor(step)
        if mode != "none" and (step + 1) % every == 0:
            t = time.perf_counter()
            if mode == "sync":
                mgr.save(step, torch_writer(state))
            else:
                mgr.save_state_async(step, state)
            in_save += time.perf_counter() - t
    mgr.wait()
    return time.perf_counter() - started, in_save


def async_stall(root: Path, mb: int, steps: int, every: int) -> dict:
    numel = mb * 1024 * 1024 // 4
    state = {"model": torch.randn(numel // 2), "opt": torch.randn(numel - numel // 2)}
    torch.set_num_threads(1)
    base, _ = step_loop(root, "none", state, steps, every)
    sync_total, sync_in_save = step_loop(root, "sync", state, steps, every)
    async_total, async_in_save = step_loop(root, "async", state, steps, every)
    return {"state_MB": mb, "steps": steps, "save_every": every, "loop_seconds_no_checkpoint": round(base, 3),
            "loop_seconds_sync": round(sync_total, 3), "loop_seconds_async": round(async_total, 3),
            "stall_seconds_sync": round(sync_in_save, 4), "stall_seconds_async": round(async_in_save, 4),
            "async_vs_sync_stall_ratio": round(async_in_save / sync_in_save, 4),
            "async_vs_sync_overhead_ratio": round(max(async_total - base, 0) / max(sync_total - base, 1e-9), 4)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=256, help="checkpoint size")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-", dir=args.dir) as tmp:
        result = {"throughput": throughput(Path(tmp), args.mb, args.repeats),
                  "async": async_stall(Path(tmp), args.mb // 2, steps=300, every=100)}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
