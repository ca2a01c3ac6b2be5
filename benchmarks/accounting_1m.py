"""Ledger ingest + showback report over N synthetic sacct rows (default 1,000,000).

Rows look like `sacct -a -X --duplicates -P --delimiter=\\x1f` output from the local cluster
(same fields, realistic mix of states, partitions, GPU counts, requeued attempts), generated lazily
so the input itself costs no memory. Prints wall time and peak RSS of ingest and of the report.

    .venv/bin/python benchmarks/accounting_1m.py [--rows N]
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from slurmctl.ops.accounting import SACCT_FIELDS, Ledger, ingest
from slurmctl.ops.report import build_report, to_html
from slurmctl.slurm.client import SEP
from slurmctl.submit.spec import load_site_config

REPO = Path(__file__).resolve().parent.parent
STATES = ["COMPLETED"] * 70 + ["FAILED"] * 10 + ["CANCELLED by 1000"] * 8 + ["TIMEOUT"] * 5 + ["PREEMPTED"] * 5 + ["NODE_FAIL"] * 2
SHAPES = [("h100-ondemand", "h100", 8), ("h100-spot", "h100", 8), ("h100-ondemand", "h100", 16),
          ("l4-dev", "l4", 1), ("h100-spot", "h100", 32)]


def synthetic_lines(rows: int, seed: int = 7):
    rng = random.Random(seed)
    base = datetime(2026, 10, 1)
    job_id = 100000
    emitted = 0
    while emitted < rows:
        job_id += 1
        attempts = 1 if rng.random() > 0.05 else rng.randint(2, 4)  # 5% were requeued
        submit = base + timedelta(seconds=rng.randrange(60 * 86400))
        start = submit + timedelta(seconds=int(rng.expovariate(1 / 900)))
        partition, model, gpus = rng.choice(SHAPES)
        user = f"user{rng.randrange(200)}"
        for attempt in range(attempts):
            if emitted >= rows:
                return
            elapsed = int(rng.expovariate(1 / 7200)) + 30
            end = start + timedelta(seconds=elapsed)
            state = "PREEMPTED" if attempt < attempts - 1 else rng.choice(STATES)
            nodes = max(1, gpus // 8)
            tres = f"billing={gpus},cpu={gpus * 4},gres/gpu:{model}={gpus},gres/gpu={gpus},mem=64G,node={nodes}"
            values = [str(job_id), f"run{job_id}", user, f"team{hash(user) % 12}", partition, tres, str(nodes),
                      submit.isoformat(), submit.isoformat(), start.isoformat(), end.isoformat(), str(elapsed),
                      "1-00:00:00", state, "0:0", f"slurmctl:run-{job_id}"]
            yield SEP.join(values)
            emitted += 1
            start = end + timedelta(seconds=rng.randrange(30, 300))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    assert len(SACCT_FIELDS) == 16
    with tempfile.TemporaryDirectory() as tmp:
        site = load_site_config(REPO / "deploy" / "local" / "site.yaml")
        site = site.model_copy(update={"accounting": site.accounting.model_copy(
            update={"ledger_path": str(Path(tmp) / "ledger.sqlite")})})
        sacct_file = Path(tmp) / "sacct.txt"
        with open(sacct_file, "w") as fh:  # like `sacct ... > file`: generation is not what we time
            fh.writelines(line + "\n" for line in synthetic_lines(args.rows))
        t0 = time.perf_counter()
        with open(sacct_file) as lines:
            result = ingest(site, client=None, since=datetime(2026, 10, 1), now=datetime(2026, 12, 1), lines=lines)
        ingest_s = time.perf_counter() - t0
        rss_ingest = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t0 = time.perf_counter()
        report = build_report(Ledger(Path(site.accounting.ledger_path)), "account",
                              datetime(2026, 10, 1), datetime(2026, 12, 1))
        page = to_html(report)
        report_s = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows={args.rows} attempts_ingested={result.attempts}")
    print(f"ingest: {ingest_s:.2f} s ({args.rows / ingest_s:,.0f} rows/s), peak RSS {rss_ingest:.0f} MB")
    print(f"report: {report_s:.2f} s over {report.totals.attempts} attempts, ${report.totals.cost_usd:,.0f}, "
          f"html {len(page) / 1024:.0f} KiB")
    print(f"total: {ingest_s + report_s:.2f} s (goal < 10 s), peak RSS {rss:.0f} MB (goal < 300 MB)")


if __name__ == "__main__":
    main()
