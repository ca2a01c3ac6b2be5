"""Wall time of the Prolog and Epilog entry points, as slurmd runs them (fresh interpreter, as root,
real scontrol/squeue), against the 150 ms budget. Also: the in-process time of the hooks slurmd
really ran, from hooks.jsonl (read only).

The hooks are timed against a job this benchmark submits itself, as a cluster user (alice), held so
that it never starts: the epilog kills the job user's processes that Slurm no longer runs, so it must
never be pointed at somebody else's job. Scratch, GPU map and cost records go to a temporary state
directory; the job is cancelled at the end (also on error).

    .venv/bin/python benchmarks/plugins_hooks.py [N]      (as root, like slurmd)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _as_user import bench_user, cancel, submit_held

REPO = Path(__file__).resolve().parents[1]
BUDGET_MS = 150.0
STATE = Path(os.environ.get("SLURMCTL_LOCAL_DIR", "/var/lib/slurmctl-local"))
NODE, PARTITION = "l4-1", "l4-dev"  # the job asks for this partition; the hooks run "on" its node


def time_hook(hook: str, env: dict, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        done = subprocess.run(["/usr/bin/python3", str(REPO / "plugins" / f"{hook}.py")], env=env,
                              capture_output=True, text=True)
        times.append((time.perf_counter() - t0) * 1000)
        if done.returncode != 0:
            raise SystemExit(f"{hook} exited {done.returncode}: {done.stderr.strip()}")
    return times


def precheck(env: dict) -> None:
    """A failing prolog drains its node: run the checks in-process, without a Slurm client (so
    nothing can be drained), before the real entry point is timed."""
    sys.path.insert(0, str(REPO))
    from slurmctl.ops.hooks.config import HookConfig
    from slurmctl.ops.hooks.prolog import run_prolog

    cfg = HookConfig.from_env(env)
    cfg.slurm = None
    result = run_prolog(env, cfg)
    if not result.ok:
        raise SystemExit(f"prolog health checks fail here ({result.reason}); not timing it (it would drain {NODE})")


def main() -> None:
    if os.geteuid() != 0:
        raise SystemExit("run as root: slurmd runs the hooks as root")
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    user = bench_user()
    ids: list[int] = []
    try:
        job_id = submit_held(f"bench-hooks-{os.getpid()}", ids, partition=PARTITION,
                             comment=f"slurmctl:bench-hooks-{os.getpid()}")
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(f"{tmp}/datacache", 0o755)  # the prolog's cache step, on a cache of the benchmark's own
            env = {"SLURMCTL_LOCAL_DIR": tmp, "SLURMD_NODENAME": NODE, "SLURM_JOB_ID": str(job_id),
                   "SLURMCTL_DATA_CACHE_DIRS": f"{tmp}/datacache",
                   "SLURM_JOB_USER": user.pw_name, "SLURM_JOB_UID": str(user.pw_uid),
                   "SLURM_JOB_ACCOUNT": "", "SLURM_JOB_PARTITION": PARTITION, "SLURM_JOB_NUM_NODES": "1",
                   "SLURM_JOB_GPUS": "0", "SLURM_JOB_RESTART_COUNT": "0",
                   "SLURM_JOB_COMMENT": f"slurmctl:bench-hooks-{os.getpid()}",
                   "SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0"}
            precheck({**env, "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"})
            print(f"hooks timed against job {job_id} (held, submitted by {user.pw_name} for this benchmark)")
            for hook in ("prolog", "epilog"):
                times = time_hook(hook, {**env, "SLURM_SCRIPT_CONTEXT": f"{hook}_slurmd"}, n)
                med = statistics.median(times)
                p95 = sorted(times)[int(0.95 * (len(times) - 1))]
                print(f"{hook:7} wall (fresh python3, n={n}): median {med:6.1f} ms  p95 {p95:6.1f} ms  "
                      f"min {min(times):6.1f}  max {max(times):6.1f}  budget/median {BUDGET_MS / med:4.1f}x")
    finally:
        cancel(ids)
    real = {"prolog": [], "epilog": []}
    log = STATE / "log" / "hooks.jsonl"
    if log.exists():
        for line in log.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "ms" in rec and rec.get("hook") in real and not str(rec.get("job_id", "")).startswith("9000"):
                real[rec["hook"]].append(rec["ms"])
    for hook, values in real.items():
        if values:
            print(f"{hook:7} in-process, run by slurmd (hooks.jsonl, n={len(values)}): median "
                  f"{statistics.median(values):6.1f} ms (interpreter start not included)")


if __name__ == "__main__":
    main()
