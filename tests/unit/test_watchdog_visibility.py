"""`status` and `diagnose` say what the progress watchdog did and point at its scene folder.

The watchdog's own Watchdog class writes <run>/watchdog/state.json here (driven by a fake clock), so
these tests follow its real format."""

import json
import time

from slurmctl.observe.run_diagnosis import diagnose_file
from slurmctl.observe.status import build_status
from slurmctl.observe.watchdog_report import watchdog_report
from slurmctl.rundir import Run
from slurmctl.runtime.watchdog import Settings, StepReader, Watchdog
from slurmctl.slurm.client import Job

HUNG_LOG = ("[rank0]: step 41 loss 2.1\n"
            "slurmctl watchdog [12:00:45]: WARNING: no progress in field 'step' in heartbeat.json for 45.0 s\n"
            "slurmctl watchdog [12:15:00]: HUNG: no progress in field 'step' for 900.0 s\n"
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n")


def make_run(tmp_path, job_id=42, log=HUNG_LOG) -> Run:
    path = tmp_path / "r"
    (path / "logs").mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"name": "r", "created": time.time()}))
    (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": job_id}) + "\n")
    (path / "logs" / f"{job_id}.out").write_text(log)
    (path / "heartbeat.json").write_text(json.dumps({"step": 41, "time": 1000.0, "job_id": str(job_id)}))
    return Run("r", path)


def stalled_watchdog(run: Run, job_id="42") -> tuple[Watchdog, list[float]]:
    clock = [1000.0]
    settings = Settings(run_dir=run.path, reader=StepReader("step", run.path / "heartbeat.json"), check_seconds=45,
                        stall_seconds=900, startup_seconds=900, drain_timeout_seconds=300, job_id=job_id)
    dog = Watchdog(settings, clock=lambda: clock[0])
    dog.progressed = True
    return dog, clock


def killed_by_watchdog(run: Run) -> str:
    dog, clock = stalled_watchdog(run)
    clock[0] += 901
    dog.check()  # -> drain-requested
    scene = run.path / "watchdog" / f"42-{int(clock[0]) + 300}"
    scene.mkdir()
    (scene / "stacks.txt").write_text("=== pid 7 ===\nThread 7: all_reduce\n")
    dog._write_state("killed", clock[0] + 300, {"scene": str(scene)})  # what _while_draining records
    return str(scene)


def test_no_watchdog_folder_means_nothing_to_report(tmp_path):
    run = make_run(tmp_path, log="[rank0]: ModuleNotFoundError: No module named 'x'\n")
    assert watchdog_report(run.path) is None
    assert build_status(run, Job(job_id=42, name="r", state="FAILED", exit_code="1:0")).watchdog is None
    assert diagnose_file(run.log_path(42)).watchdog is None


def test_status_says_the_watchdog_asked_a_stalled_training_to_drain(tmp_path):
    run = make_run(tmp_path)
    dog, clock = stalled_watchdog(run)
    clock[0] += 901
    dog.check()
    status = build_status(run, Job(job_id=42, name="r", state="RUNNING", elapsed_seconds=2000), now=clock[0])
    assert status.watchdog["state"] == "drain-requested" and status.watchdog["scene"] is None
    assert "asked the training to checkpoint and stop" in status.watchdog["message"]
    assert status.health == "hung: the watchdog asked it to drain"
    assert any(d.startswith("Watchdog: the watchdog saw no progress (no progress in field 'step'")
               for d in status.details)


def test_status_and_diagnose_point_at_the_scene_of_a_step_the_watchdog_ended(tmp_path):
    run = make_run(tmp_path)
    scene = killed_by_watchdog(run)
    job = Job(job_id=42, name="r", state="FAILED", exit_code="0:15", source="sacct")
    status = build_status(run, job)
    assert status.watchdog["state"] == "killed" and status.watchdog["scene"] == scene
    assert status.watchdog["scenes"] == [scene] and status.health == "hung: the watchdog ended the step"
    assert status.diagnosis["watchdog"]["scene"] == scene
    result = diagnose_file(run.log_path(42), "FAILED", "0:15")
    assert result.category == "unknown" and "watchdog ended the hung step" in result.summary
    assert result.evidence[0].startswith("watchdog: the watchdog ended the hung training step")
    assert scene in result.evidence[0]
    assert result.evidence[1].startswith("slurmctl watchdog [12:00:45]: WARNING") and "HUNG" in result.evidence[2]
    assert f"{scene}/stacks.txt" in result.hint


def test_a_root_cause_in_the_log_keeps_its_category_and_the_watchdog_is_evidence(tmp_path):
    run = make_run(tmp_path, log=HUNG_LOG + "[rank3]: torch.OutOfMemoryError: CUDA out of memory.\n")
    killed_by_watchdog(run)
    result = diagnose_file(run.log_path(42), "FAILED", "1:0")
    assert result.category == "cuda_oom" and result.summary.startswith("A GPU ran out of memory")
    assert result.watchdog["state"] == "killed" and result.evidence[0].startswith("watchdog:")


def test_another_jobs_watchdog_state_is_not_shown_for_this_job(tmp_path):
    run = make_run(tmp_path)
    killed_by_watchdog(run)
    assert watchdog_report(run.path, 43) is None
    assert watchdog_report(run.path, 42)["state"] == "killed"


def test_a_configuration_problem_is_reported_without_a_hang(tmp_path):
    run = make_run(tmp_path)
    (run.path / "heartbeat.json").unlink()
    dog, clock = stalled_watchdog(run)
    clock[0] += 901
    dog.check()
    status = build_status(run, Job(job_id=42, name="r", state="RUNNING"), now=clock[0])
    assert status.watchdog["state"] == "config-problem" and status.health == "ok"
    assert "never found its progress field 'step'" in status.watchdog["message"]


def test_a_first_warning_shows_in_status_and_clears_when_progress_resumes(tmp_path):
    run = make_run(tmp_path)
    dog, clock = stalled_watchdog(run)
    clock[0] += 46
    dog.check()  # past one check interval without progress: a warning, not an action
    report = watchdog_report(run.path, 42)
    assert report["state"] == "warned" and "no progress" in report["message"]
    running = Job(job_id=42, name="r", state="RUNNING", nodelist="h100-1")
    assert build_status(run, running, now=clock[0]).health.startswith("stalled")
    (run.path / "heartbeat.json").write_text(json.dumps({"step": 42, "time": clock[0], "job_id": "42"}))
    clock[0] += 1
    dog.check()
    assert watchdog_report(run.path, 42) is None
