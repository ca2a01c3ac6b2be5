"""Slurm's own reading of a job script: `sbatch -v --test-only [ARGS] SCRIPT` prints every option it
took from the #SBATCH lines and the command line ("defined options"), then when and where the job
would start. Nothing is submitted. adopt compares its reading of a script with this one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

_OPTION_RE = re.compile(r"^sbatch: (\S+)\s+: (.*)$")
_ESTIMATE_RE = re.compile(r"to start at (\S+) using (\d+) processors on nodes (\S+) in partition (\S+)")
# options sbatch -v lists that are ours (the query), not the script's
_QUERY_OPTIONS = {"test-only", "verbose"}


@dataclass
class SbatchReading:
    options: dict[str, str] = field(default_factory=dict)  # long name -> value as sbatch printed it
    ok: bool = False
    message: str = ""  # Slurm's answer when the job could not be placed
    start: str = ""
    processors: int | None = None
    nodelist: str = ""
    partition: str = ""

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def parse_sbatch_reading(text: str) -> SbatchReading:
    reading, inside = SbatchReading(), False
    for line in text.splitlines():
        if line.startswith("sbatch: defined options"):
            inside = True
            continue
        if line.startswith("sbatch: end of defined options"):
            inside = False
            continue
        m = _OPTION_RE.match(line)
        if inside and m and not m.group(1).startswith("---") and m.group(1) not in _QUERY_OPTIONS:
            reading.options[m.group(1)] = m.group(2).strip()
    m = _ESTIMATE_RE.search(text)
    if m:
        reading.ok, reading.start, reading.nodelist, reading.partition = True, m.group(1), m.group(3), m.group(4)
        reading.processors = int(m.group(2))
    else:
        rest = [line for line in text.splitlines() if line.strip() and not line.startswith("sbatch: ")]
        errors = [line.removeprefix("sbatch: error: ") for line in text.splitlines() if "error:" in line]
        reading.message = "; ".join(errors or rest)[:500] or "sbatch --test-only gave no estimate"
    return reading


def sbatch_reading(client, script: Path, args: Sequence[str] = ()) -> SbatchReading:
    """One `sbatch -v --test-only`; a refusal (no partition fits, bad account) is part of the answer."""
    result = client._run(["sbatch", "-v", "--test-only", *args, str(script)], check=False)
    return parse_sbatch_reading(f"{result.stderr}\n{result.stdout}")
