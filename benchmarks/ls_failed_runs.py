"""`slurmctl ls` with failed runs, as a person waits for it: the first `ls` after the runs failed
(every failed run's log diagnosed: no diagnosis cache) against the next ones (the cached diagnosis
read back), side by side with the raw `squeue --me`.

    .venv/bin/python benchmarks/ls_failed_runs.py [--runs 8] [--repeat 7]

Started as root it re-runs itself as alice (see _as_user.py). It submits --runs jobs of its own that
print 3,000 progress lines and fail with a Python traceback, each the latest job of a run in a
temporary runs root of its own (selected with SLURMCTL_SITE_CONFIG pointing at a copy of the site
config), waits for them to end, then times `ls` cold (the cache files removed first), `ls` warm and
`squeue --me`, alternating, --repeat times; it removes its runs root at the end (its jobs have ended).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _as_user import bench_user, reexec_as_user

SLURMCTL = str(Path(sys.executable).parent / "slurmctl")
FAILING = ("import sys\nfor i in range(3000):\n    print(f'step {i} loss {1 / (i + 1):.4f}')\n"
           "def load(cfg):\n    return cfg['lr']\nload({})\n")


def sh(argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/tmp")
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} -> {result.returncode}\n{result.stderr[-2000:]}")
    return result


def timed(argv: list[str], env: dict) -> float:
    started = time.perf_counter()
    sh(argv, env)
    return time.perf_counter() - started


def main() -> None:
    if os.geteuid() == 0:  # byte-code as an install leaves it: the user cannot write __pycache__ in the repo
        import compileall

        import slurmctl

        compileall.compile_dir(os.path.dirname(slurmctl.__file__), quiet=1)
    reexec_as_user()
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--partition", default="l4-dev")
    args = parser.parse_args()

    import yaml

    from slurmctl.config.locate import find_site_config
    from slurmctl.rundir import DIAGNOSIS_CACHE

    user = bench_user().pw_name
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-lsfail-{os.getpid()}-"))
    root = tmp / "runs" / user
    root.mkdir(parents=True, mode=0o700)
    site = yaml.safe_load(find_site_config().read_text())
    (tmp / "site.yaml").write_text(yaml.safe_dump({**site, "runs_root": str(tmp / "runs")}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMCTL_")}
    env.update(SLURMCTL_SITE_CONFIG=str(tmp / "site.yaml"), SLURMCTL_USER_CONFIG=str(tmp / "none.yaml"))
    (tmp / "fail.py").write_text(FAILING)
    try:
        jobs = []
        for i in range(args.runs):
            run_id = f"lsfail-20261201-{os.getpid() % 4096:03x}{i}"
            path = root / run_id
            (path / "logs").mkdir(parents=True)
            (path / "run.json").write_text(json.dumps({"run_id": run_id, "name": "lsfail", "created": time.time()}))
            (path / "run.yaml").write_text(f"name: lsfail\nentrypoint: fail.py\npartition: {args.partition}\n"
                                           "gpus_per_node: 0\ntime_limit: 5m\n")
            job = int(sh(["sbatch", "--parsable", "-p", args.partition, "-t", "5", "-J", run_id,
                          f"--comment=slurmctl:{run_id}", "-o", str(path / "logs" / "%j.out"),
                          "--wrap", f"{sys.executable} {tmp / 'fail.py'}"]).stdout.strip().split(";")[0])
            (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": job}) + "\n")
            jobs.append(job)
        deadline = time.monotonic() + 600
        while sh(["squeue", "-h", "-j", ",".join(map(str, jobs)), "-o", "%i"]).stdout.strip():
            if time.monotonic() > deadline:
                raise SystemExit("the failing jobs did not end within 10 minutes")
            time.sleep(3)
        time.sleep(5)  # accounting's record of the last ones

        def cold() -> None:
            for path in root.iterdir():
                (path / DIAGNOSIS_CACHE).unlink(missing_ok=True)

        rows = {"ls, first after the failures": [], "ls, again (cached diagnosis)": [], "squeue --me": []}
        shown = sh([SLURMCTL, "ls"], env).stdout
        assert shown.count("unknown") + shown.count("missing_config") + shown.count("failed") >= args.runs, shown
        for round_ in range(args.repeat):
            order = list(rows) if round_ % 2 == 0 else list(reversed(rows))
            for label in order:
                if label.startswith("ls, first"):
                    cold()
                    rows[label].append(timed([SLURMCTL, "ls"], env))
                elif label.startswith("ls, again"):
                    sh([SLURMCTL, "ls"], env)  # makes sure the cache is there, not timed
                    rows[label].append(timed([SLURMCTL, "ls"], env))
                else:
                    rows[label].append(timed(["squeue", "--me"], env))
        medians = {label: statistics.median(t) for label, t in rows.items()}
        raw = medians["squeue --me"]
        print(f"medians of {args.repeat} whole-process runs each, interleaved, as {user}, "
              f"{args.runs} failed runs of 3,000-line logs:")
        for label, m in medians.items():
            print(f"  {label:<32} {m * 1000:>7.0f} ms  {m / raw:>6.1f}x squeue")
        first, again = medians["ls, first after the failures"], medians["ls, again (cached diagnosis)"]
        print(f"  cached / first: {again / first:.2f}x ({(first - again) * 1000:.0f} ms saved per ls)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
