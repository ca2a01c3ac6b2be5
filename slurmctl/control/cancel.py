"""Cancel a run: ask the training to drain (checkpoint + ACK), wait for the ACK, then stop the job
and verify Slurm stopped it. `now=True` skips the drain. A drain that is never acknowledged is
reported (CancelResult.drain == "unacknowledged"), never as success.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from slurmctl.errors import RunNotFound, SlurmCommandError, SlurmctlError
from slurmctl.rundir import Run
from slurmctl.runtime import write_drain_request
from slurmctl.slurm.client import Job, SlurmClient

# drain: not-needed (job not running) | skipped (--now) | acknowledged | unacknowledged
ACKED_EXIT_GRACE_SECONDS = 30.0
# A running training without one heartbeat after this long (the default drain timeout) either does
# not use slurmctl.runtime or is still loading: a drain is acknowledged from a step, so waiting
# another drain timeout for it is said at once instead.
NO_HEARTBEAT_SECONDS = 300
ProgressFn = Callable[[float, dict | None], None]


@dataclass
class CancelResult:
    run_id: str
    job_id: int
    final_state: str
    verified: bool
    seconds: float
    drain: str = "not-needed"
    ack_step: int | None = None
    ack_checkpoint: str | None = None
    drain_seconds: float | None = None
    slurm_state: str | None = None  # Slurm's own end state, when it differs from final_state
    note: str = ""  # what the drain found, in words (an adopted program's own checkpoint)
    # an adopted program's last logged step and the checkpoint its next start restores: the steps lost
    last_step: int | None = None
    kept_step: int | None = None
    steps_lost: int | None = None

    @property
    def ok(self) -> bool:
        return self.verified and self.drain != "unacknowledged"

    def to_dict(self) -> dict:
        return {**self.__dict__, "ok": self.ok}


def request_drain(run: Run, job_id: int) -> None:
    """Ask the training of `job_id` to checkpoint and stop (drain.request); a stale ACK is removed first."""
    run.drain_ack_path.unlink(missing_ok=True)
    write_drain_request(run.path, "cancel", job_id=str(job_id))
    run.record("drain-requested", job_id=job_id, reason="cancel")


def wait_until_gone(client: SlurmClient, job_ids: Iterable[int], seconds: float,
                    poll: float) -> tuple[bool, dict[int, Job]]:
    """Ask Slurm every `poll` s until no job of `job_ids` is active any more (ended, or unknown to
    Slurm), for at most `seconds`: (whether they are gone, the last answer)."""
    ids = list(dict.fromkeys(job_ids))
    deadline = time.monotonic() + seconds
    while True:
        jobs = client.jobs(ids)
        if not any(job.active for job in jobs.values()):
            return True, jobs
        if time.monotonic() >= deadline:
            return False, jobs
        time.sleep(poll)


def cancel_run(run: Run, client: SlurmClient, *, now: bool = False, drain_timeout: float = 300.0,
               wait_seconds: float = 60.0, poll: float = 1.0, progress: ProgressFn | None = None) -> CancelResult:
    job_id = run.latest_job_id()
    if job_id is None:
        raise RunNotFound(f"run {run.run_id} was never submitted; nothing to cancel.", "`slurmctl ls` lists your runs.")
    started = time.monotonic()
    if (task := run.waiting_array_task()) is not None:  # a sweep element not started: its task alone
        return _cancel_array_task(run, client, task, started, wait_seconds, poll)
    job = client.jobs([job_id]).get(job_id)
    if job is not None and not job.active:
        return CancelResult(run.run_id, job_id, job.state, True, 0.0)
    result = CancelResult(run.run_id, job_id, "", False, 0.0)
    if job is not None and job.state == "RUNNING" and not now:
        _refuse_if_never_heartbeat(run, job)
        _drain(run, client, job_id, result, drain_timeout, poll, progress)
    elif now:
        result.drain = "skipped"
    # an acknowledged drain: let the batch shell record the end before anything is cancelled
    gone, jobs = wait_until_gone(client, [job_id], ACKED_EXIT_GRACE_SECONDS if result.drain == "acknowledged" else 0,
                                 poll)
    if not gone:
        # a sweep element's task by '<array>_<index>': its job id may be the array's, which is every task's
        task = run.array_task()
        client.cancel(f"{task[0]}_{task[1]}" if task else job_id)
    run.record("cancel-requested", job_id=job_id, drain=result.drain, ack_step=result.ack_step)
    remaining = max(0.0, drain_timeout + wait_seconds - (time.monotonic() - started))
    gone, jobs = (gone, jobs) if gone else wait_until_gone(client, [job_id], remaining, poll)
    job = jobs.get(job_id)
    if gone:
        result.final_state = job.state if job else "CANCELLED"
        result.verified, result.seconds = True, time.monotonic() - started
        return result
    raise SlurmCommandError(
        f"job {job_id} is still {job.state if job else 'unknown'} {wait_seconds:.0f} s after scancel.",
        "Slurm may be cleaning up a stuck node; check again with `slurmctl status`, then tell the platform team.")


def _refuse_if_never_heartbeat(run: Run, job) -> None:
    """A training that has run NO_HEARTBEAT_SECONDS without one heartbeat does not use slurmctl.runtime:
    it can never acknowledge a drain. Say so at once instead of waiting the whole drain timeout."""
    beat = run.heartbeat()
    if (beat and str(beat.get("job_id")) == str(job.job_id)) or (job.elapsed_seconds or 0) < NO_HEARTBEAT_SECONDS:
        return
    run.record("drain-impossible", job_id=job.job_id, reason="no heartbeat")
    raise SlurmctlError(
        f"run {run.run_id} has run {job.elapsed_seconds} s without a single heartbeat: its program does not use "
        "slurmctl.runtime (or has not reached its first step), so it cannot save and acknowledge a drain now. "
        "Nothing was cancelled.",
        f"Stop it now with `slurmctl cancel {run.run_id} --now` (work since its last checkpoint is lost); for next "
        "time, add the README's Runtime lines, or run it with `slurmctl adopt` and its framework's own save.")


def _cancel_array_task(run: Run, client: SlurmClient, task: tuple[int, int], started: float, wait_seconds: float,
                       poll: float) -> CancelResult:
    array_id, index = task
    if client.array_task_state(array_id, index) is not None:
        client.cancel(f"{array_id}_{index}")
    run.record("cancel-requested", job_id=array_id, array_task_id=index, drain="not-needed", ack_step=None)
    while time.monotonic() - started < wait_seconds:
        if (state := client.array_task_state(array_id, index)) is None:
            return CancelResult(run.run_id, array_id, "CANCELLED", True, time.monotonic() - started)
        time.sleep(poll)
    raise SlurmCommandError(f"task {array_id}_{index} is still {state} {wait_seconds:.0f} s after scancel.",
                            "Check again with `slurmctl status`, then tell the platform team.")


def _drain(run: Run, client: SlurmClient, job_id: int, result: CancelResult, timeout: float, poll: float,
           progress: ProgressFn | None) -> None:
    request_drain(run, job_id)
    began = time.monotonic()
    while (waited := time.monotonic() - began) < timeout:
        ack = run.drain_ack()
        if ack is not None:
            result.drain = "acknowledged"
            result.ack_step, result.ack_checkpoint = ack.get("step"), ack.get("checkpoint")
            result.drain_seconds = waited
            return
        job = client.jobs([job_id]).get(job_id)
        if job is None or not job.active:
            break  # ended without acknowledging (crashed, or finished and ignored the flag)
        if progress:
            progress(waited, run.heartbeat())
        time.sleep(poll)
    result.drain, result.drain_seconds = "unacknowledged", time.monotonic() - began
    run.record("drain-unacknowledged", job_id=job_id, waited_seconds=round(result.drain_seconds, 1))
