"""What to do when an attempt ends: requeue it or stop, and why (a pure function, unit-tested).

Rules, in order:
  - a drain asked for by `slurmctl cancel` stops the run (acknowledged or not);
  - a drain asked for by the site's idle policy (idle_action: drain) stops it too: requeued, an
    allocation that did nothing would hold GPUs doing nothing again;
  - an acknowledged time-limit / preemption drain requeues: long runs chain through time limits
    and preempted runs resume; these never count against the restart cap;
  - a preemption or time limit that Slurm's record shows but nobody could ask the program about (its
    signal went straight to its srun tasks and it died of it before it saved, e.g. while starting):
    the end is still the preemption's or the time limit's, not the program's failure: requeue from the
    checkpoint its next start restores (the steps since are lost), stop before the first one;
  - exit code 0 without a drain: the training finished;
  - any other end is a failure. It requeues only if a valid checkpoint exists (a crash before the
    first checkpoint would loop from step 0), the failure cap is not reached, and the previous
    attempt did not also fail at the same checkpoint (no progress between two failures).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

REQUEUE, STOP = "requeue", "stop"


@dataclass(frozen=True)
class Decision:
    action: str  # requeue | stop
    outcome: str  # completed | time-limit | preemption | cancelled | idle | failed
    reason: str  # one plain sentence
    failures: int  # failures since the run's latest submission, this one included
    preemptions: int  # preemption drains since the latest submission, this one included

    def to_dict(self) -> dict:
        return asdict(self)


def decide(*, exit_code: int, drain: dict | None, acked: bool, checkpoint_step: int | None,
           previous_ends: list[dict], max_restarts: int) -> Decision:
    """previous_ends: this run's `end` records since its latest `submitted` record, oldest first."""
    failures = sum(1 for e in previous_ends if e.get("outcome") == "failed")
    preemptions = sum(1 for e in previous_ends if e.get("outcome") == "preemption")
    reason = (drain or {}).get("reason")
    ck = f"checkpoint step {checkpoint_step}" if checkpoint_step is not None else "no checkpoint"

    if reason == "cancel":
        said = "acknowledged" if acked else "NOT acknowledged (work since the last checkpoint is lost)"
        return Decision(STOP, "cancelled", f"cancelled by request; drain {said}; {ck}.", failures, preemptions)
    if reason == "idle":
        said = "acknowledged" if acked else "NOT acknowledged (work since the last checkpoint is lost)"
        return Decision(STOP, "idle", f"drained by the site's idle policy (the allocation held GPUs without "
                        f"training); drain {said}; {ck}. Not requeued: fix what it waited for, then "
                        "`slurmctl resume`.", failures, preemptions)
    if reason in {"time-limit", "preemption", "signal"} and acked:
        outcome = "preemption" if reason == "preemption" else "time-limit"
        preemptions += outcome == "preemption"
        why = "preempted" if outcome == "preemption" else "reached its time limit"
        return Decision(REQUEUE, outcome, f"{why}; drained at {ck}; requeued to continue.", failures, preemptions)
    if reason in {"time-limit", "preemption"} and (drain or {}).get("read_from") == "slurm":
        outcome = reason
        preemptions += outcome == "preemption"
        why = (f"the job was preempted (Slurm's record) and the program died of its signal (exit code {exit_code}) "
               "before it saved" if outcome == "preemption" else
               f"the program died of the job's own signal before its time limit (exit code {exit_code}) before "
               "it saved")
        if checkpoint_step is None:
            return Decision(STOP, outcome, f"{why}, and it has no checkpoint yet; not restarting (it would start "
                            "from step 0 again). Resubmit it.", failures, preemptions)
        return Decision(REQUEUE, outcome, f"{why}; requeued to continue from {ck}.", failures, preemptions)
    if exit_code == 0 and not drain:
        return Decision(STOP, "completed", f"the training finished; {ck}.", failures, preemptions)
    if reason == "smoke" and acked and exit_code == 0:  # `submit --smoke` stops after one step
        return Decision(STOP, "completed", f"smoke test: one step, drained at {ck}.", failures, preemptions)

    failures += 1
    what = f"exit code {exit_code}"
    if drain:
        what = f"{reason or 'drain'} drain was NOT acknowledged ({what})"
    if checkpoint_step is None:
        return Decision(STOP, "failed", f"{what} before the first valid checkpoint; not restarting "
                        "(it would start from step 0 again). Fix the error, then resubmit.", failures, preemptions)
    if failures > max_restarts:
        return Decision(STOP, "failed", f"{what}; {failures} failures reach the cap of max_restarts={max_restarts}; "
                        f"stopping at {ck}. Fix the error, then `slurmctl resume`.", failures, preemptions)
    last = previous_ends[-1] if previous_ends else None
    if last and last.get("outcome") == "failed" and last.get("checkpoint_step") == checkpoint_step:
        return Decision(STOP, "failed", f"{what}; two failures in a row without a new checkpoint (still at "
                        f"{ck}); stopping instead of looping. Fix the error, then `slurmctl resume`.",
                        failures, preemptions)
    return Decision(REQUEUE, "failed", f"{what}; restart {failures} of {max_restarts} from {ck}.",
                    failures, preemptions)
