"""The one chart drawing: metric lines over steps with axes, labels, a legend, a log scale where the
values span decades, and vertical markers where a run restarted (preemption, crash, time limit).

The web pages (SVG) and `slurmctl compare --png` (PNG) both draw through `line_chart`. matplotlib
(Agg backend: no display, no GUI toolkit) is imported on the first chart only, so no read command
pays for it.
"""

from __future__ import annotations

import io
import math
import threading
from dataclasses import dataclass, field

# Restart markers by what ended the attempt before them; anything else is drawn as a plain restart.
# Dark colours outside matplotlib's line cycle, so a marker never reads as one of the series.
MARKER_STYLES = {"preemption": ("#b00020", "--"), "time-limit": ("#4b0082", ":"), "failed": ("#333333", "-."),
                 "restart": ("#808080", "--")}
LOG_SPAN = 20.0  # max/min of positive values at or above this: the y axis is logarithmic
_LOCK = threading.Lock()  # pyplot's figure registry is not thread-safe; the web server is threaded


@dataclass
class Series:
    label: str
    steps: list[float]
    values: list[float]


@dataclass
class Marker:
    step: float
    label: str
    kind: str = "restart"  # preemption | time-limit | failed | restart


@dataclass
class Chart:
    title: str
    ylabel: str
    series: list[Series]
    markers: list[Marker] = field(default_factory=list)
    xlabel: str = "step"
    log: bool | None = None  # None: decided from the values (wants_log)
    xticks: list[tuple[float, str]] = field(default_factory=list)  # labelled x positions (e.g. days)
    ymin: float | None = None  # a linear axis from here (0 for money: a small spread must not look large)


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def wants_log(series: list[Series]) -> bool:
    """A log y axis when every value is positive and they span more than LOG_SPAN (a loss falling from
    10 to 0.1 is a flat line at the bottom on a linear axis)."""
    values = [v for s in series for v in _finite(s.values)]
    if len(values) < 2 or min(values) <= 0:
        return False
    return max(values) / min(values) >= LOG_SPAN


def line_chart(chart: Chart, fmt: str = "svg", width: float = 7.5, height: float = 3.6) -> bytes:
    """The chart as SVG or PNG bytes. Empty series still draw labelled axes with a 'no data yet' note."""
    if fmt not in {"svg", "png"}:
        raise ValueError(f"chart format {fmt!r}: svg or png")
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    with _LOCK:
        # Figure() directly (not pyplot): nothing is registered globally, the figure is freed with its last reference
        fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        drawn = False
        for s in chart.series:
            points = [(x, y) for x, y in zip(s.steps, s.values)
                      if isinstance(y, (int, float)) and math.isfinite(y)]
            if not points:
                continue
            xs, ys = zip(*points)
            ax.plot(xs, ys, label=s.label, linewidth=1.6, marker="o" if len(points) < 3 else None, markersize=3)
            drawn = True
        log = wants_log(chart.series) if chart.log is None else chart.log
        if log and drawn:
            ax.set_yscale("log")
        elif chart.ymin is not None and drawn:
            ax.set_ylim(bottom=chart.ymin)
        seen_kinds = set()
        for m in chart.markers:
            colour, style = MARKER_STYLES.get(m.kind, MARKER_STYLES["restart"])
            # one legend entry per kind of marker; the step and cause are written at the line itself
            ax.axvline(m.step, color=colour, linestyle=style, linewidth=1.2,
                       label=None if m.kind in seen_kinds else _MARKER_LEGEND.get(m.kind, m.kind))
            seen_kinds.add(m.kind)
            ax.annotate(m.label, xy=(m.step, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
                        textcoords="offset points", va="top", fontsize=7, color=colour, rotation=90)
        if not drawn:
            ax.text(0.5, 0.5, "no data yet", transform=ax.transAxes, ha="center", va="center", color="#777777")
        if chart.xticks:
            step = max(1, len(chart.xticks) // 10)  # at most ~10 labels, evenly spaced
            shown = chart.xticks[::step]
            ax.set_xticks([x for x, _ in shown], [label for _, label in shown], rotation=30, ha="right")
        ax.set_title(chart.title, fontsize=11)
        ax.set_xlabel(chart.xlabel)
        ax.set_ylabel(chart.ylabel + (" (log scale)" if log and drawn else ""))
        ax.grid(True, which="major", alpha=0.3)
        if drawn or chart.markers:
            ax.legend(fontsize=8, loc="best")
        buffer = io.BytesIO()
        # svg.hashsalt: the same chart gives the same bytes (ids in the SVG are otherwise random)
        with matplotlib.rc_context({"svg.hashsalt": "slurmctl", "svg.fonttype": "none"}):
            fig.savefig(buffer, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    if fmt == "png":  # opaque RGB: the plot has a white background, an alpha channel only adds bytes
        from PIL import Image

        buffer.seek(0)
        rgb, buffer = Image.open(buffer).convert("RGB"), io.BytesIO()
        rgb.save(buffer, format="png")
    return buffer.getvalue()


_MARKER_LEGEND = {"preemption": "preempted, requeued", "time-limit": "time limit, requeued",
                  "failed": "crashed, restarted", "restart": "restart"}
