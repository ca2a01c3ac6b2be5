"""The requeue expediter: once a requeued job waits in PENDING (BeginTime), set its StartTime=now (and
add nodes to its ExcNodeList), instead of Slurm's wait of the credential lifetime. Started detached by
the batch script (slurmctl.runtime.attempt's `end` and `drain-signal`) or, under proctrack/cgroup, by
the epilog (slurmctl.ops.hooks.epilog):

    python -I -c BOOTSTRAP SECONDS PACKAGE_ROOT --job REF [--limit S] [--exclude NODES] [--shape N,T]

After a node loss `end` shrinks the job to its surviving nodes and requeues it held (`--shape`): the
expediter gives the pending job back its node and task counts (the owner may raise them up to what
the job was submitted with), then releases it; if that fails the job stays held, never runs smaller.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from slurmctl.errors import SlurmctlError
from slurmctl.slurm.client import SlurmClient, job_ref_from_env

# How long it waits for the requeued job to reach PENDING: Slurm's own requeue after a node loss (the
# batch script waits up to 600 s for it, runtime.attempt), KillWait and the epilog.
EXPEDITE_LIMIT_SECONDS = 600.0 + 300.0
_TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
             "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT"}


# The expediter's interpreter start: isolated (-I: no user site-packages or .pth, no PYTHON*
# variables, no current directory on the path), so nothing but this package and the system's own
# site-packages runs; SIGALRM's default action ends it at the hard bound whatever it is doing.
_EXPEDITER_BOOTSTRAP = ("import signal, sys; signal.alarm(int(sys.argv[1])); sys.path.insert(0, sys.argv[2]); "
                        "from slurmctl.runtime.expediter import main; sys.exit(main(sys.argv[3:]))")


def expediter_argv(job: int | str, exclude: list[str] | None = None, limit: float = EXPEDITE_LIMIT_SECONDS,
                   python: str = sys.executable, shape: tuple[int, int | None] | None = None) -> list[str]:
    """The command line of the expediter for `job`: `python -I`, this package put on its path
    explicitly, alive `limit` s at most (its own loop) and killed 30 s after that (SIGALRM)."""
    package_root = str(Path(__file__).resolve().parents[2])
    argv = [python, "-I", "-c", _EXPEDITER_BOOTSTRAP, str(int(limit) + 30), package_root,
            "--job", str(job), "--limit", str(int(limit))]
    argv += ["--exclude", ",".join(exclude)] if exclude else []
    return argv + (["--shape", f"{int(shape[0])},{int(shape[1]) if shape[1] else ''}"] if shape else [])


def start_expediter(exclude: list[str] | None = None, shape: tuple[int, int | None] | None = None) -> None:
    """Start the expediter for this job, detached: its own session, reparented to init once this
    process ends, so it outlives the batch script that `scontrol requeue` (or Slurm's own requeue)
    kills -- under proctrack/linuxproc, which follows the process tree. Under proctrack/cgroup the
    job's cgroup is killed whole and the wait stays (docs/node-health.md, "The requeue wait")."""
    argv = expediter_argv(job_ref_from_env(), exclude, shape=shape)
    # It acts on the job from outside, as the user could from a login shell: without the job's
    # SLURM_* variables the epilog does not take it for an orphan of the ending attempt and kill it
    # before the requeue is through (it ends by itself, at the latest after EXPEDITE_LIMIT_SECONDS).
    env = {k: v for k, v in os.environ.items() if k == "SLURM_CONF" or not k.startswith(("SLURM_", "SLURMD_"))}
    try:  # its lines go to the job's log, which it inherits
        # SIGTERM and SIGHUP ignored from its first instruction (a disposition exec keeps): the requeue
        # that follows at once SIGTERMs every process of the job, this one before its main() could
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, env=env,
                         preexec_fn=_ignore_hangup_and_term)
    except OSError as exc:
        print(f"slurmctl: could not start the requeue expediter: {exc}", file=sys.stderr)


def _ignore_hangup_and_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


# slurmd refuses a job's credential issued in the same second as the previous attempt's revocation (whole-second
# timestamps): the requeued job is started this long after its earlier steps were seen ended, never sooner.
SETTLE_SECONDS = 2.0


def expedite_requeue(client: SlurmClient, job: int | str, exclude: list[str], limit: float = EXPEDITE_LIMIT_SECONDS,
                     poll: float = 1.0, shape: tuple[int, int | None] | None = None,
                     settle: float = SETTLE_SECONDS) -> int:
    """Take Slurm's requeue wait out: a requeued batch job goes back to PENDING with BeginTime = now +
    the credential lifetime (121 s by default), set when its epilog ends. The job's owner may move a
    pending job's begin time (and its excluded nodes): StartTime=now lets it start at the next
    scheduling pass. With `shape` (nodes, tasks) the job was shrunk and requeued held: its counts are
    set back first, then it is released. Runs as the job's owner, never root; ends when the job runs
    again, ended, or after `limit` s. Exit code 0 when it expedited the job.

    It waits until every step of the earlier attempt has ended in accounting and then `settle` s more: started
    while a step still winds down on a node, or within the second of its end, slurmd refuses the launch ("Job
    credential revoked") and the job ends FAILED instead of running again."""
    started, deadline, seen_pending, done = time.monotonic(), time.monotonic() + limit, False, False
    retry_at, backoff, said, steps_gone_at = 0.0, poll, "", None
    while time.monotonic() < deadline:
        view = client.requeue_wait(job)
        if view is None or view[0] in _TERMINAL:
            break
        state, reason, excluded = view
        if state == "RUNNING" and seen_pending:
            break
        if state == "PENDING":
            seen_pending = True
            waiting = reason == "BeginTime" or (shape is not None and "held" in reason.lower())
            if waiting and not done and steps_gone_at is None and not client.earlier_steps_running(job):
                steps_gone_at = time.monotonic()
            settled = steps_gone_at is not None and time.monotonic() - steps_gone_at >= settle
            if waiting and not done and settled and time.monotonic() >= retry_at:
                fields: dict[str, str | int] = {}
                if shape:
                    fields["NumNodes"] = shape[0]
                    if shape[1]:
                        fields["NumTasks"] = shape[1]
                fields["StartTime"] = "now"
                if exclude:
                    have = client.hostnames(excluded) if excluded and excluded != "(null)" else []
                    fields["ExcNodeList"] = ",".join(dict.fromkeys([*have, *exclude]))
                try:
                    client.update_job(job, **fields)
                    if shape:
                        client.release(job)
                    done = True
                    print(f"slurmctl: {time.strftime('%H:%M:%S')} job {job}: requeue wait ended "
                          f"({' '.join(f'{k}={v}' for k, v in fields.items())}{', released' if shape else ''}) "
                          f"{time.monotonic() - started:.1f} s after this watcher started", flush=True)
                except SlurmctlError as exc:
                    if exc.message != said:  # the same refusal again is no news
                        print(f"slurmctl: job {job}: could not end the requeue wait: {exc.message}", flush=True)
                        said = exc.message
                    if refusal_is_final(exc.message):
                        print(f"slurmctl: job {job}: Slurm refuses this for good; " + (
                            f"the job stays held: set NumNodes={shape[0]} and release it (`scontrol release "
                            f"{job}`) to run it" if shape else "leaving the requeue wait to Slurm"), flush=True)
                        break
                    backoff = min(max(backoff * 2, 1.0), _EXPEDITE_MAX_BACKOFF_SECONDS)
                    retry_at = time.monotonic() + backoff
        time.sleep(poll)
    return 0 if done else 1


# scontrol's words for a refusal that asking again cannot change: not the owner, no such job, done.
_FINAL_REFUSALS = ("invalid user id", "access/permission denied", "permission denied", "invalid job id",
                   "already completing or completed", "job has already finished")
_EXPEDITE_MAX_BACKOFF_SECONDS = 30.0


def refusal_is_final(message: str) -> bool:
    return any(words in message.lower() for words in _FINAL_REFUSALS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurmctl.runtime.expediter")
    parser.add_argument("--job", default=None)
    parser.add_argument("--exclude", default="")
    parser.add_argument("--limit", type=float, default=EXPEDITE_LIMIT_SECONDS)
    parser.add_argument("--shape", default="", help="NODES,TASKS to give the held job back before releasing it")
    args = parser.parse_args(argv)
    exclude = [n for n in args.exclude.split(",") if n]
    nodes, _, tasks = args.shape.partition(",")
    shape = (int(nodes), int(tasks) if tasks else None) if nodes else None
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the batch script's end must not end it
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return expedite_requeue(SlurmClient(), args.job or job_ref_from_env(), exclude,
                            limit=min(args.limit, EXPEDITE_LIMIT_SECONDS), shape=shape)


if __name__ == "__main__":
    sys.exit(main())
