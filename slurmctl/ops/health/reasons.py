"""The drain reason is the record of who drained a node and why: `slurmctl:[<blame>] <check>: <detail>`.

Only a reason with this prefix is ours. Everything else (an operator's "maint", Slurm's own "Prolog
error", "Kill task failed") belongs to someone else and is never changed or resumed by us.
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
