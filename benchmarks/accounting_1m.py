"""Ledger ingest + showback report over N synthetic sacct rows (default 1,000,000).

Rows look like `sacct -a -X --duplicates -P --delimiter=\\x1f` output from the local cluster
(same fields, realistic mix of states, partitions, GPU counts, requeued attempts). The input is the
same on every run (seeded generator, no salted hash()); its sha256 is printed so two runs can be
checked to have measured the same thing.

Absolute times depend on the machine and on what else runs on it, so each step is also reported
as a ratio to a baseline measured in the same run on the same rows:
  ingest  vs  one SQLite transaction inserting the raw split rows (read + split + insert, no parsing
              or pricing): what the ledger's parsing, pricing and waste assessment add;
  report  vs  one `GROUP BY account` over that raw table: what percentiles and the HTML add.
Steps alternate with their baselines (--repeat times) and the median and the spread are printed.

    .venv/bin/python benchmarks/accounting_1m.py [--rows N] [--repeat K]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import resource
import sqlite3
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from slurmctl.config.models import load_site_config
from slurmctl.ops.accounting import SACCT_FIELDS, Ledger, ingest
from slurmctl.ops.report import build_report, to_html
from slurmctl.slurm.client import SEP

REPO = Path(__file__).resolve().parent.parent
STATES = (["COMPLETED"] * 70 + ["FAILED"] * 10 + ["CANCELLED by 1000"] * 8 + ["TIMEOUT"] * 5 + ["PREEMPTED"] * 5
          + ["NODE_FAIL"] * 2)
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
            values = [str(job_id), user, f"team{int(user[4:]) % 12}", partition, tres, str(nodes),
                      submit.isoformat(), submit.isoformat(), start.isoformat(), end.isoformat(), str(elapsed),
                      "1-00:00:00", state, "0:0", f"run{job_id}", f"slurmctl:run-{job_id}"]
            yield SEP.join(values)
            emitted += 1
            start = end + timedelta(seconds=rng.randrange(30, 300))


def run_ingest(site, sacct_file: Path):
    t0 = time.perf_counter()
    with open(sacct_file) as lines:
        rows = (line.rstrip("\n").split(SEP) for line in lines)
        result = ingest(site, client=None, since=datetime(2026, 10, 1), now=datetime(2026, 12, 1), rows=rows)
    return time.perf_counter() - t0, result


def run_report(ledger_path: Path):
    t0 = time.perf_counter()
    report = build_report(Ledger(ledger_path), "account", datetime(2026, 10, 1), datetime(2026, 12, 1))
    page = to_html(report)
    return time.perf_counter() - t0, report, page


def raw_insert(sacct_file: Path, db_path: Path) -> float:
    """Baseline: the same rows, split and bulk-inserted as text in one transaction."""
    t0 = time.perf_counter()
    db = sqlite3.connect(db_path)
    db.execute(f"CREATE TABLE raw ({', '.join(SACCT_FIELDS)})")
    with open(sacct_file) as lines:
        db.executemany(f"INSERT INTO raw VALUES ({', '.join('?' * len(SACCT_FIELDS))})",
                       (line.rstrip("\n").split(SEP) for line in lines))
    db.commit()
    db.close()
    return time.perf_counter() - t0


def raw_group_by(db_path: Path) -> float:
    """Baseline for the report: one aggregate per account over the raw rows."""
    t0 = time.perf_counter()
    db = sqlite3.connect(db_path)
    db.execute("SELECT Account, COUNT(*), SUM(ElapsedRaw) FROM raw GROUP BY Account").fetchall()
    db.close()
    return time.perf_counter() - t0


def spread(samples: list[float]) -> str:
    return f"median {statistics.median(samples):.3f} (min {min(samples):.3f}, max {max(samples):.3f}, n={len(samples)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="samples of each step (alternating with its baseline)")
    args = parser.parse_args()
    assert len(SACCT_FIELDS) == 16
    site0 = load_site_config(REPO / "deploy" / "local" / "site.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        sacct_file = Path(tmp) / "sacct.txt"
        digest = hashlib.sha256()
        with open(sacct_file, "w") as fh:  # like `sacct ... > file`: generation is not what we time
            for line in synthetic_lines(args.rows):
                fh.write(line + "\n")
                digest.update(line.encode())
        ingest_s, base_ingest_s, report_s, base_report_s, ratios_ingest, ratios_report = [], [], [], [], [], []
        rss_ingest = 0.0
        for k in range(args.repeat):
            ledger_path = Path(tmp) / f"ledger{k}.sqlite"
            raw_path = Path(tmp) / f"raw{k}.sqlite"
            site = site0.model_copy(update={"accounting": site0.accounting.model_copy(
                update={"ledger_path": str(ledger_path)})})

            # Alternate which runs first, so page cache and CPU frequency favour neither side.
            if k % 2 == 0:
                (ing, result), base = run_ingest(site, sacct_file), raw_insert(sacct_file, raw_path)
            else:
                base, (ing, result) = raw_insert(sacct_file, raw_path), run_ingest(site, sacct_file)
            rss_ingest = max(rss_ingest, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)

            if k % 2 == 0:
                (rs, report, page), rbase = run_report(ledger_path), raw_group_by(raw_path)
            else:
                rbase, (rs, report, page) = raw_group_by(raw_path), run_report(ledger_path)
            ingest_s.append(ing)
            base_ingest_s.append(base)
            report_s.append(rs)
            base_report_s.append(rbase)
            ratios_ingest.append(ing / base)
            ratios_report.append(rs / rbase)
            ledger_path.unlink()
            raw_path.unlink()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows={args.rows} attempts_ingested={result.attempts} input sha256={digest.hexdigest()[:16]}")
    print(f"ingest / raw sqlite insert of the same rows: {spread(ratios_ingest)} x")
    print(f"report / raw GROUP BY:                       {spread(ratios_report)} x")
    print(f"  ingest s: {spread(ingest_s)}; raw insert s: {spread(base_ingest_s)}")
    print(f"  report s: {spread(report_s)}; raw group-by s: {spread(base_report_s)}; "
          f"{report.totals.attempts} attempts, ${report.totals.cost_usd:,.0f}, html {len(page) / 1024:.0f} KiB")
    total = statistics.median(ingest_s) + statistics.median(report_s)
    print(f"  total (median ingest + median report): {total:.2f} s (goal < 10 s), peak RSS {rss:.0f} MB "
          f"(ingest {rss_ingest:.0f} MB; goal < 300 MB)")


if __name__ == "__main__":
    main()
