"""The caller's own Slurm jobs by id, and the caller's jobs that are no run of the platform.

Whose job it is is decided on the numeric uid Slurm prints (squeue %U, sacct UID): the controller
sets it from the submitter's credentials, no user writes it. Only fixed-format fields are asked for
in the ownership query, so a job name or comment holding newlines or our separator cannot forge
another job's line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from slurmctl.durations import parse_slurm_duration, parse_slurm_timestamp
from slurmctl.errors import RunNotFound, RunNotOwned
from slurmctl.slurm.parsing import SEP
from slurmctl.slurm.records import RUN_COMMENT_PREFIX, Job

_UID_RE = re.compile(r"[^()]*\((\d+)\)")


def _owner_uid(client, job_id: int) -> int | None:
    """The uid of job `job_id` (squeue while it is queued or running, else sacct); None if unknown."""
    result = client._run(["squeue", "-h", "-j", str(job_id), "-o", f"%A{SEP}%U"], check=False)
    for line in result.stdout.splitlines() if result.returncode == 0 else []:
        jid, _, uid = line.partition(SEP)
        if jid == str(job_id) and uid.isdigit():
            return int(uid)
    # An ended job leaves squeue at once but stays with the controller for MinJobAge: ask it before
    # accounting, which lags behind and, after job ids were reset, may still hold an older job of
    # that id (another user's). UserId=name(uid): a line with a key twice is refused (job_info).
    info = client.job_info(job_id)
    if info is not None:
        uid = _UID_RE.fullmatch(info.raw.get("UserId", ""))
        return int(uid.group(1)) if uid else None
    result = client._run(["sacct", "-n", "-P", "-X", "-a", "--duplicates", f"--delimiter={SEP}", "-j", str(job_id),
                          "-o", "JobIDRaw,UID,Submit"], check=False)
    rows = []
    for line in result.stdout.splitlines() if result.returncode == 0 else []:
        values = line.split(SEP)
        if len(values) == 3 and values[0] == str(job_id) and values[1].isdigit():
            rows.append((values[2], int(values[1])))
    return max(rows)[1] if rows else None  # the newest job of that id (ISO times sort as text)


def owned_job_id(client, job_id: int, uid: int | None = None) -> int:
    """`job_id` when Slurm knows it and it is the caller's; RunNotFound / RunNotOwned otherwise."""
    uid = os.geteuid() if uid is None else uid
    owner = _owner_uid(client, job_id)
    if owner is None:
        raise RunNotFound(f"Slurm knows no job {job_id} (neither the queue nor accounting).",
                          "Check the id with `squeue --me` or `sacct`; `slurmctl ls` lists your runs and jobs.")
    if owner != uid:
        raise RunNotOwned(f"job {job_id} is not yours.",
                          "slurmctl only shows and acts on your own jobs; `slurmctl ls` lists them.")
    return job_id


@dataclass
class PlainJobRow:
    """One of the caller's queued or running jobs that is no run of the platform (ls)."""

    job_id: str  # '<array>_<task>' for an array task, as squeue prints it
    state: str
    partition: str
    num_nodes: int
    elapsed: str
    name: str

    def to_dict(self) -> dict:
        return {"kind": "sbatch", "run_id": None, **self.__dict__}


def my_plain_jobs(client, uid: int | None = None) -> list[PlainJobRow]:
    """The caller's active jobs without a run comment, one `squeue --me`. The uid column is checked
    again (a remote login node's `--me` is whoever logged in); the name is the last field and the
    comment the one before it, both the caller's own text."""
    uid = os.geteuid() if uid is None else uid
    fields = ["%i", "%U", "%T", "%P", "%D", "%M", "%k", "%j"]
    result = client._run(["squeue", "-h", "-r", "--me", "-o", SEP.join(fields)])
    rows = []
    for line in result.stdout.splitlines():
        values = line.split(SEP, len(fields) - 1)
        if len(values) != len(fields) or not values[1].isdigit() or not values[0].replace("_", "").isdigit():
            continue  # a continuation of a name or comment holding a newline
        job_id, owner, state, partition, nodes, elapsed, comment, name = values
        if int(owner) != uid or comment.startswith(RUN_COMMENT_PREFIX):
            continue
        rows.append(PlainJobRow(job_id, state, partition, int(nodes) if nodes.isdigit() else 0, elapsed, name))
    return rows


_HISTORY_FIELDS = ["JobIDRaw", "UID", "Submit", "Start", "End", "State", "Reason", "Partition", "NNodes", "NodeList",
                   "ElapsedRaw", "TimelimitRaw", "ExitCode", "AllocTRES", "Comment", "JobName"]


def _null(text: str | None) -> str:
    return "" if text in {None, "None", "(null)", "Unknown", "N/A"} else text


def _count(text: str) -> int:
    """NumNodes as scontrol prints it: '2', or a range '1-2' while pending."""
    first = text.split("-")[0]
    return int(first) if first.isdigit() else 0


def owned_job(client, job_id: int, uid: int | None = None) -> Job | None:
    """The caller's job `job_id` as Slurm knows it now (RunNotOwned when it is another user's):
    from the controller (`scontrol show job`, which refuses a line with a key twice) while it knows
    the job, else from accounting, the newest job of that id (ids restart when a cluster is rebuilt,
    and accounting keeps the older jobs). Only this job's own line is read, never the whole queue."""
    uid = os.geteuid() if uid is None else uid
    owned_job_id(client, job_id, uid)
    info = client.job_info(job_id)
    if info is not None:
        f = info.raw
        submit, start = parse_slurm_timestamp(f.get("SubmitTime", "")), parse_slurm_timestamp(f.get("StartTime", ""))
        return Job(job_id=job_id, name=f.get("JobName", ""), state=f.get("JobState", ""),
                   reason=_null(f.get("Reason")), partition=f.get("Partition", ""),
                   num_nodes=_count(f.get("NumNodes", "")), nodelist=_null(f.get("NodeList")),
                   elapsed_seconds=parse_slurm_duration(f.get("RunTime", "")),
                   time_limit_seconds=parse_slurm_duration(f.get("TimeLimit", "")),
                   submit_time=submit, start_time=start if info.start_time else None,
                   end_time=parse_slurm_timestamp(f.get("EndTime", "")) if info.end_time else None,
                   exit_code=f.get("ExitCode", ""), comment=_null(f.get("Comment")),
                   user=str(uid), tres=f.get("TRES", ""), source="scontrol")
    result = client._run(["sacct", "-n", "-P", "-X", "--duplicates", f"--delimiter={SEP}", "-j", str(job_id),
                          "-o", ",".join(_HISTORY_FIELDS)], check=False)
    rows = []
    for line in result.stdout.splitlines() if result.returncode == 0 else []:
        values = line.split(SEP, len(_HISTORY_FIELDS) - 1)
        if len(values) == len(_HISTORY_FIELDS) and values[0] == str(job_id) and values[1] == str(uid):
            rows.append(values)
    if not rows:
        return None
    (_, _, submit, start, end, state, reason, partition, nodes, nodelist, elapsed, limit, exit_code, tres, comment,
     name) = max(rows, key=lambda r: r[2])
    return Job(job_id=job_id, name=name, state=state.split(" ")[0], reason=_null(reason), partition=partition,
               num_nodes=_count(nodes), nodelist=_null(nodelist),
               elapsed_seconds=int(elapsed) if elapsed.isdigit() else None,
               time_limit_seconds=int(limit) * 60 if limit.isdigit() else None,
               submit_time=parse_slurm_timestamp(submit), start_time=parse_slurm_timestamp(start),
               end_time=parse_slurm_timestamp(end), exit_code=exit_code, comment=comment, user=str(uid),
               tres=tres, source="sacct")
