"""SlurmClient: every Slurm command slurmctl runs goes through ``_run``, as an argv list.

The client builds argv and hands the output to slurmctl.slurm.parsing; the records it returns
live in slurmctl.slurm.records. Hot paths (ls, status, the exporter) make one batched call with a
format and a \\x1f separator: on 22.05, `squeue --json` took 0.15-0.19 s for 1,000 jobs against
0.015 s for `squeue -o`, and sacct --json 0.8 s against 0.15 s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path

from slurmctl.durations import parse_slurm_duration
from slurmctl.errors import SlurmCommandError, SlurmUnreachable
from slurmctl.slurm.cluster import ClusterQueries
from slurmctl.slurm.node_admin import NodeAdministration
from slurmctl.slurm.parsing import (
    SEP,
    JobQuery,
    Rejects,
    field_separator,
    first_line_id,
    job_ids,
    listed_twice,
    new_seal,
    rows,
    split_id_closed,
)
from slurmctl.slurm.records import (
    ACTIVE_STATES,
    Association,
    Job,
    JobInfo,
    NodeInfo,
    NodeUsage,
    PartitionInfo,
    QueueEntry,
    QueueSnapshot,
    QueueView,
    QuotaJob,
    StartEstimate,
)
from slurmctl.slurm.runner import CommandResult, LocalRunner, Runner

__all__ = ["ACTIVE_STATES", "SEP", "Association", "Job", "JobInfo", "NodeInfo", "NodeUsage", "PartitionInfo",
           "QueueEntry", "QueueView", "QuotaJob", "SlurmClient", "StartEstimate", "parse_slurm_duration"]

# One query per kind of job listing, each sealed per call (parsing.new_seal).
# -O, not -o: only -O has the allocated TRES (what a job costs) and the restart count (a requeued job
# waiting to start again); the same single call, as fast (~10 ms).
QUEUE = JobQuery("queue", ("job_id", "state", "reason", "partition", "num_nodes", "nodelist", "elapsed_seconds",
                           "time_limit_seconds", "submit_time", "start_time", "tres", "restarts", "user", "name",
                           "comment"), "squeue -O")
# ls: which of the caller's queued jobs belong to a run (the run id is in the comment)
JOB_COMMENTS = JobQuery("job_comments", ("job_id", "comment"), "squeue -o")
_QUEUE_USER, _QUEUE_COMMENT = QUEUE.attrs.index("user"), QUEUE.attrs.index("comment")


def _user_name() -> str | None:
    """This process's user as squeue prints it (%u), the user `squeue --me` means; None if unknown."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return None


# squeue -O (not -o) where GPUs count: only -O has tres-alloc, which counts GPUs however they were
# asked for (--gres, --gpus, --gpus-per-node).
SNAPSHOT = JobQuery("queue_snapshot", ("job_id", "state", "reason", "partition", "num_nodes", "tres", "submit_time",
                                       "start_time", "time_limit_seconds", "user", "qos", "dependency",
                                       "tres_per_node", "array_tasks", "comment"),
                    "squeue -O")
QUOTA = JobQuery("quota_jobs", ("job_id", "state", "user", "account", "qos", "tres"), "squeue -O")
# the node hooks' view of one job (JobInfo): what `scontrol show job` would say, sealed
JOB_INFO = JobQuery("job_info", ("job_id", "state", "exit_code", "restarts", "start_time", "end_time", "batch_host",
                                 "nodelist", "tres", "std_out", "work_dir", "name"), "squeue -O")
# A batch script told to stop (SIGTERM): was its job requeued, after a preemption, and how long may it run
REQUEUE_CHECK = JobQuery("requeue_check", ("job_id", "state", "restarts", "preempt_time", "time_limit_seconds"),
                         "squeue -O")
HISTORY = JobQuery("history", ("job_id", "state", "reason", "partition", "num_nodes", "nodelist", "elapsed_seconds",
                               "time_limit_seconds", "submit_time", "start_time", "end_time", "exit_code", "tres",
                               "user", "name", "comment"), "sacct")

_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Problem talking to the database|Zero Bytes were transmitted|Munge .*(?:failed|error)",
    re.IGNORECASE,
)
_TASK_REF_RE = re.compile(r"\d+_\d+")


# srun's line for a node whose slurmd did not take a step's launch
_LAUNCH_FAILED_ON = re.compile(r"Task launch for StepId=\S+ failed on node ([^\s:]+):")


def job_ref(job: int | str) -> str:
    """A job id, or an array task as '<array id>_<index>'. Slurm 22.05 gives an array task its own id
    when it starts, but the task that starts last keeps the array's id, and scontrol update/requeue,
    scancel and squeue -s read that id as EVERY task of the array (tested): such a task is only
    reached alone as '<array id>_<index>'."""
    if isinstance(job, str) and _TASK_REF_RE.fullmatch(job):
        return job
    return str(int(job))


def job_ref_from_env(environ=os.environ) -> int | str:
    """Inside a job: '<array id>_<index>' for an array task (a sweep element), else SLURM_JOB_ID."""
    array, index = environ.get("SLURM_ARRAY_JOB_ID", ""), environ.get("SLURM_ARRAY_TASK_ID", "")
    if array.isdigit() and index.isdigit():
        return f"{array}_{index}"
    try:
        return int(environ.get("SLURM_JOB_ID") or 0)
    except ValueError:
        return 0


class SlurmClient(ClusterQueries, NodeAdministration):
    """Jobs: submission, control, listings (this module); cluster facts: nodes, partitions, placement,
    associations and limits (slurmctl.slurm.cluster)."""

    def __init__(self, runner: Runner | None = None):
        self.runner = runner or LocalRunner()
        self.rejects = Rejects()  # output lines that did not parse, per query (the exporter reports them)

    def _run(self, argv: list[str], timeout: float = 60.0, check: bool = True) -> CommandResult:
        result = self.runner.run(argv, timeout=timeout)
        if check and result.returncode != 0:
            err = (result.stderr or result.stdout).strip()
            if _UNREACHABLE.search(err):
                raise SlurmUnreachable(
                    f"Slurm did not answer `{argv[0]}`: {err.splitlines()[-1] if err else 'no output'}.",
                    "The controller or its database is down or unreachable from here; retry in a minute, "
                    "then tell your admin (on the local dev cluster: deploy/local/up).",
                )
            raise SlurmCommandError(f"`{argv[0]}` failed: {err or f'exit code {result.returncode}'}.",
                                    "See the message from Slurm above.")
        return result

    def _listing(self, query: JobQuery, argv: list[str], tail: Sequence[str] = (), source: str = "squeue",
                 timeout: float = 60.0) -> list[Job]:
        """`argv` + the query's sealed format + `tail`, parsed into Jobs (see parsing.new_seal)."""
        seal = new_seal()
        result = self._run([*argv, *query.format_argv(seal), *tail], timeout=timeout)
        return query.parse(result.stdout, seal, self.rejects, source)

    def _sealed(self, query: JobQuery, argv: list[str], tail: Sequence[str] = ()) -> tuple[CommandResult, str]:
        seal = new_seal()
        return self._run([*argv, *query.format_argv(seal), *tail]), seal

    # --- submission and control -------------------------------------------------------------
    def submit(self, script: Path, extra_args: Sequence[str] = ()) -> int:
        """sbatch the script; extra_args come before the script so they override #SBATCH lines."""
        return self._job_id_of(self._run(["sbatch", "--parsable", *extra_args, str(script)]))

    def submit_wrapped(self, sbatch_args: Sequence[str], environment: dict[str, str] | None = None) -> int:
        """`sbatch --parsable ARGS` (with --wrap among them); `environment` reaches the job via `env`."""
        prefix = ["env", *(f"{k}={v}" for k, v in (environment or {}).items())] if environment else []
        return self._job_id_of(self._run([*prefix, "sbatch", "--parsable", *sbatch_args]))

    @staticmethod
    def _job_id_of(result: CommandResult) -> int:
        job_id = first_line_id(result.stdout)
        if not job_id.isdigit():
            raise SlurmCommandError(f"sbatch answered something unexpected: {result.stdout!r}.",
                                    "Check `sbatch --version` and the cluster's job_submit plugins.")
        return int(job_id)

    def interactive(self, argv: list[str]) -> int:
        """An interactive Slurm command (`srun --pty ...`) on the user's terminal; its exit code."""
        return self.runner.attach(argv)

    def cancel(self, job_id: int | str, signal: str | None = None, batch_only: bool = False,
               full: bool = False) -> None:
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal}")
        if batch_only:
            argv.append("--batch")
        if full:
            argv.append("--full")
        self._run([*argv, job_ref(job_id)])

    def array_task_state(self, array_job_id: int, index: int) -> str | None:
        """The squeue state of one array task (`squeue -j <array>_<index>`); None once it left the queue."""
        result = self._run(["squeue", "-h", "-j", f"{int(array_job_id)}_{int(index)}", "-o", "%T"], check=False)
        states = result.stdout.split() if result.returncode == 0 else []
        return states[0] if states else None

    def array_task_states(self, array_job_id: int) -> dict[int, str]:
        """index -> squeue state of every task of an array still in the queue, one call (`-r` lists a
        pending range such as 5_[2-9%2] as one line per task)."""
        result = self._run(["squeue", "-h", "-r", "-j", str(int(array_job_id)), "-o", f"%K{SEP}%T"], check=False)
        states = {}
        for line in result.stdout.splitlines() if result.returncode == 0 else []:
            index, _, state = line.partition(SEP)
            if index.isdigit() and state:
                states[int(index)] = state
        return states

    def cancel_many(self, job_ids: Iterable[int], chunk: int = 1000) -> None:
        """scancel many jobs, 1,000 ids per call (~0.8 s each on 22.05)."""
        ids = [str(int(j)) for j in job_ids]
        for start in range(0, len(ids), chunk):
            self._run(["scancel", *ids[start:start + chunk]])

    # --- reliability: requeue, update, release, time left -------------------------------------
    def requeue(self, job_id: int | str) -> None:
        """`scontrol requeue`: needs Requeue=1 on the job; the next attempt waits ~120 s (BeginTime)."""
        self._run(["scontrol", "requeue", job_ref(job_id)])

    def update_job(self, job_id: int | str, **fields: str | int) -> None:
        """`scontrol update JobId=N Key=Value ...`, e.g. update_job(7, Requeue=1, StartTime="now")."""
        self._run(["scontrol", "update", f"JobId={job_ref(job_id)}", *(f"{k}={v}" for k, v in fields.items())])

    def requeue_wait(self, job_id: int | str) -> tuple[str, str, str] | None:
        """(state, reason, excluded nodes) of a job as squeue shows it, None once Slurm forgot it. A
        requeued job stays COMPLETING until its epilog ends, then PENDING with reason BeginTime."""
        result = self._run(["squeue", "-h", "-j", job_ref(job_id), "-o", "%T|%r|%x"], check=False)
        fields = result.stdout.strip().split("|") if result.returncode == 0 else []
        return (fields[0], fields[1], fields[2]) if len(fields) == 3 else None

    def earlier_steps_running(self, job_id: int | str) -> bool:
        """Whether a step of the job has no end in accounting yet (every attempt's: `--duplicates`): its processes
        may still be on a node, and slurmd refuses to launch the job there again ("Job credential revoked").
        True when sacct cannot say."""
        result = self._run(["sacct", "-j", job_ref(job_id), "--duplicates", "-n", "-P", "-o", "JobID,End"],
                           check=False)
        if result.returncode != 0:
            return True
        steps = [line.split("|") for line in result.stdout.splitlines() if "." in line.split("|")[0]]
        return any(len(fields) != 2 or fields[1] in ("Unknown", "") for fields in steps)

    def requeue_check(self, job_id: int | str) -> Job | None:
        """ONE job's state, restart count, preemption time and time limit (a sealed `squeue -O`, ~10 ms);
        None once the controller forgot it."""
        try:
            jobs = self._listing(REQUEUE_CHECK, ["squeue", "-h", "-t", "all", "-j", job_ref(job_id)])
        except SlurmCommandError:
            return None
        return jobs[0] if jobs else None

    def release(self, job_id: int | str) -> None:
        self._run(["scontrol", "release", job_ref(job_id)])

    def requeue_held(self, job_id: int | str) -> None:
        """`scontrol requeuehold`: requeue the job and hold it until `release` (the owner may)."""
        self._run(["scontrol", "requeuehold", job_ref(job_id)])

    def time_left_seconds(self, job_id: int | str) -> int | None:
        result = self._run(["squeue", "-h", "-j", job_ref(job_id), "-o", "%L"], check=False)
        return parse_slurm_duration(result.stdout) if result.returncode == 0 else None

    # --- steps and holds (watchdog, cleanup) ---------------------------------------------------
    def job_steps(self, job_id: int | str) -> list[str]:
        """The job's srun steps ('123.0', an array task's '120_3.0', ...), without the batch and extern steps."""
        result = self._run(["squeue", "-h", "-s", "-j", job_ref(job_id), "-o", "%i"], check=False)
        steps = [s.strip() for s in result.stdout.split() if s.strip()]
        return [s for s in steps if s.rsplit(".", 1)[-1].isdigit()]

    def cancel_step(self, step: str) -> None:
        """End one step (SIGTERM, then SIGKILL after KillWait); the batch shell goes on."""
        self._run(["scancel", step])

    def hostnames(self, nodelist: str) -> list[str]:
        """`scontrol show hostnames` (local, no RPC): 'h100-[1-2]' -> ['h100-1', 'h100-2']."""
        return self._run(["scontrol", "show", "hostnames", nodelist]).stdout.split()

    def probe_allocation(self, nodes: int, timeout: float = 20.0) -> bool:
        """Inside a job: one tiny step on every node of the allocation (--overlap and --mem=0: beside a
        step that still runs or winds down and holds the job's memory; without --mem=0 Slurm 22.05
        refuses it, "Memory required by task is not available"). False when it fails or does not
        finish in `timeout` (a lost node's slurmd never answers the launch)."""
        return self.allocation_probe_failure(nodes, timeout) is None

    @staticmethod
    def nodes_not_launched(probe_failure: str) -> set[str]:
        """The nodes srun says the probe's launch failed on (their slurmd did not take it): srun's
        "Task launch for StepId=7.3 failed on node h100-3: Communication connection failure"."""
        return set(_LAUNCH_FAILED_ON.findall(probe_failure))

    def allocation_probe_failure(self, nodes: int, timeout: float = 20.0) -> str | None:
        """The probe of probe_allocation: None when every node ran it, else why not, in srun's words
        (its last error line, e.g. "Task launch for StepId=7.3 failed on node h100-3: ...")."""
        try:
            result = self._run(["srun", "--overlap", f"--nodes={int(nodes)}", f"--ntasks={int(nodes)}",
                                "--ntasks-per-node=1", "--gres=none", "--mem=0", "--kill-on-bad-exit=1", "true"],
                               timeout=timeout, check=False)
        except SlurmUnreachable as exc:
            return exc.message
        if result.returncode == 0:
            return None
        lines = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        said = next((line for line in reversed(lines) if "node" in line.lower()), lines[-1] if lines else "")
        return said[:300] or f"srun exited {result.returncode}"

    # --- node-side hooks (Prolog/Epilog: slurmctl.ops.hooks) and root's confirmations -----------
    def job_info(self, job_id: int, timeout: float = 60.0) -> JobInfo | None:
        """ONE job's facts for the node hooks, a sealed `squeue -t all -j JOB` (~10-20 ms; it lists
        a job the controller still remembers, ended ones included); None when it no longer knows it.
        Not `scontrol show job`: its `Key=Value` line cannot be sealed against a forging job name."""
        try:
            jobs = self._listing(JOB_INFO, ["squeue", "-h", "-t", "all", "-j", str(int(job_id))], timeout=timeout)
        except SlurmCommandError as exc:
            if "invalid job id" in exc.message.lower():
                return None
            raise
        job = next((j for j in jobs if j.job_id == int(job_id)), None)
        return JobInfo.from_job(job) if job is not None else None

    def batch_script(self, job_id: int, timeout: float = 60.0) -> str | None:
        """The batch script slurmctld stored for the job (`scontrol write batch_script JOB -`; root or
        the owner, while the controller remembers the job); None when it has none or forgot it."""
        result = self._run(["scontrol", "write", "batch_script", str(int(job_id)), "-"], timeout=timeout, check=False)
        return result.stdout if result.returncode == 0 else None

    def node_job_ids(self, node: str, timeout: float = 60.0) -> set[int]:
        """Jobs Slurm still runs on `node` (running, completing, configuring, suspended). %A, not %i:
        an array task's own job id, the SLURM_JOB_ID its processes carry (%i says <array id>_<task>)."""
        result = self._run(["squeue", "-h", "-o", "%A", "-w", node, "-t", "R,CG,CF,S"], timeout=timeout)
        return job_ids(result.stdout, self.rejects, "node_job_ids")

    _CONFIRM_FIELDS = ["%A", "%U", "%T", "%r", "%P", "%M", "%k"]

    def confirm_job(self, job_id: int, timeout: float = 30.0) -> Job | None:
        """ONE job as the controller sees it now, for root about to act on it (cleanup's scancel).

        Only fixed-format fields, the owner as a numeric uid (`user` holds it, from %U), and the
        one free-text field, the comment, LAST and split off with maxsplit: a job name or comment
        holding newlines or separators cannot forge another job's line here. None when squeue no
        longer lists the job, or its answer is not this job's."""
        fmt = SEP.join(self._CONFIRM_FIELDS)
        try:
            result = self._run(["squeue", "-h", "-j", str(int(job_id)), "-o", fmt], timeout=timeout)
        except SlurmCommandError as exc:
            if "invalid job id" in exc.message.lower():
                return None
            raise
        values = result.stdout.removesuffix("\n").split(SEP, len(self._CONFIRM_FIELDS) - 1)
        if len(values) != len(self._CONFIRM_FIELDS) or values[0] != str(job_id) or not values[1].isdigit():
            if result.stdout.strip():
                self.rejects.add("confirm_job", result.stdout)
            return None
        _, uid, state, reason, partition, elapsed, comment = values
        return Job(job_id=job_id, name="", state=state, reason=reason if reason not in {"None", "(null)"} else "",
                   partition=partition, elapsed_seconds=parse_slurm_duration(elapsed),
                   comment=comment if comment != "(null)" else "", user=uid, source="squeue")

    def job_submit_time(self, job_id: int, timeout: float = 60.0) -> str:
        """The job's submit time, Slurm's local ISO timestamp ("" once the controller forgot it)."""
        result = self._run(["squeue", "-h", "-j", str(int(job_id)), "-o", "%V"], timeout=timeout, check=False)
        lines = result.stdout.split() if result.returncode == 0 else []
        return lines[0] if lines else ""

    def named_job_states(self, name: str, user: str, timeout: float = 60.0) -> dict[int, str]:
        """{job id: state} of `user`'s jobs named `name` the controller still remembers (ended ones
        for MinJobAge). For root's own jobs: no other user can submit as root, so the name is ours."""
        result = self._run(["squeue", "-h", "-t", "all", "-u", user, "-n", name, "-o", "%A|%T"], timeout=timeout)
        found = {}
        for parts in rows(result.stdout):
            if len(parts) == 2 and parts[0].isdigit():
                found[int(parts[0])] = parts[1]
            elif parts and parts[0]:
                self.rejects.add("named_job_states", "|".join(parts))
        return found

    # --- job listings: one query per kind, each returns Job ---------------------------------
    def queue(self, mine: bool = True) -> list[Job]:
        """Active jobs, one squeue call."""
        return self._listing(QUEUE, ["squeue", "-h"], ["--me"] if mine else [])

    def my_job_comments(self, containing: str = "") -> tuple[list[Job], QueueSnapshot | None]:
        """The caller's active jobs whose comment contains `containing` (ls: the run comment's prefix),
        for their id and comment, one squeue call. With a local runner that call is the whole queue's
        squeue, returned too as a QueueSnapshot for ``queue_view`` (`squeue --me` means this process's
        user, so ls asks Slurm once for both); only this user's records with `containing` are parsed.
        Otherwise `squeue --me` with those two fields, and no snapshot."""
        me = _user_name() if isinstance(self.runner, LocalRunner) else None
        if me is None:
            jobs = self._listing(JOB_COMMENTS, ["squeue", "-h", "--me"])
            return [j for j in jobs if containing in j.comment], None
        result, seal = self._sealed(QUEUE, ["squeue", "-h"])
        jobs, seen = [], set()
        for values in QUEUE.records(result.stdout, seal, self.rejects):
            if values[_QUEUE_USER] != me or containing not in values[_QUEUE_COMMENT]:
                continue
            job = QUEUE.parse_values(values, self.rejects)
            if job is not None:
                if job.job_id in seen:
                    raise listed_twice(QUEUE, job.job_id, self.rejects)
                seen.add(job.job_id)
                jobs.append(job)
        return jobs, QueueSnapshot(result.stdout, seal)

    def queue_view(self, job_ids: Iterable[int], snapshot: QueueSnapshot | None = None) -> QueueView:
        """One squeue of every user's jobs (or the `snapshot` of one that a caller already has),
        fully parsed only for `job_ids` (status/ls at scale: building a Job per line costs more than
        squeue itself with 1,000 jobs); the rest only feeds queue positions."""
        wanted = {int(j) for j in job_ids}
        if snapshot is None:
            result, seal = self._sealed(QUEUE, ["squeue", "-h"])
            snapshot = QueueSnapshot(result.stdout, seal)
        view, seen = QueueView(), set()
        for values in QUEUE.records(snapshot.stdout, snapshot.seal, self.rejects):
            job_id, state, reason, partition = values[0].split("_")[0], values[1], values[2], values[3]
            if not job_id.isdigit():
                self.rejects.add(QUEUE.name, SEP.join(values))
                continue
            if int(job_id) in seen:
                raise listed_twice(QUEUE, int(job_id), self.rejects)
            seen.add(int(job_id))
            if int(job_id) in wanted:
                job = QUEUE.parse_values(values, self.rejects)
                if job is not None:
                    view.jobs[job.job_id] = job
            if state == "PENDING" and not reason.startswith("JobHeld"):
                view.pending_by_partition.setdefault(partition.split(",")[0], []).append(int(job_id))
        return view

    def queue_filtered(self, partitions: Sequence[str] = (), users: Sequence[str] = (),
                       states: Sequence[str] = ()) -> list[Job]:
        """The whole queue like `squeue -p/-u/-t` (`slurmctl queue`), one squeue call."""
        tail = []
        for flag, values in (("-p", partitions), ("-u", users), ("-t", states)):
            if values:
                tail += [flag, ",".join(values)]
        return self._listing(QUEUE, ["squeue", "-h"], tail)

    def queue_snapshot(self) -> list[Job]:
        """Every active job of every user with its GPUs (tres), one squeue call (the exporter)."""
        return self._listing(SNAPSHOT, ["squeue", "-h"])

    def quota_jobs(self) -> list[Job]:
        """Every active job's user, account, QOS and TRES (requested if pending), one squeue call."""
        return self._listing(QUOTA, ["squeue", "-h"])

    def history(self, job_ids: Iterable[int]) -> list[Job]:
        """Accounting records (one row per job: the latest attempt), one sacct call."""
        ids = sorted({int(j) for j in job_ids})
        if not ids:
            return []
        return self._listing(HISTORY, ["sacct", "-n", "-P", "-X"], ["-j", ",".join(map(str, ids))], source="sacct")

    def jobs(self, job_ids: Iterable[int]) -> dict[int, Job]:
        """Current view of the given jobs: squeue for live ones, sacct for the rest."""
        wanted = {int(j) for j in job_ids}
        if not wanted:
            return {}
        found = {j.job_id: j for j in self.queue(mine=False) if j.job_id in wanted}
        missing = wanted - found.keys()
        if missing:
            for job in self.history(missing):
                found.setdefault(job.job_id, job)
        return found

    def all_attempts(self, fields: Sequence[str], *, start: datetime, end: datetime,
                     job_ids: Iterable[int] = (), states: Sequence[str] = ()) -> Iterator[list[str]]:
        """The `fields` of every attempt (--duplicates) of every user's job, one sealed sacct call: the
        cost ledger's input (slurmctl.ops.accounting prices them, a million at a time). `fields`
        must start with JobIDRaw (each record is closed by its id, see parsing.split_id_closed).
        `states` (sacct's -s codes): only attempts that ended in one of them within the window, by their
        end time; without them sacct selects by the job's eligible time, and 22.05 left out of such a
        window a health job that failed as it started, once other jobs had run (its -j listing had it)."""
        if fields[0] != "JobIDRaw":
            raise ValueError("all_attempts: the first field must be JobIDRaw")
        seal = new_seal()
        argv = ["sacct", "-a", "-X", "--duplicates", "-n", "-P", f"--delimiter={field_separator(seal)}",
                "-o", ",".join([*fields, "JobIDRaw"])]
        ids = ",".join(str(int(j)) for j in job_ids)
        argv += ["-j", ids] if ids else ["-S", start.isoformat(timespec="seconds"),
                                         "-E", end.isoformat(timespec="seconds")]
        argv += ["-s", ",".join(states)] if states else []
        stdout = self._run(argv, timeout=600).stdout
        return split_id_closed(stdout, seal, len(fields) + 1, "all_attempts", self.rejects)
