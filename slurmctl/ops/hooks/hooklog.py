"""One JSON line per hook run in the hooks log: the evidence that slurmd really invoked us."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

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
    "exit_code": "SLURM_JOB_EXIT_CODE",  # raw wait status; 0 for cancelled jobs
    "exit_code2": "SLURM_JOB_EXIT_CODE2",
}


def hooks_log_path(env) -> str:
    explicit = env.get("SLURMCTL_HOOKS_LOG")
    if explicit:
        return explicit
    state = env.get("SLURMCTL_LOCAL_DIR") or DEFAULT_STATE_DIR
    return os.path.join(state, "log", "hooks.jsonl")


def log_hook(env, hook: str, started: float, **extra) -> None:
    """Append one line (one O_APPEND write, so parallel slurmds never interleave); never raises."""
    now = time.time()
    record = {"hook": hook, "ts": round(now, 3), "ms": round((time.monotonic() - started) * 1000, 1),
              "time": datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat()}
    record.update({key: env.get(var) for key, var in FIELDS.items() if env.get(var) is not None})
    record.update(extra)
    try:
        path = hooks_log_path(env)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
        try:
            os.fchmod(fd, 0o640)  # names every user's jobs and nodes: operators (root's group) only
            os.write(fd, (json.dumps(record, sort_keys=True, default=str) + "\n").encode())
        finally:
            os.close(fd)
    except Exception as exc:  # noqa: BLE001 - logging must never fail the hook
        print(f"slurmctl {hook}: could not write the hooks log: {exc!r}", file=sys.stderr)
