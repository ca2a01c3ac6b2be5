"""A job Slurm requeued, waiting to start again, and a job waiting for its --begin time: told apart by
the restart count Slurm keeps. The squeue records are the real cluster's answers to the client's own
`squeue -O` (captured as alice): job 3336 after `scontrol requeue`, job 3337 submitted with
`--begin=now+1hour`."""

import json
import time

from slurmctl.observe.plain_job import PlainJob, plain_job_status
from slurmctl.observe.status import build_status
from slurmctl.rundir import Run
from slurmctl.slurm.client import QUEUE, SlurmClient

from .fakes import ReplayRunner, pin_seal, squeue_output

REQUEUED = ["3336", "PENDING", "BeginTime", "l4-dev", "1", "", "0:00", "3:00", "2026-12-01T22:09:46",
            "2026-12-01T22:11:47", "cpu=1,mem=1000M,node=1,billing=1", "1", "alice", "rq-capture", "(null)"]
BEGIN_LATER = ["3337", "PENDING", "BeginTime", "l4-dev", "1", "", "0:00", "2:00", "2026-12-01T22:09:38",
               "2026-12-01T23:09:38", "cpu=1,mem=1000M,node=1,billing=1", "0", "alice", "begin-capture", "(null)"]
# the end of an adopted Lightning program's log when its SIGUSR1 handler requeued the job itself
LIGHTNING_TAIL = """slurmctl: attempt 0 of job 3336 starting on l4-1
step 40 loss 0.9812
Handling auto-requeue signal: 10
slurmstepd: error: *** STEP 3336.0 ON l4-1 CANCELLED AT 2026-12-01T22:09:45 DUE TO JOB REQUEUE ***
"""


def _jobs(monkeypatch):
    seal = pin_seal(monkeypatch)
    argv = ("squeue", "-h", *QUEUE.format_argv(seal))
    return SlurmClient(ReplayRunner({argv: squeue_output(REQUEUED, BEGIN_LATER)})).queue_view({3336, 3337}).jobs


def _adopted_run(tmp_path, job_id: int) -> Run:
    path = tmp_path / "lit-20261201-abcd"
    (path / "logs").mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": time.time(),
                                               "adopted": {"script": "/home/alice/lit.sbatch"}}))
    events = [{"event": "submitted", "job_id": job_id},
              {"event": "start", "job_id": job_id, "restart_count": 0, "nodes": "l4-1", "time": time.time() - 60}]
    (path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (path / "logs" / f"{job_id}.out").write_text(LIGHTNING_TAIL)
    return Run(path.name, path)


def test_a_job_the_program_requeued_says_so_and_that_it_waits_to_start_again(tmp_path, monkeypatch):
    job = _jobs(monkeypatch)[3336]
    status = build_status(_adopted_run(tmp_path, 3336), job)
    assert status.phase == "requeued" and status.requeues == 1 and status.attempts == 1
    assert status.headline.startswith("Requeued by the program itself (Lightning's auto-requeue on its signal)")
    assert "waiting to start again as attempt 2" in status.headline
    (line,) = status.history
    assert not line.endswith("running") and line.endswith("(Slurm restart 1); waiting to start again"), line
    assert "by the program itself" in line
    # still Slurm's own words for the wait, with the time it may start
    assert "Requeued (Slurm restart 1) and waiting to start again" in status.why
    assert "2026-12-01 22:11:47" in status.why


def test_a_begin_time_is_not_a_requeue(monkeypatch):
    jobs = _jobs(monkeypatch)
    later = plain_job_status(PlainJob(3337, jobs[3337], None))
    assert "--begin" in later.headline and "2026-12-01 23:09:38" in later.headline
    assert "requeue" not in later.headline.lower() and later.phase == "queued"
    assert "StartTime=now" in later.action and "JobId=3337" in later.action
    requeued = plain_job_status(PlainJob(3336, jobs[3336], None))
    assert requeued.headline.startswith("Waiting: Requeued (Slurm restart 1) and waiting to start again")
    assert requeued.phase == "requeued"


def test_a_plain_jobs_advice_names_commands_that_work_for_it(tmp_path, monkeypatch):
    """A plain job has one output file and no per-rank logs: no `logs --rank`, no `logs -f`."""
    from slurmctl.observe.plain_job import plain_job_diagnosis
    from slurmctl.slurm.client import Job

    out = tmp_path / "slurm-4242.out"
    out.write_text("step 3 loss 2.0\nTraceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
                   "ValueError: bad shape\n")
    job = Job(job_id=4242, name="plain", state="FAILED", exit_code="1:0", partition="l4-dev", num_nodes=1,
              elapsed_seconds=3, source="sacct")
    status = plain_job_status(PlainJob(4242, job, out))
    said = " ".join([status.headline, status.action, *status.details, status.diagnosis["hint"],
                     status.diagnosis["summary"]])
    assert "--rank" not in said and "logs RUN" not in said and " -f`" not in said, said
    assert "`slurmctl logs 4242 -n 0` shows its whole output" in status.diagnosis["hint"]
    assert "--rank" not in plain_job_diagnosis(PlainJob(4242, job, out)).hint
    running = plain_job_status(PlainJob(4242, Job(job_id=4242, name="p", state="RUNNING", partition="l4-dev",
                                                  num_nodes=1, elapsed_seconds=3), out))
    assert running.action == f"Follow it with `tail -f {out}`.", running.action

