"""`adopt --smoke`: a program that does not use slurmctl.runtime is judged by its own success signal —
it exits 0, or it shows steps advancing in its output (its adapter's step pattern) and, when it has a
checkpoint adapter, writes a complete checkpoint of its own. The job is stopped as soon as that is seen,
so a smoke test costs minutes, not the script's whole time limit."""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field

from slurmctl.fsutil import tail_text_lines
from slurmctl.observe.run_diagnosis import diagnose_file
from slurmctl.rundir import Run
from slurmctl.runtime.adapters import Resilience
from slurmctl.slurm.client import ACTIVE_STATES, SlurmClient

GENERIC_STEP = r"\b(?:step|iter)[ =:]+(?P<step>\d+)"
STEPS_NEEDED = 2  # distinct steps seen advancing in the output


@dataclass
class AdoptedSmokeVerdict:
    passed: bool
    why: str
    state: str
    seconds: float
    steps_seen: list[int] = field(default_factory=list)
    checkpoint: str | None = None
    diagnosis: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _steps(lines: list[str], pattern: str) -> list[int]:
    compiled = re.compile(pattern)
    found = []
    for line in lines:
        m = compiled.search(line)
        if m:
            values = [v for v in m.groupdict().values() if v is not None]
            if values and (not found or int(values[0]) != found[-1]):
                found.append(int(values[0]))
    return found


def judge(run: Run, client: SlurmClient, job_id: int, block: Resilience | None, timeout: float,
          poll: float = 2.0) -> AdoptedSmokeVerdict:
    began = time.monotonic()
    pattern = (block.step_pattern or block.adapter.STEP_PATTERN) if block else GENERIC_STEP
    before = block.latest() if block else None
    state, steps = "PENDING", []
    while time.monotonic() - began < timeout:
        info = client.job_info(job_id)
        state = info.state if info is not None else "ENDED"
        lines = tail_text_lines(run.log_path(job_id), 0, 256 * 1024)
        steps = _steps(lines, pattern)
        latest = block.latest() if block else None
        new_checkpoint = latest if latest is not None and (before is None or latest.mtime > before.mtime) else None
        advancing = len(steps) >= STEPS_NEEDED and steps[-1] > steps[0]
        if state == "COMPLETED" and info is not None and info.exit_code.startswith("0:"):
            return AdoptedSmokeVerdict(True, "it exited 0", state, time.monotonic() - began, steps)
        if advancing and (block is None or new_checkpoint is not None):
            what = f"steps advanced {steps[0]} -> {steps[-1]}" + (
                f" and it wrote its own checkpoint {new_checkpoint.path}" if new_checkpoint else "")
            # recorded first: status and diagnose read the cancel that follows as the passed test's end
            run.record("smoke-passed", job_id=job_id, why=what)
            client.cancel(job_id)
            return AdoptedSmokeVerdict(True, what + "; the job was stopped there", state, time.monotonic() - began,
                                       steps, str(new_checkpoint.path) if new_checkpoint else None)
        if state not in ACTIVE_STATES:
            diagnosis = diagnose_file(run.log_path(job_id), state, info.exit_code if info else "").to_dict()
            return AdoptedSmokeVerdict(False, f"it ended {state.lower()} before showing progress"
                                       + (" and a checkpoint" if block else ""), state, time.monotonic() - began,
                                       steps, diagnosis=diagnosis)
        time.sleep(poll)
    client.cancel(job_id)
    return AdoptedSmokeVerdict(False, f"no success signal within {timeout:.0f} s (steps seen: {steps or 'none'})",
                               state, time.monotonic() - began, steps)
