"""A sweep seen as a whole: find it, each element's phase and best metric, the ranking, the cost.

Elements are ordinary runs, so their state comes from ``observe.status.runs_statuses`` (one squeue
call and at most one sacct call for the whole sweep) and their numbers from their run dirs.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from slurmctl.errors import RunNotFound, RunNotOwned, SpecError
from slurmctl.observe.status import runs_statuses
from slurmctl.rundir import Run, RunRegistry, is_run_id
from slurmctl.rundir.sweep import SWEEP_JSON, SweepDir, find_sweep

_METRIC_RECORDS = 5_000  # metrics.jsonl records read per element for its best value: the newest ones
_METRIC_BYTES = 1024 * 1024  # and at most 1 MiB of its tail
_METRIC_RE = re.compile(r"[A-Za-z0-9_./-]{1,64}")


def sweep_for(registry: RunRegistry, ref: str) -> SweepDir | None:
    """The caller's sweep that `ref` names (its id, or its name: the newest sweep of that name wins
    over a run of the same name); None otherwise, and the caller looks `ref` up as a run. Commands that
    take RUN call this first: it reads no run's files (a run id costs one lstat)."""
    if not ref or "/" in ref or ref in {".", ".."}:
        return None
    directory = registry.user_dir()
    if directory is None:
        return None
    if is_run_id(ref) and not os.path.lexists(directory / ref / SWEEP_JSON):
        return None  # a run id (or an unknown one): the run lookup answers
    return find_sweep(registry, ref)


def best_value(run: Run, metric: str, goal: str = "min") -> tuple[float | None, float | None, int | None]:
    """(best, last, step of best) of `metric` in the run's metrics.jsonl (its newest records)."""
    best = last = best_step = None
    for record in run.metrics_tail(_METRIC_RECORDS, _METRIC_BYTES):
        value = record.get(metric)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        last = float(value)
        if best is None or (value < best if goal == "min" else value > best):
            best, best_step = float(value), record.get("step")
    return best, last, best_step if isinstance(best_step, int) else None


@dataclass
class ElementStatus:
    index: int
    run_id: str
    values: dict
    phase: str
    state: str
    job_id: int | None
    step: int | None
    requeues: int
    best: float | None
    last: float | None
    best_step: int | None
    checkpoint_step: int | None
    rank: int | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SweepStatus:
    sweep_id: str
    name: str
    array_job_id: int | None
    metric: str
    goal: str
    elements: list[ElementStatus] = field(default_factory=list)

    @property
    def phases(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for element in self.elements:
            counts[element.phase] = counts.get(element.phase, 0) + 1
        return counts

    def ranked(self) -> list[ElementStatus]:
        """Elements with a value of the metric, best first (ties: lower index)."""
        scored = [e for e in self.elements if e.best is not None]
        sign = 1 if self.goal == "min" else -1
        return sorted(scored, key=lambda e: (sign * e.best, e.index))

    def to_dict(self) -> dict:
        return {"sweep_id": self.sweep_id, "name": self.name, "array_job_id": self.array_job_id,
                "metric": self.metric, "goal": self.goal, "phases": self.phases,
                "elements": [e.to_dict() for e in self.elements]}


def element_runs(sweep: SweepDir, registry: RunRegistry) -> list[tuple[int, Run]]:
    runs = [(i, run) for i, run in sweep.elements(registry) if run is not None]
    if not runs:
        raise RunNotFound(f"sweep {sweep.sweep_id} has no element run directories left.",
                          "`slurmctl ls` lists your runs.")
    return runs


def sweep_status(sweep: SweepDir, registry: RunRegistry, client, site=None, metric: str | None = None,
                 goal: str | None = None) -> SweepStatus:
    meta = sweep.meta
    metric = metric or meta.get("metric") or "loss"
    goal = goal or meta.get("goal") or "min"
    if not _METRIC_RE.fullmatch(metric):
        raise SpecError(f"metric {metric!r} is not a metrics.jsonl field name.",
                        "Use letters, digits, '_', '.', '/' or '-' (e.g. loss, val/acc).")
    if goal not in {"min", "max"}:
        raise SpecError(f"--goal is {goal!r}.", "Use --goal min or --goal max.")
    values = {e.get("index"): e.get("values") or {} for e in meta.get("elements") or []}
    pairs = element_runs(sweep, registry)
    statuses = runs_statuses([run for _, run in pairs], client, site)
    result = SweepStatus(sweep.sweep_id, str(meta.get("name") or ""), meta.get("array_job_id"), metric, goal)
    waiting = {run.run_id: task for _, run in pairs if (task := run.waiting_array_task()) is not None}
    # A task that has not started shares the array's id with every other such task: its own state
    # comes from `squeue -r` (one line per task); gone from the queue without a start = cancelled.
    queued = client.array_task_states(next(iter(waiting.values()))[0]) if waiting else {}
    for (index, run), status in zip(pairs, statuses, strict=True):
        best, last, best_step = best_value(run, metric, goal)
        phase, state = status.phase or status.state.lower(), status.state
        if run.run_id in waiting and status.slurm_unreachable_since is None:
            state = queued.get(waiting[run.run_id][1], "CANCELLED")
            phase = {"PENDING": "queued", "CANCELLED": "cancelled"}.get(state, phase)
        result.elements.append(ElementStatus(
            index, run.run_id, values.get(index, {}), phase, state, status.job_id, status.last_step,
            status.requeues, best, last, best_step, status.latest_checkpoint_step))
    for rank, element in enumerate(result.ranked(), start=1):
        element.rank = rank
    return result


def ls_entries(statuses: list) -> list[tuple[int, object, tuple | None, str]]:
    """`ls` rows with sweeps grouped, as (index into `statuses`, status, header, RUN cell): a sweep's
    header row (8 cells: sweep id, array job id, "sweep", blanks, its phases over the shown elements;
    status None) comes where its first shown element was, then its shown elements in array order,
    indented; any other run is one row as before."""
    groups: dict[str, list[tuple[int, int]]] = {}
    order: list[tuple[str, object]] = []
    for i, status in enumerate(statuses):
        meta = Run(status.run_id, Path(status.run_dir)).meta
        sweep_id, index = meta.get("sweep_id"), meta.get("array_index")
        if not is_run_id(sweep_id) or not isinstance(index, int):
            order.append(("run", i))
            continue
        if sweep_id not in groups:
            groups[sweep_id] = []
            order.append(("sweep", sweep_id))
        groups[sweep_id].append((index, i))
    entries: list[tuple[int, object, tuple | None, str]] = []
    for kind, item in order:
        if kind == "run":
            entries.append((item, statuses[item], None, statuses[item].run_id))
            continue
        members = [i for _, i in sorted(groups[item])]
        counts: dict[str, int] = {}
        for i in members:
            phase = statuses[i].phase or "unknown"
            counts[phase] = counts.get(phase, 0) + 1
        array = next((e.get("job_id") for e in _submitted(statuses[members[0]]) if "array_task_id" in e), None)
        summary = f"{len(members)} element(s): " + ", ".join(f"{n} {p}" for p, n in sorted(counts.items()))
        entries.append((-1, None, (item, str(array or "-"), "sweep", "", "", "", "", summary), item))
        entries += [(i, statuses[i], None, f"  {statuses[i].run_id}") for i in members]
    return entries


def _submitted(status) -> list[dict]:
    return [e for e in Run(status.run_id, Path(status.run_dir)).events() if e.get("event") == "submitted"]


def queued_sweep_runs(registry: RunRegistry, sweep_id: str) -> list[Run] | None:
    """The element runs of the caller's sweep `sweep_id` (a queued job's comment names the sweep until
    its task starts and takes its element's name); None when `sweep_id` names no sweep (one lstat)."""
    if not is_run_id(sweep_id) or not os.path.lexists(registry.path_of(sweep_id) / SWEEP_JSON):
        return None
    try:
        sweep = find_sweep(registry, sweep_id)
    except (RunNotFound, RunNotOwned):
        return None
    return [run for _, run in sweep.elements(registry) if run is not None] if sweep else None
