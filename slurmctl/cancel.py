"""Cancel a run's job and verify Slurm actually stopped it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .errors import RunNotFound, SlurmCommandError
from .runs import Run
from .slurm.client import SlurmClient


@dataclass
class CancelResult:
    run_id: str
    job_id: int
    final_state: str
    verified: bool
    seconds: float

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def cancel_run(run: Run, client: SlurmClient, wait_seconds: float = 60.0, poll: float = 1.0) -> CancelResult:
    job_id = run.latest_job_id()
    if job_id is None:
        raise RunNotFound(f"run {run.run_id} was never submitted; nothing to cancel.", "`slurmctl ls` lists your runs.")
    started = time.monotonic()
    job = client.jobs([job_id]).get(job_id)
    if job is not None and not job.active:
        return CancelResult(run.run_id, job_id, job.state, True, 0.0)
    client.cancel(job_id)
    run.record("cancel-requested", job_id=job_id)
    while time.monotonic() - started < wait_seconds:
        job = client.jobs([job_id]).get(job_id)
        if job is None or not job.active:
            state = job.state if job else "CANCELLED"
            return CancelResult(run.run_id, job_id, state, True, time.monotonic() - started)
        time.sleep(poll)
    raise SlurmCommandError(
        f"job {job_id} is still {job.state if job else 'unknown'} {wait_seconds:.0f} s after scancel.",
        "Slurm may be cleaning up a stuck node; check again with `slurmctl status`, then tell the platform team.")
