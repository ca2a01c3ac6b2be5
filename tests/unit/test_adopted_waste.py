"""Waste for adopted programs: the epilog's cost record names the program's own checkpoint (nanoGPT's
ckpt.pt here, laid out as torch.save writes it), so the work lost after a preemption, a kill or an
unacknowledged cancel is counted from it; a CPU-only job's loss is counted at its CPU price."""

import json
import os
import pickle
import time
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

from slurmctl.ops.accounting import Attempt, assess_waste
from slurmctl.ops.hooks.run_records import read_run_facts


def _adopted_run(tmp_path, checkpoint_at: float | None):
    path = tmp_path / "runs" / "nanogpt-20261201-abcd"
    path.mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    if checkpoint_at is not None:
        with zipfile.ZipFile(out / "ckpt.pt", "w") as archive:
            archive.writestr("ckpt/data.pkl", pickle.dumps({"iter_num": 1300, "model": {}}, protocol=2))
        os.utime(out / "ckpt.pt", (checkpoint_at, checkpoint_at))
    block = {"framework": "pytorch", "checkpoint_dir": str(out), "signal": "USR1", "signal_to": "steps"}
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": time.time(),
                                               "adopted": {"script": "/home/alice/train.sbatch",
                                                           "resilience": block}}))
    return path


def _attempt(state: str, gpus: int = 8, cost: float = 80.0) -> Attempt:
    return Attempt("c", 81, "2026-12-01T10:00:00", "2026-12-01T11:00:00", "2026-12-01T10:00:00", "nanogpt", "n",
                   "alice", "vision", "h100-spot", "h100" if gpus else "", gpus, 1, 3600, 7200, state, "0:0", 0,
                   cost_usd=cost)


def test_the_record_names_the_programs_own_checkpoint_and_the_loss_since_it_is_counted(tmp_path):
    saved = datetime(2026, 12, 1, 10, 45).timestamp()  # 15 minutes before the attempt ended
    path = _adopted_run(tmp_path, saved)
    facts = read_run_facts(str(path), path.name)
    assert facts["last_checkpoint_step"] == 1300 and facts["last_checkpoint_time"] == pytest.approx(saved)
    wasted = assess_waste(_attempt("PREEMPTED"), {**facts, "drain_requested": False})
    assert wasted.last_ckpt_step == 1300 and wasted.waste_cause == "lost-since-checkpoint"
    assert wasted.waste_gpu_hours == pytest.approx(8 * 0.25) and wasted.waste_usd == pytest.approx(20.0)


def test_without_a_checkpoint_of_its_own_the_whole_attempt_is_lost(tmp_path):
    path = _adopted_run(tmp_path, None)
    facts = read_run_facts(str(path), path.name)
    assert "last_checkpoint_step" not in facts
    wasted = assess_waste(_attempt("FAILED"), facts)
    assert wasted.waste_cause == "failed-before-checkpoint" and wasted.waste_usd == pytest.approx(80.0)


def test_an_unacknowledged_cancel_and_a_cpu_only_loss_count(tmp_path):
    saved = datetime(2026, 12, 1, 10, 30).timestamp()
    facts = read_run_facts(str(_adopted_run(tmp_path, saved)), "nanogpt-20261201-abcd")
    cancelled = assess_waste(_attempt("CANCELLED"), {**facts, "drain_requested": True, "drain_acknowledged": False})
    assert cancelled.waste_cause == "drain-unacknowledged" and cancelled.waste_usd == pytest.approx(40.0)
    saved_in_time = assess_waste(_attempt("CANCELLED"), {**facts, "drain_requested": True,
                                                        "drain_acknowledged": True})
    assert saved_in_time.waste_usd == 0
    cpu = assess_waste(_attempt("PREEMPTED", gpus=0, cost=0.06), facts)
    assert cpu.waste_usd == pytest.approx(0.03) and cpu.waste_gpu_hours == 0


def test_a_cancel_that_lost_steps_counts_them_as_waste(tmp_path):
    """`cancel --now` (no drain): the run records the steps lost since the checkpoint the next start
    restores; the attempt's time since that checkpoint is waste, as for a kill."""
    saved = datetime(2026, 12, 1, 10, 45).timestamp()
    path = _adopted_run(tmp_path, saved)
    with open(path / "attempts.jsonl", "a") as fh:
        for event in ({"event": "start", "job_id": 81, "restart_count": 0},
                      {"event": "cancel-result", "job_id": 81, "last_step": 148, "checkpoint_step": 140,
                       "steps_lost": 8}):
            fh.write(json.dumps(event) + "\n")
    from slurmctl.rundir import Run

    assert Run(path.name, path).lost_on_cancel_attempts() == {(81, 0)}
    facts = read_run_facts(str(path), path.name)
    before = assess_waste(_attempt("CANCELLED"), {**facts, "drain_requested": False})
    assert before.waste_usd == 0  # a cancel alone loses nothing the program saved
    lost = assess_waste(_attempt("CANCELLED"), {**facts, "drain_requested": False, "lost_on_cancel": True})
    assert lost.waste_cause == "lost-on-cancel" and lost.waste_usd == pytest.approx(20.0)
    assert lost.waste_gpu_hours == pytest.approx(8 * 0.25)


def test_an_adopted_programs_attempt_end_names_its_own_checkpoint(tmp_path, monkeypatch, capsys):
    """A finished attempt of a program with its own checkpoint (ckpt.pt at iter 1300) is not 'no checkpoint'."""
    from slurmctl.runtime import attempt
    from slurmctl.slurm.client import SlurmClient

    from .fakes import ReplayRunner

    path = _adopted_run(tmp_path, time.time())
    monkeypatch.setenv("SLURM_JOB_ID", "81")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    monkeypatch.setenv("SLURMCTL_ADOPTED", "1")  # the adopt wrapper's
    attempt.start(path)
    (path / "logs").mkdir(exist_ok=True)
    attempt.end(path, SlurmClient(ReplayRunner({})), 0)
    ends = [json.loads(line) for line in (path / "attempts.jsonl").read_text().splitlines()
            if json.loads(line).get("event") == "end"]
    assert ends and ends[-1]["checkpoint_step"] == 1300


def _captured_run(tmp_path, monkeypatch, fixture: str, run_id: str):
    """The run dir (attempts.jsonl, its cost-records copies) and a client replaying the sacct of a run
    captured on the local cluster (tests/fixtures/slurm/capture_run_cost.py), the full argv matched."""
    from slurmctl.rundir import Run
    from slurmctl.slurm.client import SlurmClient

    from .fakes import ReplayRunner, pin_seal

    captured = json.loads((Path(__file__).parents[1] / "fixtures" / "adopted" / fixture).read_text())
    pin_seal(monkeypatch, captured["seal"])
    path = tmp_path / run_id
    (path / "cost-records").mkdir(parents=True)
    for record in captured["cost_records"]:
        name = f"{record['job_id']}.{record['restart_count']}.{int(record['start_time'] or 0)}.json"
        (path / "cost-records" / name).write_text(json.dumps(record))
    (path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in captured["events"]))
    runner = ReplayRunner({tuple(captured["sacct"]["argv"]): captured["sacct"]["stdout"]})
    runner.strict = True  # any other Slurm call fails the test
    return Run(path.name, path), SlurmClient(runner)


def _run_cost(run, client, site, job_id):
    from slurmctl.ops.accounting import run_cost

    return run_cost([run.run_id], [job_id], site, client, [run.cost_records_dir], run.drain_acknowledged_attempts(),
                    run.lost_on_cancel_attempts(), run.attempt_ends())


def test_cost_reads_each_attempt_of_a_preempted_and_drained_lightning_run_as_status_does(tmp_path, local_site,
                                                                                       monkeypatch):
    """Replayed from a Lightning run on the local cluster (sacct, the epilog's records, attempts.jsonl): its
    second attempt was preempted during start-up, before any save of its own (Slurm: REQUEUED, exit 138;
    status: preempted), so cost calls it preempted, not failed; its drained cancel's 4 steps past the save
    ran in under accounting's one second, so they price at nothing and name no cause."""
    run, client = _captured_run(tmp_path, monkeypatch, "lightning_preempted_at_startup.json", "lit-ddp-20261202-17df")
    assert {k for k, e in run.attempt_ends().items() if e["outcome"] == "preemption"} == {(5365, 0), (5365, 1)}
    site = local_site.model_copy(update={"cost_records_dir": ""})  # this run's own copies only
    saved, startup, cancelled = _run_cost(run, client, site, 5365).attempts
    assert startup.state == "REQUEUED" and startup.waste_cause == "preempted-before-checkpoint"
    assert startup.cost_usd > 0 and startup.waste_usd == pytest.approx(startup.cost_usd)
    assert (cancelled.state, cancelled.waste_usd, cancelled.waste_cause) == ("CANCELLED", 0, "")
    assert (saved.waste_usd, saved.waste_cause) == (0, "")  # preempted just after its save


def test_a_requeued_attempts_exit_code_is_the_runs_own_not_slurms_0_0(tmp_path, local_site, monkeypatch):
    """Slurm records each requeued attempt of the Lightning run REQUEUED 0:0 (it ended them itself); the
    run's own end records say how they ended: the batch script's 143 (SIGTERM, after its save) and 138
    (died of its signal in start-up). The cancelled attempt, of which the run recorded no end, has no exit
    code rather than Slurm's 0:0."""
    run, client = _captured_run(tmp_path, monkeypatch, "lightning_preempted_at_startup.json", "lit-ddp-20261202-17df")
    site = local_site.model_copy(update={"cost_records_dir": ""})
    attempts = _run_cost(run, client, site, 5365).attempts
    assert [(a.state, a.exit_code) for a in attempts] == [("REQUEUED", "143:0"), ("REQUEUED", "138:0"),
                                                           ("CANCELLED", "")]
    assert client.runner.calls == [json.loads((Path(__file__).parents[1] / "fixtures" / "adopted" /
                                               "lightning_preempted_at_startup.json").read_text())["sacct"]["argv"]]


def test_a_drain_unacknowledged_with_no_step_lost_is_the_drains_grace_not_lost_work(tmp_path, local_site,
                                                                                  monkeypatch):
    """Replayed from an HF Trainer run on the local cluster, preempted twice without acknowledging its drain:
    one step past its checkpoint 550 (1 step lost), then right after its checkpoint 1100 (0 lost). The time
    after each checkpoint was the preemption's grace the program sat out, not work lost: drain-grace, and
    the note says so; Slurm's 0:0 gives way to the batch script's own 143."""
    run, client = _captured_run(tmp_path, monkeypatch, "hf_trainer_preempted_in_grace.json", "hf-clm-20261202-c5a3")
    site = local_site.model_copy(update={"cost_records_dir": ""})
    result = _run_cost(run, client, site, 5826)
    first, second = result.attempts  # the third record never started: no allocation, not an attempt
    for attempt, step in ((first, 550), (second, 1100)):
        assert (attempt.state, attempt.drain_requested, attempt.drain_acked) == ("PREEMPTED", 1, 0)
        assert attempt.last_ckpt_step == step and attempt.exit_code == "143:0"
        assert attempt.waste_cause == "drain-grace" and 0 < attempt.waste_usd < attempt.cost_usd
    # 39 s (04:21:16.96 -> 04:21:56) and 46 s (04:23:06.19 -> 04:23:53) after the saves, on 2 GPUs
    assert first.waste_gpu_hours == pytest.approx(2 * 39 / 3600)
    assert second.waste_gpu_hours == pytest.approx(2 * 46 / 3600)
    told = " ".join(result.notes)
    assert "work since the last checkpoint was lost" not in told, told
    assert "job 5826: a drain was requested but never acknowledged, yet at most the step in flight was lost since " \
           "checkpoint step 1100: the time after it was the drain's grace" in told, told


def test_a_drain_unacknowledged_that_lost_steps_is_still_said_so(tmp_path, local_site, monkeypatch):
    """The same run, had its program gone on training through the grace (its end record: 40 steps lost):
    the work since the checkpoint was lost because the drain was never acknowledged."""
    run, client = _captured_run(tmp_path, monkeypatch, "hf_trainer_preempted_in_grace.json", "hf-clm-20261202-c5a3")
    events = [json.loads(line) for line in (run.path / "attempts.jsonl").read_text().splitlines()]
    for e in events:
        if e["event"] == "end":
            e["steps_lost"] = 40
    (run.path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    result = _run_cost(run, client, local_site.model_copy(update={"cost_records_dir": ""}), 5826)
    assert [a.waste_cause for a in result.attempts] == ["drain-unacknowledged"] * 2
    assert "job 5826: a drain was requested but never acknowledged; work since the last checkpoint was lost." \
        in result.notes
