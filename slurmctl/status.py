"""RunStatus: the Slurm view of a run's latest job + its heartbeat + checkpoints, in plain words."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from .checkpoint import CheckpointManager
from .runs import Run
from .slurm.client import Job, SlurmClient
from .slurm.explain import explain_reason, explain_state


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


@dataclass
class RunStatus:
    run_id: str
    run_dir: str
    job_id: int | None
    state: str  # Slurm's state, or NOT_SUBMITTED / UNKNOWN
    headline: str
    action: str
    details: list[str] = field(default_factory=list)
    reason: str = ""
    nodes: str = ""
    partition: str = ""
    elapsed_seconds: int | None = None
    time_limit_seconds: int | None = None
    exit_code: str = ""
    last_step: int | None = None
    heartbeat_age_seconds: float | None = None
    last_metrics: dict = field(default_factory=dict)
    latest_checkpoint_step: int | None = None
    attempts: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def build_status(run: Run, job: Job | None, now: float | None = None) -> RunStatus:
    """Pure function of its inputs, so every branch is unit-testable with captured jobs."""
    now = now or time.time()
    job_id = run.latest_job_id()
    starts = [e for e in run.events() if e.get("event") == "start"]
    heartbeat = run.heartbeat()
    spec_ck_dir = run.path / "checkpoints"
    latest_ck = CheckpointManager(spec_ck_dir).latest()

    if job_id is None:
        status = RunStatus(run.run_id, str(run.path), None, "NOT_SUBMITTED",
                           "This run was never submitted to Slurm.", "Submit it with `slurmctl submit`.")
    elif job is None:
        status = RunStatus(run.run_id, str(run.path), job_id, "UNKNOWN",
                           f"Slurm no longer knows job {job_id} (accounting has no record of it).",
                           "Check the log with `slurmctl logs RUN`; the platform team can look it up.")
    else:
        state_expl = explain_state(job.state)
        headline, action = state_expl.headline, state_expl.action
        reason_expl = explain_reason(job.reason) if job.state in {"PENDING", "REQUEUE_HOLD", "SPECIAL_EXIT"} else None
        if reason_expl:
            headline, action = f"Waiting: {reason_expl.headline}", reason_expl.action
        status = RunStatus(
            run.run_id, str(run.path), job.job_id, job.state, headline, action.replace("JOBID", str(job.job_id)),
            reason=job.reason, nodes=job.nodelist, partition=job.partition,
            elapsed_seconds=job.elapsed_seconds, time_limit_seconds=job.time_limit_seconds,
            exit_code=job.exit_code,
        )
        if job.state == "RUNNING":
            status.details.append(
                f"Running on {job.nodelist} ({job.partition}) for {human_duration(job.elapsed_seconds)}"
                f" of {human_duration(job.time_limit_seconds)}.")
        elif job.state == "FAILED" and job.exit_code:
            status.details.append(f"Exit code {job.exit_code.split(':')[0]} (signal {job.exit_code.split(':')[-1]}).")
        elif not job.active and job.elapsed_seconds is not None:
            status.details.append(f"Ran for {human_duration(job.elapsed_seconds)} on {job.nodelist or 'no nodes'}.")

    status.attempts = len(starts)
    if heartbeat:
        status.last_step = heartbeat.get("step")
        status.heartbeat_age_seconds = max(0.0, now - float(heartbeat.get("time", now)))
        status.last_metrics = {k: v for k, v in (heartbeat.get("metrics") or {}).items() if k not in {"step", "time"}}
        shown = ", ".join(f"{k} {v:.4g}" for k, v in status.last_metrics.items() if isinstance(v, (int, float)))
        status.details.append(f"Last progress: step {status.last_step}"
                              f"{f' ({shown})' if shown else ''}, {human_duration(status.heartbeat_age_seconds)} ago.")
    if latest_ck:
        status.latest_checkpoint_step = latest_ck.step
        status.details.append(f"Newest valid checkpoint: step {latest_ck.step}.")
    elif job_id is not None:
        status.details.append("No valid checkpoint yet.")
    return status


def run_status(run: Run, client: SlurmClient) -> RunStatus:
    job_id = run.latest_job_id()
    job = client.jobs([job_id]).get(job_id) if job_id is not None else None
    return build_status(run, job)


def runs_statuses(runs: list[Run], client: SlurmClient) -> list[RunStatus]:
    """Status for many runs with one squeue call and at most one sacct call."""
    latest = {run.run_id: run.latest_job_id() for run in runs}
    jobs = client.jobs([j for j in latest.values() if j is not None])
    return [build_status(run, jobs.get(latest[run.run_id])) for run in runs]
