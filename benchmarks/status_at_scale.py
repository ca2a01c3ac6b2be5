"""`slurmctl ls` / `status` vs the single raw Slurm query they need, with 1,000 held jobs queued.

Run on the local cluster (not part of the test suite): .venv/bin/python benchmarks/status_at_scale.py
It submits held jobs named bench-status-<pid>-N as a cluster user (alice; see _as_user.py), measures
side by side in one run, prints the ratios, and cancels exactly the jobs it submitted (also on error).
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

from _as_user import cancel, reexec_as_user, submit_held

from slurmctl.observe.status import run_status, runs_statuses
from slurmctl.rundir import Run
from slurmctl.slurm.client import QUEUE, SlurmClient
from slurmctl.slurm.parsing import new_seal

JOBS = int(os.environ.get("BENCH_JOBS", "1000"))
REPEAT = 15
PREFIX = f"bench-status-{os.getpid()}-"


def fake_runs(root: Path, job_ids: list[int], count: int) -> list[Run]:
    runs = []
    for i, job_id in enumerate(job_ids[:count]):
        path = root / f"{PREFIX}{i}"
        (path / "checkpoints").mkdir(parents=True)
        (path / "run.json").write_text(json.dumps({"name": path.name, "created": i}))
        (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": job_id}) + "\n")
        runs.append(Run(path.name, path))
    return runs


def medians_interleaved(**fns) -> dict[str, float]:
    """Median seconds of each fn, sampled round-robin so load from other users hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(REPEAT):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> int:
    reexec_as_user()
    ids: list[int] = []
    try:
        for i in range(JOBS):
            submit_held(f"{PREFIX}{i}", ids, comment=f"slurmctl:{PREFIX}{i}")
        client = SlurmClient()
        raw_argv = ["squeue", "-h", *QUEUE.format_argv(new_seal())]
        with tempfile.TemporaryDirectory() as tmp:
            runs = fake_runs(Path(tmp), ids, 20)
            calls = []
            runner_run = client.runner.run
            client.runner.run = lambda argv, timeout=60.0: (calls.append(argv[0]), runner_run(argv, timeout))[1]
            # the alternative ls design: ask squeue only for the runs' jobs (no queue positions then)
            only_runs = [*raw_argv, "-j", ",".join(str(i) for i in ids[:len(runs)])]
            calls_before = len(calls)
            runs_statuses(runs, client)
            calls_per_ls = len(calls) - calls_before
            t = medians_interleaved(
                raw=lambda: subprocess.run(raw_argv, capture_output=True, check=True),
                raw_only_runs=lambda: subprocess.run(only_runs, capture_output=True, check=True),
                ls=lambda: runs_statuses(runs, client),
                status=lambda: run_status(runs[0], client))
        raw, raw_only_runs, ls, status = t["raw"], t["raw_only_runs"], t["ls"], t["status"]
        print(f"queue: {JOBS} held jobs; median of {REPEAT}, sampled round-robin")
        print(f"raw squeue           {raw * 1000:7.1f} ms")
        print(f"raw squeue -j 20 ids {raw_only_runs * 1000:7.1f} ms  ratio {raw_only_runs / raw:.2f}x")
        print(f"ls (20 runs)         {ls * 1000:7.1f} ms  ratio {ls / raw:.2f}x  "
              f"({calls_per_ls} Slurm command(s) per ls)")
        print(f"status (1 held run)  {status * 1000:7.1f} ms  ratio {status / raw:.2f}x")
        return 0
    finally:
        cancel(ids)


if __name__ == "__main__":
    sys.exit(main())
