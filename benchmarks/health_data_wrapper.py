"""What `for batch in rt.data(loader)` costs, measured side by side in one run.

Three loops over the same batches, interleaved in rounds so machine load hits all alike:
  bare      for batch in loader
  wrapped   for batch in rt.data(loader)   (two clock reads, a generator hop, a health-file check)
and, for scale, one real torch DataLoader batch (TensorDataset, batch 64, no workers) and one tiny
training step (a 2-layer MLP forward+backward on that batch, CPU).
Printed: ns per batch for bare and wrapped, the wrapper's overhead per batch, and that overhead as
a share of the DataLoader batch and of the training step (the medians of the rounds).

    .venv/bin/python benchmarks/health_data_wrapper.py [--batches 200000 --rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def per_item_ns(loop, items: int) -> float:
    started = time.perf_counter_ns()
    loop()
    return (time.perf_counter_ns() - started) / items


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    from slurmctl.runtime import Runtime

    run_dir = Path(tempfile.mkdtemp(prefix="health-bench-"))
    rt = Runtime(run_dir=run_dir)
    batches = list(range(args.batches))

    def bare():
        for _ in batches:
            pass

    def wrapped():
        for _ in rt.data(batches):
            pass

    bare_ns, wrapped_ns = [], []
    for _ in range(args.rounds):
        bare_ns.append(per_item_ns(bare, args.batches))
        wrapped_ns.append(per_item_ns(wrapped, args.batches))
    bare_med, wrapped_med = statistics.median(bare_ns), statistics.median(wrapped_ns)
    overhead = wrapped_med - bare_med

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(64 * 200, 256), torch.randint(0, 10, (64 * 200,)))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    load_ns, step_ns = [], []
    for _ in range(args.rounds):
        load_ns.append(per_item_ns(lambda: [None for _ in loader], len(loader)))
        x, y = next(iter(loader))

        def step(x=x, y=y):
            for _ in range(50):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        step_ns.append(per_item_ns(step, 50))
    load_med, step_med = statistics.median(load_ns), statistics.median(step_ns)

    print(f"rt.data() wrapper, {args.batches} batches x {args.rounds} rounds (medians):")
    print(f"  bare loop        {bare_med:8.1f} ns/batch")
    print(f"  rt.data() loop   {wrapped_med:8.1f} ns/batch   ({wrapped_med / bare_med:.1f}x the bare loop)")
    print(f"  overhead         {overhead:8.1f} ns/batch")
    print(f"  DataLoader batch {load_med:8.0f} ns  -> overhead = {100 * overhead / load_med:.3f}% of a batch")
    print(f"  MLP train step   {step_med:8.0f} ns  -> overhead = {100 * overhead / step_med:.4f}% of a step")


if __name__ == "__main__":
    main()
