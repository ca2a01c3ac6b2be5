"""Our words in Slurm's fields.

The drain reason is the record of who drained a node and why: `slurmctl:[<blame>] <check>: <detail>`.
Only a reason with this prefix is ours. Everything else (an operator's "maint", Slurm's own "Prolog
error", "Kill task failed") belongs to someone else and is never changed or resumed by us.

Our health jobs say their outcome in their own AdminComment: `slurmctl:health <moment> <outcome>
<node>` (JobNote).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "slurmctl:"
NODE_PROBLEM = "node_problem"
USER_PROBLEM = "user_problem"
MAX_REASON = 240  # slurmctld keeps the reason whole, sinfo -R columns and our exporter labels do not
_OURS = re.compile(r"\Aslurmctl:\[(node_problem|user_problem)\] ([a-z][a-z0-9_]{0,31}): ?(.*)\Z", re.DOTALL)


@dataclass(frozen=True)
class DrainReason:
    blame: str  # NODE_PROBLEM | USER_PROBLEM
    check: str
    detail: str

    def text(self) -> str:
        return f"{PREFIX}[{self.blame}] {self.check}: {one_line(self.detail)}"[:MAX_REASON]


def one_line(text: str) -> str:
    """Printable, one line: a detail can quote a process name or a file's first line."""
    cleaned = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(cleaned.split())


def parse(reason: str) -> DrainReason | None:
    """Our reason, or None for anyone else's."""
    m = _OURS.match(reason or "")
    return DrainReason(m[1], m[2], m[3]) if m else None


def is_ours(reason: str) -> bool:
    return parse(reason) is not None


# A health job (the verification job, the scheduled active check) says its outcome in its own
# AdminComment: only a Slurm administrator can write that field, and accounting keeps it, so the
# operator's view and the exporter read every node's last verdict from one sacct call.
JOB_NOTE_PREFIX = "slurmctl:health "
_JOB_NOTE = re.compile(r"\Aslurmctl:health (active|verify) ([a-z_]{1,32}) ([A-Za-z0-9._-]{1,128})\Z")


@dataclass(frozen=True)
class JobNote:
    moment: str  # active | verify
    action: str  # agent.Outcome.action: passed | failed | drained | config_error | ...
    node: str

    def text(self) -> str:
        return f"{JOB_NOTE_PREFIX}{self.moment} {self.action} {self.node}"


def parse_job_note(text: str) -> JobNote | None:
    m = _JOB_NOTE.match(text or "")
    return JobNote(m[1], m[2], m[3]) if m else None
