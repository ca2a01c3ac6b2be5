"""A run's metrics split by attempt, with a marker where each restart began: what the Run page's loss
and throughput charts draw (through observe/charts.py).

Records come from metrics.jsonl (fsutil's capped reader, via rundir) and attempts from attempts.jsonl:
a record belongs to the latest attempt that started at or before its time, so a requeued run shows
its replayed steps as a second line over the first one's tail, not as a zigzag.
"""

from __future__ import annotations

import math

from slurmctl.observe.charts import Chart, Marker, Series
from slurmctl.observe.story import attempt_label, steps_lost_words
from slurmctl.rundir import Run, attempt_ids

# A throughput the training logs itself wins over steps/s computed from the records' clock.
THROUGHPUT_FIELDS = ("tokens_per_s", "tokens_per_sec", "samples_per_s", "samples_per_sec", "throughput")
_END_KIND = {"preemption": "preemption", "time-limit": "time-limit", "failed": "failed"}


def _current_starts(events: list[dict]) -> list[dict]:
    last_submit = max((i for i, e in enumerate(events) if e.get("event") == "submitted"), default=-1)
    return [e for e in events[last_submit + 1:] if e.get("event") in {"start", "end", "step-restart"}]


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def attempt_records(run: Run) -> tuple[list[tuple[str, list[dict]]], list[Marker]]:
    """[(segment label, its metric records)] in order, and the restart markers. A segment is an
    attempt (a Slurm start) or, after a crash restarted inside the allocation, the rest of it."""
    everything = run.events()
    numbers = {key: n + 1 for n, key in enumerate(attempt_ids(everything))}  # as status and its story number them
    events = _current_starts(everything)
    records = [r for r in run.metrics_records() if isinstance(r.get("step"), int)]
    bounds = [e for e in events if e.get("event") in {"start", "step-restart"} and _number(e.get("time")) is not None]
    if not any(e.get("event") == "start" for e in bounds):
        return ([("run", records)] if records else []), []
    bounds = bounds[next(i for i, e in enumerate(bounds) if e.get("event") == "start"):]
    labels, markers, previous_end, attempt = [], [], None, None
    for event in events:
        if event.get("event") == "end":
            previous_end = event
        if event not in bounds:
            continue
        if event.get("event") == "start":
            attempt = attempt_label(event, numbers)
            labels.append(attempt)
            step = event.get("resume_step")
            if len(labels) > 1 and isinstance(step, int):
                lost = (previous_end or {}).get("steps_lost")
                markers.append(Marker(step, f"{attempt.split(' (')[0]} from step {step}"
                                      + (f", {steps_lost_words(lost)}" if isinstance(lost, int) else ""),
                                      _END_KIND.get((previous_end or {}).get("outcome"), "restart")))
        else:
            restarts = sum(1 for label in labels if label.startswith(f"{attempt}, restart"))
            labels.append(f"{attempt}, restart {restarts + 1} in the allocation")
            step = event.get("checkpoint_step")
            if isinstance(step, int):
                lost = event.get("steps_lost")
                markers.append(Marker(step, f"crash, restarted from step {step}"
                                      + (f", {steps_lost_words(lost)}" if isinstance(lost, int) else ""), "failed"))
    # records older than the latest submission (a resume continues the same run): one line of their own
    groups: list[tuple[str, list[dict]]] = [(label, []) for label in [*labels, "earlier jobs of this run"]]
    times = [float(e["time"]) for e in bounds]
    for r in records:
        t = _number(r.get("time"))
        index = 0 if t is None else max((i for i, st in enumerate(times) if st <= t), default=-1)
        groups[index][1].append(r)
    return [groups[-1], *groups[:-1]] if groups[-1][1] else groups[:-1], markers


def metric_names(records: list[dict]) -> list[str]:
    """Numeric fields the training logged, loss first."""
    names = dict.fromkeys(k for r in records[:200] for k, v in r.items()
                          if k not in {"step", "time"} and isinstance(v, (int, float)))
    return sorted(names, key=lambda k: (k != "loss", k))


def throughput(records: list[dict]) -> tuple[str, list[float], list[float]]:
    """(y label, steps, values): a logged throughput field, else steps/s between consecutive records."""
    for name in THROUGHPUT_FIELDS:
        if any(name in r for r in records):
            points = [(r["step"], _number(r.get(name))) for r in records]
            points = [(s, v) for s, v in points if v is not None]
            return name.replace("_", " "), [s for s, _ in points], [v for _, v in points]
    steps, values = [], []
    for a, b in zip(records, records[1:]):
        ta, tb = _number(a.get("time")), _number(b.get("time"))
        if ta is not None and tb is not None and tb > ta and b["step"] > a["step"]:
            steps.append(b["step"])
            values.append((b["step"] - a["step"]) / (tb - ta))
    return "steps/s", steps, values


def run_charts(run: Run) -> dict[str, Chart]:
    """The Run page's charts: 'loss' (or the first metric logged) and 'throughput', across attempts."""
    groups, markers = attempt_records(run)
    all_records = [r for _, rs in groups for r in rs]
    names = metric_names(all_records)
    metric = names[0] if names else "loss"
    main = [Series(label, [r["step"] for r in rs if _number(r.get(metric)) is not None],
                   [float(r[metric]) for r in rs if _number(r.get(metric)) is not None]) for label, rs in groups]
    ylabel, tp_series = "steps/s", []
    for label, rs in groups:
        ylabel, steps, values = throughput(rs)
        tp_series.append(Series(label, steps, values))
    return {"loss": Chart(f"{metric} by step, {run.run_id}", metric, main, markers),
            "throughput": Chart(f"throughput, {run.run_id}", ylabel, tp_series, markers, log=False)}
