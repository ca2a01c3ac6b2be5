"""status/ls read Slurm a constant number of times; phases, progress and diagnosis from a run dir.

Slurm output is replayed from tests/fixtures/slurm_22.05_outputs.json (captured on the local cluster).
"""

import json
import time

from slurmctl.observe.compare import sparkline, write_png
from slurmctl.observe.logs import split_attempts, training_lines
from slurmctl.observe.status import build_status, runs_statuses
from slurmctl.rundir import Run
from slurmctl.slurm.client import Job, SlurmClient

from .fakes import JOBS, ReplayRunner


def _run(tmp_path, name, job_id, **files) -> Run:
    path = tmp_path / name
    (path / "logs").mkdir(parents=True)
    (path / "checkpoints").mkdir()
    (path / "run.json").write_text(json.dumps({"name": name, "created": time.time()}))
    (path / "run.yaml").write_text("name: x\nentrypoint: train.py\npartition: h100-ondemand\nnodes: 2\n"
                                   "gpus_per_node: 8\ngpu_type: h100\ntime_limit: 1h\n")
    (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": job_id}) + "\n")
    for rel, text in files.items():
        (path / rel).write_text(text)
    return Run(name, path)


def test_ls_makes_a_constant_number_of_slurm_calls(tmp_path):
    failed, completed, held = JOBS["failed"], JOBS["completed"], JOBS["held"]
    runs = [_run(tmp_path, f"r{i}", job) for i, job in enumerate([failed, completed, held] * 20)]
    runner = ReplayRunner()
    statuses = runs_statuses(runs, SlurmClient(runner))
    assert [c[0] for c in runner.calls] == ["squeue", "sacct"]  # 60 runs, 2 commands
    by_job = {s.job_id: s for s in statuses}
    assert by_job[held].phase == "held" and by_job[completed].phase == "finished" and by_job[failed].phase == "failed"
    assert by_job[failed].diagnosis["category"] == "unknown"  # FAILED with an empty log: honest, not a guess
    assert by_job[completed].gpus == 16 and by_job[completed].requeues_left == 3


def test_running_status_has_progress_throughput_and_stall_health(tmp_path):
    now = time.time()
    metrics = "".join(json.dumps({"step": s, "time": now - 2000 + s, "loss": 1.0 / (s + 1)}) + "\n" for s in range(10))
    heartbeat = json.dumps({"step": 9, "time": now - 1500, "job_id": "42", "total_steps": 100,
                            "metrics": {"step": 9, "loss": 0.1}})
    run = _run(tmp_path, "r", 42, **{"metrics.jsonl": metrics, "heartbeat.json": heartbeat})
    job = Job(job_id=42, name="r", state="RUNNING", partition="h100-ondemand", num_nodes=2, nodelist="h100-[1-2]",
              elapsed_seconds=2000)
    status = build_status(run, job, now=now)
    assert status.phase == "training" and status.progress_percent == 10.0
    assert status.steps_per_second == 1.0 and status.health == "no step progress for 25 min"
    (run.path / "drain.request").write_text("{}")
    assert build_status(run, job, now=now).phase == "draining"


def test_failed_run_is_diagnosed_from_its_log(tmp_path):
    run = _run(tmp_path, "r", 5, **{"logs/5.out": "[rank1]: ModuleNotFoundError: No module named 'flash_attn'\n"})
    job = Job(job_id=5, name="r", state="FAILED", exit_code="1:0", source="sacct")
    status = build_status(run, job)
    assert status.diagnosis["category"] == "import_error" and status.diagnosis["rank"] == 1


def test_logs_by_rank_and_attempt():
    lines = ["slurmctl: attempt 0 of job 9 starting on n1", "[rank0]: a", "[rank1]: b", "1: c",
             "slurmctl: attempt 1 of job 9 starting on n1", "[rank0]: d"]
    attempts = split_attempts(lines)
    assert attempts[1] == lines[4:] and training_lines(attempts[0], 0) == [lines[0], "[rank0]: a"]
    assert training_lines(lines, 1) == [lines[0], "[rank1]: b", "1: c", lines[4]]


def test_sparkline_and_png_without_data(tmp_path):
    from .test_compare import read_png

    assert sparkline([3, 2, 1, 0]) == "█▅▃▁"
    # No series: a valid PNG with empty labelled axes (two runs' plotted lines: test_compare.py).
    from .test_compare import COLOURS, near

    image = read_png(write_png(tmp_path / "p.png", []))
    assert (len(image), len(image[0])) == (360, 640) and not near(image, COLOURS[1], 10)


def test_a_drained_cancel_reads_as_stopped_not_finished(tmp_path):
    # A drained cancel exits 0, so Slurm reports COMPLETED; the run's own end record says why.
    run = _run(tmp_path, "c", 9)
    run.record("start", job_id=9, restart_count=0)
    run.record("end", job_id=9, outcome="cancelled", drain_acked=True, checkpoint_step=292,
               reason="cancelled by request; drain acknowledged; checkpoint step 292.")
    status = build_status(run, Job(job_id=9, name="c", state="COMPLETED", exit_code="0:0"))
    assert status.phase == "cancelled" and "step 292" in status.headline and "slurmctl resume" in status.action
