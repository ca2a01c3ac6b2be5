"""Exporter scrape time with a big queue: submits N held jobs (name prefix bench8-exporter-<pid>)
as a cluster user (alice; see _as_user.py), scrapes with the exporter as the operator runs it,
prints times and Slurm calls per interval, then cancels exactly those jobs, as their owner.

    .venv/bin/python benchmarks/exporter_scrape.py --jobs 10000

Not part of the test suite. Mind slurm.conf's MaxJobCount (deploy/local: 10,000, which includes
jobs ended in the last MinJobAge seconds): --jobs must stay below it minus the rest of the queue.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path

from _as_user import bench_user, cancel, run
from prometheus_client import generate_latest

from slurmctl.config.models import load_site_config
from slurmctl.ops.exporter import build
from slurmctl.slurm.client import SEP, SlurmClient
from slurmctl.slurm.runner import CommandResult, LocalRunner


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


class ScaledQueueRunner:
    """Real Slurm, except that squeue's real output is repeated (fresh job ids) up to `size` rows:
    measures the exporter's own parse + collect cost at a queue size the cluster cannot hold."""

    def __init__(self, size: int):
        self.inner, self.size = LocalRunner(), size

    def run(self, argv, timeout=60.0):
        result = self.inner.run(argv, timeout=timeout)
        if argv[0] != "squeue" or not result.stdout.strip():
            return result
        # a sealed record starts with its job id and ends with the seal's record end and a newline
        end = argv[-1].rsplit(":", 1)[-1]
        rows = [r.removeprefix("\n") for r in result.stdout.split(end) if r.strip()]
        scaled = [str(900000 + i) + row[row.index(SEP):] for i, row in zip(range(self.size), itertools.cycle(rows))]
        return CommandResult(result.argv, result.returncode, "".join(f"{r}{end}\n" for r in scaled), result.stderr)


def synthetic_scrape(size: int) -> None:
    registry, collector = build(load_site_config(), interval=15.0, runner=ScaledQueueRunner(size))
    clock = Clock()
    collector.cache.clock = clock

    def fresh_scrape():
        clock.now += 15.0
        generate_latest(registry)

    fresh = timed(fresh_scrape, 5)
    print(f"scrape that takes the snapshot with squeue output scaled to {size} rows: "
          f"median {statistics.median(fresh):.3f} s, max {max(fresh):.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--partition", default="l4-dev")
    parser.add_argument("--synthetic", type=int, default=10000, help="rows for the scaled-queue measurement")
    args = parser.parse_args()
    client = SlurmClient()
    name = f"bench8-exporter-{os.getpid()}"
    script = Path(tempfile.mkdtemp()) / "held.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    script.parent.chmod(0o755)  # sbatch reads the script as the benchmark user
    job_ids: list[int] = []
    try:
        started = time.perf_counter()
        for _ in range(args.jobs):
            out = run(["sbatch", "--parsable", "--hold", "-J", name, "-p", args.partition, "-t", "1",
                       "-o", "/dev/null", str(script)], check=False)
            if out.returncode != 0:  # MaxJobCount or an overloaded slurmctld: measure what is queued
                print(f"submission as {bench_user().pw_name} stopped after {len(job_ids)} jobs: {out.stderr.strip()}")
                break
            job_ids.append(int(out.stdout.strip().split(";")[0]))
        submit_seconds = time.perf_counter() - started
        queued = len(client.queue_snapshot())
        print(f"submitted {len(job_ids)} held jobs in {submit_seconds:.1f} s "
              f"({submit_seconds / max(len(job_ids), 1) * 1000:.1f} ms each); queue now {queued} jobs")

        registry, collector = build(load_site_config(), interval=15.0)
        clock = Clock()
        collector.cache.clock = clock

        def fresh_scrape():  # the worst case: this scrape takes the interval's Slurm snapshot
            clock.now += 15.0
            generate_latest(registry)

        fresh = timed(fresh_scrape, 5)
        cached = timed(lambda: generate_latest(registry), 20)
        calls_before = sum(collector.runner.calls.values())
        for _ in range(100):  # 100 scrapes inside one interval
            generate_latest(registry)
        calls_in_interval = sum(collector.runner.calls.values()) - calls_before
        clock.now += 15.0
        calls_before = dict(collector.runner.calls)
        for _ in range(100):
            generate_latest(registry)
        calls_next = {c: collector.runner.calls[c] - calls_before.get(c, 0) for c in collector.runner.calls}
        squeue_json = timed(lambda: client._run(["squeue", "--json"]), 3)
        squeue_lean = timed(client.queue_snapshot, 3)
        print(f"scrape that takes the Slurm snapshot: median {statistics.median(fresh):.3f} s, "
              f"max {max(fresh):.3f} s (goal < 1 s)")
        print(f"scrape from the cached snapshot:      median {statistics.median(cached) * 1000:.1f} ms")
        print(f"Slurm calls for 100 scrapes inside one interval: {calls_in_interval}; "
              f"in the next interval: {calls_next} (goal <= 2 per interval)")
        lean, as_json = statistics.median(squeue_lean), statistics.median(squeue_json)
        print(f"squeue -O (lean, parsed) {lean:.3f} s vs squeue --json (unparsed) {as_json:.3f} s: "
              f"ratio {as_json / lean:.1f}x")
        synthetic_scrape(args.synthetic)
    finally:
        cancel(job_ids)
        print(f"cancelled {len(job_ids)} jobs named {name}")


if __name__ == "__main__":
    main()
