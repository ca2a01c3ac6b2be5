"""SlurmClient: every Slurm command slurmctl runs goes through ``_run``.

Hot paths make one batched call with an ``-o`` format and a \\x1f separator (10x faster than
``--json`` on 22.05, see ../shared/slurm-local.md), and the same parsing works on Slurm 25.x.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from ..errors import SlurmCommandError, SlurmUnreachable
from .runner import CommandResult, LocalRunner, Runner

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

    def cancel(self, job_id: int, signal: str | None = None, batch_only: bool = False, full: bool = False) -> None:
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal}")
        if batch_only:
            argv.append("--batch")
        if full:
            argv.append("--full")
        self._run([*argv, str(job_id)])

    # --- queries ------------------------------------------------------------------------------
    def queue(self, mine: bool = True) -> list[Job]:
        """Active jobs, one squeue call."""
        fmt = SEP.join(code for _, code in _SQUEUE_FIELDS)
        argv = ["squeue", "-h", "-o", fmt]
        if mine:
            argv.append("--me")
        result = self._run(argv)
        return [self._job_from_squeue(line) for line in result.stdout.splitlines() if line.strip()]

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
