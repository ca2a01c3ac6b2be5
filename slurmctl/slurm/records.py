"""What slurmctl knows about Slurm objects: plain dataclasses, filled by slurmctl.slurm.parsing.

One job shape: every squeue or sacct listing returns ``Job`` (a query that does not ask for a
field leaves its default). Standard library only: the node hooks import these records too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import lru_cache

ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT",
})


@lru_cache(maxsize=4096)  # a cluster has few distinct shapes; accounting reads a million rows
def tres_gpus(tres: str) -> tuple[int, str]:
    """GPUs in a TRES string: 'billing=4,cpu=4,gres/gpu:h100=4,gres/gpu=4,mem=4000M' -> (4, 'h100').

    The untyped `gres/gpu=N` is the total; a typed `gres/gpu:<model>=N` names the model (and is the
    count when Slurm recorded only the typed one). (0, '') when there is no GPU."""
    total, model = 0, ""
    at = tres.find("gres/gpu")
    while at != -1:  # string scanning, not a regex: this runs once per accounting row
        end = tres.find(",", at)
        key, _, value = tres[at:end if end != -1 else None].partition("=")
        count = int(value) if value.isdigit() else 0
        if key == "gres/gpu":
            total = count
        elif key.startswith("gres/gpu:"):
            model = model or key[9:]
            total = total or count
        at = tres.find("gres/gpu", at + 8)
    return total, model


@lru_cache(maxsize=4096)
def tres_cpus(tres: str) -> int:
    """cpu=N of a TRES string ('billing=2,cpu=2,mem=2000M,node=1' -> 2); 0 when it has none."""
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == "cpu" and value.isdigit():
            return int(value)
    return 0


def array_task_count(spec: str) -> int:
    """'0-9,15%2' -> 2, '0-9:3' -> 4, '' or a single index or anything unreadable -> 1."""
    ranges, _, throttle = spec.strip("[]").partition("%")
    count = 0
    for part in ranges.split(","):
        bounds, _, step = part.partition(":")
        first, _, last = bounds.partition("-")
        if not first.isdigit() or (last and not last.isdigit()) or (step and not step.isdigit()):
            return 1
        count += (int(last or first) - int(first)) // max(int(step or 1), 1) + 1
    if throttle.isdigit() and int(throttle) > 0:
        count = min(count, int(throttle))
    return max(count, 1)


@dataclass
class Job:
    """One Slurm job as slurmctl sees it, from squeue (live) or sacct (accounting)."""

    job_id: int
    name: str = ""
    state: str = ""
    reason: str = ""
    partition: str = ""  # as Slurm says it: a pending job may list several, comma-separated
    num_nodes: int = 0
    nodelist: str = ""
    elapsed_seconds: int | None = None
    time_limit_seconds: int | None = None
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    exit_code: str = ""
    comment: str = ""
    user: str = ""
    uid: int | None = None  # the owner's numeric uid, where the query asked (whose job it is)
    account: str = ""
    qos: str = ""
    tres: str = ""  # allocated (running) or requested (pending): 'cpu=2,mem=1G,node=1,gres/gpu=1'
    dependency: str = ""  # the part of --dependency not yet met ('' when none is left)
    tres_per_node: str = ""  # what the job asked per node: 'gres:gpu:l4:1' (--gres, --gpus-per-node)
    array_tasks: str = ""  # a pending array's tasks not yet started, as squeue prints them: '0-9,15%2'
    array_ref: str = ""  # '<array id>_<index>' for an array task (squeue JobArrayID, sacct JobID)
    restarts: int = 0
    preempt_time: datetime | None = None
    batch_host: str = ""
    work_dir: str = ""  # user-written, like name and comment
    std_out: str = ""  # user-written
    std_err: str = ""  # user-written; the same as std_out when the job names no --error
    submit_line: str = ""  # user-written: the sbatch command line (sacct only)
    source: str = "squeue"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def held(self) -> bool:
        """Pending and will never start by itself (user/admin hold, requeue hold)."""
        return self.state == "REQUEUE_HOLD" or (self.state == "PENDING" and (
            self.reason.startswith("JobHeld") or "held" in self.reason.lower()))

    @property
    def partitions(self) -> list[str]:
        return [p for p in self.partition.split(",") if p]

    @property
    def gpus(self) -> int:
        """GPUs allocated (running) or requested (pending), from tres; 0 when the query had no tres."""
        return tres_gpus(self.tres)[0]

    @property
    def cpus(self) -> int:
        """CPUs allocated (running) or requested (pending), from tres; 0 when the query had no tres."""
        return tres_cpus(self.tres)

    @property
    def array_task(self) -> tuple[str, str] | None:
        """(array id, index) of an array task ('4341_2'), None for any other job or an array's pending rest."""
        head, sep, index = self.array_ref.partition("_")
        return (head, index) if sep and head.isdigit() and index.isdigit() else None

    @property
    def pending_tasks(self) -> int:
        """How many tasks this record stands for: an array's pending rest ('0-9:2,15%2') counts its
        indices, at most its throttle (%N tasks run at once); any other job is one."""
        return array_task_count(self.array_tasks)

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("submit_time", "start_time", "end_time", "preempt_time"):
            d[key] = d[key].isoformat() if d[key] else None
        return d


@dataclass
class JobInfo:
    """What node-side hooks need and the hook environment lacks: the job state, exit code, start/end
    times and GPU model (a cancelled job even shows exit code 0 in the Epilog's environment)."""

    job_id: int
    state: str = ""
    exit_code: str = ""
    restarts: int = 0
    start_time: float | None = None
    end_time: float | None = None
    batch_host: str = ""
    nodelist: str = ""
    std_out: str = ""
    work_dir: str = ""
    gpu_model: str | None = None
    gpu_count: int = 0
    name: str = ""  # the job name, user-written (the smoke verdict reads its code hash from it)

    @classmethod
    def from_job(cls, job: Job) -> JobInfo:
        gpus, model = tres_gpus(job.tres)
        return cls(job_id=job.job_id, state=job.state, exit_code=job.exit_code, restarts=job.restarts,
                   start_time=job.start_time.timestamp() if job.start_time else None,
                   end_time=job.end_time.timestamp() if job.end_time else None,
                   batch_host=job.batch_host, nodelist=job.nodelist, std_out=job.std_out, work_dir=job.work_dir,
                   gpu_model=model or None, gpu_count=gpus, name=job.name)


# Earlier names of the same shape (the exporter's snapshot rows, quota's rows).
QueueEntry = Job
QuotaJob = Job


@dataclass(frozen=True)
class QueueSnapshot:
    """One `squeue` of every user's active jobs, as Slurm printed it: the caller that asked once
    (``my_job_comments``) hands it to the next reader (``queue_view``) instead of asking again, with
    the per-call seal its records were printed with (slurm/parsing.py)."""

    stdout: str
    seal: str


@dataclass
class QueueView:
    """The queue as status/ls need it: the wanted jobs in full, every other job as a queue place."""

    jobs: dict[int, Job] = field(default_factory=dict)
    pending_by_partition: dict[str, list[int]] = field(default_factory=dict)  # squeue order, holds left out


@dataclass
class NodeInfo:
    name: str
    partitions: list[str] = field(default_factory=list)
    gpu_type: str | None = None
    gpus: int = 0
    cpus: int = 0
    memory_mb: int = 0
    state: str = ""


_DOWN_OR_FAILED = frozenset({"down", "fail", "failing", "not_responding", "no_respond"})


@dataclass(frozen=True)
class NodeHealthRow:
    """One node as `slurmctl nodes` and the health agent see it: state and who drained it why."""

    name: str
    state: str  # sinfo's StateComplete: "idle", "idle+drain", "mixed+drain+reserved", ...
    reason: str  # "" when none
    reason_user: str  # who set the reason ("root", "slurm", an operator), "" when none
    reason_time: str  # when, Slurm's ISO timestamp, "" when none
    gres: str

    @property
    def drained(self) -> bool:
        return "drain" in self.state.split("+")

    @property
    def down_or_failed(self) -> bool:
        """DOWN, FAIL or not responding (IDLE*): an operator's or slurmctld's verdict, never a drain of ours."""
        return any(flag.endswith("*") or flag in _DOWN_OR_FAILED for flag in self.state.split("+"))

    @property
    def out_of_service(self) -> bool:
        return self.drained or self.down_or_failed


@dataclass
class NodeUsage:
    """One (node, partition) row of sinfo: GPUs configured and in use, state and drain reason."""

    name: str
    partition: str
    gpu_type: str | None
    gpus: int
    gpus_used: int
    state: str
    reason: str


@dataclass
class StartEstimate:
    """`sbatch --test-only`: when and where Slurm would start the job now, or why it can't."""

    ok: bool
    start_time: datetime | None = None
    partition: str = ""
    nodes: str = ""
    message: str = ""


@dataclass
class PartitionInfo:
    name: str
    max_time_seconds: int | None  # None = UNLIMITED
    available: str = "up"


@dataclass(frozen=True)
class PartitionPolicy:
    """Which QOS a partition admits and what it adds to every job there (scontrol show partition):
    Slurm checks these only once the partition has nodes, so on a pool scaled to zero a job it will
    never start there still pends with PartitionConfig."""

    name: str
    allow_qos: frozenset[str] | None = None  # None: ALL
    deny_qos: frozenset[str] = frozenset()
    qos: str = ""  # the partition QOS: its limits apply to every job in the partition
    max_nodes: int | None = None  # None: UNLIMITED

    def admits(self, qos: str) -> bool:
        """False when the job's QOS is named by DenyQos or missing from AllowQos ('' = not known: True)."""
        if not qos:
            return True
        return qos not in self.deny_qos and (self.allow_qos is None or qos in self.allow_qos)


@dataclass(frozen=True)
class QosLimits:
    """The limits of one QOS that decide whether a job can ever start (sacctmgr show qos): TRES caps
    as {'gres/gpu': 16, 'node': 4} per job, per user and for the whole QOS, running jobs per user,
    and the wall time."""

    per_job: dict[str, int] = field(default_factory=dict)
    per_user: dict[str, int] = field(default_factory=dict)
    group: dict[str, int] = field(default_factory=dict)
    jobs_per_user: int | None = None
    max_wall_seconds: int | None = None


@dataclass
class Association:
    account: str
    qos: list[str] = field(default_factory=list)
