"""What hostile users' run directories cost root, against a clean cluster, side by side in one run:

1. the exporter's per-run read (run_sample.read_run: through the run dir's fd, as bob, whose runs
   they are) of 100 clean runs against 100 runs whose attempts.jsonl is one 64 MiB file hard-linked
   into every run dir (and the old whole-file parse of two of those, scaled, for comparison);
2. the operator's `slurmctl ls --all-users` as a whole process (as root, as an operator types it)
   over a runs root of 10 users x 10 clean runs, against the same users with 10 hostile runs each
   (64 MiB hard-linked attempts.jsonl and metrics.jsonl) plus 100,000 more run directories
   (10,000 per hostile user, all of today).

    .venv/bin/python benchmarks/root_side_run_reads.py            # as root
    .venv/bin/python benchmarks/root_side_run_reads.py --dirs 20000 --mib 16   # a quicker look
    .venv/bin/python benchmarks/root_side_run_reads.py --skip-ls   # the exporter's reads only

It touches no job and no node: the runs are synthetic, under a temporary runs root owned by unused
uids, with their own copy of the site config; `ls` asks squeue about job ids no job has (read only).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

from slurmctl.config.models import load_site_config
from slurmctl.fsutil import read_jsonl
from slurmctl.ops.run_sample import read_run
from slurmctl.rundir import Run
from slurmctl.slurm.records import Job

EVENT = json.dumps({"event": "start", "job_id": 1, "restart_count": 0, "time": 1.0, "nodes": "h100-1"}) + "\n"


def make_runs(root: Path, count: int, attempts: Path | None, uid: int) -> list[Run]:
    """`count` run dirs owned by `uid` (the exporter reads a job's run only as its user's)."""
    runs = []
    for i in range(count):
        path = root / f"r{i}-20261201-{i:04x}"
        (path / "checkpoints").mkdir(parents=True)
        (path / "run.json").write_text(json.dumps({"run_id": path.name, "checkpoint_dir": str(path / "checkpoints")}))
        if attempts is None:
            (path / "attempts.jsonl").write_text(EVENT * 3)
        else:
            os.link(attempts, path / "attempts.jsonl")
        for entry in (path, path / "checkpoints", path / "run.json", path / "attempts.jsonl"):
            os.chown(entry, uid, uid)
        runs.append(Run(path.name, path))
    return runs


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


REPO = Path(__file__).resolve().parents[1]
FIRST_UID = 61000  # uids no account has: the synthetic users own their run dirs as real users would


def write_big(path: Path, mib: int) -> Path:
    with open(path, "w") as fh:
        line = EVENT * 1024
        for _ in range(mib * 1024 * 1024 // len(line)):
            fh.write(line)
    return path


def make_user_runs(runs_root: Path, user: int, clean: int, hostile: int, extra_dirs: int, big: Path | None) -> None:
    """runs_root/u<user>/: `hostile` newest runs with `big` hard-linked as attempts.jsonl and
    metrics.jsonl, `clean` small runs, and `extra_dirs` older run dirs of today (run.json only), all
    owned by the user."""
    uid = FIRST_UID + user
    home = runs_root / f"u{user}"
    home.mkdir(mode=0o700)
    day = f"{datetime.now(UTC):%Y%m%d}"
    now = time.time()
    for i in range(clean + hostile + extra_dirs):
        path = home / f"r{i}-{day}-{i % 65536:04x}" if i < 65536 else home / f"s{i}-{day}-{i % 65536:04x}"
        path.mkdir()
        (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": now - i}))
        if i < hostile and big is not None:  # the newest runs: the ones `ls` shows
            os.link(big, path / "attempts.jsonl")
            os.link(big, path / "metrics.jsonl")
        elif i < hostile + clean:
            (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": 9_000_000 + i}) + "\n")
        os.chown(path, uid, uid)
    os.chown(home, uid, uid)


def operator_ls(site_file: Path, repeat: int, code: Path) -> float:
    env = {**os.environ, "SLURMCTL_SITE_CONFIG": str(site_file), "PYTHONPATH": str(code)}
    argv = [sys.executable, "-m", "slurmctl.cli", "ls", "--all-users", "--json"]

    def once():
        # cwd: `python -m` puts it first on sys.path, so it must be the checkout measured
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, cwd=code)
        if done.returncode != 0:
            raise SystemExit(f"ls --all-users failed: {done.stderr[-2000:]}")
        return done
    once()  # warm the page cache: both sides are then measured warm
    return timed(once, repeat)


def bench_operator_ls(args) -> None:
    site = yaml.safe_load(Path(os.environ.get("SLURMCTL_SITE_CONFIG", "/etc/slurmctl/site.yaml")).read_text())
    with tempfile.TemporaryDirectory(prefix="bench-operator-ls-") as tmp:
        os.chmod(tmp, 0o755)
        big = write_big(Path(tmp) / "big.jsonl", args.mib)
        roots = {}
        for kind in ("clean", "hostile"):
            runs_root = Path(tmp) / kind
            runs_root.mkdir(mode=0o755)
            started = time.perf_counter()
            for user in range(args.users):
                hostile = kind == "hostile"
                make_user_runs(runs_root, user, args.jobs, args.jobs if hostile else 0,
                               args.dirs // args.users if hostile else 0, big if hostile else None)
            site_file = Path(tmp) / f"site-{kind}.yaml"
            site_file.write_text(yaml.safe_dump({**site, "runs_root": str(runs_root)}))
            roots[kind] = site_file
            print(f"made the {kind} runs root in {time.perf_counter() - started:.1f} s")
        measured = []
        for code in [args.code, *args.compare_code]:  # each checkout over the same runs roots, in turn
            measured.append((code, operator_ls(roots["clean"], args.repeat, code),
                             operator_ls(roots["hostile"], args.repeat, code)))
    for code, t_clean, t_hostile in measured:
        print(f"operator `ls --all-users` (whole process, {code}): clean {args.users} users x {args.jobs} runs "
              f"{t_clean:.2f} s; hostile (+{args.jobs} runs each with {args.mib} MiB hard-linked attempts.jsonl and "
              f"metrics.jsonl, +{args.dirs} run dirs) {t_hostile:.2f} s, ratio {t_hostile / t_clean:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100, help="exporter reads: runs per kind (10 users x 10 jobs)")
    parser.add_argument("--users", type=int, default=10, help="operator ls: users")
    parser.add_argument("--jobs", type=int, default=10, help="operator ls: clean (and hostile) runs per user")
    parser.add_argument("--dirs", type=int, default=100_000, help="operator ls: extra run dirs of the hostile users")
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-exporter", action="store_true")
    parser.add_argument("--skip-ls", action="store_true")
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout whose `slurmctl ls` runs (e.g. an "
                        "older one, for the before)")
    parser.add_argument("--compare-code", type=Path, action="append", default=[],
                        help="another checkout whose `slurmctl ls` is timed over the same runs roots, side by side")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the operator's view, over runs that other uids own")
    if not args.skip_exporter:
        bench_exporter_reads(args)
    if not args.skip_ls:
        bench_operator_ls(args)


def bench_exporter_reads(args) -> None:
    site = load_site_config()
    job = Job(1, state="RUNNING", partition="h100-ondemand", user="bob", tres="cpu=1,gres/gpu=1",
              start_time=datetime.now())
    uid = pwd.getpwnam(job.user).pw_uid
    with tempfile.TemporaryDirectory(prefix="bench-root-reads-") as tmp:
        big = write_big(Path(tmp) / "big.jsonl", args.mib)
        clean = make_runs(Path(tmp) / "clean", args.runs, None, uid)
        hostile = make_runs(Path(tmp) / "hostile", args.runs, big, uid)
        now = time.time()
        t_clean = timed(lambda: [read_run(r, job, site, now) for r in clean], args.repeat)
        t_hostile = timed(lambda: [read_run(r, job, site, now) for r in hostile], args.repeat)
        t_whole = timed(lambda: [read_jsonl(r.attempts_path) for r in hostile[:2]], 1) * len(hostile) / 2
    print(f"exporter run reads, {args.runs} runs: clean {t_clean:.3f} s, hostile ({args.mib} MiB hard-linked "
          f"attempts.jsonl) {t_hostile:.3f} s, ratio {t_hostile / t_clean:.2f}x")
    print(f"the old whole-file parse of those hostile attempts.jsonl (2 timed, scaled to {args.runs}): "
          f"{t_whole:.1f} s, {t_whole / t_clean:.0f}x clean")


if __name__ == "__main__":
    main()
