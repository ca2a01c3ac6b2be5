"""cancel of a run whose program never heartbeats says so at once (no 300 s wait for an ACK that
cannot come); one that heartbeats, or has only just started, is drained as before."""

import json

import pytest

from slurmctl.control.cancel import NO_HEARTBEAT_SECONDS, _refuse_if_never_heartbeat
from slurmctl.errors import SlurmctlError
from slurmctl.rundir import Run
from slurmctl.slurm.records import Job


def _run(tmp_path) -> Run:
    path = tmp_path / "deaf-20261201-abcd"
    path.mkdir()
    (path / "run.json").write_text(json.dumps({"run_id": path.name}))
    return Run(path.name, path)


def test_a_program_without_a_heartbeat_is_told_at_once(tmp_path):
    run = _run(tmp_path)
    with pytest.raises(SlurmctlError, match="without a single heartbeat") as raised:
        _refuse_if_never_heartbeat(run, Job(job_id=7, state="RUNNING", elapsed_seconds=NO_HEARTBEAT_SECONDS + 1))
    assert "--now" in raised.value.hint
    assert [e["event"] for e in run.events()] == ["drain-impossible"]


def test_a_young_job_or_one_that_heartbeats_is_drained(tmp_path):
    run = _run(tmp_path)
    _refuse_if_never_heartbeat(run, Job(job_id=7, state="RUNNING", elapsed_seconds=5))
    (run.path / "heartbeat.json").write_text(json.dumps({"job_id": 7, "step": 3, "time": 0}))
    _refuse_if_never_heartbeat(run, Job(job_id=7, state="RUNNING", elapsed_seconds=3600))
    (run.path / "heartbeat.json").write_text(json.dumps({"job_id": 6, "step": 3, "time": 0}))  # the previous job's
    with pytest.raises(SlurmctlError):
        _refuse_if_never_heartbeat(run, Job(job_id=7, state="RUNNING", elapsed_seconds=3600))
