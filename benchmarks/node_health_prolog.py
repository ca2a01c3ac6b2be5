"""The prolog's wall time with the health checks, side by side with the bare interpreter start it
cannot avoid, interleaved in one run (the machine's load hits both alike). As root, like slurmd;
no Slurm call: the node name is one no process carries (the leftover check finds nothing to ask
about), state goes to a temporary directory.

    .venv/bin/python benchmarks/node_health_prolog.py [N] [BASELINE_TREE] [OTHERS]

Each prolog is also run N/4 times under `python3 -X importtime` (interleaved the same way): what
the whole process spends importing, and how much of it is slurmctl's own modules.

BASELINE_TREE: a checkout of another commit (`git archive <commit> slurmctl plugins | tar -x -C DIR`):
its prolog joins the interleaving, e.g. the one before the health checks ("-": none).
OTHERS: that many processes of another user (bob, `sleep`) carrying another node's job environment
stay alive during the run, as a busy neighbour's job does on a shared host; they are this
benchmark's own and are killed at its end.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.99 * len(ordered)) - 1)]


def start_others(count: int) -> list[subprocess.Popen]:
    env = {"SLURM_JOB_ID": "999999", "SLURMD_NODENAME": "bench-other-node", "PATH": "/usr/bin:/bin"}
    return [subprocess.Popen(["/bin/sleep", "900"], env=env, user="bob", stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(count)]


def main(n: int, baseline: str | None = None, others: int = 0) -> None:
    neighbours = start_others(others)
    try:
        run(n, baseline, others)
    finally:
        for proc in neighbours:
            proc.kill()
            proc.wait()


def run(n: int, baseline: str | None, others: int) -> None:
    with tempfile.TemporaryDirectory(prefix="slurmctl-prolog-bench-") as state:
        env = {"SLURMCTL_LOCAL_DIR": state, "SLURMD_NODENAME": "bench-node-none", "SLURM_JOB_ID": "1",
               "SLURM_JOB_UID": "0", "SLURMCTL_SLURM_BIN_DIR": "/nonexistent", "SLURMCTL_MIN_FREE_SCRATCH_MB": "1",
               "SLURMCTL_HOOKS_LOG": f"{state}/hooks.jsonl",
               "SLURMCTL_DATA_CACHE_DIRS": ""}  # never the local cluster's caches (site.yaml data:)
        commands = {"python3 -c pass": ["/usr/bin/python3", "-c", "pass"],
                    "prolog with health checks": ["/usr/bin/python3", str(REPO / "plugins" / "prolog.py")]}
        if baseline:
            commands["baseline prolog"] = ["/usr/bin/python3", str(Path(baseline) / "plugins" / "prolog.py")]
        times: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(n):
            for name, argv in commands.items():
                t0 = time.perf_counter()
                done = subprocess.run(argv, env=env, capture_output=True)
                times[name].append((time.perf_counter() - t0) * 1000)
                if done.returncode != 0:
                    raise SystemExit(f"{name} exited {done.returncode}: {done.stderr.decode().strip()}")
        prologs = {("this prolog" if "health" in k else "the baseline"): v
                   for k, v in commands.items() if "prolog" in k}
        imports: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in prologs}
        for _ in range(max(1, n // 4)):
            for name, argv in prologs.items():
                done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, capture_output=True, text=True)
                total, own = import_ms(done.stderr)
                imports[name][0].append(total)
                imports[name][1].append(own)
    floor, ours = times["python3 -c pass"], times["prolog with health checks"]
    print(f"{n} runs each, interleaved, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, "
          f"{others} processes of another user's job alive")
    for name, values in times.items():
        print(f"  {name:28s} p50 {statistics.median(values):6.0f} ms   p99 {p99(values):6.0f} ms")
    print(f"  ratio prolog/interpreter     p50 {statistics.median(ours) / statistics.median(floor):.1f}x  "
          f"p99 {p99(ours) / p99(floor):.1f}x")
    if baseline:
        base = times["baseline prolog"]
        print(f"  ratio prolog/baseline        p50 {statistics.median(ours) / statistics.median(base):.2f}x  "
              f"p99 {p99(ours) / p99(base):.2f}x")
    for name, (total, own) in imports.items():
        print(f"  imports of {name:17s} p50 {statistics.median(total):5.1f} ms (slurmctl's own modules "
              f"{statistics.median(own):5.1f} ms)  p99 {p99(total):5.1f} ms   [python -X importtime]")


def import_ms(stderr: str) -> tuple[float, float]:
    """(all imports, slurmctl's modules) in ms from `-X importtime`: the sum of the self times."""
    total = own = 0
    for line in stderr.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and parts[0].split(":")[1].strip().isdigit():
            us = int(parts[0].split(":")[1])
            total += us
            own += us if parts[2].strip().startswith("slurmctl") else 0
    return total / 1000, own / 1000


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100,
         sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None,
         int(sys.argv[3]) if len(sys.argv) > 3 else 0)
