"""Attempts are numbered once, across the run's jobs (a resume is a new job whose Slurm restart count
starts at 0 again): status, its story, diagnose and `logs --attempt N` agree on N."""

import json
import time

import pytest

from slurmctl.errors import SpecError
from slurmctl.observe.logs import attempt_log
from slurmctl.observe.run_diagnosis import diagnose_file
from slurmctl.observe.status import build_status
from slurmctl.rundir import Run
from slurmctl.slurm.client import Job

T0 = time.time() - 3600


def _run(tmp_path) -> Run:
    path = tmp_path / "r-20261201-abcd"
    (path / "logs").mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": T0}))
    events = [{"event": "submitted", "job_id": 9},
              {"event": "start", "job_id": 9, "restart_count": 0, "nodes": "n1", "time": T0},
              {"event": "start", "job_id": 9, "restart_count": 1, "nodes": "n2", "time": T0 + 100},
              {"event": "submitted", "job_id": 10},  # `slurmctl resume`: a new job
              {"event": "start", "job_id": 10, "restart_count": 0, "nodes": "n3", "time": T0 + 200}]
    (path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    # as runtime.attempt writes each attempt's header (Slurm's restart count) into the job's log
    (path / "logs" / "9.out").write_text("slurmctl: attempt 0 of job 9 starting on n1\nfirst\n"
                                         "slurmctl: attempt 1 of job 9 starting on n2\nsecond\n")
    (path / "logs" / "10.out").write_text("slurmctl: attempt 0 of job 10 starting on n3\nthird\n"
                                          "Traceback (most recent call last):\nRuntimeError: CUDA out of memory.\n")
    return Run(path.name, path)


def test_status_story_logs_and_diagnose_number_attempts_alike(tmp_path):
    run = _run(tmp_path)
    status = build_status(run, Job(job_id=10, state="FAILED", exit_code="1:0", source="sacct"))
    assert status.attempts == 3
    assert [line.split(":")[0] for line in status.history] == [
        "attempt 1 (job 9)", "attempt 2 (job 9, Slurm restart 1)", "attempt 3 (job 10)"]
    assert [attempt_log(run, n)[1][-1] for n in (1, 2)] == ["first", "second"]
    path, lines = attempt_log(run, 3)
    assert path.name == "10.out" and "third" in lines
    assert "`slurmctl logs RUN --attempt 3`" in diagnose_file(path, "FAILED", "1:0").summary
    with pytest.raises(SpecError, match="has attempts 1 to 3"):
        attempt_log(run, 4)
    with pytest.raises(SpecError):
        attempt_log(run, 0)
