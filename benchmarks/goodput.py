"""Goodput under faults on the local cluster, measured side by side in one sitting.

Two identical runs of a step-counting training (fixed step time, a checkpoint every K steps) start
together as the benchmark user (alice): one without faults, one with a fault injected every
--fault-every seconds, in turn:
  crash       the training process exits 3 (a file the benchmark drops in the run dir); the run is
              opted in to in-allocation restart (SLURMCTL_RESTART_IN_ALLOCATION=1)
  preemption  USR1 to the batch shell (`scancel --signal=USR1 --batch`, what Slurm's
              preempt_send_user_signal sends): drain, checkpoint, ACK, Slurm requeue
Printed: goodput = useful steps x step time / wall time for both runs (the faulty run's wall time
without Slurm's fixed requeue delay, which is printed separately), time from each fault to the
first new step, and steps lost per fault.

Reduced from the issue's plan: 1 node x 1 process per run (not 2 x 2) and minutes, not 15; node
loss is not injected.

    .venv/bin/python benchmarks/goodput.py [--steps 1500 --step-seconds 0.1 --fault-every 60]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _as_user import reexec_as_user  # noqa: E402 - after the sys.path line above

TRAIN = r'''
import json, sys, time
from slurmctl.runtime import Runtime

rt = Runtime.from_env()
steps, dt = int(sys.argv[1]), float(sys.argv[2])
ck = rt.checkpoints.latest()
fault = rt.run_dir / "inject-crash"


def save(step):
    return rt.checkpoints.save(step, lambda d: (d / "state.json").write_text(json.dumps({"step": step})))


for step in range(ck.step + 1 if ck else 0, steps):
    time.sleep(dt)  # the step's compute
    rt.log(step, loss=1.0 / (step + 1))
    if fault.exists():
        fault.unlink()
        print(f"injected crash at step {step}", flush=True)
        sys.exit(3)
    if rt.should_stop():
        rt.ack_drain(step, save(step).path)
        sys.exit(0)
    if (step + 1) % rt.checkpoint_interval == 0:
        save(step)
save(steps - 1)
'''
PY = sys.executable
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def slurmctl(*args: str) -> dict:
    out = subprocess.run([PY, "-m", "slurmctl.cli", *args, "--json"], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SystemExit(f"slurmctl {' '.join(args)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def jsonl(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def submit(base: Path, name: str, args, env: dict) -> dict:
    import yaml

    d = base / name
    d.mkdir()
    (d / "train.py").write_text(TRAIN)
    (d / "run.yaml").write_text(yaml.safe_dump({
        "name": name, "entrypoint": "train.py", "args": [str(a) for a in args], "partition": "h100-ondemand",
        "gpus_per_node": 1, "time_limit": "60m", "max_restarts": 20, "checkpoint": {"interval_steps": ARGS.interval},
        "env": env}))
    return slurmctl("submit", str(d / "run.yaml"))


def attempt_gaps(job_id: int) -> float:
    """Seconds the job spent waiting between attempts (Slurm's requeue delay), from sacct."""
    out = subprocess.run(["sacct", "-X", "--duplicates", "-n", "-P", "-o", "Start,End", "-j", str(job_id)],
                         capture_output=True, text=True, timeout=60).stdout.split()
    spans = [[time.mktime(time.strptime(t, "%Y-%m-%dT%H:%M:%S")) for t in row.split("|")] for row in out]
    return sum(max(0.0, spans[i + 1][0] - spans[i][1]) for i in range(len(spans) - 1))


def main() -> None:
    reexec_as_user()
    started_bench = time.time()
    base = Path(tempfile.mkdtemp(prefix="goodput-"))
    args = (ARGS.steps, ARGS.step_seconds)
    runs = {"no faults": submit(base, "goodput-base", args, {}),
            "faults": submit(base, "goodput-faults", args, {"SLURMCTL_RESTART_IN_ALLOCATION": "1"})}
    faulty = runs["faults"]
    run_dir = Path(faulty["run_dir"])
    kinds, injected, next_fault = ["crash", "preemption"], [], None
    try:
        while True:
            states = {k: slurmctl("status", r["run_id"])["state"] for k, r in runs.items()}
            if all(s in ENDED for s in states.values()):
                break
            beat = (jsonl(run_dir / "metrics.jsonl") or [{}])[-1]
            if states["faults"] == "RUNNING" and beat.get("time", 0) > time.time() - 5:
                next_fault = next_fault or time.time() + ARGS.fault_every
                if time.time() >= next_fault and len(injected) < ARGS.faults:
                    kind = kinds[len(injected) % len(kinds)]
                    if kind == "crash":
                        (run_dir / "inject-crash").write_text("")
                    else:
                        subprocess.run(["scancel", "--signal=USR1", "--batch", str(faulty["job_id"])], check=True)
                    injected.append({"kind": kind, "time": time.time(), "step": beat.get("step")})
                    print(f"injected {kind} at step {beat.get('step')}", flush=True)
                    next_fault = None
            if time.time() - started_bench > ARGS.timeout:
                raise SystemExit("timed out")
            time.sleep(1)
    finally:
        for r in runs.values():
            if slurmctl("status", r["run_id"])["state"] not in ENDED:
                subprocess.run([PY, "-m", "slurmctl.cli", "cancel", r["run_id"], "--now"], capture_output=True)

    result = {}
    for key, r in runs.items():
        rd = Path(r["run_dir"])
        metrics, events = jsonl(rd / "metrics.jsonl"), jsonl(rd / "attempts.jsonl")
        first = next(e["time"] for e in events if e["event"] == "start")
        last = max(m["time"] for m in metrics)
        delay = attempt_gaps(r["job_id"])
        wall = last - first - delay
        result[key] = {"wall": wall, "delay": delay, "goodput": ARGS.steps * ARGS.step_seconds / wall,
                       "state": slurmctl("status", r["run_id"])["state"], "metrics": metrics, "events": events}
    events = result["faults"]["events"]
    print(f"\ngoodput: {ARGS.steps} steps x {ARGS.step_seconds} s, checkpoint every {ARGS.interval} steps, "
          f"{len(injected)} faults, one per {ARGS.fault_every:.0f} s of training")
    for key in runs:
        r = result[key]
        print(f"  {key:10s} {r['state']:9s} wall {r['wall']:7.1f} s (+ Slurm requeue delay {r['delay']:.0f} s, "
              f"excluded)  goodput {r['goodput']:.3f}")
    print(f"  ratio faults / no faults: {result['faults']['goodput'] / result['no faults']['goodput']:.3f}")
    print("  fault        at step  first new step after (s)  steps lost  restart")
    ends = [e for e in events if e["event"] in {"step-restart", "end"}]
    for fault in injected:
        handled = next((e for e in ends if e["time"] >= fault["time"]), None)
        new = next((m for m in result["faults"]["metrics"] if handled and m["time"] > handled["time"]), None)
        after = new["time"] - fault["time"] if new else float("nan")
        if fault["kind"] == "preemption" and new:
            after -= result["faults"]["delay"] / max(1, sum(1 for f in injected if f["kind"] == "preemption"))
        lost = handled.get("steps_lost") if handled else None
        kind = ("in allocation" if handled and handled["event"] == "step-restart" else "Slurm requeue")
        print(f"  {fault['kind']:11s}  {fault['step']!s:>7}  {after:24.1f}  {lost!s:>10}  {kind}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--step-seconds", type=float, default=0.1)
    parser.add_argument("--interval", type=int, default=50, help="checkpoint every N steps")
    parser.add_argument("--fault-every", type=float, default=40.0)
    parser.add_argument("--faults", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0)
    ARGS = parser.parse_args()
    main()
