"""The requeue wait, taken out by the job's owner, on the real local cluster (only alice's own jobs).

Three requeueable batch jobs of alice's, submitted side by side, each `scontrol requeue`s itself in its
first attempt and records the time just before; its second attempt records when it runs:
  - plain: Slurm's own wait (BeginTime = the end of the requeue + 121 s on 22.05.8)
  - expedited: the first attempt starts runtime.attempt's expediter first (what `end` does before it
    requeues): it runs again within seconds
  - expedited, excluding its node: the expediter also adds the first attempt's node to ExcNodeList
    (what `end` does after a lost node): the second attempt runs elsewhere, the node excluded
The times go to benchmarks/results/requeue_wait.txt.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "requeue_wait.txt"
PARTITION = "h100-ondemand"

SCRIPT = """#!/bin/bash
out={out}
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then
  {expedite}
  echo "$SLURMD_NODENAME" > "$out/first-node"
  date +%s.%N > "$out/requeued"
  scontrol requeue "$SLURM_JOB_ID"
  sleep 120
else
  date +%s.%N > "$out/running"
  echo "$SLURMD_NODENAME" > "$out/second-node"
  scontrol show job "$SLURM_JOB_ID" > "$out/job.txt"
fi
"""
START = "python -c 'import sys; from slurmctl.runtime.expediter import start_expediter; start_expediter(sys.argv[1:])'"


def submit(alice, workdir: Path, name: str, expedite: str) -> tuple[int, Path]:
    out = workdir / name
    out.mkdir()
    script = workdir / f"{name}.sh"
    script.write_text(SCRIPT.format(out=shlex.quote(str(out)), expedite=expedite))
    for path in (out, script):  # this test runs as root; the jobs write as alice
        os.chown(path, alice.uid, alice.gid)
    job = alice.sbatch("--requeue", "-p", PARTITION, "-n", "1", "-t", "10", "-J", f"requeue-wait-{name}",
                       "-o", str(out / "job.out"), "--open-mode=append", str(script))
    return job, out


def wait_for(path: Path, limit: float) -> float:
    deadline = time.time() + limit
    while time.time() < deadline:
        if path.exists() and path.read_text().strip():
            return float(path.read_text())
        time.sleep(1)
    raise AssertionError(f"{path} not written within {limit:.0f} s")


def test_the_owner_takes_the_requeue_wait_out(alice, workdir):
    jobs = []
    try:
        plain = submit(alice, workdir, "plain", ":")
        jobs.append(plain[0])
        fast = submit(alice, workdir, "expedited", START)
        jobs.append(fast[0])
        excluding = submit(alice, workdir, "excluding", f'{START} "$SLURMD_NODENAME"')
        jobs.append(excluding[0])
        gaps = {}
        for name, (_job, out) in {"expedited": fast, "excluding": excluding, "plain": plain}.items():
            requeued = wait_for(out / "requeued", 120)
            gaps[name] = wait_for(out / "running", 300) - requeued
        job_txt = (excluding[1] / "job.txt").read_text()
        first, second = ((excluding[1] / f).read_text().strip() for f in ("first-node", "second-node"))
        log = (fast[1] / "job.out").read_text()
    finally:
        alice.scancel(*jobs)
    RESULTS.write_text(
        f"# tests/integration/test_requeue_wait.py, local cluster (Slurm 22.05.8), alice's own jobs, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
        "requeue-to-running (from just before `scontrol requeue` in the first attempt to the second attempt's "
        "first line)\n"
        f"  plain requeue (Slurm's BeginTime wait)      {gaps['plain']:6.1f} s\n"
        f"  expedited (StartTime=now as the owner)      {gaps['expedited']:6.1f} s\n"
        f"  expedited + its node excluded               {gaps['excluding']:6.1f} s  ({first} -> {second})\n"
        f"  ratio plain / expedited                     {gaps['plain'] / gaps['expedited']:6.1f}\n")
    print(RESULTS.read_text())
    assert gaps["plain"] > 100, gaps  # Slurm's wait is really there on this cluster
    assert gaps["expedited"] < 30 and gaps["excluding"] < 30, gaps
    assert "requeue wait ended (StartTime=now)" in log
    assert second != first and f"ExcNodeList={first}" in job_txt, (first, second, job_txt)

