"""A tiny single-process 'training' for reliability tests: counts steps, checkpoints, drains.

--crash-at S    exit 3 at step S (every attempt; with --crash-once only in attempt 0)
--ignore-drain  never look at the drain flag (a training that does not follow the convention)
"""

import argparse
import json
import os
import sys
import time

from slurmctl.runtime import Runtime

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--sleep", type=float, default=0.2)
parser.add_argument("--crash-at", type=int, default=None)
parser.add_argument("--crash-once", action="store_true")
parser.add_argument("--ignore-drain", action="store_true")
args = parser.parse_args()

rt = Runtime.from_env()
ck = rt.checkpoints.latest()
start = ck.step + 1 if ck else 0
attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
print(f"attempt {attempt} starts at step {start}", flush=True)


def save(step):
    return rt.checkpoints.save(step, lambda d: (d / "state.json").write_text(json.dumps({"step": step})))


for step in range(start, args.steps):
    time.sleep(args.sleep)
    rt.log(step, loss=1.0 / (step + 1))
    if args.crash_at == step and not (args.crash_once and attempt > 0):
        print(f"crashing at step {step}", flush=True)
        sys.exit(3)
    if not args.ignore_drain and rt.should_stop():
        ck = save(step)
        rt.ack_drain(step, ck.path)
        print(f"drained at step {step}", flush=True)
        sys.exit(0)
    if (step + 1) % rt.checkpoint_interval == 0:
        save(step)
save(args.steps - 1)
print("finished", flush=True)
