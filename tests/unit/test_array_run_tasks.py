"""An adopted array (`--array=0-3%2`) is four jobs, each priced, each told as a task of its own, not four
attempts of one job: replayed from alice's adopted lab array on the local cluster (array 5085, tasks
5086, 5087, 5088 and 5085, their records interleaved in attempts.jsonl)."""

import json
from pathlib import Path

from slurmctl.observe.story import story
from slurmctl.ops.accounting import run_attempts
from slurmctl.rundir import Run
from slurmctl.slurm.client import QueueSnapshot, SlurmClient
from tests.unit.fakes import ReplayRunner, pin_seal

CAPTURED = json.loads((Path(__file__).parent.parent / "fixtures" / "slurm" / "adopted_array_tasks.json").read_text())


def _run(tmp_path, adopted: bool = True) -> Run:
    path = tmp_path / "lab-ddp-20261202-b6e5"
    path.mkdir()
    (path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in CAPTURED["events"]))
    meta = {"run_id": "lab-ddp-20261202-b6e5", "name": "lab-ddp"}
    (path / "run.json").write_text(json.dumps({**meta, "adopted": {"script": "ddp.sbatch"}} if adopted else meta))
    return Run("lab-ddp-20261202-b6e5", path)


def test_every_task_of_an_adopted_array_is_priced(tmp_path, local_site, monkeypatch):
    pin_seal(monkeypatch, CAPTURED["seal"])
    run = _run(tmp_path)
    assert run.job_ids() == [5085]  # the array's id: the submission
    assert sorted(run.priced_job_ids()) == [5085, 5086, 5087, 5088]
    client = SlurmClient(ReplayRunner({tuple(c["argv"]): c["stdout"] for c in CAPTURED["calls"]}))
    attempts = run_attempts(local_site, client, sorted(run.priced_job_ids()))
    assert sorted(a.job_id for a in attempts) == [5085, 5086, 5087, 5088]
    assert round(sum(a.cost_usd for a in attempts), 2) == 0.18  # `cost` said $0.05: one task of four


def test_an_adopted_arrays_history_lists_its_tasks_each_with_its_own_end(tmp_path):
    lines = story(_run(tmp_path).events())
    assert [line.split(":")[0] for line in lines] == ["array task (job 5087)", "array task (job 5086)",
                                                      "array task (job 5085)", "array task (job 5088)"]
    assert all(line.endswith("finished, no checkpoint") for line in lines), lines  # no "without an end record"


def test_an_adopted_array_whose_steps_failed_is_no_success(tmp_path):
    """Slurm recorded every task COMPLETED 0:0; each task's srun step FAILED 1:0 (`srun ... &`, a bare
    `wait`): status says failed, with the step, never "Finished successfully"."""
    from slurmctl.observe.status import RunStatus, _failed_steps, completed_but_failed
    from slurmctl.slurm.records import Job

    run, call = _run(tmp_path), CAPTURED["steps_call"]
    client = SlurmClient(ReplayRunner({tuple(call["argv"]): call["stdout"]}))
    job = Job(5085, state="COMPLETED", exit_code="0:0")
    steps = completed_but_failed(run, client, job)
    expected = [(f"{j}.0", "FAILED", "1:0") for j in (5086, 5087, 5088, 5085)]
    assert [(s.step, s.state, s.exit_code) for s in steps] == expected
    status = RunStatus(run.run_id, str(run.path), 5085, "COMPLETED", "Finished successfully (exit code 0).", "",
                       phase="finished")
    _failed_steps(status, run, job, steps)
    assert status.phase == "failed" and status.headline.startswith("Its step 5086.0 failed (failed, exit code 1:0)")
    assert status.diagnosis["category"] != "success"
    assert completed_but_failed(run, client, Job(5085, state="FAILED")) == []  # only a COMPLETED job is asked


def test_ls_reads_an_adopted_array_whose_steps_failed_as_status_does(tmp_path, local_site):
    """`ls` (runs_statuses) gives the same reading as `status`: failed with the step, never "finished ...
    Finished successfully"; and each task's history line says its step failed, not "finished"."""
    from slurmctl.observe.status import runs_statuses
    from slurmctl.slurm.records import Job

    run, call = _run(tmp_path), CAPTURED["steps_call"]
    runner = ReplayRunner({tuple(call["argv"]): call["stdout"]})
    runner.strict = True  # any other Slurm call fails the test
    job = Job(5085, state="COMPLETED", exit_code="0:0", source="sacct")
    [status] = runs_statuses([run], SlurmClient(runner), site=local_site, queue=QueueSnapshot("", CAPTURED["seal"]),
                             known=lambda: {5085: job})
    assert status.phase == "failed", (status.phase, status.headline)
    assert status.headline.startswith("Its step 5086.0 failed (failed, exit code 1:0) (and 3 more step(s))")
    assert runner.calls[-1] == call["argv"]
    assert [line.split("; ", 1)[1] for line in status.history] == [
        f"failed: its step {j}.0 failed (failed, exit code 1:0) though the batch script ended 0, no checkpoint"
        for j in (5087, 5086, 5085, 5088)]


def test_a_run_slurmctl_runs_itself_is_not_asked_for_its_steps(tmp_path, local_site):
    """slurmctl's own runtime records each step's end (a step it restarted in the allocation failed, the
    run did not): only an adopted script's exit status can hide a failed step, so only it costs ls a sacct."""
    from slurmctl.observe.status import runs_statuses
    from slurmctl.slurm.records import Job

    runner = ReplayRunner({})
    runner.strict = True
    job = Job(5085, state="COMPLETED", exit_code="0:0", source="sacct")
    [status] = runs_statuses([_run(tmp_path, adopted=False)], SlurmClient(runner), site=local_site,
                             queue=QueueSnapshot("", CAPTURED["seal"]), known=lambda: {5085: job})
    assert status.phase == "finished" and runner.calls == []


def test_ls_says_a_hidden_step_failure_as_the_headline_does_with_no_stale_pending_reason(tmp_path, local_site,
                                                                                         monkeypatch):
    """Replayed from the local cluster: accounting's record of the array's job 5085 (the sacct status asks
    for a job squeue no longer shows) is COMPLETED 0:0 and still carries the pending reason it waited with,
    JobArrayTaskLimit; its steps failed. `ls`'s WHAT IS HAPPENING says what the headline says (the step),
    not the cause read from the log alone, and the finished job has no pending reason."""
    from slurmctl.observe.status import runs_statuses

    ended = json.loads((Path(__file__).parent.parent / "fixtures" / "slurm" / "adopted_array_ended.json").read_text())
    pin_seal(monkeypatch, ended["seal"])
    run, steps = _run(tmp_path), CAPTURED["steps_call"]
    runner = ReplayRunner({tuple(ended["history"]["argv"]): ended["history"]["stdout"],
                           tuple(steps["argv"]): steps["stdout"]})
    runner.strict = True  # any other Slurm call fails the test
    [status] = runs_statuses([run], SlurmClient(runner), site=local_site, queue=QueueSnapshot("", ended["seal"]))
    assert runner.calls == [ended["history"]["argv"], steps["argv"]]
    assert (status.state, status.phase) == ("COMPLETED", "failed")
    assert status.diagnosis and status.diagnosis["category"] != "success"
    assert status.what_is_happening == status.headline
    assert status.what_is_happening.startswith("Its step 5086.0 failed (failed, exit code 1:0) (and 3 more step(s))")
    assert status.reason == "" and status.to_dict()["reason"] == ""  # accounting's record: JobArrayTaskLimit


def test_a_reason_stands_while_the_job_waits_and_one_that_says_how_it_ended_stays():
    from slurmctl.observe.explain import reason_now
    from slurmctl.slurm.records import Job

    assert reason_now(Job(5085, state="PENDING", reason="JobArrayTaskLimit")) == "JobArrayTaskLimit"
    assert reason_now(Job(5085, state="COMPLETED", reason="JobArrayTaskLimit")) == ""
    assert reason_now(Job(5085, state="FAILED", reason="NonZeroExitCode")) == "NonZeroExitCode"
    assert reason_now(Job(5085, state="TIMEOUT", reason="TimeLimit")) == "TimeLimit"
    # accounting's last record of a job squeue no longer lists: REQUEUED with the wait it had then
    assert reason_now(Job(685, state="REQUEUED", reason="BeginTime", source="sacct")) == ""
    assert reason_now(Job(685, state="REQUEUED", reason="BeginTime")) == "BeginTime"  # squeue's: live
