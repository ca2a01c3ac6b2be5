"""Wall time of the Prolog and Epilog entry points, as slurmd runs them (fresh interpreter, real
scontrol/squeue, a real job id), against the 150 ms budget. Also: the in-process time of the hooks
slurmd really ran, from hooks.jsonl. Usage: .venv/bin/python benchmarks/plugins_hooks.py [N]"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_MS = 150.0
STATE = Path(os.environ.get("SLURMCTL_LOCAL_DIR", "/var/lib/slurmctl-local"))


def recent_job_id() -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "JobIDRaw", "-S", "now-1hours"],
                         capture_output=True, text=True).stdout.split()
    return out[-1] if out else "1"


def time_hook(hook: str, env: dict, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(["/usr/bin/python3", str(REPO / "plugins" / f"{hook}.py")], env=env, check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    with tempfile.TemporaryDirectory() as tmp:
        env = {"SLURMCTL_LOCAL_DIR": tmp, "SLURMD_NODENAME": "h100-2", "SLURM_JOB_ID": recent_job_id(),
               "SLURM_JOB_USER": "root", "SLURM_JOB_UID": "0", "SLURM_JOB_ACCOUNT": "ml-research",
               "SLURM_JOB_PARTITION": "h100-ondemand", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_GPUS": "0,1",
               "SLURM_JOB_RESTART_COUNT": "0", "SLURM_JOB_COMMENT": "slurmctl:bench-run",
               "SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0"}
        for hook in ("prolog", "epilog"):
            times = time_hook(hook, {**env, "SLURM_SCRIPT_CONTEXT": f"{hook}_slurmd"}, n)
            med = statistics.median(times)
            p95 = sorted(times)[int(0.95 * (len(times) - 1))]
            print(f"{hook:7} wall (fresh python3, n={n}): median {med:6.1f} ms  p95 {p95:6.1f} ms  "
                  f"budget/median {BUDGET_MS / med:4.1f}x")
    real = {"prolog": [], "epilog": []}
    log = STATE / "log" / "hooks.jsonl"
    if log.exists():
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if "ms" in rec and rec.get("hook") in real and not rec.get("job_id", "").startswith("9000"):
                real[rec["hook"]].append(rec["ms"])
    for hook, values in real.items():
        if values:
            print(f"{hook:7} in-process, run by slurmd (hooks.jsonl, n={len(values)}): median "
                  f"{statistics.median(values):6.1f} ms (interpreter start not included)")


if __name__ == "__main__":
    main()
