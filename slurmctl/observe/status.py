"""RunStatus: Slurm's view of a run's latest job + heartbeat + metrics + checkpoints + diagnosis.

`build_status` takes the Slurm job as an argument and reads only the run directory (through
slurmctl.rundir) and the clock, so every branch is unit-testable with jobs captured from the real
cluster and a run dir in a temporary directory; `run_status` / `runs_statuses` do the reading with a constant
number of Slurm commands: one squeue for every run, one sacct for the ones squeue forgot, and
(status of a run waiting for GPUs only) one sinfo for free capacity.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from slurmctl import rundir
from slurmctl.config.pricing import allocated_cost
from slurmctl.config.views import run_spec_view
from slurmctl.durations import human_duration
from slurmctl.errors import SlurmUnreachable
from slurmctl.fsutil import read_json, tail_text_lines, write_atomic
from slurmctl.observe.data import cache_suggestion, data_note, data_summary, failure_headline, staging_headlines
from slurmctl.observe.explain import explain_beyond_limit, explain_job_reason, explain_state, reason_now
from slurmctl.observe.health import apply_live_health
from slurmctl.observe.quota import quota_for
from slurmctl.observe.story import (
    cancelled_on_request,
    checkpoint_failure,
    in_allocation_restarts,
    node_loss,
    reliability_details,
    requeue_cause,
    requeue_story,
    story,
    waiting_requeued,
)
from slurmctl.observe.watchdog_report import watchdog_report
from slurmctl.rundir import Run, attempt_ids
from slurmctl.runtime.checkpoint import COMPLETE_MARKER, CheckpointManager
from slurmctl.slurm.client import Job, NodeUsage, QueueSnapshot, QueueView, SlurmClient
from slurmctl.slurm.owned import StepOutcome, failed_steps, failed_steps_words
from slurmctl.slurm.runner import answer_within

FAILED_STATES = {"FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "TIMEOUT", "PREEMPTED", "DEADLINE"}
STALL_SECONDS = 600  # no new step for this long while RUNNING is reported as unhealthy
# A read command's Slurm queries are cut off after this: with a hung controller, status and ls still
# answer within 5 s, from the run directory.
QUERY_SECONDS = 3.0
REQUEUE_LOG_TAIL_BYTES = 64 * 1024  # why a requeued job was requeued: the end of its log says


@dataclass
class QueueContext:
    """What the queue says about a pending job: its place and the free capacity."""

    position: int | None = None  # 1 = next pending job of its partition
    pending_in_partition: int = 0
    nodes: list[NodeUsage] = field(default_factory=list)


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
    # not submitted | queued | held | requeued | starting | training | checkpointing | draining |
    # finishing | finished | failed | stopped | cancelled
    phase: str = ""
    why: str = ""  # the reason in plain words, with numbers where Slurm has them
    reason_kind: str = ""  # wait | blocked | hold | ... (slurmctl.observe.explain)
    gpus: int = 0
    cpus: int = 0  # allocated (running) or asked (pending), from Slurm's TRES
    num_nodes: int = 0
    waiting_seconds: float | None = None
    estimated_start: str | None = None
    queue_position: int | None = None
    total_steps: int | None = None
    progress_percent: float | None = None
    steps_per_second: float | None = None
    checkpoint_age_seconds: float | None = None
    requeues: int = 0  # Slurm requeues of the latest job (its SLURM_RESTART_COUNT): what max_restarts caps
    restarts_in_allocation: int = 0  # crashes restarted inside their allocation (step-restart events)
    requeues_left: int | None = None  # max_restarts - requeues
    drain_unacknowledged: bool = False  # a drain was requested and the training never confirmed it
    health: str = "ok"
    cost_usd: float | None = None
    attempt_started: datetime | None = None  # the newest attempt's start (what cost_usd prices)
    suggestions: list[str] = field(default_factory=list)
    diagnosis: dict | None = None
    watchdog: dict | None = None  # what the progress watchdog did to the latest job (watchdog_report.watchdog_report)
    quota: dict | None = None  # QOS*/Assoc* reasons: the limit, its value, current usage (slurmctl.observe.quota)
    slurm_unreachable_since: float | None = None  # epoch: Slurm did not answer; the rest is the run dir's
    history: list[str] = field(default_factory=list)  # one line per attempt: how it started and ended
    health_notes: list[str] = field(default_factory=list)  # live health, end-of-run efficiency (observe/health.py)
    live_health: dict | None = None  # the numbers behind them: transport per rank, data wait, idle
    data_cache: dict | None = None  # the datasets' staging: hit rate, bytes staged, seconds (observe/data.py)
    tracked_run: dict | None = None  # run.json's tracked run: backend, run id, url (MLflow)
    notifications: list[dict] = field(default_factory=list)  # messages sent: event, time, delivered to, failed
    notified: str = ""  # one line for ls: how many messages, to which channels


    @property
    def what_is_happening(self) -> str:
        """One line for `ls` and the runs page: a failure's diagnosed cause, else the reason in words (or
        the headline). A failure Slurm's record hid (its srun steps failed in a job it recorded COMPLETED)
        is said as the headline says it, with the step: the cause alone would not say Slurm's COMPLETED
        is wrong."""
        if self.diagnosis and not (self.state == "COMPLETED" and self.phase == "failed"):
            return self.diagnosis["category"]
        return self.why or self.headline

    def to_dict(self) -> dict:
        d = asdict(self)
        d["attempt_started"] = self.attempt_started.isoformat() if self.attempt_started else None
        return d


def _phase(run: Run, job: Job, heartbeat: dict | None, restarts: int) -> str:
    state = job.state
    if state in {"PENDING", "REQUEUED", "REQUEUE_HOLD", "SPECIAL_EXIT", "REQUEUE_FED"}:
        if job.reason.startswith("JobHeld") or state in {"REQUEUE_HOLD", "SPECIAL_EXIT"}:
            return "held"
        return "requeued" if restarts or state == "REQUEUED" else "queued"
    if state in {"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING"}:
        if run.drain_requested():
            return "draining"
        if not heartbeat or str(heartbeat.get("job_id")) != str(job.job_id):
            return "starting"
        ck_dir = run.checkpoint_dir
        if ck_dir.is_dir() and any(p.name.endswith(".tmp") for p in ck_dir.iterdir()):
            return "checkpointing"
        return "training"
    if state == "COMPLETING":
        return "finishing"
    if state == "COMPLETED":
        return "finished"
    if state == "CANCELLED":
        return "cancelled"
    if state in {"TIMEOUT", "PREEMPTED", "NODE_FAIL", "DEADLINE"}:
        return "stopped"
    return "failed"


def _capacity_why(status: RunStatus, spec_gpu_type: str | None, per_node: int, ctx: QueueContext,
                  partitions: dict | None) -> None:
    """Resources/Priority: say how much is free where, and which acceptable partition could start now."""
    part = status.partition.split(",")[0]
    rows = [n for n in ctx.nodes if n.partition == part and n.state.split("+")[0] not in {"down", "drained", "drain"}]
    if not rows:
        return
    free = [n.gpus - n.gpus_used for n in rows]
    gpu = (spec_gpu_type or rows[0].gpu_type or "GPU").upper()
    fitting = sum(1 for f in free if f >= per_node)
    status.why = (f"needs {status.num_nodes} node(s) x {per_node} {gpu}; {part} has {sum(free)} of "
                  f"{sum(n.gpus for n in rows)} GPUs free and {fitting} node(s) with {per_node} free right now")
    for name, conf in (partitions or {}).items():
        if name == part or (spec_gpu_type and conf.gpu_type != spec_gpu_type):
            continue
        fits = sum(1 for n in ctx.nodes if n.partition == name and n.gpus - n.gpus_used >= per_node)
        if fits >= max(1, status.num_nodes):
            status.suggestions.append(f"{name} could start it now (${conf.price_per_gpu_hour:.2f}/GPU-hour)")
    if per_node > 1:
        status.suggestions.append("fewer GPUs (e.g. `slurmctl submit --smoke`) for a quick check")


def build_status(run: Run, job: Job | None, now: float | None = None, *, queue: QueueContext | None = None,
                 site=None, unreachable_since: float | None = None, one_run: bool = False) -> RunStatus:
    """The run's story from its Slurm job (given, never queried here) and its run directory.
    `unreachable_since`: Slurm did not answer (job is None): say so, and what the run dir knows.
    `one_run`: the status of this run alone (not a row of `ls`): an ended run's ranks' records are read too."""
    now = now or time.time()
    job_id = run.latest_job_id()
    events = run.events()
    heartbeat = run.heartbeat()
    try:
        spec = run_spec_view(run)  # Run.spec()'s values, without pydantic once validated
    except Exception:  # noqa: BLE001 - a broken run.yaml must not hide the Slurm state
        spec = None

    if job_id is None:
        status = RunStatus(run.run_id, str(run.path), None, "NOT_SUBMITTED",
                           "This run was never submitted to Slurm.", "Submit it with `slurmctl submit`.",
                           phase="not submitted")
    elif job is None and unreachable_since is not None:
        since = datetime.fromtimestamp(unreachable_since).strftime("%H:%M:%S")
        status = RunStatus(run.run_id, str(run.path), job_id, "UNREACHABLE",
                           f"Slurm unreachable since {since} ({human_duration(max(0.0, now - unreachable_since))}); "
                           "this is what the run directory knows.",
                           "A running job goes on without the controller; retry in a minute, and tell your admin "
                           "if it lasts.", phase=_phase_from_run_dir(events, job_id, heartbeat, now),
                           slurm_unreachable_since=unreachable_since)
    elif job is None:
        status = RunStatus(run.run_id, str(run.path), job_id, "UNKNOWN",
                           f"Slurm no longer knows job {job_id} (accounting has no record of it).",
                           "Check the log with `slurmctl logs RUN`; the platform team can look it up.", phase="unknown")
    else:
        status = _from_job(run, job, events, heartbeat, queue, now)
        _price(status, job, site)

    _attempts(status, events, job, spec, queue, site, _requeue_cause(run, job, events))
    if heartbeat:
        _progress(status, run, heartbeat, now)
    _checkpoint(status, run, events, job_id, now)
    if job_id is not None:
        status.watchdog = watchdog_report(run.path, job_id)
    if status.watchdog:
        _watchdog(status)
    node_loss(status, events)
    _tracking(status, run)
    apply_live_health(status, run, job, site, now, ended_ranks=one_run)
    status.data_cache = data_summary(run, job_id)
    if status.data_cache:
        status.health_notes.insert(0, data_note(status.data_cache))
        failed = status.data_cache["failed"] if status.data_cache["job_id"] is not None and str(
            status.data_cache["job_id"]) == str(job_id) else []
        staging = status.data_cache["staging"] if status.data_cache["job_id"] is not None and str(
            status.data_cache["job_id"]) == str(job_id) else []
        if failed and not (job is not None and job.state in {"PENDING", "REQUEUED"}):
            # the job's own staging step stopped it before the training: that, not "the job failed", is the news
            status.headline = failure_headline(failed[0])
            status.action = failed[0]["fix"] or "Do what the staging message says (`slurmctl logs RUN`)."
            status.why = status.headline
        elif staging and job is not None and job.state not in {"PENDING", "REQUEUED"}:
            # the staging step is at work, or the job ended under it (its time limit, a cancel): the training
            # has not started, whatever Slurm's state says of the job
            status.headline, status.action = staging_headlines(staging, ended=not job.active, state=job.state)
            status.why = status.headline
            if not job.active and status.diagnosis:
                status.diagnosis = {**status.diagnosis, "category": "data_staging", "summary": status.headline,
                                    "hint": status.action}
    staged_by_job = status.data_cache is not None and str(status.data_cache["job_id"]) == str(job_id)
    if (job is not None and job.state == "RUNNING" and heartbeat is None and not staged_by_job and spec is not None
            and any(getattr(d, "cache", "none") != "none" for d in getattr(spec, "datasets", None) or ())):
        # the job script runs the staging step first; until it reports, the training has not started either
        status.headline = status.why = ("Starting: the run's datasets are staged into the node cache before the "
                                        "training (the staging step has not reported yet).")
        status.action = "Nothing to do; the training starts when the data is in the node cache."
    if status.health.startswith("input-bound") and spec is not None:
        suggestion = cache_suggestion(getattr(spec, "datasets", None), status.data_cache)
        if suggestion:
            status.suggestions.append(suggestion)
    if "adopted" in run.meta:  # a program run by `slurmctl adopt`: its own output and checkpoints
        from slurmctl.observe.adopted import (
            apply_adopted,  # why: read only for adopted runs; status is on every command's path
        )

        apply_adopted(status, run, job, now)
    return status


def _from_job(run: Run, job: Job, events: list[dict], heartbeat: dict | None, queue: QueueContext | None,
              now: float) -> RunStatus:
    """What Slurm says of the job, in words: state and reason, phase, queue place, where it ran, and
    the diagnosis of a failed one."""
    state_expl = explain_state(job.state)
    headline, action = state_expl.headline, state_expl.action
    reason_expl = explain_job_reason(job) if job.state in {"PENDING", "REQUEUE_HOLD", "SPECIAL_EXIT"} else None
    if reason_expl:
        headline, action = f"Waiting: {reason_expl.headline}", reason_expl.action
    status = RunStatus(
        run.run_id, str(run.path), job.job_id, job.state, headline, action.replace("JOBID", str(job.job_id)),
        reason=reason_now(job), nodes=job.nodelist, partition=job.partition,
        elapsed_seconds=job.elapsed_seconds, time_limit_seconds=job.time_limit_seconds,
        exit_code=job.exit_code, num_nodes=job.num_nodes,
        why=reason_expl.headline if reason_expl else "", reason_kind=reason_expl.kind if reason_expl else "",
    )
    status.phase = _phase(run, job, heartbeat, max(_requeues(events), job.restarts))
    if job.state == "PENDING":
        if job.submit_time:
            status.waiting_seconds = max(0.0, now - job.submit_time.timestamp())
        if job.start_time:
            status.estimated_start = job.start_time.isoformat()
        if queue:
            status.queue_position = queue.position
    if job.state == "RUNNING":
        status.details.append(
            f"Running on {job.nodelist} ({job.partition}) for {human_duration(job.elapsed_seconds)}"
            f" of {human_duration(job.time_limit_seconds)}.")
    elif job.state == "FAILED" and job.exit_code:
        status.details.append(f"Exit code {job.exit_code.split(':')[0]} (signal {job.exit_code.split(':')[-1]}).")
    elif not job.active and job.elapsed_seconds is not None:
        status.details.append(f"Ran for {human_duration(job.elapsed_seconds)} on {job.nodelist or 'no nodes'}.")
    if job.state in FAILED_STATES:
        status.diagnosis, why = _diagnosis(run, job)
        if status.diagnosis.get("failing_exit"):  # srun's 143/137 or the shutdown's 15 says only who was last
            status.details.append(f"The failing rank ended with {status.diagnosis['failing_exit']}.")
        status.why = status.why or why
    return status


def _price(status: RunStatus, job: Job, site) -> None:
    """The cost so far of what Slurm allocated (the job's TRES) at the site's prices, with the same
    off-peak/weekend discounts as `slurmctl cost` and the ledger: a run, an adopted script or a
    CPU-only job alike."""
    status.cpus = job.cpus
    status.cost_usd = job_cost(job, site, status.elapsed_seconds)
    status.attempt_started = job.start_time


def job_cost(job: Job, site, elapsed_seconds: int | None, now: datetime | None = None) -> float | None:
    """Dollars for `job`'s allocation (its TRES) held for `elapsed_seconds`; None when there is nothing
    to price (no site prices, not started, or Slurm gave no TRES)."""
    if site is None or not elapsed_seconds or not job.tres:
        return None
    partition = next((site.partitions[p] for p in job.partitions if p in site.partitions), None)
    if partition is None:
        return None
    start = job.start_time or (now or datetime.now()) - timedelta(seconds=elapsed_seconds)
    return allocated_cost(job.gpus, job.cpus, start, start + timedelta(seconds=elapsed_seconds), partition,
                          site.accounting.discounts)


# The diagnosis code: a change to it misses every cached diagnosis. Named, not imported: a cached
# diagnosis is read without importing (and compiling the rules of) the diagnosis modules at all.
_DIAGNOSIS_CODE = tuple(Path(__file__).with_name(name) for name in ("diagnose.py", "diagnosis_rules.py",
                                                                     "diagnosis_families.py", "failure_structure.py",
                                                                     "log_reading.py", "run_diagnosis.py",
                                                                     "unknown_verdict.py"))


def _diagnosis(run: Run, job: Job) -> tuple[dict, str]:
    """The ended job's diagnosis and its one-line why: the run's cached ones while nothing they were read
    from changed (the log, attempts.jsonl, the watchdog's state, Slurm's state and exit code, the
    diagnosis code itself), else new ones, cached. Every rule compiled and run over the log costs ~0.3 s
    a run in `ls`; a failed run's log no longer changes. Only the run's owner reads or writes the cache."""
    def stamp(path) -> list[int]:
        try:
            st = os.stat(path, follow_symlinks=False)
            return [st.st_size, st.st_mtime_ns]
        except OSError:
            return []

    log = run.log_path(job.job_id)
    key = [job.job_id, job.state, job.exit_code, stamp(log), stamp(run.path / rundir.ATTEMPTS),
           stamp(run.path / rundir.DATA_DIR),
           stamp(run.path / rundir.WATCHDOG_DIR / rundir.WATCHDOG_STATE),
           *(stamp(path) for path in _DIAGNOSIS_CODE)]
    cache = run.path / rundir.DIAGNOSIS_CACHE
    mine = stamp(run.path) and os.stat(run.path, follow_symlinks=False).st_uid == os.geteuid()
    if mine:
        cached = read_json(cache, 1024 * 1024, owner=os.geteuid())
        if isinstance(cached, dict) and cached.get("key") == key and isinstance(cached.get("diagnosis"), dict) \
                and isinstance(cached.get("why"), str):
            return cached["diagnosis"], cached["why"]
    from slurmctl.observe.diagnose import one_line_why  # why: see _DIAGNOSIS_CODE
    from slurmctl.observe.run_diagnosis import diagnose_file  # why: see _DIAGNOSIS_CODE

    # as JSON prints it (a set of line numbers becomes its text): the same whether fresh or read back
    found = json.loads(json.dumps(diagnose_file(log, job.state, job.exit_code).to_dict(), default=str))
    why = one_line_why(found)
    if mine:
        try:
            write_atomic(cache, json.dumps({"key": key, "diagnosis": found, "why": why}), mode=0o600)
        except OSError:
            pass  # a full disk or a read-only run dir: the diagnosis is still shown
    return found, why


def _requeues(events: list[dict]) -> int:
    """Slurm requeues of the latest job: the highest SLURM_RESTART_COUNT its attempts started with."""
    return max([int(e.get("restart_count") or 0) for e in events if e.get("event") == "start"] + [0])


def _requeue_cause(run: Run, job: Job | None, events: list[dict]) -> str:
    """Why Slurm requeued the latest attempt, for a job waiting to start again without slurmctl's end
    record of it (story.requeue_cause); read only then: the drain request, then the log's tail."""
    if waiting_requeued(events, job) is None:
        return ""
    drain = run.drain_request()
    try:
        lines = tail_text_lines(run.log_path(job.job_id), 0, REQUEUE_LOG_TAIL_BYTES, nofollow=True)
    except OSError:
        lines = []
    return requeue_cause(lines, (drain or {}).get("reason"))


def _attempts(status: RunStatus, events: list[dict], job: Job | None, spec, queue: QueueContext | None,
              site, requeued_because: str = "") -> None:
    """Attempts and their story, requeues against the cap, the run's size, and why a pending job waits."""
    status.attempts = len(attempt_ids(events))
    reliability_details(status, events)
    status.history = story(events, job, requeued_because)
    requeue_story(status, job, events, requeued_because)
    cancelled_on_request(status, job, events)
    # Slurm's restart count where the attempt it requeued recorded no end (a requeue by the program itself)
    status.requeues = max(_requeues(events), job.restarts if job is not None else 0)
    status.restarts_in_allocation = in_allocation_restarts(events)
    if job is not None and job.tres:
        status.gpus = job.gpus  # what Slurm allocated (or, pending, what the job asks)
    if spec is not None:
        status.gpus = status.gpus or spec.nodes * spec.gpus_per_node
        status.num_nodes = status.num_nodes or spec.nodes
        status.requeues_left = max(0, spec.max_restarts - status.requeues)
        if job is not None and job.state == "PENDING" and status.reason in {"Resources", "Priority"} and queue:
            _capacity_why(status, spec.gpu_type, spec.gpus_per_node, queue, site.partitions if site else None)


def _progress(status: RunStatus, run: Run, heartbeat: dict, now: float) -> None:
    """The training's last step (heartbeat), its metrics, rate and share done; a stall while training."""
    status.last_step = heartbeat.get("step")
    status.heartbeat_age_seconds = max(0.0, now - float(heartbeat.get("time", now)))
    status.last_metrics = {k: v for k, v in (heartbeat.get("metrics") or {}).items() if k not in {"step", "time"}}
    total = heartbeat.get("total_steps") or status.last_metrics.get("total_steps") or run.meta.get("total_steps")
    status.total_steps = int(total) if total else None
    if status.total_steps and status.last_step is not None:
        status.progress_percent = round(100 * (status.last_step + 1) / status.total_steps, 1)
    status.steps_per_second = run.step_rate()
    shown = ", ".join(f"{k} {v:.4g}" for k, v in status.last_metrics.items() if isinstance(v, (int, float)))
    status.details.append(f"Last progress: step {status.last_step}"
                          f"{f' ({shown})' if shown else ''}, {human_duration(status.heartbeat_age_seconds)} ago.")
    if status.phase == "training" and status.heartbeat_age_seconds > STALL_SECONDS:
        status.health = f"no step progress for {int(status.heartbeat_age_seconds // 60)} min"


def _checkpoint(status: RunStatus, run: Run, events: list[dict], job_id: int | None, now: float) -> None:
    """The newest valid checkpoint and its age; a save that failed."""
    latest_ck = CheckpointManager(run.checkpoint_dir).latest()
    if latest_ck:
        status.latest_checkpoint_step = latest_ck.step
        marker = latest_ck.path / COMPLETE_MARKER
        if marker.exists():
            status.checkpoint_age_seconds = max(0.0, now - marker.stat().st_mtime)
        status.details.append(f"Newest valid checkpoint: step {latest_ck.step}.")
    elif job_id is not None:
        status.details.append("No valid checkpoint yet.")
        # resume refuses a run without one: advise what works (an adopted program's own: observe.adopted)
        if "slurmctl resume" in status.action and "adopted" not in run.meta:
            spec_path = run.path / rundir.RUN_YAML
            status.action = ("It saved no checkpoint, so `slurmctl resume` has nothing to continue from: submit "
                             f"its run.yaml again to start from step 0 (`slurmctl submit {spec_path}`).")
    checkpoint_failure(status, events, now)


def _watchdog(status: RunStatus) -> None:
    """What the progress watchdog did to the latest job, and the health it implies."""
    status.details.append(f"Watchdog: {status.watchdog['message']}.")
    if status.watchdog["state"] == "warned" and status.health == "ok":
        status.health = "stalled: no step progress (the watchdog warned)"
    if status.watchdog["state"] in {"drain-requested", "killed"}:
        status.health = "hung: " + ("the watchdog ended the step" if status.watchdog["state"] == "killed"
                                    else "the watchdog asked it to drain")


def _tracking(status: RunStatus, run: Run) -> None:
    """The tracked run (MLflow, W&B) and where the run's notifications went."""
    tracked = run.meta.get("tracking")
    status.tracked_run = tracked if isinstance(tracked, dict) else None
    status.notifications = notification_summary(run.notifications())
    if status.notifications:
        channels = sorted({c for n in status.notifications for c in n["to"]})
        status.notified = f"{len(status.notifications)} message(s) to {', '.join(channels) or 'no channel'}"


def notification_summary(records: list[dict]) -> list[dict]:
    """notifications.jsonl in words: per message its event, time, the channels it reached and what failed."""
    summary = []
    for r in records[-50:]:
        channels = r.get("channels") if isinstance(r.get("channels"), list) else []
        summary.append({"event": str(r.get("event")), "time": r.get("time"), "title": str(r.get("title") or ""),
                        "to": [f"{c.get('channel')} ({c.get('kind')})" for c in channels
                               if isinstance(c, dict) and c.get("error") is None],
                        "failed": [f"{c.get('channel') or 'settings'}: {c.get('error')}" for c in channels
                                   if isinstance(c, dict) and c.get("error") is not None]
                        + ([str(r["suppressed"])] if r.get("suppressed") else [])})
    return summary


def _queue_context(job: Job | None, view: QueueView) -> QueueContext | None:
    if job is None or job.state != "PENDING":
        return None
    pending = view.pending_by_partition.get(job.partition.split(",")[0], [])
    position = pending.index(job.job_id) + 1 if job.job_id in pending else None
    return QueueContext(position=position, pending_in_partition=len(pending))


def _lookup(client: SlurmClient, job_ids: set[int], snapshot: QueueSnapshot | None = None,
            known: Callable[[], dict[int, Job]] | None = None) -> tuple[dict[int, Job], QueueView]:
    """One squeue for everything active, or the `snapshot` of one (+ one sacct for what squeue no
    longer shows and `known`, the caller's recent jobs from accounting, does not have)."""
    view = client.queue_view(job_ids, snapshot)
    found = dict(view.jobs)
    missing = job_ids - found.keys()
    if missing and known is not None:
        recent = known()
        found.update({j: recent[j] for j in missing if j in recent})
        missing -= recent.keys()
    if missing:
        for job in client.history(missing):
            found.setdefault(job.job_id, job)
    return found, view


def run_status(run: Run, client: SlurmClient, site=None) -> RunStatus:
    """Slurm's view + the run dir. When Slurm does not answer within QUERY_SECONDS, the run dir's
    alone, marked UNREACHABLE with `slurm_unreachable_since` (the CLI exits non-zero on it)."""
    job_id = run.latest_job_id()
    try:
        with answer_within(getattr(client, "runner", None), QUERY_SECONDS):
            found, view = _lookup(client, {job_id}) if job_id is not None else ({}, QueueView())
            job = found.get(job_id) if job_id is not None else None
            if job is not None and job.active and (task := run.waiting_array_task()) is not None \
                    and client.array_task_state(*task) is None:
                # a sweep element that never started: the array's id shows its other tasks; its own
                # task (<array>_<index>) left the queue without a start, i.e. it was cancelled
                job = replace(job, state="CANCELLED", reason="", nodelist="", elapsed_seconds=0)
            ctx = _queue_context(job, view)
            if ctx is not None and job.reason in {"Resources", "Priority"}:
                ctx.nodes = client.node_usage()
            # only quota reasons cost Slurm calls (one squeue, one sacctmgr)
            quota = quota_for(job, client) if job is not None and job.state == "PENDING" else None
    except SlurmUnreachable:
        return build_status(run, None, site=site, unreachable_since=slurm_unreachable(), one_run=True)
    if job_id is not None:
        slurm_answered()
    status = build_status(run, job, queue=ctx, site=site, one_run=True)
    with_failed_steps(client, [(run, job, status)])
    if quota is not None:
        status.quota = quota.to_dict()
        status.why = f"{status.why} ({quota.sentence()})"
        if quota.never_fits:  # no running job's end makes room: say so, with the limit and the fix
            expl = explain_beyond_limit(quota.request, quota.limit, quota.unit, f"{quota.field} of {quota.scope} "
                                        f"{quota.holder}")
            status.headline, status.why, status.reason_kind = f"Blocked: {expl.headline}", expl.headline, expl.kind
            status.action = expl.action
    return status


def completed_but_failed(run: Run, client: SlurmClient, job: Job) -> list[StepOutcome]:
    """The failed srun steps of an adopted run Slurm recorded COMPLETED (its latest submission's job and,
    for an array, its tasks: job ids from the submission's on), one sacct; [] for any other run."""
    return _steps_of_completed(client, [(run, job)]).get(run.run_id, [])


def _steps_of_completed(client: SlurmClient, runs: list[tuple[Run, Job]]) -> dict[str, list[StepOutcome]]:
    """The failed srun steps of each adopted run whose latest job Slurm recorded COMPLETED, by run id: one
    sacct for all of them (none when there is no such run). Only adopted runs are asked: slurmctl's own
    runtime records how each of its steps ended (its end and step-restart events; a step it restarted in
    the allocation failed, the run did not), while an adopted script's exit status can hide its steps'
    failures (`srun ... &`, a bare `wait`)."""
    ids = {run.run_id: [i for i in run.priced_job_ids() if i >= job.job_id]
           for run, job in runs if job.state == "COMPLETED" and "adopted" in run.meta}
    if not ids:
        return {}
    steps = failed_steps(client, list(dict.fromkeys(i for own in ids.values() for i in own)))
    return {run_id: [s for s in steps if int(s.step.split(".")[0]) in own] for run_id, own in ids.items()}


def with_failed_steps(client: SlurmClient, found: list[tuple[Run, Job | None, RunStatus]]) -> None:
    """The one reading of a run Slurm recorded COMPLETED whose srun steps failed (_steps_of_completed):
    `status`, `ls` and the web alike turn each such finished run's status into a failure, one sacct for
    them all."""
    finished = [(run, job, status) for run, job, status in found
                if status.phase == "finished" and job is not None and job.state == "COMPLETED"]
    steps = _steps_of_completed(client, [(run, job) for run, job, _ in finished])
    for run, job, status in finished:
        if steps.get(run.run_id):
            _failed_steps(status, run, job, steps[run.run_id])


def _failed_steps(status: RunStatus, run: Run, job: Job, steps: list[StepOutcome]) -> None:
    """A run whose step failed inside a job Slurm recorded COMPLETED 0:0 failed: said with the step (in
    the headline and on each attempt's line of the history), and diagnosed from the failed job's log as
    a failure with the step's exit code."""
    status.phase = "failed"
    status.headline = status.why = failed_steps_words(steps, job.exit_code)
    status.history = story(run.events(), job, failed_steps=steps)
    status.action = f"Read the diagnosis and `slurmctl logs {run.run_id}`; fix the step, then submit it again."
    failed = int(steps[0].step.split(".")[0])
    status.diagnosis, _ = _diagnosis(run, replace(job, job_id=failed, state="FAILED", exit_code=steps[0].exit_code))


def runs_statuses(runs: list[Run], client: SlurmClient, site=None, queue: QueueSnapshot | None = None,
                  known: Callable[[], dict[int, Job]] | None = None) -> list[RunStatus]:
    """Status for many runs with one squeue call (none when the caller passes the `queue` it has)
    and at most one sacct call, none for the jobs `known` has (run dirs alone, marked UNREACHABLE, when
    Slurm does not answer within QUERY_SECONDS)."""
    latest = {run.run_id: run.latest_job_id() for run in runs}
    wanted = {j for j in latest.values() if j is not None}
    try:
        with answer_within(getattr(client, "runner", None), QUERY_SECONDS):
            found, view = _lookup(client, wanted, queue, known) if wanted else ({}, QueueView())
    except SlurmUnreachable:
        return unreachable_statuses(runs, site)
    if wanted:
        slurm_answered()
    statuses = [build_status(run, found.get(latest[run.run_id]),
                             queue=_queue_context(found.get(latest[run.run_id]), view), site=site) for run in runs]
    try:
        with answer_within(getattr(client, "runner", None), QUERY_SECONDS):
            with_failed_steps(client, [(run, found.get(latest[run.run_id]), s) for run, s in zip(runs, statuses)])
    except SlurmUnreachable:
        pass  # Slurm's own states stand: its step records could not be read in time
    return statuses


def unreachable_statuses(runs: list[Run], site=None) -> list[RunStatus]:
    """Every run from its run dir alone, marked UNREACHABLE (a caller already found Slurm silent)."""
    since = slurm_unreachable()
    return [build_status(run, None, site=site, unreachable_since=since) for run in runs]


def _outage_file():
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "slurmctl" / "slurm-unreachable-since"


def slurm_unreachable(now: float | None = None) -> float:
    """When this user's commands first found Slurm unreachable in the current outage (remembered in
    ~/.local/state/slurmctl, so "since" spans commands); `now` starts a new outage."""
    now = now or time.time()
    path = _outage_file()
    try:
        since = float(path.read_text().strip())
        if 0 < since <= now:
            return since
    except (OSError, ValueError):
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(f"{now}\n")
    except OSError:
        pass  # a read-only home: "since" is this command's first failure
    return now


def slurm_answered() -> None:
    """Slurm answered: the outage (if one was remembered) is over."""
    try:
        _outage_file().unlink()
    except OSError:
        pass


def _phase_from_run_dir(events: list[dict], job_id: int | None, heartbeat: dict | None, now: float) -> str:
    """The phase as the run dir alone tells it (Slurm did not answer): the latest attempt's events
    and the heartbeat's age; "unknown" where only Slurm could say."""
    mine = [e for e in events if e.get("job_id") == job_id and e.get("event") in {"start", "end"}]
    if not mine:
        return "unknown"
    last = mine[-1]
    if last["event"] == "end":
        if last.get("action") == "requeue":
            return "requeued"
        return {"completed": "finished", "cancelled": "cancelled"}.get(last.get("outcome"), "stopped")
    fresh = heartbeat and str(heartbeat.get("job_id")) == str(job_id) and \
        now - float(heartbeat.get("time", 0) or 0) < STALL_SECONDS
    return "training" if fresh else "unknown"
