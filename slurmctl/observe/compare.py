"""Compare two runs from their metrics.jsonl: a table, terminal sparklines and a PNG plot.

The PNG is drawn by observe/charts.py, the same drawing as the web pages' charts (axes, labels,
legend, log scale when the values span decades).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from slurmctl.errors import SpecError
from slurmctl.fsutil import read_jsonl
from slurmctl.observe.charts import Chart, Series, line_chart
from slurmctl.rundir import Run

SPARK = "▁▂▃▄▅▆▇█"
COLOURS = [(31, 119, 180), (255, 127, 14)]  # the chart's first two line colours (matplotlib's default cycle)


@dataclass
class RunSeries:
    run_id: str
    steps: list[int]
    losses: list[float]
    last_step: int | None
    last_loss: float | None
    min_loss: float | None
    steps_per_second: float | None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("steps"), d.pop("losses")
        return d


def load_series(run: Run, metric: str = "loss") -> RunSeries:
    steps, values = [], []
    for record in read_jsonl(run.metrics_path):  # capped; a FIFO or device there reads as empty
        if isinstance(record.get(metric), (int, float)) and isinstance(record.get("step"), int):
            steps.append(record["step"])
            values.append(float(record[metric]))
    rate = run.step_rate()  # the same steps/s as `slurmctl status` and the exporter
    rate = round(rate, 3) if rate is not None else None
    finite = [v for v in values if v == v]
    return RunSeries(run.run_id, steps, values, steps[-1] if steps else None, values[-1] if values else None,
                     min(finite) if finite else None, rate)


def sparkline(values: list[float], width: int = 40) -> str:
    finite = [v for v in values if v == v]
    if not finite:
        return ""
    if len(values) > width:  # sample evenly so the line keeps its shape
        values = [values[int(i * len(values) / width)] for i in range(width)]
    lo, hi = min(finite), max(finite)
    span = (hi - lo) or 1.0
    return "".join(SPARK[int((v - lo) / span * (len(SPARK) - 1))] if v == v else " " for v in values)


def write_png(path: Path, series: list[RunSeries], metric: str = "loss", width: int = 640, height: int = 360) -> Path:
    """`metric` against step for each run, one coloured line each (COLOURS first), with axes, labels
    and a legend."""
    chart = Chart(f"{metric} by step", metric, [Series(s.run_id, s.steps, s.losses) for s in series])
    image = line_chart(chart, "png", width / 100, height / 100)
    try:
        path.write_bytes(image)
    except OSError as exc:
        raise SpecError(f"--png {path}: cannot write it ({exc.strerror or exc}).",
                        "Give a file path in a directory you can write, e.g. --png ./compare.png.") from None
    return path


def compare_runs(a: Run, b: Run, png: Path | None = None, metric: str = "loss") -> dict:
    series = [load_series(a, metric), load_series(b, metric)]
    result = {"metric": metric, "runs": [s.to_dict() for s in series],
              "sparklines": {s.run_id: sparkline(s.losses) for s in series}, "png": None}
    if png is not None:
        result["png"] = str(write_png(png, series, metric))
    return result
