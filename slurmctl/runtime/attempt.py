"""Batch-shell hooks: record an attempt's start and end in attempts.jsonl.

Called by the rendered sbatch script as ``python -m slurmctl.runtime.attempt start|end``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

from ..fsutil import append_jsonl


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurmctl.runtime.attempt")
    parser.add_argument("event", choices=["start", "end"])
    parser.add_argument("--exit-code", type=int, default=None)
    args = parser.parse_args(argv)
    run_dir = os.environ.get("SLURMCTL_RUN_DIR")
    if not run_dir:
        print("slurmctl: SLURMCTL_RUN_DIR is not set; not inside a slurmctl job", file=sys.stderr)
        return 2
    run_path = Path(run_dir)
    record = {
        "event": args.event,
        "time": time.time(),
        "job_id": int(os.environ.get("SLURM_JOB_ID", "0")),
        "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),
        "nodes": os.environ.get("SLURM_JOB_NODELIST", ""),
        "batch_host": socket.gethostname(),
    }
    if args.event == "start":
        # A fresh attempt must not inherit the previous attempt's drain handshake.
        for name in ("drain.request", "drain.ack"):
            (run_path / name).unlink(missing_ok=True)
        print(f"slurmctl: attempt {record['restart_count']} of job {record['job_id']} "
              f"starting on {record['nodes']}", file=sys.stderr)
    else:
        record["exit_code"] = args.exit_code
        record["drain_requested"] = (run_path / "drain.request").exists()
        record["drain_acked"] = (run_path / "drain.ack").exists()
        print(f"slurmctl: attempt ended with exit code {args.exit_code}", file=sys.stderr)
    append_jsonl(run_path / "attempts.jsonl", record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
