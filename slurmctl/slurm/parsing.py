"""Parsing Slurm's output: one TRES/GRES parser, one duration parser, one job parser per query kind.

Slurm prints a job name, comment, work dir or output path as the user wrote it, any byte included,
so every job listing is sealed per call (see new_seal): fields and records end in a secret the
user never saw, and no user-written field can end a field or forge a record. A record that does
not parse is counted in ``Rejects`` and skipped (one odd job must not blind `ls`, the exporter or
cleanup); a job listed twice is a forgery and the answer is refused (``listed_twice``).
`scontrol show job` cannot be sealed (it prints `Key=Value` pairs, user values unquoted), so no
reader uses it: the hooks' job facts come from a sealed squeue record (SlurmClient.job_info).

Standard library only (the node hooks use it under the system python3).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from slurmctl.durations import parse_slurm_duration, parse_slurm_timestamp
from slurmctl.errors import ForgedSlurmOutput
from slurmctl.slurm.records import Job

SEP = "\x1f"
_NULL = frozenset({"None", "(null)", "none"})


# --- GRES (TRES is records.tres_gpus) ---------------------------------------------------------

_GRES_GPU_RE = re.compile(r"(?:^|,)gpu(?::([A-Za-z0-9_.-]+))?:(\d+)")


def gres_gpus(gres: str) -> tuple[int, str | None]:
    """GPUs in a GRES string (sinfo %G / Gres / GresUsed): 'gpu:h100:8(S:0-1)' -> (8, 'h100'),
    'gpu:8' -> (8, None), 'gpu:h100:2(IDX:0-1),gpu:l4:1' -> (3, 'h100'); (0, None) without GPUs."""
    total, model = 0, None
    for m in _GRES_GPU_RE.finditer(gres):
        total += int(m.group(2))
        model = model or m.group(1)
    return total, model


def parse_tres(text: str) -> dict[str, float]:
    """'cpu=4,gres/gpu=1,mem=8G' -> {'cpu': 4, 'gres/gpu': 1, 'mem': 8192} (mem in MB)."""
    out: dict[str, float] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if not value:
            continue
        scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(value[-1:].upper())
        try:
            out[key.strip()] = float(value[:-1] if scale else value) * (scale or 1)
        except ValueError:
            continue
    return out


# --- rejected lines ---------------------------------------------------------------------------

@dataclass
class Rejects:
    """Lines of Slurm output that did not parse, per query (kept to a few samples)."""

    counts: dict[str, int] = field(default_factory=dict)
    samples: list[str] = field(default_factory=list)

    def add(self, query: str, line: str) -> None:
        self.counts[query] = self.counts.get(query, 0) + 1
        if len(self.samples) < 5:
            self.samples.append(f"{query}: {line[:200]!r}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())


# --- sealed records: what no user-written field can forge ------------------------------------

FIELD_MARK, RECORD_MARK = "\x1f", "\x1e"


def new_seal() -> str:
    """A fresh secret for ONE Slurm call, part of every separator that call prints.

    A job name or comment may hold any byte, newlines and our marks included, but not a secret it
    never saw: without it, no user-written field can end a field or a record, so it cannot forge a
    field of its own job or a whole record of someone else's. (The seal is in the command's argv
    for the few milliseconds it runs; a record forged by racing that is caught as a job listed twice.)"""
    return secrets.token_hex(8)


def field_separator(seal: str) -> str:
    return FIELD_MARK + seal


def record_end(seal: str) -> str:
    return RECORD_MARK + seal


def split_terminated(stdout: str, seal: str, n_fields: int, query: str,
                     rejects: Rejects | None) -> Iterator[list[str]]:
    """squeue output whose every record ends with ``record_end(seal)`` (and squeue's newline)."""
    fs, chunks = field_separator(seal), stdout.split(record_end(seal))
    for i, chunk in enumerate(chunks):
        if i:
            chunk = chunk.removeprefix("\n")
        if i == len(chunks) - 1 and not chunk.strip():
            break  # what follows the last record: squeue's final newline
        values = chunk.split(fs)
        if len(values) == n_fields:
            yield values
        elif rejects is not None:
            rejects.add(query, chunk)


def split_id_closed(stdout: str, seal: str, n_fields: int, query: str,
                    rejects: Rejects | None) -> Iterator[list[str]]:
    """sacct output (`--delimiter=field_separator(seal)`, no way to print a record end) whose
    records repeat their job id as the LAST field: Slurm ends a record with a bare newline, which a
    user field may hold too, so a record is closed by '<its own id>\\n' right after its last
    separator. Returns each record's fields without the closing id; output that does not follow
    this shape is rejected from the first record that breaks it on."""
    if not stdout.strip():
        return
    tokens = stdout.split(field_separator(seal))
    first, at = tokens[0], 1
    while True:
        values = [first, *tokens[at:at + n_fields - 1]]
        closing, newline, first = values[-1].partition("\n") if len(values) == n_fields else ("", "", "")
        if not newline or closing != values[0]:
            if rejects is not None:
                rejects.add(query, field_separator(seal).join(tokens[at - 1:]))
            return
        yield values[:-1]
        at += n_fields - 1
        if at >= len(tokens):
            if first.strip() and rejects is not None:
                rejects.add(query, first)
            return


def _resized_in_accounting(query: JobQuery, resized: bool, earlier: Job, later: Job) -> bool:
    """A job whose size changed (a node lost under `--no-kill`, `scontrol update NumNodes=`) keeps
    a RESIZING record in accounting beside its others, and `sacct -X` lists them all under one id
    (22.05 also leaves a second record of the cancelled job). That repeat is Slurm's, not a forgery;
    the record that started last stands for the job."""
    return query.command == "sacct" and (resized or "RESIZING" in (earlier.state, later.state))


def _started(job: Job) -> float:
    return job.start_time.timestamp() if job.start_time else 0.0


def listed_twice(query: JobQuery, job_id: int, rejects: Rejects) -> ForgedSlurmOutput:
    """The error for a job a listing shows twice: a record forged into a user-written field (by a
    user who raced the seal); which of the two Slurm wrote cannot be told, so neither is believed."""
    rejects.add(f"{query.name}:duplicate", str(job_id))
    return ForgedSlurmOutput(
        f"`{query.command.split()[0]}` listed job {job_id} twice: a job name or comment carries a forged "
        "record, so this answer is not used.",
        f"Tell your admin: `squeue -j {job_id}` and `sacct -j {job_id}` show whose jobs these are.")


# --- one job parser, driven by the query's field list -----------------------------------------

def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0


def _text(text: str) -> str:
    return "" if text in _NULL else text


def _job_id(text: str) -> int:
    """'123' -> 123. squeue is asked with %A, which prints an array task's own job id (the one in
    SLURM_JOB_ID, its log name and sacct's JobIDRaw); %i would print '123_4' for every task of
    array 123. A still-pending rest of an array ('123_[2-5%2]') has the array's id under %A."""
    head = text.split("_", 1)[0]
    if not head.isdigit():
        raise ValueError(f"job id {text!r}")
    return int(head)


def _wait_status(text: str) -> str:
    """squeue -O exit_code prints the raw wait status ('768'); as sacct and scontrol say it: '3:0'
    (exit code, then the signal that ended it)."""
    if not text.isdigit():
        return text
    status = int(text)
    return f"{(status >> 8) & 0xFF}:{status & 0x7F}"


def _elapsed_raw(text: str) -> int | None:
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class Field:
    attr: str  # Job attribute
    squeue_o: str | None  # squeue -o code
    squeue_O: str | None  # squeue -O name (only -O has tres-alloc)
    sacct: str | None  # sacct -o name
    convert: Callable[[str], object]
    sacct_convert: Callable[[str], object] | None = None  # where sacct prints it differently

    def converter(self, command: str) -> Callable[[str], object]:
        return self.sacct_convert if command == "sacct" and self.sacct_convert else self.convert


FIELDS = {f.attr: f for f in [
    Field("job_id", "%A", "JobID", "JobIDRaw", _job_id),
    Field("state", "%T", "State", "State", lambda s: s.split(" ")[0]),  # sacct: "CANCELLED by 0"
    Field("reason", "%r", "Reason", "Reason", _text),
    Field("partition", "%P", "Partition", "Partition", str),
    Field("num_nodes", "%D", "NumNodes", "NNodes", _int),
    Field("nodelist", "%N", "NodeList", "NodeList", lambda s: "" if s == "None assigned" else s),
    Field("elapsed_seconds", "%M", "TimeUsed", "ElapsedRaw", parse_slurm_duration, sacct_convert=_elapsed_raw),
    Field("time_limit_seconds", "%l", "TimeLimit", "Timelimit", parse_slurm_duration),
    Field("submit_time", "%V", "SubmitTime", "Submit", parse_slurm_timestamp),
    Field("start_time", "%S", "StartTime", "Start", parse_slurm_timestamp),
    Field("end_time", None, "EndTime", "End", parse_slurm_timestamp),
    Field("exit_code", None, "exit_code", "ExitCode", _wait_status, sacct_convert=str),
    Field("user", "%u", "UserName", "User", str),
    Field("uid", "%U", None, "UID", lambda s: int(s) if s.isdigit() else None),
    Field("account", "%a", "Account", "Account", str),
    Field("qos", "%q", "QOS", "QOS", str),
    Field("tres", None, "tres-alloc", "AllocTRES", _text),
    # what is left of the job's dependency ('afterok:12(unfulfilled)'); Slurm removes what is met
    Field("dependency", None, "Dependency", None, _text),
    # the GPU model a job asked for: tres-alloc names it only where AccountingStorageTRES tracks the
    # typed GPU (production tracks gres/gpu alone)
    Field("tres_per_node", None, "tres-per-node", None, lambda s: "" if s in _NULL or s == "N/A" else s),
    # a pending array's rest ('0-9,15%2'); 'N/A' for any other job
    Field("array_tasks", None, "ArrayTaskID", None, lambda s: "" if s in _NULL or s == "N/A" else s),
    # an array task as Slurm names it, '<array id>_<index>' ('4341_2'; the pending rest '4341_[2-5%2]'),
    # a plain job's own id otherwise: what %A and %a in its output pattern stand for
    Field("array_ref", None, "JobArrayID", "JobID", _text),
    Field("restarts", None, "RestartCnt", None, _int),
    # set when Slurm chose the job for preemption; kept while the requeued job completes, gone once PENDING
    Field("preempt_time", None, "PreemptTime", None, parse_slurm_timestamp),
    Field("batch_host", None, "BatchHost", None, lambda s: "" if s in _NULL or s == "n/a" else s),
    # written by users: any byte, our marks included (the seal keeps them inside their field)
    Field("name", "%j", "Name", "JobName", str),
    Field("comment", "%k", "Comment", "Comment", _text),
    Field("work_dir", None, "WorkDir", "WorkDir", _text),
    Field("std_out", None, "STDOUT", None, _text),
    Field("std_err", None, "STDERR", None, _text),
    # the sbatch command line as the user typed it (22.05's sacct keeps no StdOut: where the output went
    # is read from here, and from the script it names)
    Field("submit_line", None, None, "SubmitLine", _text),
]}


@dataclass(frozen=True)
class JobQuery:
    """One kind of job listing: which fields, in which order, from which command, sealed per call
    (see new_seal): every caller passes the seal it put into ``format_argv`` to ``parse``."""

    name: str
    attrs: tuple[str, ...]
    command: str  # "squeue -o" | "squeue -O" | "sacct"

    def __post_init__(self) -> None:
        fields = [FIELDS[a] for a in self.attrs]
        # computed once: parsing runs per record of a 10,000-job queue
        object.__setattr__(self, "_plan", (tuple(f.attr for f in fields),
                                           tuple(f.converter(self.command) for f in fields)))

    @property
    def fields(self) -> list[Field]:
        return [FIELDS[a] for a in self.attrs]

    def format_argv(self, seal: str) -> list[str]:
        """The format options of the command for these fields, sealed with `seal`."""
        fs, end = field_separator(seal), record_end(seal)
        if self.command == "squeue -o":
            return ["-o", fs.join(f.squeue_o for f in self.fields) + end]
        if self.command == "squeue -O":
            # 'Name:<suffix>': no width (no padding, no truncation), then our separator after it
            names = [f.squeue_O for f in self.fields]
            return ["-O", ",".join([*(f"{n}:{fs}" for n in names[:-1]), f"{names[-1]}:{end}"])]
        return [f"--delimiter={fs}", "-o", ",".join([*(f.sacct for f in self.fields), "JobIDRaw"])]

    def records(self, stdout: str, seal: str, rejects: Rejects | None) -> Iterator[list[str]]:
        """The raw field values of each record, in ``attrs`` order."""
        if self.command == "sacct":
            return split_id_closed(stdout, seal, len(self.attrs) + 1, self.name, rejects)
        return split_terminated(stdout, seal, len(self.attrs), self.name, rejects)

    def parse(self, stdout: str, seal: str, rejects: Rejects, source: str = "squeue") -> list[Job]:
        """Every record as a Job; a job listed twice raises ForgedSlurmOutput (see listed_twice).
        A record is its job id and, where the query asks, its array task id: `squeue -r` prints the
        array's id for every task still pending (and for the task that starts last), told apart only
        by ArrayTaskID."""
        jobs: dict[tuple[int, str], Job] = {}
        resized: set[tuple[int, str]] = set()
        for values in self.records(stdout, seal, rejects):
            job = self.parse_values(values, rejects, source)
            if job is None:
                continue
            key = (job.job_id, job.array_tasks)
            if key in jobs:
                if not _resized_in_accounting(self, key in resized, jobs[key], job):
                    raise listed_twice(self, job.job_id, rejects)
                resized.add(key)
                if _started(job) >= _started(jobs[key]):
                    jobs[key] = job
                continue
            jobs[key] = job
        return list(jobs.values())

    def parse_values(self, values: Sequence[str], rejects: Rejects | None, source: str = "squeue") -> Job | None:
        attrs, converters = self._plan
        try:
            kwargs = {attr: convert(v) for attr, convert, v in zip(attrs, converters, values, strict=True)}
        except ValueError:
            if rejects is not None:
                rejects.add(self.name, FIELD_MARK.join(values))
            return None
        return Job(**kwargs, source=source)


def job_ids(stdout: str, rejects: Rejects, query: str) -> set[int]:
    """One job id per line (squeue -o %A)."""
    found = set()
    for line in stdout.split():
        if line.isdigit():
            found.add(int(line))
        else:
            rejects.add(query, line)
    return found


def tres_counts(text: str) -> dict[str, int]:
    """A TRES limit as sacctmgr prints it -> counts: 'gres/gpu=16,node=4' -> {'gres/gpu': 16, 'node': 4}.
    Entries that are not 'name=<count>' (an empty field, a memory size such as 'mem=4G') are left out."""
    found = {}
    for item in text.split(","):
        key, _, value = item.strip().partition("=")
        if key and value.isdigit():
            found[key] = int(value)
    return found


def rows(stdout: str, sep: str = "|") -> Iterable[list[str]]:
    """`sacctmgr -n -P` / `sreport -n -P` rows (no user-written fields in what slurmctl asks for)."""
    return (line.split(sep) for line in stdout.splitlines() if line.strip())


def first_line_id(stdout: str) -> str:
    """`sbatch --parsable` answers 'JOBID' or 'JOBID;CLUSTER' on its last line."""
    lines = stdout.strip().splitlines()
    return lines[-1].split(";", 1)[0] if lines else ""


def columns(line: str, names: Sequence[str]) -> dict[str, str] | None:
    """A `-O`/`-o` line of Slurm-controlled fields only -> {name: value}; None if the count is off."""
    values = line.removesuffix(SEP).split(SEP)
    return dict(zip(names, values)) if len(values) == len(names) else None
