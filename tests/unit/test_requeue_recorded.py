"""An adopted script's own trap (or its program: Lightning on SIGUSR1) runs `scontrol requeue` before
slurmctl recorded the attempt's end: the wrapper's SIGTERM trap (`attempt interrupted`) records it
with why -- the time limit, a preemption, or the job's own requeue. The squeue answers are what the
real cluster printed for the client's `squeue -O` while a requeued job completed (restart count
already 1; PreemptTime set only after a preemption)."""

import json
import os
import pickle
import time
import zipfile

import pytest

from slurmctl.observe.status import build_status
from slurmctl.rundir import Run
from slurmctl.runtime.attempt import interrupted
from slurmctl.slurm.client import REQUEUE_CHECK, Job, SlurmClient, job_ref

from .fakes import ReplayRunner, pin_seal, squeue_output

LIMIT = 600


@pytest.fixture
def adopted(tmp_path, monkeypatch):
    path = tmp_path / "univ-20261201-abcd"
    (path / "logs").mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    block = {"framework": "pytorch", "checkpoint_dir": str(out), "signal": "USR1", "signal_to": "steps"}
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": time.time(),
                                               "adopted": {"script": "/home/alice/univ.sbatch",
                                                           "resilience": block}}))
    started = time.time() - (LIMIT - 80)  # 80 s before its limit: inside the script's @90 signal margin
    events = [{"event": "submitted", "job_id": 3424},
              {"event": "start", "job_id": 3424, "restart_count": 0, "nodes": "l4-1", "time": started}]
    (path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (path / "logs" / "3424.out").write_text("slurmctl: attempt 0 of job 3424 starting on l4-1\n"
                                            + "".join(f"iter {i}: loss 1.0\n" for i in range(46)))
    with zipfile.ZipFile(out / "ckpt.pt", "w") as archive:  # its save on USR1, as torch.save lays it out
        archive.writestr("ckpt/data.pkl", pickle.dumps({"iter_num": 45, "model": {}}, protocol=2))
    for name, value in {"SLURM_JOB_ID": "3424", "SLURM_RESTART_COUNT": "0", "SLURMCTL_ADOPTED": "1",
                        "SLURMCTL_DRAIN_MARGIN": "60", "SLURMCTL_PROGRAM_SIGNAL_MARGIN": "90"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    return Run(path.name, path)


def _client(monkeypatch, state: str, restarts: str, preempt_time: str) -> SlurmClient:
    seal = pin_seal(monkeypatch)
    argv = ("squeue", "-h", "-t", "all", "-j", job_ref(3424), *REQUEUE_CHECK.format_argv(seal))
    return SlurmClient(ReplayRunner({argv: squeue_output(["3424", state, restarts, preempt_time, "10:00"])}))


def test_a_requeue_by_the_scripts_trap_near_the_limit_is_recorded_as_the_time_limit(adopted, monkeypatch):
    record = interrupted(adopted.path, _client(monkeypatch, "COMPLETING", "1", "N/A"))
    assert record["outcome"] == "time-limit" and record["action"] == "requeue" and record["drain_acked"]
    assert (record["checkpoint_step"], record["last_step"], record["steps_lost"]) == (45, 45, 0)
    # once: a second SIGTERM finds the end recorded
    assert interrupted(adopted.path, _client(monkeypatch, "COMPLETING", "1", "N/A")) is None
    status = build_status(adopted, Job(job_id=3424, state="PENDING", reason="BeginTime", restarts=1))
    assert status.phase == "requeued after time limit", status.phase
    assert status.history[0].endswith("reached its time limit at step 45, newest checkpoint 45, 0 steps lost; "
                                      "requeued (new Slurm attempt)"), status.history


def test_a_preemption_is_recorded_as_one(adopted, monkeypatch):
    record = interrupted(adopted.path, _client(monkeypatch, "COMPLETING", "1", "2026-12-01T22:15:04"))
    assert record["outcome"] == "preemption"


def test_no_requeue_no_record(adopted, monkeypatch):
    """The time limit's own kill or a cancel: the restart count did not move; the epilog records those."""
    assert interrupted(adopted.path, _client(monkeypatch, "COMPLETING", "0", "N/A")) is None
    assert '"end"' not in (adopted.path / "attempts.jsonl").read_text()


def test_a_periodic_checkpoint_before_the_signal_is_no_save_on_it(adopted, monkeypatch):
    """The real cluster's case: the script's USR1 trap requeued at once, the program never got the signal;
    its newest checkpoint is an older periodic one: the steps since are lost, the drain unacknowledged."""
    from slurmctl.runtime import write_drain_request

    write_drain_request(adopted.path, "time-limit", time_left_seconds=66)
    time.sleep(0.01)
    old = time.time() - 30
    os.utime(next((adopted.path.parent / "out").iterdir()), (old, old))
    record = interrupted(adopted.path, _client(monkeypatch, "COMPLETING", "1", "N/A"))
    assert record["outcome"] == "time-limit" and not record["drain_acked"]
    assert "saved a checkpoint" not in record["reason"]
