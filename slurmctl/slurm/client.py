"""SlurmClient: every Slurm command slurmctl runs goes through ``_run``.

Hot paths make one batched call with an ``-o`` format and a \\x1f separator (10x faster than
``--json`` on 22.05, see ../shared/slurm-local.md), and the same parsing works on Slurm 25.x.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from slurmctl.errors import SlurmCommandError, SlurmUnreachable
from slurmctl.slurm.runner import CommandResult, LocalRunner, Runner
from slurmctl.slurm.scontrol import JobInfo, job_info_from_output

SEP = "\x1f"

# squeue -o codes, in order; names are Job fields.
_SQUEUE_FIELDS = [
    ("job_id", "%i"), ("name", "%j"), ("state", "%T"), ("reason", "%r"), ("partition", "%P"),
    ("num_nodes", "%D"), ("nodelist", "%N"), ("elapsed", "%M"), ("time_limit", "%l"),
    ("submit_time", "%V"), ("start_time", "%S"), ("comment", "%k"), ("user", "%u"),
]
_SACCT_FIELDS = [
    ("job_id", "JobIDRaw"), ("name", "JobName"), ("state", "State"), ("reason", "Reason"),
    ("partition", "Partition"), ("num_nodes", "NNodes"), ("nodelist", "NodeList"),
    ("elapsed", "ElapsedRaw"), ("time_limit", "Timelimit"), ("submit_time", "Submit"),
    ("start_time", "Start"), ("end_time", "End"), ("exit_code", "ExitCode"), ("comment", "Comment"),
    ("user", "User"),
]
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Problem talking to the database|Zero Bytes were transmitted|Munge .*(?:failed|error)",
    re.IGNORECASE,
)
_GPU_RE = re.compile(r"gpu:(?:([A-Za-z0-9_.-]+):)?(\d+)")


def parse_slurm_duration(text: str) -> int | None:
    """'1-02:03:04', '02:03:04', '3:04', '45' (minutes for limits) -> seconds; None if unknown."""
    text = text.strip()
    if not text or text.upper() in {"INVALID", "UNLIMITED", "NOT_SET", "PARTITION_LIMIT", "N/A"}:
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts[-3:]
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _parse_time(text: str) -> datetime | None:
    text = text.strip()
    if not text or text in {"N/A", "Unknown", "None"}:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


@dataclass
class Job:
    """One Slurm job as slurmctl sees it (merged from squeue or sacct)."""

    job_id: int
    name: str
    state: str
    reason: str = ""
    partition: str = ""
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
    def run_id(self) -> str | None:
        return self.comment.removeprefix("slurmctl:") if self.comment.startswith("slurmctl:") else None

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("submit_time", "start_time", "end_time"):
            d[key] = d[key].isoformat() if d[key] else None
        return d


ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT",
})


@dataclass
class NodeInfo:
    name: str
    partitions: list[str] = field(default_factory=list)
    gpu_type: str | None = None
    gpus: int = 0
    cpus: int = 0
    memory_mb: int = 0
    state: str = ""


@dataclass
class QueueEntry:
    """One queued or running job, as the exporter needs it (lean: no names, no node lists)."""

    job_id: int
    state: str
    reason: str
    partitions: list[str]
    num_nodes: int
    gpus: int  # total GPUs requested (pending) or allocated (running), from tres-alloc
    submit_time: datetime | None
    start_time: datetime | None
    comment: str
    user: str

    @property
    def run_id(self) -> str | None:
        return self.comment.removeprefix("slurmctl:") if self.comment.startswith("slurmctl:") else None


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


@dataclass
class Association:
    account: str
    qos: list[str] = field(default_factory=list)


@dataclass
class QuotaJob:
    """One active job as quota usage counts it."""

    job_id: int
    state: str
    user: str
    account: str
    qos: str
    tres: str  # 'cpu=2,mem=1G,node=1,billing=2,gres/gpu=1'


@dataclass
class QueueView:
    """The queue as status/ls need it: the wanted jobs in full, every other job as a queue place."""

    jobs: dict[int, Job] = field(default_factory=dict)
    pending_by_partition: dict[str, list[int]] = field(default_factory=dict)  # squeue order, holds left out


_TEST_ONLY_RE = re.compile(r"to start at (\S+) using \d+ processors on nodes (\S+) in partition (\S+)")


class SlurmClient:
    def __init__(self, runner: Runner | None = None):
        self.runner = runner or LocalRunner()

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

    # --- submission and control -------------------------------------------------------------
    def submit(self, script: Path, extra_args: Sequence[str] = ()) -> int:
        """sbatch the script; extra_args come before the script so they override #SBATCH lines."""
        result = self._run(["sbatch", "--parsable", *extra_args, str(script)])
        first = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        job_id = first.split(";", 1)[0]
        if not job_id.isdigit():
            raise SlurmCommandError(f"sbatch answered something unexpected: {result.stdout!r}.",
                                    "Check `sbatch --version` and the cluster's job_submit plugins.")
        return int(job_id)

    # --- dev sessions (issue 9) ----------------------------------------------------------------------
    def submit_wrapped(self, sbatch_args: Sequence[str], environment: dict[str, str] | None = None) -> int:
        """`sbatch --parsable ARGS` (with --wrap among them); `environment` reaches the job via `env`."""
        prefix = ["env", *(f"{k}={v}" for k, v in (environment or {}).items())] if environment else []
        result = self._run([*prefix, "sbatch", "--parsable", *sbatch_args])
        job_id = result.stdout.strip().splitlines()[-1].split(";", 1)[0] if result.stdout.strip() else ""
        if not job_id.isdigit():
            raise SlurmCommandError(f"sbatch answered something unexpected: {result.stdout!r}.",
                                    "Check `sbatch --version` and the cluster's job_submit plugins.")
        return int(job_id)

    def interactive(self, argv: list[str]) -> int:
        """An interactive Slurm command (`srun --pty ...`) on the user's terminal; its exit code."""
        return self.runner.attach(argv)

    def cancel(self, job_id: int, signal: str | None = None, batch_only: bool = False, full: bool = False) -> None:
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal}")
        if batch_only:
            argv.append("--batch")
        if full:
            argv.append("--full")
        self._run([*argv, str(job_id)])

    def cancel_many(self, job_ids: Iterable[int], chunk: int = 1000) -> None:
        """scancel many jobs, 1,000 ids per call (~0.8 s each on 22.05)."""
        ids = [str(int(j)) for j in job_ids]
        for start in range(0, len(ids), chunk):
            self._run(["scancel", *ids[start:start + chunk]])

    # --- reliability (issue 3): requeue, update, release, time left --------------------------------
    def requeue(self, job_id: int) -> None:
        """`scontrol requeue`: needs Requeue=1 on the job; the next attempt waits ~120 s (BeginTime)."""
        self._run(["scontrol", "requeue", str(job_id)])

    def update_job(self, job_id: int, **fields: str | int) -> None:
        """`scontrol update JobId=N Key=Value ...`, e.g. update_job(7, Requeue=1, StartTime="now")."""
        self._run(["scontrol", "update", f"JobId={job_id}", *(f"{k}={v}" for k, v in fields.items())])

    def release(self, job_id: int) -> None:
        self._run(["scontrol", "release", str(job_id)])

    def time_left_seconds(self, job_id: int) -> int | None:
        result = self._run(["squeue", "-h", "-j", str(job_id), "-o", "%L"], check=False)
        return parse_slurm_duration(result.stdout) if result.returncode == 0 else None

    # --- steps and holds (watchdog, cleanup: issue 6) -------------------------------------------
    def job_steps(self, job_id: int) -> list[str]:
        """The job's srun steps ('123.0', ...), without the batch and extern steps."""
        result = self._run(["squeue", "-h", "-s", "-j", str(job_id), "-o", "%i"], check=False)
        steps = [s.strip() for s in result.stdout.split() if s.strip()]
        return [s for s in steps if s.rsplit(".", 1)[-1].isdigit()]

    def cancel_step(self, step: str) -> None:
        """End one step (SIGTERM, then SIGKILL after KillWait); the batch shell goes on."""
        self._run(["scancel", step])

    # --- node-side hooks (Prolog/Epilog: slurmctl.ops.hooks) ----------------------------------------
    def job_info(self, job_id: int, timeout: float = 60.0) -> JobInfo | None:
        """`scontrol show job -o JOB` (~5-25 ms); None when the controller no longer knows the job."""
        try:
            result = self._run(["scontrol", "show", "job", "-o", str(job_id)], timeout=timeout)
        except SlurmCommandError as exc:
            if "invalid job id" in exc.message.lower():
                return None
            raise
        return job_info_from_output(job_id, result.stdout)

    def node_job_ids(self, node: str, timeout: float = 60.0) -> set[int]:
        """Jobs Slurm still runs on `node` (running, completing, configuring, suspended). %A, not %i:
        an array task's own job id, the SLURM_JOB_ID its processes carry (%i says <array id>_<task>)."""
        result = self._run(["squeue", "-h", "-o", "%A", "-w", node, "-t", "R,CG,CF,S"], timeout=timeout)
        return {int(x) for x in result.stdout.split() if x.isdigit()}

    _CONFIRM_FIELDS = ["%A", "%U", "%T", "%r", "%P", "%M", "%k"]

    def confirm_job(self, job_id: int, timeout: float = 30.0) -> Job | None:
        """ONE job as the controller sees it now, for root about to act on it (cleanup's scancel).

        Only fixed-format fields, the owner as a numeric uid (`user` holds it, from %U), and the
        one free-text field, the comment, LAST and split off with maxsplit: a job name or comment
        holding newlines or separators cannot forge another job's line here. None when squeue no
        longer lists the job, or its answer is not this job's."""
        fmt = SEP.join(self._CONFIRM_FIELDS)
        try:
            result = self._run(["squeue", "-h", "-j", str(job_id), "-o", fmt], timeout=timeout)
        except SlurmCommandError as exc:
            if "invalid job id" in exc.message.lower():
                return None
            raise
        values = result.stdout.removesuffix("\n").split(SEP, len(self._CONFIRM_FIELDS) - 1)
        if len(values) != len(self._CONFIRM_FIELDS) or values[0] != str(job_id) or not values[1].isdigit():
            return None
        _, uid, state, reason, partition, elapsed, comment = values
        return Job(job_id=job_id, name="", state=state, reason=reason if reason not in {"None", "(null)"} else "",
                   partition=partition, elapsed_seconds=parse_slurm_duration(elapsed),
                   comment=comment if comment != "(null)" else "", user=uid, source="squeue")

    def drain_node(self, node: str, reason: str, timeout: float = 60.0) -> None:
        """Drain `node` with `reason` (shown by `sinfo -R`; Slurm keeps 250 characters or so)."""
        self._run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"], timeout=timeout)

    # --- queries ------------------------------------------------------------------------------
    def queue(self, mine: bool = True) -> list[Job]:
        """Active jobs, one squeue call."""
        fmt = SEP.join(code for _, code in _SQUEUE_FIELDS)
        argv = ["squeue", "-h", "-o", fmt]
        if mine:
            argv.append("--me")
        result = self._run(argv)
        # A job name or comment may hold a newline: its pieces are no lines of their own; skip them.
        return [self._job_from_squeue(line) for line in result.stdout.splitlines()
                if line.count(SEP) == len(_SQUEUE_FIELDS) - 1 and line.split(SEP, 1)[0].split("_")[0].isdigit()]

    def queue_view(self, job_ids: Iterable[int]) -> QueueView:
        """One squeue of every user's jobs, fully parsed only for `job_ids` (status/ls at scale: building
        a Job per line costs more than squeue itself with 1,000 jobs); the rest only feeds queue positions."""
        wanted = {int(j) for j in job_ids}
        result = self._run(["squeue", "-h", "-o", SEP.join(code for _, code in _SQUEUE_FIELDS)])
        view = QueueView()
        for line in result.stdout.splitlines():
            job_id, _name, state, reason, partition, _rest = (line.split(SEP, 5) + [""] * 6)[:6]
            job_id = job_id.split("_")[0]
            if not job_id.isdigit():
                continue
            if int(job_id) in wanted:
                view.jobs[int(job_id)] = self._job_from_squeue(line)
            if state == "PENDING" and not reason.startswith("JobHeld"):
                view.pending_by_partition.setdefault(partition.split(",")[0], []).append(int(job_id))
        return view

    def history(self, job_ids: Iterable[int]) -> list[Job]:
        """Accounting records (one row per job: the latest attempt), one sacct call."""
        ids = sorted({int(j) for j in job_ids})
        if not ids:
            return []
        fmt = ",".join(name for _, name in _SACCT_FIELDS)
        result = self._run(["sacct", "-n", "-P", "-X", f"--delimiter={SEP}", "-o", fmt,
                            "-j", ",".join(map(str, ids))])
        jobs = [self._job_from_sacct(line) for line in result.stdout.splitlines() if line.strip()]
        return [j for j in jobs if j is not None]

    def all_attempts(self, fields: Sequence[str], *, start: datetime, end: datetime,
                     job_ids: Iterable[int] = ()) -> list[str]:
        """Raw sacct lines for every attempt (--duplicates) of every user's job: the cost ledger's input."""
        argv = ["sacct", "-a", "-X", "--duplicates", "-n", "-P", f"--delimiter={SEP}", "-o", ",".join(fields)]
        ids = ",".join(map(str, job_ids))
        argv += ["-j", ids] if ids else ["-S", start.isoformat(timespec="seconds"),
                                         "-E", end.isoformat(timespec="seconds")]
        return self._run(argv, timeout=600).stdout.splitlines()

    def gpu_utilization(self, start: datetime, end: datetime) -> dict[str, float]:
        """Cluster GPU-hours allocated/down/idle from sreport (complete hours only: slurmdbd rolls up hourly)."""
        result = self._run(["sreport", "-n", "-P", "cluster", "Utilization", "-T", "gres/gpu", "-t", "hours",
                            f"start={start.isoformat(timespec='seconds')}", f"end={end.isoformat(timespec='seconds')}"])
        names = ["allocated", "down", "planned_down", "idle", "planned", "reported"]
        for line in result.stdout.splitlines():
            parts = line.split("|")
            if len(parts) >= 8 and parts[1] == "gres/gpu":
                return {n: float(v) for n, v in zip(names, parts[2:8]) if v.replace(".", "", 1).isdigit()}
        return {}

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

    def nodes(self) -> list[NodeInfo]:
        """Every node with its partitions and GPUs, one sinfo call."""
        fmt = SEP.join(["%N", "%P", "%G", "%c", "%m", "%T"])
        result = self._run(["sinfo", "-h", "-N", "-o", fmt])
        by_name: dict[str, NodeInfo] = {}
        for line in result.stdout.splitlines():
            if not line.strip():
                continue
            name, partition, gres, cpus, mem, state = line.split(SEP)
            node = by_name.setdefault(name, NodeInfo(name=name))
            node.partitions.append(partition.rstrip("*"))
            m = _GPU_RE.search(gres)
            if m:
                node.gpu_type, node.gpus = m.group(1), int(m.group(2))
            node.cpus = int(cpus) if cpus.isdigit() else 0
            node.memory_mb = int(mem) if mem.isdigit() else 0
            node.state = state
        return list(by_name.values())

    # --- monitoring snapshot (the exporter: one call each per interval) ------------------------
    # squeue -O (not -o) because only -O has tres-alloc, which counts GPUs however they were asked
    # for (--gres, --gpus, --gpus-per-node); empty ':' widths mean "no padding, no truncation".
    _QUEUE_SNAPSHOT_FIELDS = ["JobID", "State", "Reason", "Partition", "NumNodes", "tres-alloc",
                              "SubmitTime", "StartTime", "Comment", "UserName"]
    _NODE_USAGE_FIELDS = ["NodeList", "Partition", "Gres", "GresUsed", "StateLong", "Reason"]

    def queue_filtered(self, partitions: Sequence[str] = (), users: Sequence[str] = (),
                       states: Sequence[str] = ()) -> list[Job]:
        """The whole queue like `squeue -p/-u/-t` (issue 4: `slurmctl queue`), one squeue call."""
        argv = ["squeue", "-h", "-o", SEP.join(code for _, code in _SQUEUE_FIELDS)]
        for flag, values in (("-p", partitions), ("-u", users), ("-t", states)):
            if values:
                argv += [flag, ",".join(values)]
        result = self._run(argv)
        return [self._job_from_squeue(line) for line in result.stdout.splitlines() if line.strip()]

    def queue_snapshot(self) -> list[QueueEntry]:
        """Every active job of every user, one squeue call."""
        fmt = ",".join(f"{name}:{SEP}" for name in self._QUEUE_SNAPSHOT_FIELDS)
        result = self._run(["squeue", "-h", "-O", fmt])
        entries = []
        for line in result.stdout.splitlines():
            values = line.split(SEP)
            if len(values) < len(self._QUEUE_SNAPSHOT_FIELDS) or not values[0].split("_")[0].isdigit():
                continue
            job_id, state, reason, partition, nodes, tres, submit, start, comment, user = values[:10]
            gpus = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
            entries.append(QueueEntry(
                job_id=int(job_id.split("_")[0]), state=state,
                reason=reason if reason not in {"None", "(null)"} else "",
                partitions=[p for p in partition.split(",") if p], num_nodes=int(nodes) if nodes.isdigit() else 0,
                gpus=int(gpus.group(1)) if gpus else 0, submit_time=_parse_time(submit),
                start_time=_parse_time(start), comment=comment if comment != "(null)" else "", user=user,
            ))
        return entries

    def node_usage(self) -> list[NodeUsage]:
        """GPUs configured/in use, state and reason of every (node, partition), one sinfo call."""
        fmt = ",".join(f"{name}:{SEP}" for name in self._NODE_USAGE_FIELDS)
        result = self._run(["sinfo", "-h", "-N", "-O", fmt])
        rows = []
        for line in result.stdout.splitlines():
            values = line.split(SEP)
            if len(values) < len(self._NODE_USAGE_FIELDS):
                continue
            name, partition, gres, gres_used, state, reason = values[:6]
            total, used = _GPU_RE.search(gres), _GPU_RE.search(gres_used)
            rows.append(NodeUsage(
                name=name, partition=partition.rstrip("*"), gpu_type=total.group(1) if total else None,
                gpus=int(total.group(2)) if total else 0, gpus_used=int(used.group(2)) if used else 0,
                state=state, reason=reason if reason not in {"none", "None", "(null)"} else "",
            ))
        return rows

    # --- preflight and placement (issue 5) ----------------------------------------------------
    def test_only(self, script: Path | None, args: Sequence[str] = ()) -> StartEstimate:
        """`sbatch --test-only`: submits nothing; a refusal is an answer, not an error.
        With script=None the options in `args` describe the job (no file needed on a remote login node)."""
        argv = ["sbatch", "--test-only", *args, str(script) if script else "--wrap=true"]
        for pause in (0.5, 1.0, 2.0, None):
            try:
                result = self._run(argv)
                break
            except SlurmCommandError as exc:
                message = exc.message.removeprefix("`sbatch` failed: ").rstrip(".")
                if pause is None or "temporarily unavailable" not in message:  # EAGAIN: slurmctld busy, retry
                    return StartEstimate(ok=False, message=message)
                time.sleep(pause)
        text = f"{result.stderr}\n{result.stdout}"
        m = _TEST_ONLY_RE.search(text)
        if not m:
            return StartEstimate(ok=False, message=text.strip() or "sbatch --test-only gave no estimate")
        return StartEstimate(ok=True, start_time=_parse_time(m.group(1)), nodes=m.group(2), partition=m.group(3))

    def partitions(self) -> dict[str, PartitionInfo]:
        """Each partition's MaxTime and availability, one sinfo call."""
        result = self._run(["sinfo", "-h", "-o", SEP.join(["%R", "%l", "%a"])])
        found = {}
        for line in result.stdout.splitlines():
            if line.count(SEP) == 2:
                name, limit, available = line.split(SEP)
                found[name] = PartitionInfo(name, parse_slurm_duration(limit), available)
        return found

    def associations(self, user: str) -> list[Association]:
        """Accounts (with their QOS) the user may submit to, one sacctmgr call."""
        result = self._run(["sacctmgr", "-n", "-P", "show", "associations", f"user={user}", "format=account,qos"])
        rows = [line.split("|") for line in result.stdout.splitlines() if line.strip()]
        return [Association(r[0], [q for q in r[1].split(",") if q] if len(r) > 1 else []) for r in rows if r[0]]

    # --- quota numbers (issue 4: status of a job pending for a QOS*/Assoc* limit) --------------
    def quota_jobs(self) -> list[QuotaJob]:
        """Every active job's user, account, QOS and TRES (requested if pending), one squeue call."""
        names = ["JobID", "State", "UserName", "Account", "QOS", "tres-alloc"]
        result = self._run(["squeue", "-h", "-O", ",".join(f"{n}:{SEP}" for n in names)])
        rows = [line.split(SEP) for line in result.stdout.splitlines()]
        return [QuotaJob(int(r[0].split("_")[0]), *r[1:6]) for r in rows
                if len(r) >= 6 and r[0].split("_")[0].isdigit()]

    def qos_limits(self, qos: str, fields: Sequence[str]) -> dict[str, str]:
        """{field: raw value} of one QOS from sacctmgr (e.g. MaxTRESPU -> 'gres/gpu=1')."""
        result = self._run(["sacctmgr", "-n", "-P", "show", "qos", f"name={qos}", f"format=Name,{','.join(fields)}"])
        for line in result.stdout.splitlines():
            values = line.split("|")
            if values[0] == qos:
                return dict(zip(fields, values[1:]))
        return {}

    def assoc_limits(self, account: str, fields: Sequence[str]) -> dict[str, dict[str, str]]:
        """{user ('' = the account's own row): {field: raw value}} for one account, one sacctmgr call."""
        result = self._run(["sacctmgr", "-n", "-P", "show", "associations", f"account={account}",
                            f"format=Account,User,{','.join(fields)}"])
        rows = {}
        for line in result.stdout.splitlines():
            values = line.split("|")
            if len(values) >= 2 and values[0] == account:
                rows[values[1]] = dict(zip(fields, values[2:]))
        return rows

    # --- parsing ------------------------------------------------------------------------------
    @staticmethod
    def _job_from_squeue(line: str) -> Job:
        values = dict(zip((n for n, _ in _SQUEUE_FIELDS), line.split(SEP)))
        return Job(
            job_id=int(values["job_id"].split("_")[0]),
            name=values["name"],
            state=values["state"],
            reason=values["reason"] if values["reason"] not in {"None", "(null)"} else "",
            partition=values["partition"],
            num_nodes=int(values["num_nodes"]) if values["num_nodes"].isdigit() else 0,
            nodelist=values["nodelist"],
            elapsed_seconds=parse_slurm_duration(values["elapsed"]),
            time_limit_seconds=parse_slurm_duration(values["time_limit"]),
            submit_time=_parse_time(values["submit_time"]),
            start_time=_parse_time(values["start_time"]),
            comment=values["comment"] if values["comment"] != "(null)" else "",
            user=values["user"],
            source="squeue",
        )

    @staticmethod
    def _job_from_sacct(line: str) -> Job | None:
        values = dict(zip((n for n, _ in _SACCT_FIELDS), line.split(SEP)))
        if not values.get("job_id", "").isdigit():
            return None
        state = values["state"].split(" ")[0]  # "CANCELLED by 0" -> CANCELLED
        limit = values["time_limit"]
        return Job(
            job_id=int(values["job_id"]),
            name=values["name"],
            state=state,
            reason=values["reason"] if values["reason"] not in {"None", "(null)"} else "",
            partition=values["partition"],
            num_nodes=int(values["num_nodes"]) if values["num_nodes"].isdigit() else 0,
            nodelist=values["nodelist"] if values["nodelist"] != "None assigned" else "",
            elapsed_seconds=int(values["elapsed"]) if values["elapsed"].isdigit() else None,
            time_limit_seconds=parse_slurm_duration(limit),
            submit_time=_parse_time(values["submit_time"]),
            start_time=_parse_time(values["start_time"]),
            end_time=_parse_time(values["end_time"]),
            exit_code=values["exit_code"],
            comment=values["comment"],
            user=values["user"],
            source="sacct",
        )
