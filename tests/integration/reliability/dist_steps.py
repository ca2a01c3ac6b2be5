"""A tiny gloo training across nodes for fault tests: every step is an allreduce over all ranks
(so a lost peer stops every survivor), rank 0 logs and checkpoints, every rank drains on request.

--crash-at S      rank 0 exits 3 at step S, once per run (a crash inside a healthy allocation)
--crash-file F    rank 0 exits 3 whenever <run dir>/F exists, removing it (benchmarks/goodput.py drops it)
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from slurmctl.runtime import Runtime

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100000)
parser.add_argument("--sleep", type=float, default=0.1)
parser.add_argument("--crash-at", type=int, default=None)
parser.add_argument("--crash-file", default=None)
args = parser.parse_args()

rt = Runtime.from_env()
dist.init_process_group("gloo")
rank = dist.get_rank()
ck = rt.checkpoints.latest()
start = ck.step + 1 if ck else 0
if rt.is_main:
    print(f"world size {dist.get_world_size()}, starting at step {start} on {os.uname().nodename}", flush=True)


def save(step):
    return rt.checkpoints.save(step, lambda d: (d / "state.json").write_text(json.dumps({"step": step})))


for step in range(start, args.steps):
    time.sleep(args.sleep)
    # One allreduce per step: it blocks until every rank arrives (a lost peer ends it with an error),
    # and carries the drain flag so that every rank stops at the same step.
    total = torch.tensor([1.0, 1.0 if rt.should_stop() else 0.0])
    dist.all_reduce(total)
    rt.log(step, loss=1.0 / (step + 1))
    if rank == 0 and args.crash_file and (rt.run_dir / args.crash_file).exists():
        (rt.run_dir / args.crash_file).unlink()
        print(f"injected crash at step {step}", flush=True)
        sys.exit(3)
    if args.crash_at == step and rank == 0 and not any(p.name.startswith("crashed-") for p in rt.run_dir.iterdir()):
        (rt.run_dir / f"crashed-{step}").write_text("")
        print(f"crashing at step {step}", flush=True)
        sys.exit(3)
    if total[1] > 0:
        saved = save(step) if rt.is_main else None
        rt.ack_drain(step, saved.path if saved else None)
        dist.barrier()
        sys.exit(0)
    if rt.is_main and (step + 1) % rt.checkpoint_interval == 0:
        save(step)
if rt.is_main:
    save(args.steps - 1)
dist.barrier()
