"""What each page shows, read from the same core as the CLI: `ls` (rundir's registry + observe/status's
batched `runs_statuses`), `status` (`run_status`: story, diagnosis), `cost` (ops/accounting's
`run_cost` over the run's lineage), `logs` (observe/logs), `queue` (one squeue + observe/explain),
`compare` (observe/compare), `report` (ops/report over the ledger) and `nodes` (ops/health/view). No
second implementation of any of them: these functions only pick and shape values for the templates.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from slurmctl import lineage
from slurmctl.durations import human_duration, until
from slurmctl.errors import SlurmctlError
from slurmctl.observe.charts import Chart, Series
from slurmctl.observe.compare import load_series
from slurmctl.observe.explain import explain_job_reason
from slurmctl.observe.listing import CallerJobs, my_runs
from slurmctl.observe.logs import log_file, tail_lines, training_lines
from slurmctl.observe.status import run_status, runs_statuses
from slurmctl.ops.accounting import Ledger, cost_records_dir, run_cost
from slurmctl.ops.cost_so_far import price_every_attempt
from slurmctl.ops.health.view import node_views
from slurmctl.ops.report import build_report
from slurmctl.rundir import Run
from slurmctl.runtime.checkpoint import CheckpointManager

SORT_KEYS = ("created", "run", "phase", "step", "gpus", "elapsed", "cost")


@dataclass
class RunRow:
    user: str
    run_id: str
    job_id: str
    phase: str
    step: str
    step_value: int
    gpus: int
    created: float
    age: str
    elapsed: str
    elapsed_value: int
    cost: str
    cost_value: float
    what: str


def _row(user: str, run: Run, s, now: float) -> RunRow:
    step = "-" if s.last_step is None else (f"{s.last_step}/{s.total_steps}" if s.total_steps else str(s.last_step))
    created = float(run.meta.get("created") or 0)
    return RunRow(user, s.run_id, str(s.job_id or "-"), s.phase, step, s.last_step or 0, s.gpus or 0, created,
                  human_duration(max(0.0, now - created)) if created else "-",
                  human_duration(s.elapsed_seconds) if s.elapsed_seconds is not None else "-", s.elapsed_seconds or 0,
                  f"${s.cost_usd:,.2f}" if s.cost_usd is not None else "-", s.cost_usd or 0.0, s.what_is_happening)


def runs_page(ctx, operator: bool, limit: int | None, query: str = "", phase: str = "", sort: str = "created",
              descending: bool = True) -> dict:
    """The rows `slurmctl ls -n LIMIT` (or `ls --all-users` for the operator) shows, filtered and sorted."""
    if operator:
        owned = ctx.registry.list_all_users(limit)
        users, runs = [u for u, _ in owned], [r for _, r in owned]
        statuses = runs_statuses(runs, ctx.client, site=ctx.site)
    else:
        mine = CallerJobs(ctx.client, ctx.registry.uid)  # as `ls`: asked while the runs are read
        runs, statuses = my_runs(ctx.registry, ctx.client, ctx.registry.recent(limit), site=ctx.site,
                                 known=mine.recent)
        users = [ctx.registry.user] * len(runs)
    down = [s.slurm_unreachable_since for s in statuses if s.slurm_unreachable_since is not None]
    if not operator and not down:  # as `ls`: a requeued or resumed run's cost is all its attempts'
        price_every_attempt(ctx.site, ctx.client, runs, statuses)
    now = time.time()
    rows = [_row(u, r, s, now) for u, r, s in zip(users, runs, statuses)]
    phases = sorted({r.phase for r in rows})
    if query:
        rows = [r for r in rows if query.lower() in r.run_id.lower() or query.lower() in r.user.lower()]
    if phase:
        rows = [r for r in rows if r.phase == phase]
    key = {"created": lambda r: (r.created, r.run_id), "run": lambda r: r.run_id, "phase": lambda r: r.phase,
           "step": lambda r: r.step_value, "gpus": lambda r: r.gpus, "elapsed": lambda r: r.elapsed_value,
           "cost": lambda r: r.cost_value}[sort if sort in SORT_KEYS else "created"]
    rows.sort(key=key, reverse=descending)
    # as `ls`: the caller's plain sbatch jobs beside the runs (never another user's; none for the operator)
    plain = [] if operator or down else [p.to_dict() for p in mine.plain_rows(limit, ctx.site)]
    return {"rows": rows, "phases": phases, "plain": plain,
            "unreachable": datetime.fromtimestamp(min(down)).strftime("%H:%M:%S") if down else None}


def run_page(ctx, run: Run, operator: bool) -> dict:
    """`status` + `cost` + checkpoints of one run."""
    status = run_status(run, ctx.client, site=ctx.site)
    try:
        checkpoints = [{"step": c.step, "path": str(c.path), "valid": c.valid}
                       for c in CheckpointManager(run.checkpoint_dir).all()][-20:]
    except OSError:
        checkpoints = []
    cost, cost_error = None, None
    try:
        cost = _run_cost(ctx, run, operator)
    except SlurmctlError as exc:  # the rest of the page stands without the cost table
        cost_error = f"{exc.message} {exc.hint or ''}".strip()
    heartbeat = run.heartbeat() or {}
    world = heartbeat.get("world_size")
    ranks = list(range(world)) if isinstance(world, int) and 0 < world <= 512 else [0]
    return {"s": status, "action": status.action.replace("RUN", status.run_id), "checkpoints": checkpoints,
            "cost": cost, "cost_error": cost_error, "ranks": ranks,
            "estimated_start": until(datetime.fromisoformat(status.estimated_start))
            if status.estimated_start else None,
            "cancellable": not operator and status.job_id is not None and status.state in
            {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED", "CONFIGURING"}}


def _run_cost(ctx, run: Run, operator: bool):
    # the run and its resumes/forks, as `slurmctl cost` adds them up (the operator: within its owner's runs)
    runs = [run] if operator else ctx.registry.list()
    family = lineage.family(runs, run.run_id) or [run]
    job_ids = [j for r in family for j in r.job_ids()]
    if not job_ids:
        return None
    return run_cost([r.run_id for r in family], job_ids, ctx.site, ctx.client, [r.cost_records_dir for r in family],
                    {a for r in family for a in r.drain_acknowledged_attempts()},
                    {a for r in family for a in r.lost_on_cancel_attempts()},
                    {k: e for r in family for k, e in r.attempt_ends().items()})


def log_tail(run: Run, rank: str, lines: int) -> dict:
    """`slurmctl logs RUN -n LINES --rank RANK` as data."""
    path = log_file(run)
    text = tail_lines(run.refresh(path), lines)
    return {"path": str(path), "rank": rank, "exists": path.exists(),
            "lines": training_lines(text, None if rank == "all" else int(rank))}


def queue_page(ctx, partition: str = "", user: str = "", state: str = "") -> dict:
    """`slurmctl queue [-p] [-u] [-t]`: one squeue, each pending reason in words (observe/explain)."""
    jobs = ctx.client.queue_filtered([partition] if partition else [], [user] if user else [],
                                     [state] if state else [])
    rows = []
    for j in jobs:
        expl = explain_job_reason(j) if j.state == "PENDING" else None
        rows.append((j, expl.headline if expl else "", expl.action.replace("JOBID", str(j.job_id)) if expl else "",
                     until(j.start_time) if j.state == "PENDING" and j.start_time else
                     ("running" if j.state == "RUNNING" else "")))
    return {"rows": rows, "pending": sum(1 for j in jobs if j.state == "PENDING")}


def nodes_page(ctx) -> dict:
    """`slurmctl nodes` (ops/health/view): state, who drained each node and why, the failed check,
    verification, suspect score and the GPU-hours lost to it this week."""
    local = os.environ.get("SLURMCTL_LOCAL_DIR")  # the local dev cluster's shared state: the failure spools
    views = node_views(ctx.client, None, Path(local) if local else None, cost_spool=cost_records_dir(ctx.site))
    lost = [v.gpu_hours_lost.total for v in views if v.gpu_hours_lost is not None]
    return {"nodes": views, "drained": sum(1 for v in views if v.drained),
            "ours": sum(1 for v in views if v.drained_by == "slurmctl"),
            "lost_total": sum(lost) if lost else None}


def compare_page(runs: list[Run], metric: str) -> dict:
    series = [load_series(r, metric) for r in runs]
    finals = []
    for run, s in zip(runs, series):
        last = run.metrics_tail(1)
        finals.append({**s.to_dict(), "final": {k: v for k, v in (last[-1] if last else {}).items()
                                                if k not in {"step", "time"} and isinstance(v, (int, float))}})
    names = sorted({k for f in finals for k in f["final"]})
    return {"series": series, "finals": finals, "metric_names": names}


def showback_page(ctx, by: str, days: int) -> dict:
    """`slurmctl report --no-ingest --by BY --since Nd` (the cron ingests into the ledger)."""
    now = datetime.now().replace(microsecond=0)
    start = now - timedelta(days=days)
    path = Path(ctx.site.accounting.ledger_path).expanduser()
    if not os.access(path, os.R_OK):  # none yet, or the operators' and this is a researcher's server
        return {"report": None, "ledger": str(path)}
    ledger = Ledger(path)
    try:
        report = build_report(ledger, by, start, now)
    finally:
        ledger.db.close()
    return {"report": report, "ledger": str(path)}


def showback_chart(report, by: str, top: int = 8):
    """Cost per day of the `top` groups by cost (the rest summed as 'others'), one line each."""
    days = sorted(report.cost_by_day_and_group)
    names = [g.group for g in report.groups[:top]]
    series = [Series(name, list(range(len(days))), [report.cost_by_day_and_group[d].get(name, 0.0) for d in days])
              for name in names]
    rest = [sum(v for k, v in report.cost_by_day_and_group[d].items() if k not in names) for d in days]
    if any(rest):
        series.append(Series("others", list(range(len(days))), rest))
    return Chart(f"cost per day by {by}", "$ per day", series, xlabel="day", log=False, ymin=0.0,
                 xticks=[(i, d) for i, d in enumerate(days)])
