"""Goodput under faults on the local cluster, measured side by side in one sitting.

Two identical 2-node x 2-process gloo trainings (tests/integration/reliability/dist_steps.py: fixed
step time, an allreduce per step, a checkpoint every K steps) start together as the benchmark user
(alice): one without faults, one with a fault every --fault-every seconds of training, in turn:
  crash       rank 0 exits 3 (a file the benchmark drops in the run dir): the allocation is healthy,
              so the batch script restarts the training in it (the default)
  preemption  USR1 to the batch shell (`scancel --signal=USR1 --batch`, what Slurm's
              preempt_send_user_signal sends): drain, checkpoint, ACK, Slurm requeue
  node-loss   SIGKILL of the slurmd and the job's processes of its second node (root; only a node
              no other job uses, the baseline run included; drained at once so that no other job
              lands on it): the watchdog's peer check (5 s checks in both runs; the ranks gone and a
              probe step that cannot run there) ends the stuck step, the probe names the node, the
              job leaves it and requeues itself held, the expediter gives it its size back and it
              resumes on the others (Slurm's SlurmdTimeout is not waited for where the owner's
              shrink works, else Slurm requeues it once the node is DOWN); the node is then restored
Printed: goodput = useful steps x step time / wall time for both runs, the faulty run's also without
Slurm's fixed delays (the requeue BeginTime wait, and the SlurmdTimeout wait before Slurm declares a
lost node DOWN), which are printed separately; per fault: time to the first new step (raw and less
those delays) and steps lost.

Run as root (the node loss needs it); every Slurm and slurmctl command runs as the benchmark user.

    .venv/bin/python benchmarks/goodput.py [--steps 2400 --step-seconds 0.1 --fault-every 60]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
from _as_user import bench_user, run  # noqa: E402 - after the sys.path lines above

PY = sys.executable
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
TRAIN = REPO / "tests" / "integration" / "reliability" / "dist_steps.py"
WATCHDOG = {"SLURMCTL_WATCHDOG_CHECK": "5s"}  # default stall window; a lost peer is the peer check's


def slurmctl(*args: str) -> dict:
    at = args.index("--") if "--" in args else len(args)  # after "--" come sbatch's own arguments
    out = run([PY, "-m", "slurmctl.cli", *args[:at], "--json", *args[at:]], timeout=120)
    if out.returncode not in (0, 1):  # status of a failed run exits 1 with its JSON
        raise SystemExit(f"slurmctl {' '.join(args)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def jsonl(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def hostnames(nodelist: str) -> list[str]:
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                          timeout=30).stdout.split()


def submit(base: Path, name: str, sbatch: tuple[str, ...] = ()) -> dict:
    import yaml

    user = bench_user()
    d = base / name
    d.mkdir()
    shutil.copy(TRAIN, d / "train.py")
    (d / "run.yaml").write_text(yaml.safe_dump({
        "name": name, "entrypoint": "train.py", "partition": "h100-ondemand", "nodes": 2, "gpus_per_node": 2,
        "gpu_type": "h100", "time_limit": "60m", "max_restarts": 20, "checkpoint": {"interval_steps": ARGS.interval},
        "args": ["--steps", str(ARGS.steps), "--sleep", str(ARGS.step_seconds), "--crash-file", "inject-crash"],
        "env": WATCHDOG}))
    for p in (d, d / "train.py", d / "run.yaml"):
        os.chown(p, user.pw_uid, user.pw_gid)
    return slurmctl("submit", str(d / "run.yaml"), *(("--", *sbatch) if sbatch else ()))


def squeue_nodes(job_id: int) -> list[str]:
    out = run(["squeue", "-h", "-j", str(job_id), "-o", "%N"], timeout=30).stdout.strip()
    return hostnames(out) if out else []


def other_jobs_on(node: str, mine: set[int]) -> set[int]:
    out = subprocess.run(["squeue", "-h", "-w", node, "-o", "%A", "-t", "R,CG,CF,S"], capture_output=True,
                         text=True, timeout=30).stdout.split()
    return {int(j) for j in out if j.isdigit()} - mine


def node_loss_victim(faulty: dict, baseline: dict) -> str | None:
    """The faulty run's second node (the batch script stays alive on its first), when no other job
    -- the baseline run included -- runs on it."""
    nodes = squeue_nodes(faulty["job_id"])
    if len(nodes) < 2:
        return None
    victim = nodes[1]
    return None if other_jobs_on(victim, {faulty["job_id"]}) else victim


def second_node(submitted: dict, timeout: float = 900.0) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        nodes = squeue_nodes(submitted["job_id"])
        if len(nodes) >= 2:
            return nodes[1]
        time.sleep(2)
    raise SystemExit(f"job {submitted['job_id']} did not start within {timeout:.0f} s")


def sacct_attempts(job_id: int) -> list[tuple[float, float]]:
    """(start, end) of every attempt of the job, oldest first."""
    out = run(["sacct", "-X", "--duplicates", "-n", "-P", "-o", "Start,End", "-j", str(job_id)], timeout=60).stdout
    spans = []
    for row in out.split():
        try:
            spans.append(tuple(time.mktime(time.strptime(t, "%Y-%m-%dT%H:%M:%S")) for t in row.split("|")))
        except ValueError:
            continue
    return spans


def main() -> None:
    from tests.integration.test_faults_nodeloss import kill_node, restore_node

    if os.geteuid() != 0:
        raise SystemExit("run as root: the node-loss fault kills a slurmd (every Slurm command runs as "
                         f"{bench_user().pw_name})")
    started_bench = time.time()
    base = Path(tempfile.mkdtemp(prefix="goodput-"))
    os.chmod(base, 0o755)
    kinds = ARGS.kinds.split(",")
    faulty_run = submit(base, "goodput-faults")
    # The node loss takes the faulty run's second node, which no other job may share: the baseline
    # keeps off it (every node here is the same machine: placement does not change a run's speed).
    # Not the other way round: the faulty run's next attempts exclude the lost node too, and with
    # both excluded a 2-node job has no nodes left in a 3-node partition (seen: BadConstraints).
    try:
        runs = {"no faults": submit(base, "goodput-base", (f"--exclude={second_node(faulty_run)}",))}
    except BaseException:  # the faulty run is ours: it does not run on alone
        run([PY, "-m", "slurmctl.cli", "cancel", faulty_run["run_id"], "--now"], timeout=120)
        raise
    runs["faults"] = faulty_run
    faulty, run_dir = runs["faults"], Path(runs["faults"]["run_dir"])
    injected, next_fault, lost_node = [], None, None
    try:
        while True:
            states = {k: slurmctl("status", r["run_id"])["state"] for k, r in runs.items()}
            if all(s in ENDED for s in states.values()):
                break
            requeued = any(e["event"] == "end" and e.get("outcome") == "node-lost"
                           for e in jsonl(run_dir / "attempts.jsonl"))
            # once the requeued job left the node (it shrank itself, or Slurm declared the node DOWN),
            # bring the node back
            if lost_node and requeued and states["faults"] != "RUNNING" \
                    and lost_node not in squeue_nodes(faulty["job_id"]):
                restore_node(lost_node)
                print(f"node {lost_node} restored", flush=True)
                lost_node = None
            beat = (jsonl(run_dir / "metrics.jsonl") or [{}])[-1]
            if states["faults"] == "RUNNING" and beat.get("time", 0) > time.time() - 5 and not lost_node:
                next_fault = next_fault or time.time() + ARGS.fault_every
                if time.time() >= next_fault and len(injected) < ARGS.faults:
                    kind = kinds[len(injected) % len(kinds)]
                    if kind == "crash":
                        (run_dir / "inject-crash").write_text("")
                    elif kind == "preemption":
                        run(["scancel", "--signal=USR1", "--batch", str(faulty["job_id"])], check=True, timeout=60)
                    else:
                        victim = node_loss_victim(faulty, runs["no faults"])
                        if victim is None and time.time() < next_fault + ARGS.node_wait:
                            time.sleep(1)
                            continue  # the second node is shared now: wait for it to be ours alone
                        if victim is None:
                            print(f"node loss skipped: no node of the run was free of other jobs for "
                                  f"{ARGS.node_wait:.0f} s", flush=True)
                            kinds.remove("node-loss")
                            ARGS.faults = ARGS.faults if kinds else len(injected)
                            next_fault = None
                            continue
                        kill_node(victim, faulty["job_id"])
                        # as an operator's health check would: no other job may land on the dead node in
                        # the seconds before slurmctld notices (the benchmark shares the cluster)
                        subprocess.run(["scontrol", "update", f"nodename={victim}", "state=drain",
                                        "reason=goodput benchmark: node loss injected"], timeout=30, check=False)
                        lost_node = victim
                    injected.append({"kind": kind, "time": time.time(), "step": beat.get("step")})
                    print(f"injected {kind} at step {beat.get('step')}", flush=True)
                    next_fault = None
            if time.time() - started_bench > ARGS.timeout:
                raise SystemExit("timed out")
            time.sleep(2)
    finally:
        for r in runs.values():
            if slurmctl("status", r["run_id"])["state"] not in ENDED:
                run([PY, "-m", "slurmctl.cli", "cancel", r["run_id"], "--now"], timeout=120)
        if lost_node:
            restore_node(lost_node)
        # what report() needs, so that `--report FILE` can print it again from the run dirs
        (base / "benchmark.json").write_text(json.dumps({"runs": runs, "injected": injected,
                                                         "started": started_bench, "args": vars(ARGS)}))
        print(f"benchmark record: {base / 'benchmark.json'}", flush=True)
    report(runs, injected, started_bench)


def report(runs: dict, injected: list[dict], started_bench: float) -> None:
    result = {}
    for key, r in runs.items():
        rd = Path(r["run_dir"])
        metrics, events = jsonl(rd / "metrics.jsonl"), jsonl(rd / "attempts.jsonl")
        first = next(e["time"] for e in events if e["event"] == "start")
        last = max(m["time"] for m in metrics)
        spans = sacct_attempts(r["job_id"])
        # Slurm's fixed delays: the wait between attempts (requeue BeginTime), and after a node loss
        # the wait for SlurmdTimeout (from the node-lost record to Slurm ending the attempt).
        gaps = sum(max(0.0, spans[i + 1][0] - spans[i][1]) for i in range(len(spans) - 1))
        timeout_wait = 0.0
        for e in (e for e in events if e["event"] == "node-lost"):
            ended = next((s[1] for s in spans if s[0] <= e["time"] <= s[1] + 5), None)
            timeout_wait += max(0.0, ended - e["time"]) if ended else 0.0
        wall = last - first
        result[key] = {"wall": wall, "gaps": gaps, "timeout_wait": timeout_wait, "metrics": metrics,
                       "events": events, "state": slurmctl("status", r["run_id"])["state"]}
    useful = ARGS.steps * ARGS.step_seconds
    print(f"\ngoodput: 2 nodes x 2 processes, {ARGS.steps} steps x {ARGS.step_seconds} s, checkpoint every "
          f"{ARGS.interval} steps, {len(injected)} faults, one per {ARGS.fault_every:.0f} s of training; "
          f"benchmark wall {max(m['time'] for r in result.values() for m in r['metrics']) - started_bench:.0f} s")
    for key in runs:
        r = result[key]
        fixed = r["gaps"] + r["timeout_wait"]
        print(f"  {key:10s} {r['state']:9s} wall {r['wall']:7.1f} s  goodput {useful / r['wall']:.3f};  less Slurm's "
              f"fixed delays (requeue wait {r['gaps']:.0f} s + SlurmdTimeout wait {r['timeout_wait']:.0f} s): "
              f"wall {r['wall'] - fixed:7.1f} s  goodput {useful / (r['wall'] - fixed):.3f}")
    base, bad = result["no faults"], result["faults"]
    ratio = (useful / (bad["wall"] - bad["gaps"] - bad["timeout_wait"])) / (useful / base["wall"])
    print(f"  ratio faults / no faults, Slurm's fixed delays excluded: {ratio:.3f}; all included: "
          f"{base['wall'] / bad['wall']:.3f}")
    print("  fault        at step  first new step after (s)  less Slurm delays (s)  steps lost  restart")
    handled_kinds = {"step-restart", "end", "node-lost"}
    events = bad["events"]
    for fault in injected:
        handled = next((e for e in events if e["event"] in handled_kinds and e["time"] >= fault["time"]), None)
        end = next((e for e in events if e["event"] in {"end", "step-restart"} and e["time"] >= fault["time"]), None)
        new = next((m for m in bad["metrics"] if end and m["time"] > end["time"]), None)
        after = new["time"] - fault["time"] if new else float("nan")
        delays = 0.0
        if new and end and end["event"] == "end":  # a Slurm requeue: its waits lie between fault and new step
            spans = sacct_attempts(runs["faults"]["job_id"])
            delays = sum(max(0.0, spans[i + 1][0] - spans[i][1]) for i in range(len(spans) - 1)
                         if fault["time"] - 5 <= spans[i][1] <= new["time"])
            if handled and handled["event"] == "node-lost":
                ended = next((s[1] for s in spans if s[0] <= handled["time"] <= s[1] + 5), handled["time"])
                delays += max(0.0, ended - handled["time"])
        lost = end.get("steps_lost") if end else None
        how = "in allocation" if end and end["event"] == "step-restart" else "Slurm requeue"
        print(f"  {fault['kind']:11s}  {fault['step']!s:>7}  {after:24.1f}  {after - delays:21.1f}  "
              f"{lost!s:>10}  {how}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2400)
    parser.add_argument("--step-seconds", type=float, default=0.1)
    parser.add_argument("--interval", type=int, default=50, help="checkpoint every N steps")
    parser.add_argument("--fault-every", type=float, default=60.0, help="seconds of training between faults")
    parser.add_argument("--faults", type=int, default=3)
    parser.add_argument("--kinds", default="crash,preemption,node-loss")
    parser.add_argument("--node-wait", type=float, default=180.0,
                        help="seconds to wait for a node of the faulty run that no other job uses")
    parser.add_argument("--timeout", type=float, default=1500.0)
    parser.add_argument("--report", type=Path, default=None, help="print the report of a finished benchmark "
                        "again from its benchmark.json")
    ARGS = parser.parse_args()
    if ARGS.report:
        saved = json.loads(ARGS.report.read_text())
        ARGS.__dict__.update({k: v for k, v in saved["args"].items() if k != "report"})
        report(saved["runs"], saved["injected"], saved["started"])
    else:
        main()
