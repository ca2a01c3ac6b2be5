"""What `slurmctl status` prints: the efficiency advice of a finished run never suggests the time
limit it asked for, and no section is printed without content. Slurm's answers are replayed from
tests/fixtures/slurm_22.05_outputs.json (captured on the local cluster as alice)."""

import json
import re
import time

import pytest

from slurmctl.cli.observe import _print_status
from slurmctl.durations import parse_duration
from slurmctl.observe.health import efficiency, tighter_time_limit
from slurmctl.observe.status import runs_statuses
from slurmctl.rundir import Run
from slurmctl.slurm.client import SlurmClient

from .fakes import JOBS, ReplayRunner

# a line that is only a heading ("History:", "Fix:  ") says nothing
BARE_HEADING = re.compile(r"^\s*[A-Za-z][A-Za-z ]*:\s*$")


def _run(tmp_path, name, job_id, events=()) -> Run:
    path = tmp_path / name
    (path / "logs").mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"name": name, "created": time.time()}))
    (path / "run.yaml").write_text("name: x\nentrypoint: train.py\npartition: h100-ondemand\nnodes: 2\n"
                                   "gpus_per_node: 8\ngpu_type: h100\ntime_limit: 15m\n")
    lines = [{"event": "submitted", "job_id": job_id}, *events]
    (path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    return Run(name, path)


def _statuses(tmp_path, events=()):
    runs = [_run(tmp_path, kind, JOBS[kind], events) for kind in ("completed", "failed", "held")]
    return {s.job_id: s for s in runs_statuses(runs, SlurmClient(ReplayRunner()))}


def _printed(status, capsys) -> list[str]:
    capsys.readouterr()
    _print_status(status)
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("used,asked,suggested", [
    (2, 15 * 60, 5 * 60),              # the replayed job 108: 2 s of 15 min
    (18, 15 * 60, 5 * 60),
    (47 * 60, 8 * 3600, 3600),
    (6 * 60, 15 * 60, 10 * 60),
    (3 * 3600, 10 * 3600, 3 * 3600 + 45 * 60),
    (7 * 3600, 24 * 3600, 9 * 3600),
    (2 * 60, 5 * 60, None),            # 5 minutes would be what it asked
    (8 * 60, 15 * 60, None),           # used more than half
    (50, 60, None),
])
def test_the_suggestion_is_below_what_was_asked(used, asked, suggested):
    assert tighter_time_limit(used, asked) == suggested
    if suggested is not None:
        assert used * 1.25 <= suggested < asked


def test_a_finished_run_is_advised_a_tighter_limit_than_it_asked(tmp_path, capsys):
    """The replayed completed job (a few seconds of its 15 min): the old advice was "e.g. 15m00s", what it asked."""
    completed = _statuses(tmp_path)[JOBS["completed"]]
    advice = next(n for n in completed.health_notes if n.startswith("Asked 15m00s, used "))
    value = re.search(r"time_limit: (\S+) in run.yaml", advice).group(1)
    assert value == "5m" and parse_duration(value) < 15 * 60
    assert f"Health: {advice}" in _printed(completed, capsys)


def test_every_suggested_value_is_a_valid_time_limit():
    from slurmctl.observe.health import _as_time_limit

    for seconds in (300, 3600, 4500, 2 * 3600, 3 * 3600 + 45 * 60, 9 * 3600):
        assert parse_duration(_as_time_limit(seconds)) == seconds


@pytest.mark.parametrize("events", [
    (),  # submitted, never started: no story
    ({"event": "start", "job_id": 1, "restart_count": 0, "time": 1_764_590_000, "nodes": "h100-[2-3]"},
     {"event": "end", "outcome": "completed", "last_step": 9, "checkpoint_step": 9, "time": 1_764_590_002}),
])
def test_no_section_without_content(tmp_path, capsys, events):
    for status in _statuses(tmp_path, events).values():
        lines = _printed(status, capsys)
        assert lines and not [line for line in lines if BARE_HEADING.match(line)], lines
        history = [line for line in lines if line.startswith("History:")]
        assert history == ([f"History: {len(status.history)} attempt(s)"] if events else [])


def test_blank_parts_are_left_out(tmp_path, capsys):
    status = _statuses(tmp_path)[JOBS["failed"]]
    status.history, status.why, status.headline, status.suggestions = ["", "  "], "", "", [""]
    status.health_notes = ["", *status.health_notes]
    status.diagnosis = {**status.diagnosis, "evidence": ["", ""], "hint": ""}
    lines = _printed(status, capsys)
    assert not [line for line in lines if BARE_HEADING.match(line) or not line.strip()], lines
    assert not any(line.startswith(("History", "Why", "Try", "  Fix")) for line in lines)


def test_efficiency_says_nothing_of_a_running_or_well_sized_job():
    from slurmctl.slurm.client import Job

    assert efficiency(Job(job_id=5, name="r", state="RUNNING", elapsed_seconds=60, time_limit_seconds=3600)) == []
    assert efficiency(Job(job_id=5, name="r", state="COMPLETED", elapsed_seconds=250,
                          time_limit_seconds=300)) == []
