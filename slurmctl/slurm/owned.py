"""The caller's own Slurm jobs by id, and the caller's jobs that are no run of the platform.

Whose job it is is decided on the numeric uid Slurm prints (squeue %U, sacct UID): the controller
sets it from the submitter's credentials, no user writes it. The ownership query asks for fixed-format
fields only; every listing that carries a user-written field (name, comment) is sealed per call
(slurm/parsing.py), so no job name or comment can forge another job's record.
"""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import dataclass

from slurmctl.durations import human_duration
from slurmctl.errors import RunNotFound, RunNotOwned, SlurmCommandError
from slurmctl.slurm.client import HISTORY
from slurmctl.slurm.parsing import SEP, JobQuery
from slurmctl.slurm.records import Job, tres_cpus, tres_gpus

# One job as the controller knows it now (queued, running or recently ended: `squeue -t all`).
# With where it writes (StdOut, WorkDir: user-written, sealed like name and comment).
OWNED_NOW = JobQuery("owned_job", ("job_id", "state", "reason", "partition", "num_nodes", "nodelist",
                                   "elapsed_seconds", "time_limit_seconds", "submit_time", "start_time", "end_time",
                                   "exit_code", "user", "tres", "restarts", "array_ref", "batch_host", "name",
                                   "comment", "std_out", "std_err", "work_dir"),
                     "squeue -O")
# Every job of that id in accounting, every user's (ids restart when a cluster is rebuilt): the newest
# decides whose it is (its numeric uid), in the same call that reads it.
OWNED_HISTORY = JobQuery("owned_history", ("job_id", "state", "reason", "partition", "num_nodes", "nodelist",
                                           "elapsed_seconds", "time_limit_seconds", "submit_time", "start_time",
                                           "end_time", "exit_code", "user", "uid", "tres", "array_ref", "name",
                                           "comment", "work_dir", "submit_line"), "sacct")
# The caller's queued and running jobs, array tasks one per record (-r).
# -O: only it has the allocated TRES (ls's GPUS column). Its JobID is each task's own id once it started;
# every pending task of an array prints the array's id, so a record is told apart by its ArrayTaskID too.
PLAIN = JobQuery("plain_jobs", ("job_id", "state", "partition", "num_nodes", "elapsed_seconds", "user", "tres",
                                "array_tasks", "name", "comment"), "squeue -O")
# The caller's jobs of the last days in accounting, with the fields status reads (client.HISTORY's): one
# sacct answers for ls's ended plain jobs and for its runs' ended jobs alike.
RECENT = JobQuery("recent_jobs", HISTORY.attrs, "sacct")
RECENT_DAYS, RECENT_LIMIT = 7, 50  # how far back ls looks for ended plain jobs, and how many it shows


def _user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _owner_uid(client, job_id: int) -> int | None:
    """The uid of job `job_id`: the controller's while it knows the job (queued, running, or ended
    within MinJobAge: `squeue -t all`), else accounting's newest job of that id; None if unknown.
    Accounting lags behind and, after job ids were reset, holds older jobs of that id (another user's)."""
    result = client._run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", f"%A{SEP}%U"], check=False)
    for line in result.stdout.splitlines() if result.returncode == 0 else []:
        jid, _, uid = line.partition(SEP)
        if jid == str(job_id) and uid.isdigit():
            return int(uid)
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
    _check_owner(job_id, _owner_uid(client, job_id), uid)
    return job_id


@dataclass
class PlainJobRow:
    """One of the caller's jobs that is no run of the platform (ls): queued, running or recently ended."""

    job_id: str
    state: str
    partition: str
    num_nodes: int
    elapsed: str
    name: str
    gpus: int = 0  # allocated (a pending job has none yet)
    cpus: int = 0  # allocated, from the same TRES
    elapsed_seconds: int | None = None
    started_at: float | None = None  # epoch: when the allocation began (priced from then)
    cost_usd: float | None = None  # filled by the caller that has the site's prices

    def to_dict(self) -> dict:
        return {"kind": "sbatch", "run_id": None, **self.__dict__}


def my_plain_jobs(client, run_comment_prefix: str, uid: int | None = None) -> list[PlainJobRow]:
    """The caller's active jobs whose comment does not start with `run_comment_prefix` (the platform's
    runs), one sealed `squeue --me`. The owner is checked again (a remote login node's `--me` is
    whoever logged in)."""
    uid = os.geteuid() if uid is None else uid
    me = _user_name(uid)
    jobs = client._listing(PLAIN, ["squeue", "-h", "-r", "--me"])
    return [_row(j, time.time() - (j.elapsed_seconds or 0))
            for j in jobs if j.user == me and not j.comment.startswith(run_comment_prefix)]


def _row(job: Job, started_at: float | None) -> PlainJobRow:
    # a pending array task has no id of its own yet: named as squeue names it, '<array id>_<index>'
    pending_task = job.state == "PENDING" and job.array_tasks.isdigit()
    job_id = f"{job.job_id}_{job.array_tasks}" if pending_task else str(job.job_id)
    return PlainJobRow(job_id, job.state, job.partition, job.num_nodes,
                       human_duration(job.elapsed_seconds) if job.elapsed_seconds is not None else "-", job.name,
                       tres_gpus(job.tres)[0], tres_cpus(job.tres), job.elapsed_seconds,
                       started_at if job.elapsed_seconds else None)


def my_recent_jobs(client, uid: int | None = None, *, days: int = RECENT_DAYS) -> list[Job]:
    """The caller's jobs that ran or ended in the last `days` as accounting has them (each job's newest
    record), one sealed sacct of the caller's own jobs; the owner is checked on each record."""
    uid = os.geteuid() if uid is None else uid
    me = _user_name(uid)
    jobs = client._listing(RECENT, ["sacct", "-n", "-P", "-X", "-S", f"now-{int(days)}days"], source="sacct")
    return [j for j in jobs if j.user == me]


def my_ended_plain_jobs(client, run_comment_prefix: str, uid: int | None = None, *, days: int = RECENT_DAYS,
                        limit: int = RECENT_LIMIT, recent: list[Job] | None = None) -> list[PlainJobRow]:
    """The caller's plain jobs that ended in the last `days` (newest first, at most `limit`), from
    `recent` (my_recent_jobs) or one sacct of its own."""
    jobs = my_recent_jobs(client, uid, days=days) if recent is None else recent
    ended = [j for j in jobs if not j.active and not j.comment.startswith(run_comment_prefix)]
    ended.sort(key=lambda j: j.end_time.timestamp() if j.end_time else 0.0, reverse=True)
    seen, rows = set(), []
    for j in ended:  # a requeued job has a record per attempt: its newest stands for it
        if j.job_id not in seen:
            seen.add(j.job_id)
            ended_at = j.end_time.timestamp() if j.end_time else None
            rows.append(_row(j, ended_at - (j.elapsed_seconds or 0) if ended_at else None))
    return rows[:limit]


def owned_job(client, job_id: int, uid: int | None = None) -> Job | None:
    """The caller's job `job_id` as Slurm knows it now (RunNotOwned when it is another user's, RunNotFound
    when Slurm knows no such job): from the controller while it knows the job (two squeue calls: the
    owner's uid, then the record), else from accounting, one sacct of every record of that id, whose
    newest decides whose it is. Only this job's own records are read, never the whole queue."""
    uid = os.geteuid() if uid is None else uid
    result = client._run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", f"%A{SEP}%U"], check=False)
    owner = next((int(u) for j, _, u in (line.partition(SEP) for line in result.stdout.splitlines())
                  if j == str(job_id) and u.isdigit()), None) if result.returncode == 0 else None
    if owner is not None:
        _check_owner(job_id, owner, uid)
        me = _user_name(uid)
        try:
            result, seal = client._sealed(OWNED_NOW, ["squeue", "-h", "-t", "all", "-j", str(job_id)])
            found = [j for j in OWNED_NOW.parse(result.stdout, seal, client.rejects, "squeue") if j.job_id == job_id]
            if found and found[0].user == me:
                return found[0]
        except SlurmCommandError:
            pass  # it left the controller just now ('Invalid job id'): accounting has it
    try:
        result, seal = client._sealed(OWNED_HISTORY, ["sacct", "-n", "-P", "-X", "-a", "--duplicates"],
                                      ["-j", str(job_id)])
    except SlurmCommandError:
        result, seal = None, ""
    rows = []
    for values in OWNED_HISTORY.records(result.stdout, seal, client.rejects) if result is not None else []:
        job = OWNED_HISTORY.parse_values(values, client.rejects, "sacct")
        if job is not None and job.job_id == job_id and job.uid is not None:
            rows.append(job)
    if not rows:
        if owner is not None:
            return None  # the controller's, not yet in accounting
        _check_owner(job_id, None, uid)
    # the newest job of that id (ISO times sort as text); its attempts: the newest one
    newest = max(rows, key=lambda j: j.submit_time.timestamp() if j.submit_time else 0.0)
    _check_owner(job_id, newest.uid, uid)
    return newest


def _check_owner(job_id: int, owner: int | None, uid: int) -> None:
    if owner is None:
        raise RunNotFound(f"Slurm knows no job {job_id} (neither the queue nor accounting).",
                          "Check the id with `squeue --me` or `sacct`; `slurmctl ls` lists your runs and jobs.")
    if owner != uid:
        raise RunNotOwned(f"job {job_id} is not yours.",
                          "slurmctl only shows and acts on your own jobs; `slurmctl ls` lists them.")


@dataclass(frozen=True)
class StepOutcome:
    """How one srun step of a job ended, as accounting recorded it."""

    step: str  # '5080.0'
    state: str
    exit_code: str  # 'code:signal'

    @property
    def failed(self) -> bool:
        return self.state in _FAILED_STEP_STATES or (self.state != "CANCELLED" and self.exit_code not in ("", "0:0"))


# A step that ended so is a failure even when the batch script exited 0 (`srun ... &` then a bare
# `wait` hides it: Slurm records the job COMPLETED 0:0). CANCELLED is left out: it follows a cancel.
_FAILED_STEP_STATES = frozenset({"FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL"})


def failed_steps(client, job_ids: int | list[int]) -> list[StepOutcome]:
    """The srun steps of the caller's jobs `job_ids` (their own ids: an array task's JobIDRaw) that
    failed, one sacct of fixed-format fields only (ids, states, exit codes: nothing a user writes);
    the batch and extern steps are the job's own record."""
    ids = [job_ids] if isinstance(job_ids, int) else list(job_ids)
    if not ids:
        return []
    result = client._run(["sacct", "-n", "-P", "-j", ",".join(map(str, ids)), "-o", "JobIDRaw,State,ExitCode"],
                         check=False)
    wanted, found = {str(i) for i in ids}, []
    for line in result.stdout.splitlines() if result.returncode == 0 else []:
        step, _, rest = line.partition("|")
        state, _, exit_code = rest.partition("|")
        head, dot, number = step.partition(".")
        if head in wanted and dot and number.isdigit():
            outcome = StepOutcome(step, state.split(" ")[0], exit_code)
            if outcome.failed:
                found.append(outcome)
    return found


def failed_steps_words(steps: list[StepOutcome], job_exit_code: str) -> str:
    """What a job Slurm recorded COMPLETED whose srun steps failed is: a failure, said with the step."""
    first = steps[0]
    more = f" (and {len(steps) - 1} more step(s))" if len(steps) > 1 else ""
    return (f"Its step {first.step} failed ({first.state.lower()}, exit code {first.exit_code}){more}, though "
            f"Slurm recorded the job COMPLETED {job_exit_code}: the batch script's own exit status hid the failure "
            "(for example `srun ... &` then a bare `wait`).")


def array_task_ids(client, array_id: int) -> list[int]:
    """The own job id of every task of array `array_id` that accounting knows (`sacct -j <array id>`
    lists them all), one sacct of job ids only."""
    result = client._run(["sacct", "-n", "-P", "-X", "-j", str(array_id), "-o", "JobIDRaw"], check=False)
    found = [int(w) for w in result.stdout.split() if w.isdigit()] if result.returncode == 0 else []
    return list(dict.fromkeys(found)) or [array_id]
