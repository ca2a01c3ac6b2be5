"""The run's story, from attempts.jsonl: one line per attempt of every submission, and what
`slurmctl status` says about requeues, stopped runs, unacknowledged drains and failed checkpoint saves.
Each function reads only the events (and the Slurm job `build_status` was given) and edits the status.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING

from slurmctl.durations import human_duration
from slurmctl.rundir import attempt_ids
from slurmctl.slurm.client import Job
from slurmctl.slurm.owned import StepOutcome

if TYPE_CHECKING:
    from slurmctl.observe.status import RunStatus

_ENDINGS = {"preemption": "preempted", "time-limit": "reached its time limit", "failed": "crashed",
            "completed": "finished", "cancelled": "cancelled",
            "requeued": "requeued by the job itself (`scontrol requeue` in its script or program)"}
_AFTER = {"preemption": "preemption", "time-limit": "time limit", "failed": "crash", "node-lost": "node loss",
          "requeued": "the job's own `scontrol requeue`"}


def _lost(record: dict) -> str:
    """'node h100-2 was lost' from a node-lost event or the end record that followed it."""
    nodes = ", ".join(record.get("nodes_lost") or []) or "a node of the allocation"
    return f"node {nodes} was lost"


def in_allocation_restarts(events: list[dict]) -> int:
    """Crashes restarted inside their allocation since the latest submission (step-restart events)."""
    return sum(1 for e in _current(events) if e.get("event") == "step-restart")


def _current(events: list[dict]) -> list[dict]:
    """The events of the latest submission (a resume or fork starts a new story)."""
    last_submit = max((i for i, e in enumerate(events) if e.get("event") == "submitted"), default=-1)
    return events[last_submit + 1:]


def _requeued_by_slurm(start: dict, following: dict) -> bool:
    """The next start is the same job with a higher restart count: Slurm requeued this attempt."""
    try:
        return (following.get("job_id") == start.get("job_id")
                and int(following.get("restart_count") or 0) > int(start.get("restart_count") or 0))
    except (TypeError, ValueError):
        return False


def _submissions(events: list[dict]) -> list[list[dict]]:
    """The events split at each submission (the first, a resume, a resubmission), oldest first; the
    last part is the latest submission's (empty while it has no event yet)."""
    parts: list[list[dict]] = [[]]
    for e in events:
        if e.get("event") == "submitted":
            parts.append([])
        else:
            parts[-1].append(e)
    return parts


# What a job's log says of why Slurm requeued it, strongest first: slurmstepd's words for the step it
# ended, and Lightning's auto-requeue (on the signal its SLURM environment listens to).
_REQUEUE_CAUSES = (
    (re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO PREEMPTION"), " after preemption"),
    (re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT"), " at its time limit"),
    (re.compile(r"Handling auto-requeue signal|Requeued SLURM job|requeing job \d+"),
     " by the program itself (Lightning's auto-requeue on its signal)"),
    (re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO JOB REQUEUE"),
     " by `scontrol requeue` (the script's own or by hand)"),
)


def requeue_cause(log_lines: list[str], drain_reason: str | None = None) -> str:
    """Why the latest attempt was requeued, as words to follow "Requeued": the drain request's reason
    (preemption, time limit) where slurmctl saw the signal, else what the attempt's log says; "" when
    neither says."""
    if drain_reason in ("preemption", "time-limit"):
        return f" after {_AFTER[drain_reason]}"
    heads = [i for i, line in enumerate(log_lines) if line.startswith("slurmctl: attempt ")]
    tail = log_lines[heads[-1]:] if heads else log_lines
    for pattern, words in _REQUEUE_CAUSES:
        if any(pattern.search(line) for line in tail):
            return words
    return ""


def waiting_requeued(events: list[dict], job: Job | None) -> dict | None:
    """The latest attempt's start record when Slurm requeued that attempt and the job waits to start
    again (its restart count is past the attempt's), with no end record of slurmctl's: the batch
    script was killed by the requeue (the program's or the script's own `scontrol requeue`)."""
    if job is None or not job.active or job.source == "sacct" or job.state not in {"PENDING", "REQUEUED"}:
        return None
    current = _current(events)
    starts = [i for i, e in enumerate(current) if e.get("event") == "start" and e.get("job_id") == job.job_id]
    if not starts or any(e.get("event") == "end" for e in current[starts[-1] + 1:]):
        return None
    start = current[starts[-1]]
    try:
        return start if job.restarts > int(start.get("restart_count") or 0) else None
    except (TypeError, ValueError):
        return None


def story(events: list[dict], job: Job | None = None, requeued_because: str = "",
          failed_steps: list[StepOutcome] = ()) -> list[str]:
    """One line per attempt of the run, every job it was submitted as (a resume is a new job) oldest
    first, from attempts.jsonl: when and where it started, from which checkpoint, how it ended
    (preempted / time limit / crashed / finished / cancelled / no end record: the node or the batch
    script was lost) at which step, the steps it lost past its newest checkpoint, and what followed
    (requeued: a new Slurm attempt, or stopped). `job` is the latest job as Slurm shows it;
    `requeued_because`: requeue_cause's words for a latest attempt Slurm requeued without an end record;
    `failed_steps`: the srun steps that failed inside jobs Slurm recorded COMPLETED (slurm.owned.failed_steps):
    an attempt whose batch script ended 0 with such a step failed, it did not finish."""
    parts = _submissions(events)
    numbers = {key: n + 1 for n, key in enumerate(attempt_ids(events))}
    lines = [line for n, part in enumerate(parts)
             for line in _attempt_lines(part, job if n == len(parts) - 1 else None, numbers, failed_steps)]
    if lines and waiting_requeued(events, job) is not None:
        lines[-1] = (lines[-1].removesuffix("; running")
                     + f"; requeued{requeued_because} (Slurm restart {job.restarts}); waiting to start again")
    return lines


def steps_lost_words(count) -> str:
    """'1 step lost', '3 steps lost': a count from a run's records."""
    return f"{count} step lost" if count == 1 else f"{count} steps lost"


def attempt_label(start: dict, numbers: dict[tuple[int, int], int]) -> str:
    """'attempt 3 (job 812, Slurm restart 1)': the run-wide number (rundir.attempt_ids), the job, and
    Slurm's restart count when it is not the job's first start."""
    try:
        key = (int(start.get("job_id")), int(start.get("restart_count") or 0))
    except (TypeError, ValueError):
        key = None
    restart = key[1] if key else 0
    return (f"attempt {numbers.get(key, '?')} (job {start.get('job_id')}"
            + (f", Slurm restart {restart}" if restart else "") + ")")


def task_label(start: dict) -> str:
    """'array task (job 5087)': a task of an array run, named by the job id Slurm gave it."""
    restart = start.get("restart_count") or 0
    return f"array task (job {start.get('job_id')}" + (f", Slurm restart {restart}" if restart else "") + ")"


def _attempt_lines(current: list[dict], job: Job | None, numbers: dict[tuple[int, int], int],
                   failed_steps: list[StepOutcome] = ()) -> list[str]:
    lines = []
    step_of = {}
    for s in failed_steps:
        step_of.setdefault(s.step.split(".")[0], s)
    starts = [(i, e) for i, e in enumerate(current) if e.get("event") == "start"]
    # one submission that started under several job ids is an array: each task is a job of its own
    # (`slurmctl logs RUN --job ID` shows it), not an attempt of the array's job
    array = len({e.get("job_id") for _, e in starts}) > 1
    for n, (i, start) in enumerate(starts):
        # this job's records up to its own next start: the tasks of an array run side by side, their
        # records interleaved (a record without a job id is the job's, as older runs wrote them)
        mine = [(j, e) for j, e in starts[n + 1:] if e.get("job_id") == start.get("job_id")]
        upto = mine[0][0] if mine else len(current)
        following = [e for e in current[i + 1:upto] if e.get("job_id") in (None, start.get("job_id"))]
        end = next((e for e in following if e.get("event") == "end"), None)
        node_lost = next((e for e in following if e.get("event") == "node-lost"), None)
        restarts = [e for e in following if e.get("event") == "step-restart"]
        when = datetime.fromtimestamp(float(start.get("time") or 0)).strftime("%m-%d %H:%M:%S")
        resume = start.get("resume_step")
        label = task_label(start) if array else attempt_label(start, numbers)
        line = (f"{label}: started {when} on "
                f"{start.get('nodes') or '?'}, " + (f"from checkpoint step {resume}" if resume is not None
                                                    else "from scratch"))
        for r in restarts:  # crashes restarted inside this allocation (runtime.attempt restart-step)
            at = f" at step {r['last_step']}" if r.get("last_step") is not None else ""
            lost = f", {steps_lost_words(r['steps_lost'])}" if r.get("steps_lost") is not None else ""
            line += (f"; crashed (exit code {r.get('exit_code')}){at}{lost}, restarted in the allocation from "
                     f"checkpoint step {r.get('checkpoint_step')}")
        if end is None and node_lost is not None:  # Slurm ended the attempt (NODE_FAIL) before `end` ran
            at = f" at step {node_lost['last_step']}" if node_lost.get("last_step") is not None else ""
            lines.append(f"{line}; {_lost(node_lost)}{at}")
            continue
        if end is None:
            following_start = mine[0][1] if mine else None
            cancelled = any(e.get("event") == "cancel-requested" and e.get("job_id") == start.get("job_id")
                            for e in following)
            smoke = any(e.get("event") == "smoke-passed" and e.get("job_id") == start.get("job_id")
                        for e in following)
            if smoke and following_start is None:
                line += "; smoke test passed, stopped there (`adopt --smoke`)"
            elif cancelled and following_start is None:
                line += "; cancelled on request (`slurmctl cancel`)"
                told = next((e for e in reversed(following) if e.get("event") == "cancel-result"
                             and e.get("steps_lost") is not None), None)
                if told is not None:
                    ck = told.get("checkpoint_step")
                    line += (f" at step {told.get('last_step')}, "
                             + (f"newest checkpoint {ck}" if ck is not None else "no checkpoint")
                             + f", {steps_lost_words(told['steps_lost'])}")
            elif following_start is not None and _requeued_by_slurm(start, following_start):
                line += ("; requeued by Slurm before slurmctl could record its end (`scontrol requeue`, a lost "
                         "node, or a preemption that did not wait for the drain)")
            elif following_start is not None:
                line += "; ended without an end record (node lost or batch script killed)"
            elif job is not None and job.active:
                line += "; running"
            else:
                line += "; no end record"
            lines.append(line)
            continue
        outcome = end.get("outcome") or "?"
        ending = _lost(end) if outcome == "node-lost" else _ENDINGS.get(outcome, outcome)
        if outcome == "completed" and (failed := step_of.get(str(start.get("job_id")))) is not None:
            ending = (f"failed: its step {failed.step} failed ({failed.state.lower()}, exit code "
                      f"{failed.exit_code}) though the batch script ended 0")
        if outcome == "failed" and end.get("exit_code") not in (None, 0):
            ending += f" (exit code {end['exit_code']})"
        if end.get("last_step") is not None:
            ending += f" at step {end['last_step']}"
        ck = end.get("checkpoint_step")
        ending += f", newest checkpoint {ck}" if ck is not None else ", no checkpoint"
        if end.get("steps_lost") is not None and outcome != "completed":
            ending += f", {steps_lost_words(end['steps_lost'])}"
        then = {"requeue": "requeued (new Slurm attempt)", "stop": "stopped"}.get(end.get("action"), "")
        then = "a new Slurm attempt follows" if outcome == "requeued" and then else then
        lines.append(f"{line}; {ending}" + (f"; {then}" if then and outcome != "completed" else ""))
    return lines


def checkpoint_failure(status: RunStatus, events: list[dict], now: float) -> None:
    """A save the filesystem refused (runtime: CheckpointSaveFailed), unless a save succeeded since."""
    failed = [e for e in _current(events) if e.get("event") == "checkpoint-failed"]
    if not failed:
        return
    last = failed[-1]
    saved_at = now - status.checkpoint_age_seconds if status.checkpoint_age_seconds is not None else None
    if saved_at is not None and saved_at >= float(last.get("time") or 0):
        return  # a later checkpoint succeeded: the disk has room again
    kept = (f"checkpoint step {last['previous_step']} is still the newest valid one"
            if last.get("previous_step") is not None else "there is no valid checkpoint yet")
    when = human_duration(max(0.0, now - float(last.get("time") or now)))
    status.details.append(f"CHECKPOINT FAILED at step {last.get('step')} ({when} ago): {last.get('reason')}: "
                          f"{last.get('error')}; {kept}. Free space in the checkpoint directory.")
    if status.health == "ok":
        status.health = f"checkpoint failing: {last.get('reason')}"


def requeue_story(status: RunStatus, job: Job | None, events: list[dict], requeued_because: str = "") -> None:
    """A run waiting after a requeue says why ("requeued after preemption"); one whose job vanished
    while it waited (cancelled: sacct keeps only the REQUEUED record) is not shown as requeued forever."""
    current = _current(events)
    if (killed := waiting_requeued(events, job)) is not None:
        _waiting_after_requeue(status, job, killed, requeued_because, len(attempt_ids(events)))
        return
    ends = [i for i, e in enumerate(current) if e.get("event") == "end"]
    last = current[ends[-1]] if ends else None
    if job is None or last is None or last.get("action") != "requeue":
        return
    if any(e.get("event") == "start" for e in current[ends[-1] + 1:]):
        return  # the requeued attempt started: its own story
    after = _AFTER.get(last.get("outcome"), last.get("outcome") or "a restart")
    ck = last.get("checkpoint_step")
    lost = last.get("steps_lost")
    if job.state == "CANCELLED" or (job.state == "REQUEUED" and job.source == "sacct"):
        # Cancelled while it waited to restart: accounting says CANCELLED, or keeps only the REQUEUED
        # record of a job that is no longer in the queue.
        status.phase = "cancelled"
        status.headline = (f"Cancelled while waiting to restart after {after}: Slurm will not run it again "
                           "(accounting keeps only the REQUEUED record).")
        status.action = (f"Continue it with `slurmctl resume {status.run_id}`"
                         + (f" (from checkpoint step {ck})" if ck is not None else "") + ".")
    elif status.phase in {"queued", "requeued"}:  # PENDING again: restart count 0 said "queued"
        status.phase = f"requeued after {after}"
        at = f" at step {last['last_step']}" if last.get("last_step") is not None else ""
        if last.get("outcome") == "node-lost":
            after = f"node loss ({_lost(last)}{at})"
            at = ""
        told = (f"Requeued after {after}{at}" + (f", {steps_lost_words(lost)}" if lost is not None else "")
                + (f"; it restarts from checkpoint step {ck}" if ck is not None else ""))
        status.headline = f"{told}. {status.headline}" if status.headline else f"{told}."
        status.why = f"{told}; {status.why}" if status.why else told


def _waiting_after_requeue(status: RunStatus, job: Job, start: dict, because: str, attempts: int) -> None:
    """Slurm requeued the latest attempt before slurmctl recorded its end: say so, why where known, and
    that it waits to start again as the next attempt."""
    status.phase = "requeued"
    ran = f" (attempt {attempts}, started {datetime.fromtimestamp(float(start.get('time') or 0)):%H:%M:%S})"
    told = f"Requeued{because or ' by Slurm'}{ran}; waiting to start again as attempt {attempts + 1}"
    status.headline = f"{told}. {status.headline}" if status.headline else f"{told}."
    status.why = f"{told}; {status.why}" if status.why else told


def cancelled_on_request(status: RunStatus, job: Job | None, events: list[dict]) -> None:
    """A job the user cancelled (`slurmctl cancel` recorded the request) reads `cancelled` however Slurm
    saw it end: a program killed by the drain signal it was sent ends FAILED, a drained one may exit 0
    (COMPLETED), and one that requeued itself leaves accounting only its REQUEUED record."""
    if job is None or (job.active and job.source != "sacct"):  # still in the queue: not over yet
        return
    current = _current(events)
    smoke = next((e for e in current if e.get("event") == "smoke-passed" and e.get("job_id") == job.job_id), None)
    if smoke is not None:  # `adopt --smoke` stopped it once its test passed
        status.phase = "smoke test passed"
        status.headline = f"Smoke test passed ({smoke.get('why') or 'it made progress'})."
        status.diagnosis, status.why = None, ""
        status.action = "Submit it for real with `slurmctl adopt SCRIPT --yes` (without --smoke)."
        return
    asked = [i for i, e in enumerate(current) if e.get("event") == "cancel-requested" and e.get("job_id") == job.job_id]
    if not asked or any(e.get("event") == "start" and e.get("job_id") == job.job_id for e in current[asked[-1] + 1:]):
        return
    status.phase = "cancelled"
    status.headline = "Cancelled on request (`slurmctl cancel`)."
    if job.state == "FAILED":
        status.details.append(f"Slurm records it as FAILED (exit code {job.exit_code}): the program ended on the "
                              "drain signal it was sent instead of saving on it.")
    elif job.state == "REQUEUED":
        status.details.append("It had requeued itself; accounting keeps only that REQUEUED record.")
    status.diagnosis, status.why = None, ""
    status.action = f"Continue it from its newest checkpoint with `slurmctl resume {status.run_id}`."


def reliability_details(status: RunStatus, events: list[dict]) -> None:
    """Why the last attempt ended (requeue/stop policy), and an unacknowledged drain, loudly."""
    current = _current(events)
    ends = [e for e in current if e.get("event") == "end" and e.get("reason")]
    if ends:
        status.details.append(f"Last attempt: {ends[-1]['reason']}")
        # A drained cancel exits 0, so Slurm says COMPLETED: the run was stopped, not finished.
        if status.state == "COMPLETED" and ends[-1].get("outcome") == "cancelled":
            step = ends[-1].get("checkpoint_step")
            status.phase = "cancelled"
            status.headline = ("Stopped on request after checkpointing" + (f" at step {step}" if step is not None
                                                                             else "") + " (drain acknowledged)."
                               if ends[-1].get("drain_acked") else "Stopped on request.")
            status.action = f"Continue it with `slurmctl resume {status.run_id}`, or branch it with `slurmctl fork`."
    if any(e.get("event") == "drain-unacknowledged" or
           (e.get("event") == "end" and e.get("drain_requested") and not e.get("drain_acked")) for e in current):
        status.drain_unacknowledged = True
        status.details.append("DRAIN NOT ACKNOWLEDGED: the training was asked to checkpoint and stop but never "
                              "confirmed; work since its last checkpoint may be lost.")


def node_loss(status: RunStatus, events: list[dict]) -> None:
    """The latest node loss of this submission (a `node-lost` event from restart-step's probe), loudly;
    the step the watchdog ended for it was left hanging by the lost peer, not hung by the training."""
    current = _current(events)
    lost = [e for e in current if e.get("event") == "node-lost"]
    if not lost:
        return
    last = lost[-1]
    at = f" at step {last['last_step']}" if last.get("last_step") is not None else ""
    ck = last.get("checkpoint_step")
    resumed = any(e.get("event") == "start" and float(e.get("time") or 0) > float(last.get("time") or 0)
                  for e in current)
    released = any(e.get("event") == "end" and e.get("lost_nodes_released") and e.get("job_id") == last.get("job_id")
                   and float(e.get("time") or 0) >= float(last.get("time") or 0) for e in current)
    listed = last.get("evidence")
    evidence = [str(e)[:300] for e in listed[:4]] if isinstance(listed, list) else []
    status.details.append(f"NODE LOST: {_lost(last)}{at} (job {last.get('job_id')}"
                          + (f", newest checkpoint {ck}" if ck is not None else ", no checkpoint")
                          + ("); the next attempt resumed on healthy nodes." if resumed
                             else "); the job left the node and was requeued without waiting for Slurm to declare "
                             "it DOWN." if released
                             else "); Slurm requeues the run on healthy nodes once it declares the node DOWN.")
                          + (f" Evidence: {'; '.join(evidence)}." if evidence else ""))
    if status.health.startswith("hung: ") or status.health == "ok":
        status.health = "ok" if resumed else f"node lost: {', '.join(last.get('nodes_lost') or ['?'])}"
