"""A run's or job's diagnosis across its attempts and records. ``diagnose_file`` reads a log file: a run's job
log (<run dir>/logs/<job>.out) holds every attempt of the job, so it picks the attempt that explains the job
(``attempts_newest_first``) and adds what the run's own records say (a node lost, the data staging step, the
progress watchdog); any other file is read as one log. ``in_run_words``, ``with_failed_steps`` and
``cancelled_before_start`` put in words how the job ended by the run's and Slurm's records (a passed
``adopt --smoke`` test, the user's ``slurmctl cancel``, a cancel while it waited after a requeue, srun steps
that failed under a job Slurm recorded COMPLETED).

Each attempt's log text is read through observe/diagnose.py (``diagnose_text``), which owns the reading of
one log and the ``Diagnosis`` it gives; this module decides no category from log lines itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from slurmctl import rundir
from slurmctl.fsutil import read_jsonl
from slurmctl.observe.data import failure_headline, in_progress, staging_failures, staging_headlines, staging_progress
from slurmctl.observe.diagnose import Diagnosis, diagnose_text
from slurmctl.observe.diagnosis_rules import CATEGORY_RANK, SIGNATURES
from slurmctl.observe.log_reading import read_tail
from slurmctl.observe.story import steps_lost_words
from slurmctl.observe.watchdog_report import add_watchdog, watchdog_report


def diagnose_file(path: Path, slurm_state: str = "", exit_code: str = "", *, nofollow: bool = True) -> Diagnosis:
    """A run's job log (<run dir>/logs/<job>.out) also brings what the watchdog did to that job.
    `nofollow=False` for a path the user named (`diagnose --log`): a symlink is theirs to follow."""
    text = read_tail(path, nofollow=nofollow)
    run_dir = rundir.run_dir_of_log(path)
    if not (path.parent.name == rundir.LOGS_DIR and (run_dir / rundir.RUN_JSON).is_file()):
        return diagnose_text(text, slurm_state, exit_code)
    # A run's log holds every attempt of the job, appended. The newest attempt is read first; while it runs
    # (or shows no failure), the newest attempt that failed is what explains the run.
    numbers = {key: n + 1 for n, key in enumerate(rundir.attempt_ids(read_jsonl(run_dir / rundir.ATTEMPTS)))}
    attempts = attempts_newest_first(text, path.stem, numbers)
    if not attempts:
        result = diagnose_text(text, slurm_state, exit_code)
        add_watchdog(result, watchdog_report(run_dir, path.stem), text)
        _add_node_loss(result, run_dir, path.stem)
        _add_data_staging(result, run_dir, path.stem, ended_state=_ended(slurm_state))
        return result
    chosen = None
    for n, (attempt, part) in enumerate(attempts):
        # Slurm's state and exit code are the newest attempt's
        result = diagnose_text(part, slurm_state, exit_code) if n == 0 else diagnose_text(part)
        _add_node_loss(result, run_dir, path.stem, attempt)
        if chosen is None:
            chosen = (attempt, part, result)
        if result.category != "unknown" or result.error_line or result.failing_exit \
                or slurm_state.split(" ")[0].upper() in _ENDED_BADLY:
            chosen = (attempt, part, result)
            break
    attempt, part, result = chosen
    add_watchdog(result, watchdog_report(run_dir, path.stem), part)
    _add_data_staging(result, run_dir, path.stem, attempt, ended_state=_ended(slurm_state))
    result.attempt = attempt
    result.summary = f"{result.summary.rstrip()} ({attempt['label']}.)"
    return result


# Slurm states of a job whose newest attempt itself failed: it is what `diagnose` explains, even when its
# log says nothing (an older attempt's preemption must not stand in for it).
_ENDED_BADLY = {"FAILED", "OUT_OF_MEMORY", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "CANCELLED", "BOOT_FAIL", "DEADLINE"}
_STEP_RESTART = re.compile(r"^slurmctl: training exited with code -?\d+; the allocation is healthy: restarting it")


def attempts_newest_first(text: str, job_id: str, numbers: dict[tuple[int, int], int] | None = None
                          ) -> list[tuple[dict, str]]:
    """Each attempt of a job's log, newest first, with a description of which it is (runtime.attempt writes a
    header per attempt; a training restarted inside the allocation starts after its 'restarting it here' line,
    and only its newest run is the attempt's own). `numbers`: (job id, restart count) -> the run-wide
    attempt number (rundir.attempt_ids), as `slurmctl logs --attempt` takes it."""
    lines = text.splitlines()
    starts = [(i, rundir.header_restart_count(m))
              for i, line in enumerate(lines) if (m := rundir.ATTEMPT_HEADER.match(line))]
    found = []
    for k, (begin, number) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        restarts = [i for i in range(begin, end) if _STEP_RESTART.match(lines[i])]
        # the header carries Slurm's restart count; the user's number is the run's (1 = its first attempt)
        run_attempt = (numbers or {}).get((int(job_id), number)) if job_id.isdigit() else None
        label = (f"read from job {job_id}'s attempt {k + 1} of {len(starts)}"
                 + (", the newest" if k + 1 == len(starts) else ", the newest that failed")
                 + f"; restart count {number}"
                 + (f"; the run's attempt {run_attempt}: `slurmctl logs RUN --attempt {run_attempt}`"
                    if run_attempt else ""))
        if restarts:
            label += f"; after {len(restarts)} restart(s) of the training inside the allocation"
        found.append(({"number": number, "run_attempt": run_attempt, "index": k + 1, "of": len(starts),
                       "job_id": job_id,
                       "restarts_in_allocation": len(restarts), "label": label},
                      "\n".join(lines[(restarts[-1] + 1) if restarts else begin:end])))
    return found[::-1]


def _ended(slurm_state: str | None) -> str:
    """Slurm's state word when the job ended badly, else ''."""
    word = (slurm_state or "").split(" ")[0].upper()
    return word if word in _ENDED_BADLY else ""


def _add_data_staging(result: Diagnosis, run_dir: Path, job_id: str, attempt: dict | None = None,
                      ended_state: str = "") -> None:
    """The run's staging step recorded why it stopped this job before the training (runtime/datastage.py):
    that record names the dataset, the cause and the fix, more exactly than the log's line. A job that
    ended (`ended_state`: its time limit, a cancel) while its record still says it was staging never trained
    either."""
    records = rundir.Run(run_dir.name, run_dir).stage_records()
    failed = staging_failures(records, job_id, attempt["number"] if attempt else None)
    if not failed:
        staging = in_progress(records, job_id) if ended_state else []
        if staging:
            result.category, result.source = "data_staging", "log"
            result.summary, result.hint = staging_headlines(staging, ended=True, state=ended_state)
            result.evidence = [f"data-stage record of {staging[0]['node']}: {staging_progress(staging)}",
                               *result.evidence][:5]
            result.error_line = result.evidence[0]
        return
    first = failed[0]
    nodes = sorted({f["node"] for f in failed})
    result.category, result.source = "data_staging", "log"
    result.summary = failure_headline(first) + (f" (also on {', '.join(nodes[1:])})" if len(nodes) > 1 else "")
    said = f"data-stage record of {first['node']}: {first['message']}"
    # the log's lines say the same as the record (or a piece of it): shown once, whole
    result.evidence = [said, *(e for e in result.evidence if e.strip() not in said and first["message"] not in e)][:5]
    result.error_line = said
    result.hint = first["fix"] or SIGNATURES[CATEGORY_RANK["data_staging"]].hint


def _add_node_loss(result: Diagnosis, run_dir: Path, job_id: str, attempt: dict | None = None) -> None:
    """A node of this job's allocation lost (runtime.attempt's probe after the step failed): that is the
    cause, whatever the survivors' logs say (their collectives fail once a peer is gone)."""
    lost = [e for e in read_jsonl(run_dir / rundir.ATTEMPTS)
            if e.get("event") == "node-lost" and str(e.get("job_id")) == job_id
            and (attempt is None or e.get("restart_count") in (None, attempt["number"]))]
    if not lost:
        return
    last = lost[-1]
    nodes = ", ".join(last.get("nodes_lost") or []) or "a node of the allocation"
    at = f" at step {last['last_step']}" if last.get("last_step") is not None else ""
    ck = last.get("checkpoint_step")
    result.category, result.source = "node_lost", "slurm"
    result.summary = (f"node {nodes} was lost{at}: its slurmd and processes stopped answering, and the other "
                      "ranks' collectives failed or hung.")
    result.evidence = [f"attempts.jsonl: node-lost {nodes}{at}, newest checkpoint {ck}", *result.evidence][:8]
    result.hint = ("Nothing to fix in the training: the run is requeued on healthy nodes (Slurm marks the lost "
                   "node DOWN) and resumes from " + (f"checkpoint step {ck}." if ck is not None else
                                                      "its newest checkpoint."))


def in_run_words(found: Diagnosis, events: list[dict], job_id: int | None,
                 cancelled_waiting: bool = False) -> Diagnosis:
    """A run's diagnosis with what its own records say of how job `job_id` ended: a passed `adopt --smoke`
    test (smoke_passed), or the user's `slurmctl cancel` and the step it stopped at.
    `cancelled_waiting`: Slurm recorded its newest attempt CANCELLED without a start (it was cancelled
    while it waited, after a requeue): what ended the attempt before is history, not the cause."""
    mine = [e for e in events if e.get("job_id") == job_id]
    passed = [e for e in mine if e.get("event") == "smoke-passed"]
    if passed and found.category in ("cancelled", "unknown"):
        return smoke_passed(passed[-1].get("why") or "", found)
    if cancelled_waiting:
        return _cancelled_while_waiting(found, any(e.get("event") == "cancel-requested" for e in mine))
    told = [e for e in mine if e.get("event") == "cancel-result"]
    if found.category == "cancelled" and any(e.get("event") == "cancel-requested" for e in mine):
        at = f" at step {told[-1]['last_step']}" if told and told[-1].get("last_step") is not None else ""
        lost = told[-1].get("steps_lost") if told else None
        found.summary = (f"You cancelled it (`slurmctl cancel`){at}; nothing failed before that"
                         + (f" ({steps_lost_words(lost)} since its checkpoint)." if lost else "."))
    return found


def with_failed_steps(found: Diagnosis, steps: list, job_exit_code: str) -> Diagnosis:
    """`found` (read as the failure of the steps' job, with the step's exit code) for a job Slurm recorded
    COMPLETED whose srun steps failed (slurm.owned.failed_steps): the steps lead the evidence and the
    summary says what hid them."""
    from slurmctl.slurm.owned import failed_steps_words  # why: the epilog imports this module; it never needs it

    found.summary = f"{found.summary.rstrip()} ({failed_steps_words(steps, job_exit_code)})"
    found.evidence = [f"step {s.step}: {s.state}, exit code {s.exit_code}" for s in steps[:3]] + found.evidence
    return found


def cancelled_before_start(job) -> bool:
    """Slurm recorded the job's newest attempt CANCELLED with no start: it was cancelled while it waited
    (after a requeue, its record in accounting has Start 'None')."""
    return job is not None and job.state == "CANCELLED" and job.start_time is None


def _cancelled_while_waiting(found: Diagnosis, by_slurmctl: bool) -> Diagnosis:
    """The newest attempt was cancelled before it started: say so, with how the attempt before it ended."""
    before = found.attempt or {}
    number = before.get("run_attempt") or before.get("number")  # as status numbers the run's attempts
    ran = f"attempt {number}" if number else "its last attempt"
    ended = {"preempted": "was preempted", "node_lost": "lost a node", "time_limit": "hit its time limit"}.get(
        found.category, f"ended ({found.category})")
    who = "You cancelled it (`slurmctl cancel`)" if by_slurmctl else "It was cancelled (scancel: by you or an admin)"
    nxt = f" as attempt {number + 1}" if isinstance(number, int) else ""
    return Diagnosis(
        "cancelled", f"{who} while it waited to start again{nxt}, after {ran} {ended} and Slurm requeued it; "
        "nothing failed.", ["Slurm state: CANCELLED, never started again", *found.evidence[:2]],
        "Nothing to fix: it was stopped on purpose. `slurmctl resume RUN` continues it from its newest checkpoint.",
        source="slurm", extra={**found.extra, "attempt_before": found.category}, attempt=found.attempt)


def smoke_passed(why: str, found: Diagnosis) -> Diagnosis:
    """A job `adopt --smoke` stopped once its test passed (`why`: what it saw): no failure, whatever the
    log's end (the smoke test's own cancel) reads as."""
    return Diagnosis("success", f"The smoke test passed ({why}); slurmctl cancelled the job there on purpose.",
                     found.evidence, "Nothing to fix: submit it for real with `slurmctl adopt SCRIPT --yes`.",
                     source="run", extra=found.extra)
