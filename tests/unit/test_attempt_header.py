"""The line a job's log starts each attempt with numbers it as status and `logs --attempt` do (1 = the
run's first), across a resume's new job, and still says which Slurm attempt it is."""

import json

from slurmctl import rundir
from slurmctl.observe.logs import split_attempts
from slurmctl.observe.run_diagnosis import attempts_newest_first
from slurmctl.runtime import attempt


def _start(run_dir, monkeypatch, capsys, job_id, restart):
    monkeypatch.setenv("SLURM_JOB_ID", str(job_id))
    monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
    monkeypatch.setenv("SLURM_JOB_NODELIST", "h100-[1-2]")
    attempt.start(run_dir)
    return capsys.readouterr().err.strip()


def test_attempts_are_numbered_across_the_run_and_name_slurms_restart(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    first = _start(run_dir, monkeypatch, capsys, 4150, 0)
    requeued = _start(run_dir, monkeypatch, capsys, 4150, 1)
    resumed = _start(run_dir, monkeypatch, capsys, 4181, 0)  # `slurmctl resume`: a new job
    assert first.startswith("slurmctl: attempt 1 of job 4150 (Slurm restart 0) starting on h100-[1-2]")
    assert requeued.startswith("slurmctl: attempt 2 of job 4150 (Slurm restart 1) starting on")
    assert resumed.startswith("slurmctl: attempt 3 of job 4181 (Slurm restart 0) starting on")
    events = [json.loads(line) for line in (run_dir / rundir.ATTEMPTS).read_text().splitlines()]
    assert rundir.attempt_ids(events) == [(4150, 0), (4150, 1), (4181, 0)]
    # the log is split by Slurm's restart count, as `logs --attempt N` looks it up (rundir.attempt_ids)
    log = [first, "[rank0]: a", requeued, "[rank0]: b"]
    assert split_attempts(log) == {0: log[:2], 1: log[2:]}
    newest = attempts_newest_first("\n".join(log), "4150", {(4150, 0): 1, (4150, 1): 2})[0][0]
    assert (newest["number"], newest["run_attempt"]) == (1, 2)


def test_logs_written_before_keep_their_number_as_the_restart_count():
    log = ["slurmctl: attempt 0 of job 9 starting on n1", "x", "slurmctl: attempt 1 of job 9 starting on n1", "y"]
    assert split_attempts(log) == {0: log[:2], 1: log[2:]}
