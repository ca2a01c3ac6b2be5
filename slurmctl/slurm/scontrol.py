"""Parsing ``scontrol show job -o``: one line of ``Key=Value`` pairs whose values may hold spaces.

JobInfo is what node-side hooks need and the hook environment lacks: the job state, start/end
times and GPU model (a cancelled job even shows exit code 0 in the Epilog's environment).
Standard library only: the Prolog/Epilog import it under the system python3.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from slurmctl.slurm.parsing import scontrol_pairs
from slurmctl.slurm.records import tres_gpus


def parse_scontrol_line(line: str) -> dict[str, str]:
    """'A=1 B=x y C=2' -> {'A': '1', 'B': 'x y', 'C': '2'} (values may contain spaces); {} when a key
    appears twice, i.e. a user wrote 'Key=' into a name or path (see parsing.scontrol_pairs)."""
    return scontrol_pairs(line) or {}


def _epoch(text: str | None) -> float | None:
    if not text or text in {"Unknown", "None", "N/A"}:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


@dataclass
class JobInfo:
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
    raw: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_fields(cls, job_id: int, f: dict[str, str]) -> JobInfo:
        gpus, model = tres_gpus(f.get("TRES", "") or f.get("AllocTRES", ""))
        restarts = f.get("Restarts", "0")
        return cls(
            job_id=job_id,
            state=f.get("JobState", ""),
            exit_code=f.get("ExitCode", ""),
            restarts=int(restarts) if restarts.isdigit() else 0,
            start_time=_epoch(f.get("StartTime")),
            end_time=_epoch(f.get("EndTime")),
            batch_host=f.get("BatchHost", ""),
            nodelist=f.get("NodeList", ""),
            std_out=f.get("StdOut", ""),
            work_dir=f.get("WorkDir", ""),
            gpu_model=model or None,
            gpu_count=gpus,
            raw=f,
        )
