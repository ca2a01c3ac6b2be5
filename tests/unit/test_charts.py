"""observe/charts.py (the one drawing of the web pages and `compare --png`) and web/series.py (a run's
metrics split by attempt, with restart markers)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from slurmctl.observe.charts import Chart, Marker, Series, line_chart, wants_log
from slurmctl.rundir import Run
from slurmctl.web.series import attempt_records, run_charts, throughput


def test_log_scale_only_for_positive_values_spanning_decades():
    assert wants_log([Series("a", [0, 1, 2], [10.0, 1.0, 0.1])])
    assert not wants_log([Series("a", [0, 1, 2], [2.0, 1.5, 1.2])])
    assert not wants_log([Series("a", [0, 1], [10.0, -1.0])])  # a negative value: linear
    assert not wants_log([Series("a", [0], [5.0])])


def test_svg_has_title_axis_labels_legend_and_marker_text():
    chart = Chart("loss by step", "loss", [Series("run-a", list(range(30)), [10 * 0.8 ** i for i in range(30)]),
                                           Series("run-b", [0, 10, 20], [3.0, float("nan"), 1.0])],
                  [Marker(12, "attempt 1 from step 12", "preemption")])
    svg = line_chart(chart, "svg").decode()
    for text in ("loss by step", "loss (log scale)", "step", "run-a", "run-b", "attempt 1 from step 12",
                 "preempted, requeued"):
        assert f">{text}<" in svg or text in svg, text
    assert line_chart(chart, "svg") == line_chart(chart, "svg")  # no date, no random ids: the same bytes
    linear = line_chart(Chart("t", "steps/s", [Series("x", [1, 2], [1.0, 100.0])], log=False), "svg").decode()
    assert "(log scale)" not in linear


def test_png_is_an_rgb_image_of_the_asked_size_and_empty_charts_say_so():
    chart = Chart("loss", "loss", [Series("a", [0, 1, 2], [3.0, 2.0, 1.0])])
    image = Image.open(io.BytesIO(line_chart(chart, "png", 6.4, 3.6)))
    assert image.size == (640, 360) and image.mode == "RGB"
    assert "no data yet" in line_chart(Chart("loss", "loss", []), "svg").decode()
    with pytest.raises(ValueError):
        line_chart(chart, "pdf")


def _run(tmp_path: Path, events: list[dict], metrics: list[dict]) -> Run:
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return Run("r-20260101-abcd", tmp_path)


def test_records_split_by_attempt_with_a_marker_per_restart(tmp_path):
    events = [{"event": "submitted", "job_id": 7},
              {"event": "start", "job_id": 7, "restart_count": 0, "time": 100.0},
              {"event": "end", "job_id": 7, "outcome": "preemption", "steps_lost": 2, "checkpoint_step": 10},
              {"event": "start", "job_id": 7, "restart_count": 1, "time": 200.0, "resume_step": 10},
              {"event": "step-restart", "checkpoint_step": 15, "steps_lost": 3, "time": 300.0}]
    metrics = [{"step": s, "time": 100.0 + s, "loss": 1.0} for s in range(13)]
    metrics += [{"step": s, "time": 200.0 + s, "loss": 0.5} for s in range(10, 19)]
    metrics += [{"step": s, "time": 300.0 + s, "loss": 0.4} for s in range(16, 30)]
    groups, markers = attempt_records(_run(tmp_path, events, metrics))
    assert [label for label, _ in groups] == ["attempt 1 (job 7)", "attempt 2 (job 7, Slurm restart 1)",
                                              "attempt 2 (job 7, Slurm restart 1), restart 1 in the allocation"]
    assert [len(rs) for _, rs in groups] == [13, 9, 14]
    assert [(m.step, m.kind) for m in markers] == [(10, "preemption"), (15, "failed")]
    assert markers[0].label == "attempt 2 from step 10, 2 steps lost"
    assert markers[1].label == "crash, restarted from step 15, 3 steps lost"
    charts = run_charts(_run(tmp_path, events, metrics))
    assert [s.label for s in charts["throughput"].series] == [label for label, _ in groups]
    assert charts["throughput"].ylabel == "steps/s" and charts["throughput"].series[0].values[0] == 1.0
    # a submission before the latest one (a resume starts a new story) is not drawn
    resumed = [*events, {"event": "submitted", "job_id": 8}, {"event": "start", "job_id": 8, "time": 400.0}]
    groups, markers = attempt_records(_run(tmp_path, resumed, [*metrics, {"step": 30, "time": 401.0, "loss": 0.3}]))
    assert [label for label, _ in groups] == ["earlier jobs of this run", "attempt 3 (job 8)"] and markers == []
    assert [len(rs) for _, rs in groups] == [len(metrics), 1]


def test_a_logged_throughput_wins_over_the_clock():
    label, steps, values = throughput([{"step": 1, "time": 1.0, "tokens_per_s": 900.0},
                                       {"step": 2, "time": 5.0, "tokens_per_s": 1000.0}])
    assert (label, steps, values) == ("tokens per s", [1, 2], [900.0, 1000.0])


def test_compare_png_into_an_unwritable_place_is_a_clear_error(tmp_path):
    from slurmctl.errors import SpecError
    from slurmctl.observe.compare import write_png

    with pytest.raises(SpecError) as refused:
        write_png(tmp_path / "no-such-dir" / "plot.png", [])
    assert "--png" in refused.value.message and "cannot write" in refused.value.message
