#!/usr/bin/env python3
"""Slurm Prolog hook for slurmctl (runs as root on each allocated node, NO PATH in env).

Today it only records that it ran: one JSON line appended to
``$SLURMCTL_LOCAL_DIR/log/hooks.jsonl`` (override with ``SLURMCTL_HOOKS_LOG``).
It must never fail: a non-zero exit drains the node and requeues the job held.
Standard library only.
"""
import datetime
import json
import os
import sys
import time

HOOK = "prolog"
DEFAULT_STATE_DIR = "/var/lib/slurmctl-local"
FIELDS = {
    "job_id": "SLURM_JOB_ID",
    "node": "SLURMD_NODENAME",
    "context": "SLURM_SCRIPT_CONTEXT",
    "user": "SLURM_JOB_USER",
    "uid": "SLURM_JOB_UID",
    "account": "SLURM_JOB_ACCOUNT",
    "partition": "SLURM_JOB_PARTITION",
    "num_nodes": "SLURM_JOB_NUM_NODES",
    "restart_count": "SLURM_JOB_RESTART_COUNT",
    "comment": "SLURM_JOB_COMMENT",
    "gpus": "SLURM_JOB_GPUS",
    "cuda_visible_devices": "CUDA_VISIBLE_DEVICES",
}


def hooks_log_path(env):
    explicit = env.get("SLURMCTL_HOOKS_LOG")
    if explicit:
        return explicit
    state = env.get("SLURMCTL_LOCAL_DIR") or DEFAULT_STATE_DIR
    return os.path.join(state, "log", "hooks.jsonl")


def build_record(env):
    now = time.time()
    record = {
        "hook": HOOK,
        "time": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(),
        "ts": round(now, 3),
    }
    for key, var in FIELDS.items():
        record[key] = env.get(var)
    return record


def append_line(path, record):
    line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        try:
            import fcntl
            fcntl.flock(fd, fcntl.LOCK_EX)
        except Exception:
            pass
        os.write(fd, line)  # one write with O_APPEND: lines from parallel slurmds don't interleave
    finally:
        os.close(fd)


def main(env=None):
    env = os.environ if env is None else env
    try:
        append_line(hooks_log_path(env), build_record(env))
    except Exception as exc:  # never fail the hook
        try:
            sys.stderr.write("slurmctl %s: could not log: %r\n" % (HOOK, exc))
        except Exception:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
