"""Checkpoint protocol cost, measured in one run:

1. save throughput of CheckpointManager.save() vs a raw write + fsync of the same bytes (goal >= 0.9);
2. step-loop stall of save_async() (snapshot + hand-off) vs save() (goal <= 5%), and the
   wall-clock overhead each adds to a training-like loop: several rounds in rotating order,
   paired ratios per round, median and range (never clamped).

    .venv/bin/python benchmarks/checkpoint_throughput.py [--mb 256] [--rounds 5] [--dir /var/lib/...]
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


def _spread(values: list[float], digits: int = 4) -> dict:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


def async_stall(root: Path, mb: int, steps: int, every: int, rounds: int) -> dict:
    """`rounds` samples of each mode. The order rotates every round (none/sync/async, then
    sync/async/none, ...) so warm-up, page cache and writeback from the previous loop do not always
    favour the same mode. Ratios are taken per round (paired) and reported as median and range,
    unclamped: an overhead below zero means the difference is within this machine's noise."""
    numel = mb * 1024 * 1024 // 4
    state = {"model": torch.randn(numel // 2), "opt": torch.randn(numel - numel // 2)}
    torch.set_num_threads(1)
    modes = ["none", "sync", "async"]
    loop: dict[str, list[float]] = {m: [] for m in modes}
    stall: dict[str, list[float]] = {m: [] for m in modes}
    stall_ratio, overhead_ratio, async_overhead = [], [], []
    for r in range(rounds):
        order = modes[r % 3:] + modes[:r % 3]
        sample = {}
        for mode in order:
            sample[mode] = step_loop(root, mode, state, steps, every)
            loop[mode].append(sample[mode][0])
            stall[mode].append(sample[mode][1])
        (base, _), (sync_total, sync_in), (async_total, async_in) = sample["none"], sample["sync"], sample["async"]
        stall_ratio.append(async_in / sync_in)
        async_overhead.append(async_total - base)
        overhead_ratio.append((async_total - base) / (sync_total - base))
    return {"state_MB": mb, "steps": steps, "save_every": every, "rounds": rounds,
            "loop_seconds": {m: _spread(v, 3) for m, v in loop.items()},
            "stall_seconds": {m: _spread(stall[m]) for m in ("sync", "async")},
            "async_vs_sync_stall_ratio": _spread(stall_ratio),
            "async_overhead_seconds_vs_no_checkpoint": _spread(async_overhead, 3),
            "async_vs_sync_overhead_ratio": _spread(overhead_ratio)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=256, help="checkpoint size")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=5, help="samples of each step-loop mode")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-", dir=args.dir) as tmp:
        result = {"throughput": throughput(Path(tmp), args.mb, args.repeats),
                  "async": async_stall(Path(tmp), args.mb // 2, steps=args.steps, every=max(1, args.steps // 3),
                                      rounds=args.rounds)}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
