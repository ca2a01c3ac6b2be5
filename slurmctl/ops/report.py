"""Showback reports over the cost ledger: GPU-hours and dollars by group, queue wait, waste, top
spenders, cluster idle/down GPU-hours; as table rows, CSV, JSON or a self-contained HTML page.

Aggregation happens in SQLite; Python sees only group totals and the sorted queue waits.
"""

from __future__ import annotations

import csv
import html
import io
import json
from array import array
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime

# A run is (user, run id): two users may use the same run id, and one's cost never lands in the other's.
GROUP_KEYS = {"account": "account", "user": "user", "partition": "partition", "gpu": "gpu_type",
              "run": "CASE WHEN run_id = '' THEN '' ELSE user || '/' || run_id END"}


@dataclass
class GroupTotals:
    group: str
    attempts: int = 0
    gpu_hours: float = 0.0
    cost_usd: float = 0.0
    waste_gpu_hours: float = 0.0
    waste_usd: float = 0.0
    queue_wait_p50_s: float = 0.0
    queue_wait_p95_s: float = 0.0


@dataclass
class Report:
    since: str
    until: str
    by: str
    groups: list[GroupTotals]
    totals: GroupTotals
    waste_by_cause: dict[str, float]
    top_users: list[tuple[str, float]]
    cost_by_day_and_group: dict[str, dict[str, float]]
    missing_epilog_attempts: int
    cluster_gpu_hours: dict[str, float] = field(default_factory=dict)  # allocated/idle/down from sreport

    def to_dict(self) -> dict:
        return asdict(self)


def _percentile(sorted_values: array, q: float) -> float:
    if not sorted_values:
        return 0.0
    return float(sorted_values[min(len(sorted_values) - 1, int(q * (len(sorted_values) - 1) + 0.5))])


def build_report(ledger, by: str, since: datetime, until: datetime, cluster_gpu_hours: dict | None = None) -> Report:
    """Sums and groupings run inside SQLite (C speed, no row objects); only queue waits stream
    through Python, already sorted per group, to take percentiles."""
    key = GROUP_KEYS[by]
    where = "WHERE end >= ? AND start < ?"
    args = [since.isoformat(timespec="seconds"), until.isoformat(timespec="seconds")]
    sums = ("COUNT(*), COALESCE(SUM(gpu_hours),0), COALESCE(SUM(cost_usd),0), COALESCE(SUM(waste_gpu_hours),0), "
            "COALESCE(SUM(waste_usd),0)")
    db = ledger.db
    groups = {row[0] or "(none)": GroupTotals(row[0] or "(none)", *row[1:])
              for row in db.execute(f"SELECT {key}, {sums} FROM attempts {where} GROUP BY {key}", args)}
    total = GroupTotals("total", *db.execute(f"SELECT {sums} FROM attempts {where}", args).fetchone())
    current, waits, all_waits = None, array("i"), array("i")

    def close(name, values):
        if name is not None and (name or "(none)") in groups:
            g = groups[name or "(none)"]
            g.queue_wait_p50_s, g.queue_wait_p95_s = _percentile(values, 0.5), _percentile(values, 0.95)

    waits_query = f"SELECT {key}, queue_wait_s FROM attempts {where} ORDER BY {key}, queue_wait_s"
    for name, wait in db.execute(waits_query, args):
        if name != current:
            close(current, waits)
            current, waits = name, array("i")
        waits.append(wait)
        all_waits.append(wait)
    close(current, waits)
    all_waits = array("i", sorted(all_waits))
    total.queue_wait_p50_s, total.queue_wait_p95_s = _percentile(all_waits, 0.5), _percentile(all_waits, 0.95)
    waste = dict(db.execute(f"SELECT waste_cause, SUM(waste_usd) FROM attempts {where} AND waste_cause != '' "
                            "GROUP BY waste_cause", args).fetchall())
    top = db.execute(f"SELECT user, SUM(cost_usd) AS c FROM attempts {where} GROUP BY user ORDER BY c DESC LIMIT 10",
                     args).fetchall()
    by_day: dict[str, dict[str, float]] = defaultdict(dict)
    for day, name, cost in db.execute(f"SELECT substr(start, 1, 10) AS d, {key}, SUM(cost_usd) FROM attempts {where} "
                                      f"GROUP BY d, {key} ORDER BY d", args):
        by_day[day][name or "(none)"] = cost
    missing = db.execute(f"SELECT COALESCE(SUM(missing_epilog),0) FROM attempts {where}", args).fetchone()[0]
    ordered = sorted(groups.values(), key=lambda g: -g.cost_usd)
    return Report(since.isoformat(timespec="seconds"), until.isoformat(timespec="seconds"), by, ordered, total,
                  waste, [tuple(t) for t in top], dict(by_day), missing, cluster_gpu_hours or {})


# A spreadsheet runs a cell that starts with one of these as a formula (=HYPERLINK(...) leaks data
# when the report is opened); a leading single quote makes it text. Numbers are written as numbers.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def csv_cell(value):
    """A CSV cell that a spreadsheet shows as text: strings that could start a formula get a quote."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def to_csv(report: Report) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    columns = list(asdict(report.totals))
    writer.writerow([csv_cell(report.by if c == "group" else c) for c in columns])
    for g in [*report.groups, report.totals]:
        writer.writerow([round(v, 4) if isinstance(v, float) else csv_cell(v) for v in asdict(g).values()])
    return buf.getvalue()


def to_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2)


def _bar_chart(title: str, items: list[tuple[str, float]], unit: str = "$") -> str:
    """A horizontal bar chart as inline SVG (no JavaScript, no external assets)."""
    if not items:
        return f"<h3>{html.escape(title)}</h3><p>No data.</p>"
    width, row_h, label_w = 720, 22, 200
    peak = max(v for _, v in items) or 1.0
    bars = []
    for i, (label, value) in enumerate(items):
        w = (width - label_w - 90) * value / peak
        y = i * row_h
        bars.append(f'<text x="0" y="{y + 15}" font-size="12">{html.escape(str(label)[:30])}</text>'
                    f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="#4c78a8"/>'
                    f'<text x="{label_w + w + 6:.1f}" y="{y + 15}" font-size="12">{unit}{value:,.2f}</text>')
    return (f"<h3>{html.escape(title)}</h3><svg width='{width}' height='{row_h * len(items)}' "
            f"xmlns='http://www.w3.org/2000/svg' font-family='sans-serif'>{''.join(bars)}</svg>")


def _stacked_days(report: Report) -> str:
    """Cost per day, stacked by group: the 'cost by team over time' chart."""
    days = list(report.cost_by_day_and_group)
    if not days:
        return ""
    names = [g.group for g in report.groups][:8]
    palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#9d755d"]
    height, bar_w, gap = 220, 28, 10
    peak = max(sum(v.values()) for v in report.cost_by_day_and_group.values()) or 1.0
    parts = []
    for i, day in enumerate(days):
        x, y = i * (bar_w + gap) + 40, height
        for j, name in enumerate(names):
            value = report.cost_by_day_and_group[day].get(name, 0.0)
            h = (height - 20) * value / peak
            y -= h
            parts.append(f'<rect x="{x}" y="{y:.1f}" width="{bar_w}" height="{h:.1f}" fill="{palette[j]}">'
                         f"<title>{html.escape(name)} {html.escape(day)}: ${value:,.2f}</title></rect>")
        parts.append(f'<text x="{x}" y="{height + 14}" font-size="9">{html.escape(day[5:])}</text>')
    legend = " ".join(f'<span style="color:{palette[j]}">&#9632; {html.escape(n)}</span>' for j, n in enumerate(names))
    width = len(days) * (bar_w + gap) + 60
    return (f"<h3>Cost by {html.escape(report.by)} over time</h3><svg width='{width}' height='{height + 20}' "
            f"xmlns='http://www.w3.org/2000/svg' font-family='sans-serif'>{''.join(parts)}</svg><p>{legend}</p>")


def to_html(report: Report) -> str:
    t = report.totals
    rows = "".join(
        f"<tr><td>{html.escape(g.group)}</td><td>{g.attempts}</td><td>{g.gpu_hours:,.2f}</td>"
        f"<td>${g.cost_usd:,.2f}</td><td>${g.waste_usd:,.2f}</td><td>{g.queue_wait_p50_s / 60:.1f}</td>"
        f"<td>{g.queue_wait_p95_s / 60:.1f}</td></tr>" for g in [*report.groups, t])
    util = report.cluster_gpu_hours
    util_line = (", ".join(f"{k} {v:,.1f} GPU-h" for k, v in util.items()) if util
                 else "not yet rolled up by slurmdbd (sreport shows complete hours only)")
    waste_share = (t.waste_usd / t.cost_usd * 100) if t.cost_usd else 0.0
    since, until = html.escape(report.since[:10]), html.escape(report.until[:10])
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>GPU showback {since} – {until}</title>
<style>body{{font-family:sans-serif;max-width:900px;margin:2em auto;color:#222}}table{{border-collapse:collapse}}
td,th{{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}}td:first-child,th:first-child{{text-align:left}}
.kpi{{display:inline-block;margin-right:2em}}.kpi b{{font-size:1.6em;display:block}}</style></head><body>
<h1>GPU showback</h1><p>{html.escape(report.since)} to {html.escape(report.until)}, grouped by {html.escape(report.by)}.
Billing is by allocated GPU time, not utilisation.</p>
<div class="kpi"><b>${t.cost_usd:,.2f}</b>total spend</div><div class="kpi"><b>{t.gpu_hours:,.1f}</b>GPU-hours</div>
<div class="kpi"><b>${t.waste_usd:,.2f}</b>waste ({waste_share:.1f}%)</div>
<div class="kpi"><b>{t.queue_wait_p95_s / 60:.1f} min</b>queue wait p95</div>
<h3>By {html.escape(report.by)}</h3><table><tr><th>{html.escape(report.by)}</th><th>attempts</th><th>GPU-hours</th>
<th>cost</th><th>waste</th><th>wait p50 (min)</th><th>wait p95 (min)</th></tr>{rows}</table>
{_stacked_days(report)}
{_bar_chart("Waste by cause", sorted(report.waste_by_cause.items(), key=lambda kv: -kv[1]))}
{_bar_chart("Top spenders", report.top_users)}
<p>Cluster GPU time: {html.escape(util_line)}.</p>
<p>{report.missing_epilog_attempts} attempt(s) had no epilog record (node lost?) and were costed from sacct alone.</p>
</body></html>
"""


def write_dated_reports(ledger, reports_dir, since: datetime, until: datetime, cluster_gpu_hours: dict,
                        groupings=("account", "user", "partition", "run")) -> list:
    """The cron job's output: <reports_dir>/<until date>/showback-<by>.{html,csv,json}.

    Files are created exclusively; if today's were already written, a new time-stamped folder
    is used, so nothing is ever clobbered."""
    from pathlib import Path

    base = Path(reports_dir).expanduser()
    folder = base / until.strftime("%Y-%m-%d")
    if folder.exists():
        folder = base / until.strftime("%Y-%m-%d_%H%M%S")
    folder.mkdir(parents=True, exist_ok=False)
    written = []
    for by in groupings:
        result = build_report(ledger, by, since, until, cluster_gpu_hours)
        for ext, render in (("html", to_html), ("csv", to_csv), ("json", to_json)):
            path = folder / f"showback-{by}.{ext}"
            with open(path, "x") as fh:
                fh.write(render(result))
            written.append(path)
    return written
