"""What each event says, composed from the run directory (attempts.jsonl, the log, heartbeat).

Events and when they are sent (by whom: always a process of the run's user):

* started    the run's first start after a submission (the job's batch shell, in the background)
* recovered  the first start after a preemption or a lost node: ONE message for the pair (what was
             lost, where it resumed); nothing is sent at the preemption itself
* failed     the job stops on a failure (the batch shell, after `attempt end` decided to stop; for a
             killed batch shell, a sender of the user's that the epilog starts): the
             diagnosis category, its evidence line, the newest valid checkpoint, the cost so far and
             the one command to run next
* finished   the job stops because the training completed: final metrics, cost, an efficiency note
* stalled    the progress watchdog asked a stalled training to drain (the watchdog sidecar)
* pending    the job is still pending `pending_after` after submit (a watcher submit leaves behind)

A requeue sends nothing (the next start says `recovered`, or the final end says why it stopped);
a cancel sends nothing beyond `started` (the user asked for it).
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

from slurmctl.durations import human_duration
from slurmctl.notify.journal import Message
from slurmctl.rundir import Run

RECOVERED_AFTER = ("preemption", "node-lost")
QUIET_STOPS = ("cancelled", "idle")


def since_submit(events: list[dict]) -> list[dict]:
    last = max((i for i, e in enumerate(events) if e.get("event") == "submitted"), default=-1)
    return events[last + 1:]


def _submissions(events: list[dict]) -> int:
    return sum(1 for e in events if e.get("event") == "submitted")


def _title(run: Run, what: str) -> str:
    return f"[slurmctl] {run.run_id}: {what}"


def _tracked_line(run: Run) -> list[str]:
    tracked = run.meta.get("tracking") or {}
    if tracked.get("url"):
        return [f"Tracked run: {tracked['url']}"]
    if tracked.get("backend") == "wandb":
        return [f"W&B run id: {tracked.get('run_id')}"]
    return []


def started_message(run: Run) -> Message | None:
    events = since_submit(run.events())
    starts = [e for e in events if e.get("event") == "start"]
    if not starts:
        return None
    start = starts[-1]
    where = start.get("nodes") or "?"
    if len(starts) == 1:
        body = [f"Run {run.run_id} started (job {start.get('job_id')}) on {where}."
                + (f" Resuming from checkpoint step {start['resume_step']}." if start.get("resume_step") is not None
                   else ""), *_tracked_line(run), f"Follow it: slurmctl status {run.run_id}"]
        return Message("started", f"started:{_submissions(run.events())}", _title(run, "started"), "\n".join(body),
                       {"job_id": start.get("job_id"), "nodes": where})
    # the end of the attempt just before this start (none: Slurm requeued it before `end` could run)
    between = events[events.index(starts[-2]) + 1:events.index(start)]
    previous = next((e for e in reversed(between) if e.get("event") == "end"), None)
    if previous is None or previous.get("outcome") not in RECOVERED_AFTER:
        return None
    cause = "preempted" if previous.get("outcome") == "preemption" else "lost a node"
    waited = max(0.0, float(start.get("time") or 0) - float(previous.get("time") or 0))
    lost = previous.get("steps_lost")
    body = [f"Run {run.run_id} was {cause} at step {previous.get('last_step')} (job {previous.get('job_id')}, "
            f"attempt {previous.get('restart_count', 0) + 1}) and has RECOVERED: running again on {where} from "
            f"checkpoint step {start.get('resume_step')} after {human_duration(waited)}"
            + (f"; {lost} step(s) are re-run." if lost else "; no step was lost."), *_tracked_line(run)]
    return Message("recovered", f"recovered:{start.get('job_id')}:{start.get('restart_count')}",
                   _title(run, f"{cause}, recovered"), "\n".join(body),
                   {"job_id": start.get("job_id"), "outcome": previous.get("outcome"),
                    "resume_step": start.get("resume_step"), "last_step": previous.get("last_step")})


def cost_so_far(run: Run, events: list[dict], now: float) -> float | None:
    """Dollars for every attempt of this submission: start -> end (or now), GPUs x the partition's price."""
    try:
        from slurmctl.config.models import load_site_config  # why: pydantic loads only for a cost
        from slurmctl.config.pricing import allocation_cost  # why: the same

        site = load_site_config()
        spec = run.spec()
        price = site.partitions[run.meta.get("partition")].price_per_gpu_hour
    except Exception:  # noqa: BLE001 - no price is better than no message
        return None
    total, started = 0.0, None
    for e in events:
        if e.get("event") == "start":
            started = float(e.get("time") or 0)
        elif e.get("event") == "end" and started:
            total += allocation_cost(spec.nodes * spec.gpus_per_node, datetime.fromtimestamp(started),
                                     datetime.fromtimestamp(float(e.get("time") or now)), price,
                                     site.accounting.discounts)
            started = None
    if started:
        total += allocation_cost(spec.nodes * spec.gpus_per_node, datetime.fromtimestamp(started),
                                 datetime.fromtimestamp(now), price, site.accounting.discounts)
    return round(total, 2)


def _efficiency(events: list[dict]) -> str:
    """Attempts and the steps done twice: only an attempt that was continued (a requeue or an in-allocation
    restart) re-runs the steps it made past its checkpoint; the final end's steps_lost re-runs nothing."""
    starts = sum(1 for e in events if e.get("event") == "start")
    restarts = sum(1 for e in events if e.get("event") == "step-restart")
    continued = [e for e in events if e.get("event") == "step-restart"
                 or (e.get("event") == "end" and e.get("action") == "requeue")]
    rerun = sum(int(e.get("steps_lost") or 0) for e in continued)
    if starts <= 1 and not restarts:
        return "One attempt, no step re-run."
    return (f"{starts} Slurm attempt(s), {restarts} restart(s) inside an allocation, "
            + (f"{rerun} step(s) re-run after resuming from checkpoints." if rerun else "no step re-run."))


def ended_message(run: Run, now: float | None = None) -> Message | None:
    now = time.time() if now is None else now
    events = since_submit(run.events())
    ends = [e for e in events if e.get("event") == "end"]
    if not ends or ends[-1].get("action") != "stop":
        return None
    end = ends[-1]
    outcome = end.get("outcome")
    key_tail = f"{end.get('job_id')}:{end.get('restart_count')}"
    cost = cost_so_far(run, events, now)
    cost_text = f"${cost:,.2f}" if cost is not None else "unknown"
    ck = end.get("checkpoint_step")
    if outcome in QUIET_STOPS:
        return None
    if outcome == "completed":
        beat = run.heartbeat() or {}
        metrics = {k: v for k, v in (beat.get("metrics") or {}).items() if k not in ("step", "time")}
        shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, (int, float))) or "none logged"
        body = [f"Run {run.run_id} FINISHED at step {beat.get('step', end.get('last_step'))} "
                f"(job {end.get('job_id')}).",
                f"Final metrics: {shown}", f"Cost: {cost_text}", f"Efficiency: {_efficiency(events)}",
                *_tracked_line(run)]
        return Message("finished", f"finished:{key_tail}", _title(run, "finished"), "\n".join(body),
                       {"job_id": end.get("job_id"), "metrics": metrics, "cost_usd": cost, "checkpoint_step": ck})
    from slurmctl.observe.diagnose import evidence_line  # why: only a failure message reads it
    from slurmctl.observe.run_diagnosis import diagnose_file  # why: as above

    job_id = int(end.get("job_id") or 0)
    diagnosis = diagnose_file(run.log_path(job_id), end.get("slurm_state") or "", f"{end.get('exit_code')}:0")
    evidence = evidence_line(diagnosis.to_dict()) or "(no evidence line in the log)"
    if ck is not None:
        next_command = f"slurmctl resume {run.run_id}"
    else:
        next_command = f"slurmctl submit {run.meta.get('source_spec') or 'run.yaml'}"
    body = [f"Run {run.run_id} FAILED (job {end.get('job_id')}, exit code {end.get('exit_code')}): "
            f"{diagnosis.category}.",
            _named(diagnosis.summary, run.run_id, job_id), f"Evidence: {evidence}",
            f"Last valid checkpoint: {f'step {ck}' if ck is not None else 'none'}", f"Cost so far: {cost_text}",
            f"Why it stopped: {end.get('reason')}", f"Fix: {_named(diagnosis.hint, run.run_id, job_id)}",
            f"Next: {next_command}",
            *_tracked_line(run)]
    return Message("failed", f"failed:{key_tail}", _title(run, f"FAILED ({diagnosis.category})"), "\n".join(body),
                   {"job_id": end.get("job_id"), "category": diagnosis.category, "evidence": evidence,
                    "checkpoint_step": ck, "cost_usd": cost, "next_command": next_command})


def _named(text: str, run_id: str, job_id: int) -> str:
    """The diagnosis's advice names this run and job where it says RUN and JOB (its placeholders)."""
    return re.sub(r"\bJOB\b", str(job_id), re.sub(r"\bRUN\b", run_id, text or ""))


def stalled_message(run: Run, job_id: str, restart_count: str, detail: str) -> Message:
    body = [f"Run {run.run_id} STALLED (job {job_id}): {detail}",
            "The watchdog asked the training to checkpoint and stop; it ends the step if there is no answer.",
            f"Look: slurmctl diagnose {run.run_id}", *_tracked_line(run)]
    return Message("stalled", f"stalled:{job_id}:{restart_count}", _title(run, "stalled"), "\n".join(body),
                   {"job_id": job_id, "detail": detail})


def pending_message(run: Run, job_id: int, waited: float, reason: str, why: str) -> Message:
    body = [f"Run {run.run_id} (job {job_id}) has been waiting {human_duration(waited)}: {why}",
            f"Slurm's reason: {reason}", f"Details: slurmctl status {run.run_id}"]
    return Message("pending", f"pending:{job_id}", _title(run, "still pending"), "\n".join(body),
                   {"job_id": job_id, "reason": reason, "waited_seconds": round(waited)})


def run_at(run_dir: str | Path) -> Run:
    path = Path(run_dir)
    return Run(path.name, path)
