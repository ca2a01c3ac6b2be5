"""A Lightning program preempted while it still starts (before trainer.fit installs its SIGUSR1
handler): this cluster has preempt_send_user_signal, so the job's own `--signal=SIGUSR1@90` reaches
the srun tasks at once and the program dies of it (exit 128+10). Nobody recorded a drain (the signal
went to the steps, not the batch shell), but Slurm's record shows the preemption: the attempt ended by
preemption, not by an unknown crash, and it continues from the checkpoint `resume` would use. The run
dir, log and PreemptTime are those of the independent check's run lit-ddp-20261202-be22 (job 5112)."""

import json
import os
import pickle
import time
import zipfile

import pytest

from slurmctl.observe.diagnose import diagnose_text
from slurmctl.rundir import Run
from slurmctl.runtime import attempt
from slurmctl.runtime.policy import REQUEUE, STOP, decide
from slurmctl.slurm.client import REQUEUE_CHECK, SlurmClient, job_ref

from .fakes import ReplayRunner, pin_seal, squeue_output

# logs/5112.out up to the wrapper's own end line
LOG = """slurmctl: attempt 6 of job 5112 (Slurm restart 0) starting on h100-[1-2], resuming from checkpoint step 866
/var/lib/slurmctl-local/runs/alice/lit-ddp-20261202-be22/adopted.sh: line 11: module: command not found
/var/lib/slurmctl-local/runs/alice/lit-ddp-20261202-be22/adopted.sh: line 12: conda: command not found
srun: error: h100-1: task 0: User defined signal 1
srun: error: h100-2: task 1: User defined signal 1
"""
PREEMPTED_AT = "2026-12-02T02:19:29"  # squeue's PreemptTime, local time (UTC here)
STARTED = 1796177965.0  # attempts.jsonl's start of job 5112: 02:19:25 UTC


def _archive(path, step):
    with zipfile.ZipFile(path, "w") as archive:  # as torch.save lays a checkpoint out
        archive.writestr("ckpt/data.pkl", pickle.dumps({"global_step": step, "state_dict": {}}, protocol=2))
    os.utime(path, (STARTED - 180, STARTED - 180))  # saved by an earlier attempt


@pytest.fixture
def run(tmp_path, monkeypatch):
    path = tmp_path / "lit-ddp-20261202-be22"
    (path / "logs").mkdir(parents=True)
    lit_out = tmp_path / "lit" / "lit_out"
    (lit_out / "ckpts").mkdir(parents=True)
    _archive(lit_out / "hpc_ckpt_3.ckpt", 866)
    _archive(lit_out / "ckpts" / "last.ckpt", 800)
    block = {"framework": "lightning", "checkpoint_dir": str(tmp_path / "lit"), "signal": "USR1",
             "signal_to": "steps", "step_pattern": None, "restore": "hpc"}
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": time.time(),
                                               "adopted": {"script": "/home/alice/check24r/lit/lit.sbatch",
                                                           "resilience": block}}))
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    started = STARTED
    events = [{"event": "submitted", "job_id": 5112, "resumed_from_step": 866},
              {"event": "start", "job_id": 5112, "restart_count": 0, "nodes": "h100-[1-2]", "time": started,
               "resume_step": 866}]
    (path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (path / "logs" / "5112.out").write_text(LOG)
    for name, value in {"SLURM_JOB_ID": "5112", "SLURM_RESTART_COUNT": "0", "SLURMCTL_ADOPTED": "1",
                        "SLURMCTL_DRAIN_MARGIN": "60", "SLURMCTL_PROGRAM_SIGNAL_MARGIN": "90",
                        "SLURMCTL_PROGRAM_SIGNAL": "USR1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.setattr(attempt, "start_expediter", lambda *a, **k: None)  # a detached process of its own
    return Run(path.name, path)


def _client(monkeypatch, preempt_time: str, limit: str = "40:00") -> tuple[SlurmClient, ReplayRunner]:
    seal = pin_seal(monkeypatch)
    argv = ("squeue", "-h", "-t", "all", "-j", job_ref(5112), *REQUEUE_CHECK.format_argv(seal))
    runner = ReplayRunner({argv: squeue_output(["5112", "RUNNING", "0", preempt_time, limit])})
    return SlurmClient(runner), runner


def _end_record(run):
    return [json.loads(line) for line in (run.path / "attempts.jsonl").read_text().splitlines()][-1]


def test_a_death_by_the_preemptions_signal_is_a_preemption_and_continues_from_the_resumable_checkpoint(
        run, monkeypatch, capsys):
    client, runner = _client(monkeypatch, PREEMPTED_AT)
    attempt.end(run.path, client, 138)
    record = _end_record(run)
    assert (record["outcome"], record["action"], record["checkpoint_step"]) == ("preemption", REQUEUE, 866)
    assert record["drain_reason"] == "preemption" and not record["drain_acked"]
    assert ["scontrol", "requeue", "5112"] in runner.calls
    said = capsys.readouterr().err
    assert "before the first valid checkpoint" not in said and "checkpoint step 866" in said
    # diagnose reads the job's log, this line included: preempted, not unknown
    assert diagnose_text(LOG + said, "FAILED", "138:0").category == "preempted"


def test_a_crash_of_an_adopted_program_sees_its_own_checkpoints(run, monkeypatch, capsys):
    """No preemption: a crash, but after the checkpoint resume would use (not 'before the first')."""
    client, _ = _client(monkeypatch, "N/A")
    attempt.end(run.path, client, 1)
    record = _end_record(run)
    assert (record["outcome"], record["action"], record["checkpoint_step"]) == ("failed", REQUEUE, 866)
    assert "restart 1 of 3 from checkpoint step 866" in record["reason"]


def test_a_death_by_the_jobs_own_signal_near_its_limit_is_the_time_limit(run, monkeypatch):
    elapsed = int(time.time() - STARTED)
    limit = elapsed + 86  # 86 s left: within the script's @90
    client, _ = _client(monkeypatch, "N/A", limit=f"{limit // 3600}:{limit // 60 % 60:02d}:{limit % 60:02d}")
    attempt.end(run.path, client, 138)
    assert _end_record(run)["outcome"] == "time-limit"


def test_another_signal_far_from_the_limit_stays_a_failure(run, monkeypatch):
    client, _ = _client(monkeypatch, "N/A", limit="UNLIMITED")
    attempt.end(run.path, client, 138)
    assert _end_record(run)["outcome"] == "failed"


def test_a_drain_read_from_slurm_without_a_checkpoint_stops():
    out = decide(exit_code=138, drain={"reason": "preemption", "read_from": "slurm"}, acked=False,
                 checkpoint_step=None, previous_ends=[], max_restarts=3)
    assert (out.action, out.outcome, out.failures, out.preemptions) == (STOP, "preemption", 0, 1)


def test_cancel_does_not_say_lightning_cannot_save_on_its_signal():
    from slurmctl.control.adopted import _why_no_save
    from slurmctl.runtime.adapters import Resilience

    lightning = Resilience("lightning", "/x", "USR1", "steps", None, "hpc")
    said = _why_no_save(lightning, "FAILED", None)
    assert "does not save" not in said and "still starting" in said
    plain = Resilience("pytorch", "/x", "USR1", "batch")
    assert "does not save on that signal" in _why_no_save(plain, "FAILED", 40)


def test_status_tells_the_preemption_not_an_unknown_crash(run, monkeypatch):
    from slurmctl.observe.status import build_status
    from slurmctl.slurm.client import Job

    client, _ = _client(monkeypatch, PREEMPTED_AT)
    attempt.end(run.path, client, 138)
    status = build_status(run, Job(job_id=5112, state="PENDING", reason="BeginTime", restarts=1))
    assert status.phase == "requeued after preemption", status.phase
    assert "preempted" in status.history[-1] and "866" in status.history[-1], status.history
