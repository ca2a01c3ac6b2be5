"""A Slurm that does not answer: the runner's read budget, status/ls from the run directory alone,
"Slurm unreachable since" remembered across commands, and the exporter's run series kept.

The hung controller itself is simulated here by a `squeue` that never answers (a shell script that
sleeps), run through the real LocalRunner; tests/integration/test_faults_outage.py stops the real
slurmctld.
"""

import json
import time

import pytest

from slurmctl.errors import SlurmUnreachable
from slurmctl.observe import status as status_mod
from slurmctl.observe.status import run_status, runs_statuses
from slurmctl.ops.exporter import CountingRunner
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.runner import LocalRunner, answer_within

from .test_exporter import make, scrape, value, write_active_run
from .test_status_observe import _run


@pytest.fixture
def hung_slurm(tmp_path, monkeypatch):
    """A LocalRunner whose squeue/sacct/sinfo sleep far longer than any budget; outage memory in tmp."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("squeue", "sacct", "sinfo"):
        script = bin_dir / name
        script.write_text("#!/bin/sh\nexec sleep 30\n")
        script.chmod(0o755)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(status_mod, "QUERY_SECONDS", 0.5)
    return LocalRunner(bin_dir=str(bin_dir))


def test_answer_within_caps_a_local_runner_also_behind_a_wrapper_and_restores_it(hung_slurm):
    counting = CountingRunner(hung_slurm)
    started = time.monotonic()
    with answer_within(counting, 0.3), pytest.raises(SlurmUnreachable, match="did not answer within"):
        counting.run(["squeue", "-h"], timeout=60)
    assert time.monotonic() - started < 3
    assert hung_slurm.max_timeout is None  # restored: the next (write) command gets its own timeout
    with answer_within(object(), 0.3):  # a runner without a LocalRunner inside (SSH): left alone
        pass


def test_status_of_a_training_run_answers_from_the_run_dir_when_slurm_hangs(tmp_path, hung_slurm):
    now = time.time()
    heartbeat = json.dumps({"step": 41, "time": now - 5, "job_id": "77", "metrics": {"loss": 0.5}})
    run = _run(tmp_path, "r", 77, **{"heartbeat.json": heartbeat})
    with (run.path / "attempts.jsonl").open("a") as f:
        f.write(json.dumps({"event": "start", "job_id": 77, "restart_count": 0, "time": now - 60}) + "\n")
    started = time.monotonic()
    first = run_status(run, SlurmClient(hung_slurm))
    assert time.monotonic() - started < 3
    assert first.state == "UNREACHABLE" and first.phase == "training" and first.last_step == 41
    assert first.headline.startswith("Slurm unreachable since ") and first.slurm_unreachable_since
    # the outage's start is remembered across commands (a second `status` a moment later)
    again = runs_statuses([run], SlurmClient(hung_slurm))[0]
    assert again.slurm_unreachable_since == first.slurm_unreachable_since and again.state == "UNREACHABLE"


def test_run_dir_phases_and_the_outage_ends_when_slurm_answers(tmp_path, hung_slurm):
    from .fakes import JOBS, ReplayRunner

    requeued = _run(tmp_path, "q", 5)
    with (requeued.path / "attempts.jsonl").open("a") as f:
        for event in ({"event": "start", "job_id": 5}, {"event": "end", "job_id": 5, "action": "requeue",
                                                        "outcome": "preemption"}):
            f.write(json.dumps(event) + "\n")
    assert run_status(requeued, SlurmClient(hung_slurm)).phase == "requeued"
    assert status_mod._outage_file().exists()
    answered = runs_statuses([_run(tmp_path, "ok", JOBS["completed"])], SlurmClient(ReplayRunner()))
    assert answered[0].state == "COMPLETED" and answered[0].slurm_unreachable_since is None
    assert not status_mod._outage_file().exists()


def test_exporter_keeps_run_series_while_slurm_is_down(tmp_path):
    write_active_run(tmp_path)
    runner, registry, clock = make(tmp_path)
    run = "fixture-20261129-0009"
    assert value(scrape(registry), "slurmctl_run_step", user="root", run=run) == 50
    # the controller stops answering; the training goes on and writes its heartbeat
    runner.returncode, runner.stderr = 1, "squeue: error: Socket timed out on send/recv operation"
    heartbeat = tmp_path / "root" / run / "heartbeat.json"
    beat = json.loads(heartbeat.read_text())
    beat.update(step=57, time=time.time())
    heartbeat.write_text(json.dumps(beat))
    clock.now += 20
    down = scrape(registry)
    assert value(down, "slurmctl_slurm_up") == 0
    assert value(down, "slurmctl_run_step", user="root", run=run) == 57  # read now, from the run dir
    assert not any(name == "slurmctl_gpus" for name, _ in down)  # cluster series: only from a live snapshot
