"""The CLI as a person waits for it: whole processes, side by side with the raw thing it replaces.

    .venv/bin/python benchmarks/cli_whole_process.py [--jobs 1000] [--runs 10000] [--repeat 9]

Started as root it re-runs itself as alice (see _as_user.py); everything below runs as that user:
  - the queue gets --jobs held jobs of its own (name bench17-<pid>; 20 of them are the latest jobs
    of the 20 recent runs), all cancelled at the end, with the jobs the submit rows made;
  - runs live in two temporary runs roots of its own, selected with SLURMCTL_SITE_CONFIG pointing at a
    copy of the site config: one with the 20 recent runs, one with the same 20 plus --runs ended runs
    spread over the past two years;
  - each row runs its two commands alternately (A B, B A, ...) --repeat times; medians and the
    ratio are printed with the goal of the row.

Rows (goals): --help vs `python -c pass` (<= 2.5x); ls and status vs python start + the raw squeue
(<= 3x); queue with the filled queue vs raw squeue (<= 3x); ls with --runs run dirs vs ls with 20
(<= 1.2x); ls with --today-runs run dirs made today (a busy day) vs ls with 20 (<= 1.2x); submit --yes
-- --hold vs python start + `import submitit` + submitit's submit() (<= 1.5x).
The "vs squeue --me" rows put ls, status RUN and status JOBID (one of its plain held jobs) beside the
bare `squeue --me` a user would type instead; their ratio is what a user feels (no goal: python's own
start alone is ~10x a squeue). `--only WORD` runs the rows whose name has WORD (e.g. `--only "squeue --me"`).
Before/after a change: run it twice, PYTHONPATH=<the other checkout> for the first.
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
from datetime import UTC, datetime
from pathlib import Path

from _as_user import bench_user, reexec_as_user

VENV_BIN = Path(sys.executable).parent
SLURMCTL = str(VENV_BIN / "slurmctl")
PYTHON = sys.executable
DAY = 86400

SUBMITIT_SCRIPT = """
import sys
import submitit

executor = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
executor.update_parameters(slurm_partition=sys.argv[2], timeout_min=5, slurm_gpus_per_node=1,
                           name=sys.argv[3], slurm_additional_parameters={"hold": True})
job = executor.submit(print, "hello")
print(job.job_id)
"""


def sh(argv: list[str], env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/tmp")
    if check and result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} -> {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return result


def timed(argv: list[str], env: dict) -> float:
    started = time.perf_counter()
    sh(argv, env)
    return time.perf_counter() - started


def submit_held(name: str, partition: str, comment: str | None = None) -> int:
    argv = ["sbatch", "--parsable", "--hold", "-p", partition, "-J", name, "-t", "5", "-o", "/dev/null",
            *([f"--comment={comment}"] if comment else []), "--wrap", "true"]
    return int(sh(argv).stdout.strip().split(";")[0])


def ended_job(name: str, partition: str, comment: str | None = None) -> int:
    """A job of its own that runs `true` and ends at once."""
    argv = ["sbatch", "--parsable", "-p", partition, "-J", name, "-t", "1", "-o", "/dev/null",
            *([f"--comment={comment}"] if comment else []), "--wrap", "true"]
    return int(sh(argv).stdout.strip().split(";")[0])


def wait_ended(job_ids: list[int], timeout: float = 120) -> None:
    """Until accounting has each of them as ended (the queue may still list them for MinJobAge)."""
    deadline = time.monotonic() + timeout
    ids = ",".join(map(str, job_ids))
    while time.monotonic() < deadline:
        states = sh(["sacct", "-n", "-X", "-P", "-j", ids, "-o", "State"], check=False).stdout.split()
        if len(states) >= len(job_ids) and all(s in {"COMPLETED", "FAILED", "CANCELLED"} for s in states):
            return
        time.sleep(1)
    raise SystemExit(f"jobs {ids} did not end within {timeout:.0f} s")


def make_run(root: Path, run_id: str, created: float, job_id: int, partition: str) -> None:
    path = root / run_id
    path.mkdir(mode=0o700)
    name = run_id.rsplit("-", 2)[0]
    (path / "run.json").write_text(json.dumps({"run_id": run_id, "name": name, "created": created,
                                               "partition": partition,  # and, as submit records it:
                                               "checkpoint_dir": str(path / "checkpoints")}))
    (path / "run.yaml").write_text(f"name: {name}\nentrypoint: train.py\npartition: {partition}\n"
                                   "gpus_per_node: 1\ntime_limit: 5m\n")
    (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": job_id, "time": created}) + "\n")


def run_id_for(name: str, created: float, n: int) -> str:
    return f"{name}-{datetime.fromtimestamp(created, UTC):%Y%m%d}-{n % 65536:04x}"


def runs_root_config(base: dict, root: Path, path: Path) -> Path:
    import yaml

    (root / bench_user().pw_name).mkdir(parents=True, mode=0o700)
    path.write_text(yaml.safe_dump({**base, "runs_root": str(root)}))
    return path


def compare(rows: list[dict], repeat: int) -> None:
    """Every row's commands in turn, alternating which goes first, `repeat` rounds."""
    for round_ in range(repeat):
        for row in rows:
            pair = list(row["commands"].items())
            for label, (argv, env) in (pair if round_ % 2 == 0 else reversed(pair)):
                row["times"].setdefault(label, []).append(timed(argv, env))


def main() -> None:
    if os.geteuid() == 0:  # byte-code as an install leaves it: the user cannot write __pycache__ in the repo
        import compileall

        import slurmctl

        compileall.compile_dir(os.path.dirname(slurmctl.__file__), quiet=1)
    reexec_as_user()
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000, help="held jobs in the queue")
    parser.add_argument("--runs", type=int, default=10000, help="ended run dirs of the large runs root")
    parser.add_argument("--today-runs", type=int, default=1000, help="ended run dirs made today (a busy day)")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--partition", default="l4-dev")
    parser.add_argument("--only", default="", help="only the rows whose name contains this")
    args = parser.parse_args()

    import yaml

    from slurmctl.config.locate import find_site_config
    from slurmctl.slurm.client import QUEUE
    from slurmctl.slurm.parsing import new_seal

    tag = f"bench17-{os.getpid()}"
    tmp = Path(tempfile.mkdtemp(prefix=f"{tag}-"))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMCTL_")}
    base_env["SLURMCTL_USER_CONFIG"] = str(tmp / "no-user-config.yaml")  # local Slurm, whatever ~/.config says
    site = yaml.safe_load(find_site_config().read_text())
    small_cfg = runs_root_config(site, tmp / "runs-20", tmp / "site-20.yaml")
    large_cfg = runs_root_config(site, tmp / f"runs-{args.runs}", tmp / f"site-{args.runs}.yaml")
    small_env = {**base_env, "SLURMCTL_SITE_CONFIG": str(small_cfg)}
    large_env = {**base_env, "SLURMCTL_SITE_CONFIG": str(large_cfg)}
    today_cfg = runs_root_config(site, tmp / "runs-today", tmp / "site-today.yaml")
    today_env = {**base_env, "SLURMCTL_SITE_CONFIG": str(today_cfg)}
    user = bench_user().pw_name
    job_ids: list[int] = []
    try:
        now = time.time()
        started = time.perf_counter()
        recent = []
        for i in range(20):  # the 20 recent runs: created over the last 20 hours, each with a held job
            run_id = run_id_for("bench17", now - 3600 * (20 - i), i)
            job_ids.append(submit_held(run_id, args.partition, comment=f"slurmctl:{run_id}"))
            recent.append((run_id, now - 3600 * (20 - i), job_ids[-1]))
        while len(job_ids) < args.jobs:
            job_ids.append(submit_held(tag, args.partition))
        print(f"queue: {len(job_ids)} held jobs of {user}'s submitted in {time.perf_counter() - started:.1f} s")
        for root in (tmp / "runs-20" / user, tmp / f"runs-{args.runs}" / user):
            for run_id, created, job in recent:
                make_run(root, run_id, created, job, args.partition)
        started = time.perf_counter()
        old_root = tmp / f"runs-{args.runs}" / user
        for i in range(args.runs):  # ended long ago: spread over the two years before the recent ones
            created = now - 2 * DAY - i * (730 * DAY / args.runs)
            make_run(old_root, run_id_for("ended", created, i), created, 100 + i, args.partition)
        print(f"runs: 20 in {tmp / 'runs-20'}; 20 + {args.runs} in {old_root.parent} "
              f"(made in {time.perf_counter() - started:.1f} s)")
        busy_root = tmp / "runs-today" / user
        for run_id, created, job in recent:
            make_run(busy_root, run_id, created, job, args.partition)
        for i in range(args.today_runs):  # a busy day: one run every 10 s, each ended 5 min after it began
            created = now - 60 - i * 10
            run_id = run_id_for("today", created, i)
            make_run(busy_root, run_id, created, 100 + i, args.partition)
            os.utime(busy_root / run_id, (created + 300, created + 300))  # its dir last changed as it ended

        work = tmp / "work"
        work.mkdir()
        (work / "train.py").write_text("print('hello')\n")
        (work / "run.yaml").write_text(f"name: {tag}\nentrypoint: train.py\npartition: {args.partition}\n"
                                       "gpus_per_node: 1\ntime_limit: 5m\n")
        submitit_script = tmp / "submitit_submit.py"
        submitit_script.write_text(SUBMITIT_SCRIPT)
        squeue = ["squeue", "-h", *QUEUE.format_argv(new_seal())]
        status_run = recent[-1][0]
        rows = [
            {"name": "--help", "goal": 2.5, "commands": {
                "slurmctl": ([SLURMCTL, "--help"], small_env), "python": ([PYTHON, "-c", "pass"], small_env)}},
            {"name": "ls (20 runs)", "goal": 3.0, "baseline": ("python", "squeue"), "commands": {
                "slurmctl": ([SLURMCTL, "ls"], small_env), "squeue": (squeue, small_env),
                "python": ([PYTHON, "-c", "pass"], small_env)}},
            {"name": "status RUN", "goal": 3.0, "baseline": ("python", "squeue"), "commands": {
                "slurmctl": ([SLURMCTL, "status", status_run], small_env), "squeue": (squeue, small_env),
                "python": ([PYTHON, "-c", "pass"], small_env)}},
            {"name": f"queue ({len(job_ids)} jobs)", "goal": 3.0, "commands": {
                "slurmctl": ([SLURMCTL, "queue"], small_env), "squeue": (squeue, small_env)}},
            {"name": f"ls ({args.runs} + 20 run dirs vs 20)", "goal": 1.2, "commands": {
                "slurmctl": ([SLURMCTL, "ls"], large_env), "ls-20": ([SLURMCTL, "ls"], small_env)}},
            {"name": f"ls ({args.today_runs} run dirs of today + 20 vs 20)", "goal": 1.2, "commands": {
                "slurmctl": ([SLURMCTL, "ls"], today_env), "ls-20": ([SLURMCTL, "ls"], small_env)}},
            {"name": "submit --yes -- --hold", "goal": 1.5, "commands": {
                "slurmctl": ([SLURMCTL, "submit", str(work / "run.yaml"), "--yes", "--", "--hold"], small_env),
                "submitit": ([PYTHON, str(submitit_script), str(tmp / "submitit"), args.partition, tag],
                             small_env)}},
        ]
        me = (["squeue", "--me"], small_env)  # what the user would type instead
        plain_job = job_ids[-1]  # one of its own held plain jobs (no run)
        # one plain job and one run of its own that ran and ended (accounting answers for them)
        ended_run = run_id_for("bench17-ended", now, 99)
        ended = [ended_job(tag, args.partition), ended_job(ended_run, args.partition, f"slurmctl:{ended_run}")]
        job_ids += ended
        make_run(tmp / "runs-20" / user, ended_run, now, ended[1], args.partition)
        wait_ended(ended)
        rows += [
            {"name": "ls vs squeue --me", "goal": None, "commands": {
                "slurmctl": ([SLURMCTL, "ls"], small_env), "squeue --me": me}},
            {"name": "status RUN vs squeue --me", "goal": None, "commands": {
                "slurmctl": ([SLURMCTL, "status", status_run], small_env), "squeue --me": me}},
            {"name": "status JOBID (plain) vs squeue --me", "goal": None, "commands": {
                "slurmctl": ([SLURMCTL, "status", str(plain_job)], small_env), "squeue --me": me}},
            {"name": "status RUN (ended) vs squeue --me", "goal": None, "commands": {
                "slurmctl": ([SLURMCTL, "status", ended_run], small_env), "squeue --me": me}},
            {"name": "status JOBID (ended plain) vs squeue --me", "goal": None, "commands": {
                "slurmctl": ([SLURMCTL, "status", str(ended[0])], small_env), "squeue --me": me}},
        ]
        rows = [row for row in rows if args.only in row["name"]]
        for row in rows:
            row["times"] = {}
        for row in rows:  # one warm-up round (page cache, slurmctld's user cache), not counted
            for argv, env in row["commands"].values():
                timed(argv, env)
        compare(rows, args.repeat)

        print(f"\nmedians of {args.repeat} whole-process runs each, interleaved, as {user}:")
        print(f"{'command':<42} {'slurmctl':>10} {'baseline':>10} {'ratio':>7} {'goal':>6}  met")
        for row in rows:
            medians = {label: statistics.median(t) for label, t in row["times"].items()}
            others = [label for label in medians if label != "slurmctl"]
            parts = row.get("baseline", others)
            baseline = sum(medians[p] for p in parts)
            ratio = medians["slurmctl"] / baseline
            what = " + ".join(f"{p} {medians[p] * 1000:.0f}" for p in parts) if len(parts) > 1 else parts[0]
            goal, met = (f"{row['goal']:>5.1f}x", "yes" if ratio <= row["goal"] else "NO") if row["goal"] else \
                ("    -", "  -")
            print(f"{row['name']:<42} {medians['slurmctl'] * 1000:>8.0f}ms {baseline * 1000:>8.0f}ms "
                  f"{ratio:>6.2f}x {goal}  {met}   ({what})")
    finally:
        # the jobs the submit rows made: slurmctl's carry the run id as comment, submitit's the tag
        mine = sh(["squeue", "--me", "-h", "-o", "%i %j %k"], check=False).stdout.split("\n")
        made = {int(line.split()[0]) for line in mine if line.strip() and
                (f" {tag}" in line or f"slurmctl:{tag}-" in line) and line.split()[0].isdigit()}
        ids = sorted(set(job_ids) | made)
        for at in range(0, len(ids), 500):
            sh(["scancel", *map(str, ids[at:at + 500])], check=False)
        print(f"cancelled {len(ids)} jobs of {user}'s; removing {tmp}")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
