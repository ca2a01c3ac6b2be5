"""What one hostile user's run directories cost root's exporter: its per-run read (run_sample.read_run)
of clean runs against runs whose attempts.jsonl is one 64 MiB file hard-linked into every run dir,
side by side in one process. It also times the old way of reading the events, which parsed the
whole attempts.jsonl, for comparison.

    .venv/bin/python benchmarks/root_side_run_reads.py --runs 100

It touches no job and no node: the run dirs are synthetic, under a temporary directory. This is
the run-file half of the bounded-work benchmark; the 100,000-run-dirs listing (`ls --all-users`) and
cleanup are not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

from slurmctl.config.models import load_site_config
from slurmctl.ops.run_sample import read_run
from slurmctl.rundir import Run
from slurmctl.slurm.records import Job

EVENT = json.dumps({"event": "start", "job_id": 1, "restart_count": 0, "time": 1.0, "nodes": "h100-1"}) + "\n"


def make_runs(root: Path, count: int, attempts: Path | None) -> list[Run]:
    runs = []
    for i in range(count):
        path = root / f"r{i}-20261201-{i:04x}"
        (path / "checkpoints").mkdir(parents=True)
        (path / "run.json").write_text(json.dumps({"run_id": path.name, "checkpoint_dir": str(path / "checkpoints")}))
        if attempts is None:
            (path / "attempts.jsonl").write_text(EVENT * 3)
        else:
            os.link(attempts, path / "attempts.jsonl")
        runs.append(Run(path.name, path))
    return runs


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100, help="runs per kind (10 users x 10 jobs: 100)")
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    site = load_site_config()
    job = Job(1, state="RUNNING", partition="h100-ondemand", user="bob", tres="cpu=1,gres/gpu=1",
              start_time=datetime.now())
    with tempfile.TemporaryDirectory(prefix="bench-root-reads-") as tmp:
        big = Path(tmp) / "big.jsonl"
        with open(big, "w") as fh:
            line = EVENT * 1024
            for _ in range(args.mib * 1024 * 1024 // len(line)):
                fh.write(line)
        clean = make_runs(Path(tmp) / "clean", args.runs, None)
        hostile = make_runs(Path(tmp) / "hostile", args.runs, big)
        now = time.time()
        t_clean = timed(lambda: [read_run(r, job, site, now) for r in clean], args.repeat)
        t_hostile = timed(lambda: [read_run(r, job, site, now) for r in hostile], args.repeat)
        t_whole = timed(lambda: [r.events() for r in hostile[:10]], 1) * len(hostile) / 10
    print(f"exporter run reads, {args.runs} runs: clean {t_clean:.3f} s, hostile ({args.mib} MiB hard-linked "
          f"attempts.jsonl) {t_hostile:.3f} s, ratio {t_hostile / t_clean:.2f}x")
    print(f"the old whole-file parse of those hostile attempts.jsonl (10 timed, scaled to {args.runs}): "
          f"{t_whole:.1f} s, {t_whole / t_clean:.0f}x clean")


if __name__ == "__main__":
    main()
