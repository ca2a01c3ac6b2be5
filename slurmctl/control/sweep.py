"""Cancel a sweep: drain every running element at once (checkpoint + ACK, as `cancel RUN` does for one
run), then `scancel <array id>`, which ends every task of the array (running, requeued or never
started) in one call, and verify with Slurm that none is left. A drain that is never acknowledged
is reported per element, never as success.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from slurmctl.control.cancel import request_drain, wait_until_gone
from slurmctl.errors import RunNotFound, SlurmCommandError
from slurmctl.observe.sweep import element_runs
from slurmctl.rundir import Run, RunRegistry
from slurmctl.rundir.sweep import SweepDir
from slurmctl.slurm.client import SlurmClient


@dataclass
class ElementCancel:
    index: int
    run_id: str
    job_id: int | None
    state: str
    drain: str = "not-needed"  # not-needed | skipped | acknowledged | unacknowledged
    ack_step: int | None = None


@dataclass
class SweepCancelResult:
    sweep_id: str
    array_job_id: int
    elements: list[ElementCancel] = field(default_factory=list)
    verified: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.verified and all(e.drain != "unacknowledged" for e in self.elements)

    def to_dict(self) -> dict:
        return {"sweep_id": self.sweep_id, "array_job_id": self.array_job_id, "verified": self.verified,
                "seconds": round(self.seconds, 1), "ok": self.ok, "elements": [e.__dict__ for e in self.elements]}


def cancel_sweep(sweep: SweepDir, registry: RunRegistry, client: SlurmClient, *, now: bool = False,
                 drain_timeout: float = 300.0, wait_seconds: float = 60.0, poll: float = 1.0) -> SweepCancelResult:
    array_id = sweep.meta.get("array_job_id")
    if not isinstance(array_id, int):
        raise RunNotFound(f"sweep {sweep.sweep_id} was never submitted; nothing to cancel.",
                          "`slurmctl ls` lists your runs.")
    started = time.monotonic()
    pairs = element_runs(sweep, registry)
    latest = {run.run_id: run.latest_job_id() for _, run in pairs}
    result = SweepCancelResult(sweep.sweep_id, array_id)
    draining = _request_drains(pairs, latest, client, result, now)
    began = time.monotonic()
    _await_acks(draining, client, drain_timeout, poll)
    for index, run in pairs:
        element = next(e for e in result.elements if e.index == index)
        if element.drain == "unacknowledged":
            run.record("drain-unacknowledged", job_id=element.job_id,
                       waited_seconds=round(time.monotonic() - began, 1))
        run.record("cancel-requested", job_id=element.job_id, drain=element.drain, ack_step=element.ack_step)
    client.cancel(array_id)  # every task of the array: running, requeued (BeginTime) or never started
    remaining = max(0.0, drain_timeout + wait_seconds - (time.monotonic() - started))
    gone, _ = wait_until_gone(client, [array_id, *(j for j in latest.values() if j is not None)], remaining, poll)
    if not gone:
        raise SlurmCommandError(
            f"array job {array_id} of sweep {sweep.sweep_id} still has active tasks {wait_seconds:.0f} s after "
            "scancel.", "Slurm may be cleaning up a stuck node; check again with `slurmctl status SWEEP`, then tell "
            "the platform team.")
    final = client.jobs([j for j in latest.values() if j is not None])
    for element in result.elements:
        job = final.get(element.job_id) if element.job_id is not None else None
        element.state = job.state if job else "CANCELLED"
    result.verified, result.seconds = True, time.monotonic() - started
    return result


def _request_drains(pairs: list[tuple[int, Run]], latest: dict[str, int | None], client: SlurmClient,
                    result: SweepCancelResult, now: bool) -> list[tuple[ElementCancel, Run]]:
    """An ElementCancel per element in `result`; a drain request to every running one (unless `now`),
    returned as the elements to wait for."""
    jobs = client.jobs([j for j in latest.values() if j is not None])
    draining = []
    for index, run in pairs:
        job_id = latest[run.run_id]
        job = jobs.get(job_id) if job_id is not None else None
        element = ElementCancel(index, run.run_id, job_id, job.state if job else "")
        result.elements.append(element)
        # Only a started task has a training to drain; one still pending under the array's id
        # shows the array's pending record (PENDING), as does a requeued one under its own id.
        if job is not None and job.state == "RUNNING":
            if now:
                element.drain = "skipped"
                continue
            request_drain(run, job_id)
            draining.append((element, run))
    return draining


def _await_acks(draining: list[tuple[ElementCancel, Run]], client: SlurmClient, timeout: float, poll: float) -> None:
    """Every draining element ends acknowledged (drain.ack, with its step) or unacknowledged (its job
    ended first, or `timeout` passed); one Slurm query per round for all of them."""
    began = time.monotonic()
    while draining and time.monotonic() - began < timeout:
        still = []
        current = client.jobs([e.job_id for e, _ in draining])
        for element, run in draining:
            ack = run.drain_ack()
            job = current.get(element.job_id)
            if ack is not None:
                element.drain, element.ack_step = "acknowledged", ack.get("step")
            elif job is None or not job.active:
                element.drain = "unacknowledged"  # ended without acknowledging
            else:
                still.append((element, run))
        draining = still
        if draining:
            time.sleep(poll)
    for element, _run in draining:
        element.drain = "unacknowledged"
