"""`python -m slurmctl.notify EVENT`: send the run's message for EVENT, as the calling user.

    started                       the job script, after `attempt start` (started or recovered)
    ended                         the job script, after `attempt end` decided to stop (failed or finished)
    stalled --detail TEXT         the watchdog, when it asks a stalled training to drain
    pending --job-id J --after S  left behind by submit: one look at the job S seconds later

The run is $SLURMCTL_RUN_DIR (or --run-dir); its notify settings are run.json's, frozen at submit. A
run without them sends nothing. Never fails the caller: every problem is printed and the exit is 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from slurmctl.notify import events
from slurmctl.notify.journal import deliver


def _deliver(run, message) -> None:
    settings = run.meta.get("notify")
    if not settings or message is None:
        return
    record = deliver(run.path, run.run_id, settings, message, Path(settings.get("secrets_file") or
                                                                   "~/.config/slurmctl/secrets.env").expanduser())
    if record is None:
        return
    went = [c["channel"] for c in record.get("channels", []) if c.get("error") is None]
    failed = [f"{c['channel'] or 'config'} ({c['error']})" for c in record.get("channels", []) if c.get("error")]
    print(f"slurmctl: {message.event} message " + (f"sent to {', '.join(went)}" if went else "NOT sent")
          + (f"; failed: {'; '.join(failed)}" if failed else "")
          + (f"; {record['suppressed']}" if record.get("suppressed") else ""), file=sys.stderr, flush=True)


def _started(run) -> bool:
    return any(e.get("event") == "start" for e in events.since_submit(run.events()))


def _pending(run, job_id: int, after: float, poll: float = 15.0) -> None:
    """Wait `after` s, leaving as soon as the job starts (its run dir says so: no Slurm query)."""
    deadline = time.monotonic() + after
    while (left := deadline - time.monotonic()) > 0:
        if _started(run):
            return  # it started (a sweep element's start carries a job id of its own)
        time.sleep(min(poll, left))
    if _started(run):
        return
    from slurmctl.observe.explain import explain_reason  # why: the watcher mostly sleeps and exits on start
    from slurmctl.slurm.client import SlurmClient  # why: the same

    job = SlurmClient().jobs([job_id]).get(job_id)
    if job is None or job.state != "PENDING":
        return
    explained = explain_reason(job.reason)
    waited = time.time() - job.submit_time.timestamp() if job.submit_time else after
    _deliver(run, events.pending_message(run, job_id, waited, job.reason,
                                         explained.headline if explained else job.reason))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurmctl.notify")
    parser.add_argument("event", choices=["started", "ended", "stalled", "pending"])
    parser.add_argument("--run-dir", default=os.environ.get("SLURMCTL_RUN_DIR"))
    parser.add_argument("--detail", default="no progress")
    parser.add_argument("--job-id", type=int)
    parser.add_argument("--after", type=float, default=1800.0)
    args = parser.parse_args(argv)
    if not args.run_dir:
        print("slurmctl notify: no run dir (SLURMCTL_RUN_DIR or --run-dir)", file=sys.stderr)
        return 0
    run = events.run_at(args.run_dir)
    try:
        if args.event == "started":
            _deliver(run, events.started_message(run))
        elif args.event == "ended":
            _deliver(run, events.ended_message(run))
        elif args.event == "stalled":
            _deliver(run, events.stalled_message(run, os.environ.get("SLURM_JOB_ID", "?"),
                                                 os.environ.get("SLURM_RESTART_COUNT", "0"), args.detail))
        elif args.job_id:
            _pending(run, args.job_id, args.after)
    except Exception as exc:  # noqa: BLE001 - a message must never fail the job
        print(f"slurmctl: could not send the {args.event} message: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
