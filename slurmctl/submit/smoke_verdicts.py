"""Root's record of smoke jobs that passed: the only evidence the `require_smoke` gate accepts.

A user owns everything their smoke job writes (run dir, attempts.jsonl, drain.ack) and can name any
job of their own like a smoke run. What a user cannot write is this spool: the node epilog (root)
adds a verdict for a job only when Slurm's own facts say so -- the job's user and partition from
slurmd's environment, its exit code 0:0, its name (sealed squeue) carrying the code+config hash, and
the batch script slurmctld stored being a rendered smoke script. The gate then still asks sacct that
the job ended COMPLETED 0:0 (an epilog of a cancelled job also sees exit code 0).

Layout: ``<dir>/<user>/<code hash>.<job id>.json``, directories root's 0755, verdicts 0644: nobody
but root writes any. Everyone may read them: a verdict says nothing that squeue and sacct do not
already show every user (job id, user, partition, the hash in the job name); users of one Unix group
share it, so a group mode would hide nothing either. The gate reads only the caller's own.

Standard library only: the epilog runs it under the system python3.
"""

from __future__ import annotations

import json
import os
import re
import stat

DEFAULT_DIR = "/var/spool/slurmctl/smoke-verdicts"
MAX_VERDICT_BYTES = 4096
MAX_VERDICTS_READ = 200  # per (user, hash): a user's smoke runs of one code hash, newest first
MAX_SCRIPT_BYTES = 1024 * 1024

CODE_HASH_RE = re.compile(r"[0-9a-f]{16}")
# The smoke run's name (smoke.smoke_name + run id suffix): <name>-smoke-<code hash>-<YYYYMMDD>-<4 hex>
SMOKE_JOB_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]*-smoke-(?P<hash>[0-9a-f]{16})-\d{8}-[0-9a-f]{4}")
# Lines every rendered smoke script has (sbatch_templates/torchrun.sbatch.j2 and the templates that
# extend it): the smoke switch and the runtime's end-of-attempt verdict, whose exit code Slurm records.
SMOKE_SCRIPT_LINES = (b"export SLURMCTL_SMOKE=1", b'"$PY" -m slurmctl.runtime.attempt end --exit-code "$rc"')


def verdict_name(code_hash: str, job_id: int) -> str:
    if not CODE_HASH_RE.fullmatch(code_hash):
        raise ValueError(f"not a code hash: {code_hash!r}")
    return f"{code_hash}.{int(job_id)}.json"


def is_smoke_script(script: bytes) -> bool:
    lines = {line.strip() for line in script.splitlines()}
    return all(required in lines for required in SMOKE_SCRIPT_LINES)


def _root_owned_not_writable(st: os.stat_result) -> bool:
    return st.st_uid == 0 and not st.st_mode & 0o022


def read_verdicts(directory: str, user: str, code_hash: str) -> list[dict]:
    """The verdicts root wrote for (user, code hash), newest job first; [] when there are none or
    anything on the way is not root's and closed to writers (a planted directory counts as none)."""
    if not CODE_HASH_RE.fullmatch(code_hash) or not user or "/" in user or user in (".", ".."):
        return []
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        top = os.open(directory, flags)
    except OSError:
        return []
    try:
        if not _root_owned_not_writable(os.fstat(top)):
            return []
        try:
            user_fd = os.open(user, flags, dir_fd=top)
        except OSError:
            return []
    finally:
        os.close(top)
    verdicts = []
    try:
        if not _root_owned_not_writable(os.fstat(user_fd)):
            return []
        names = [n for n in os.listdir(user_fd) if n.startswith(code_hash + ".") and n.endswith(".json")]
        job_ids = sorted((int(n.split(".")[1]) for n in names if n.split(".")[1].isdigit()), reverse=True)
        for job_id in job_ids[:MAX_VERDICTS_READ]:
            verdict = _read_one(user_fd, verdict_name(code_hash, job_id))
            if verdict and verdict.get("user") == user and verdict.get("code_hash") == code_hash \
                    and verdict.get("job_id") == job_id:
                verdicts.append(verdict)
    finally:
        os.close(user_fd)
    return verdicts


def _read_one(dir_fd: int, name: str) -> dict | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _root_owned_not_writable(st):
            return None
        data = os.read(fd, MAX_VERDICT_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_VERDICT_BYTES:
        return None
    try:
        verdict = json.loads(data)
    except ValueError:
        return None
    return verdict if isinstance(verdict, dict) else None
