"""Parsing Slurm's output: one TRES/GRES parser, one duration parser, one job parser per query kind.

Lines are split on \\x1f. Fields a user writes (job name, comment) come LAST in every format and
are split off with ``maxsplit``: a name containing the separator, a newline or `=` cannot shift
the fields Slurm controls (job id, user, state). A line that still does not parse is counted in
``Rejects`` and skipped, never raised: one odd job must not blind `ls`, the exporter or cleanup.

Standard library only (the node hooks use it under the system python3).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from slurmctl.durations import parse_slurm_duration, parse_slurm_timestamp
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


def _elapsed_raw(text: str) -> int | None:
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class Field:
    attr: str  # Job attribute
    squeue_o: str | None  # squeue -o code
    squeue_O: str | None  # squeue -O name (only -O has tres-alloc)
    sacct: str | None  # sacct -o name
    convert: Callable[[str], object]
    free_text: bool = False  # written by users: must come last in every format
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
    Field("end_time", None, None, "End", parse_slurm_timestamp),
    Field("exit_code", None, None, "ExitCode", str),
    Field("user", "%u", "UserName", "User", str),
    Field("account", "%a", "Account", "Account", str),
    Field("qos", "%q", "QOS", "QOS", str),
    Field("tres", None, "tres-alloc", "AllocTRES", _text),
    Field("name", "%j", "Name", "JobName", str, free_text=True),
    Field("comment", "%k", "Comment", "Comment", _text, free_text=True),
]}


@dataclass(frozen=True)
class JobQuery:
    """One kind of job listing: which fields, in which order, from which command."""

    name: str
    attrs: tuple[str, ...]
    command: str  # "squeue -o" | "squeue -O" | "sacct"

    def __post_init__(self) -> None:
        fields = [FIELDS[a] for a in self.attrs]
        first_free = next((i for i, f in enumerate(fields) if f.free_text), len(fields))
        if any(not f.free_text for f in fields[first_free:]):
            raise ValueError(f"{self.name}: free-text fields must come last")
        # computed once: parse_line runs per line of a 10,000-job queue
        object.__setattr__(self, "_plan", (tuple(f.attr for f in fields),
                                           tuple(f.converter(self.command) for f in fields), first_free))

    @property
    def fields(self) -> list[Field]:
        return [FIELDS[a] for a in self.attrs]

    def format_argv(self) -> list[str]:
        """The format options of the command for these fields."""
        if self.command == "squeue -o":
            return ["-o", SEP.join(f.squeue_o for f in self.fields)]
        if self.command == "squeue -O":
            # empty ':' widths mean "no padding, no truncation"; -O ends every field with SEP
            return ["-O", ",".join(f"{f.squeue_O}:{SEP}" for f in self.fields)]
        return [f"--delimiter={SEP}", "-o", ",".join(f.sacct for f in self.fields)]

    def parse(self, stdout: str, rejects: Rejects, source: str = "squeue") -> list[Job]:
        return [job for job in (self.parse_line(line, rejects, source) for line in stdout.splitlines())
                if job is not None]

    def parse_line(self, line: str, rejects: Rejects | None, source: str = "squeue") -> Job | None:
        if not line.strip():
            return None
        attrs, converters, n_fixed = self._plan
        if self.command == "squeue -O":
            line = line.removesuffix(SEP)  # -O ends every field, the last one too, with SEP
        n_free = len(attrs) - n_fixed
        values = line.split(SEP, n_fixed) if n_free else line.split(SEP)
        if n_free and len(values) == n_fixed + 1:
            # the user-written tail: a separator inside a name would shift the comment, so the
            # tail must split into exactly the free fields asked for
            values = values[:n_fixed] + values[n_fixed].split(SEP)
        try:
            if len(values) != len(attrs):
                raise ValueError(f"{len(values)} fields, expected {len(attrs)}")
            kwargs = {attr: convert(v) for attr, convert, v in zip(attrs, converters, values)}
        except ValueError:
            if rejects is not None:
                rejects.add(self.name, line)
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


def rows(stdout: str, sep: str = "|") -> Iterable[list[str]]:
    """`sacctmgr -n -P` / `sreport -n -P` rows (no user-written fields in what slurmctl asks for)."""
    return (line.split(sep) for line in stdout.splitlines() if line.strip())


def first_line_id(stdout: str) -> str:
    """`sbatch --parsable` answers 'JOBID' or 'JOBID;CLUSTER' on its last line."""
    lines = stdout.strip().splitlines()
    return lines[-1].split(";", 1)[0] if lines else ""


def scontrol_pairs(line: str) -> dict[str, str] | None:
    """`scontrol show job -o` line -> {key: value}; None when a key appears twice.

    Values may contain spaces (WorkDir, StdOut, JobName), so a user can write 'x UserId=root(0)'
    into a job name or a path; Slurm prints every key once, so a repeated key means a forged one
    and the line is not trusted at all."""
    matches = list(_SCONTROL_KEY_RE.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        if m.group(1) in out:
            return None
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


_SCONTROL_KEY_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def columns(line: str, names: Sequence[str]) -> dict[str, str] | None:
    """A `-O`/`-o` line of Slurm-controlled fields only -> {name: value}; None if the count is off."""
    values = line.removesuffix(SEP).split(SEP)
    return dict(zip(names, values)) if len(values) == len(names) else None
