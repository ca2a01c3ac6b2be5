"""Parsing ``scontrol show job -o``: one line of ``Key=Value`` pairs whose values may hold spaces.

JobInfo is what node-side hooks need and the hook environment lacks: the job state, start/end
times and GPU model (a cancelled job even shows exit code 0 in the Epilog's environment).
Standard library only: the Prolog/Epilog import it under the system python3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

_KEY_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
_GPU_TRES_RE = re.compile(r"gres/gpu:([A-Za-z0-9_.-]+)=(\d+)")
_GPU_COUNT_RE = re.compile(r"gres/gpu=(\d+)")


def parse_scontrol_line(line: str) -> dict[str, str]:
    """'A=1 B=x y C=2' -> {'A': '1', 'B': 'x y', 'C': '2'} (values may contain spaces)."""
    matches = list(_KEY_RE.finditer(line))
    out = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


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
        tres = f.get("TRES", "") or f.get("AllocTRES", "")
        typed = _GPU_TRES_RE.search(tres)
        count = _GPU_COUNT_RE.search(tres)
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
            gpu_model=typed.group(1) if typed else None,
            gpu_count=int(count.group(1)) if count else (int(typed.group(2)) if typed else 0),
            raw=f,
        )


def job_info_from_output(job_id: int, stdout: str) -> JobInfo | None:
    """The line of `scontrol show job -o JOB` that describes JOB itself (not another array task)."""
    for line in stdout.splitlines():
        if line.startswith(f"JobId={job_id} "):
            return JobInfo.from_fields(job_id, parse_scontrol_line(line))
    return None
