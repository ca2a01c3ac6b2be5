"""Status of adopted programs and plain jobs: a cancel the user asked for reads `cancelled` however Slurm
saw the job end (killed by the drain signal it was sent: FAILED; requeued by the program itself before:
accounting's REQUEUED), with the program's newest checkpoint; advice in the script's words, not run.yaml's."""

import json
import pickle
import time
import zipfile

from slurmctl.observe.adopted import in_script_words
from slurmctl.observe.status import build_status
from slurmctl.rundir import Run
from slurmctl.slurm.client import Job


def _adopted_run(tmp_path, job_id: int, *events: dict) -> Run:
    path = tmp_path / "nanogpt-20261201-abcd"
    (path / "logs").mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir(parents=True)
    with zipfile.ZipFile(out / "ckpt.pt", "w") as archive:  # laid out as torch.save writes it
        archive.writestr("ckpt/data.pkl", pickle.dumps({"iter_num": 40, "model": {}}, protocol=2))
    block = {"framework": "pytorch", "checkpoint_dir": str(out), "signal": "USR1", "signal_to": "steps",
             "step_pattern": None}
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": time.time(),
                                               "adopted": {"script": str(tmp_path / "train.sbatch"),
                                                           "resilience": block}}))
    lines = [{"event": "submitted", "job_id": job_id}, {"event": "start", "job_id": job_id, "time": 1.0}, *events]
    (path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    (path / "logs" / f"{job_id}.out").write_text("iter 40: loss 2.1\nsrun: error: task 0: User defined signal 1\n")
    return Run(path.name, path)


CANCEL = {"event": "cancel-requested", "job_id": 81, "drain": "unacknowledged", "time": 2.0}


def test_a_program_killed_by_its_drain_signal_reads_cancelled_with_its_checkpoint(tmp_path):
    run = _adopted_run(tmp_path, 81, {"event": "drain-requested", "job_id": 81, "reason": "cancel"}, CANCEL)
    job = Job(job_id=81, state="FAILED", exit_code="138:0", elapsed_seconds=30, source="sacct")
    status = build_status(run, job)
    assert status.phase == "cancelled" and status.diagnosis is None
    assert "ckpt.pt (step 40)" in status.headline and "slurmctl resume" in status.action
    assert "run.yaml" not in status.action and "sbatch script" not in status.action, status.action
    assert any("FAILED" in d for d in status.details)


def test_a_job_that_requeued_itself_before_the_cancel_reads_cancelled(tmp_path):
    run = _adopted_run(tmp_path, 81, CANCEL)
    status = build_status(run, Job(job_id=81, state="REQUEUED", source="sacct"))
    assert status.phase == "cancelled"


def test_without_a_cancel_request_the_job_keeps_slurms_word(tmp_path):
    run = _adopted_run(tmp_path, 81)
    assert build_status(run, Job(job_id=81, state="FAILED", exit_code="1:0", source="sacct")).phase == "failed"
    assert build_status(run, Job(job_id=81, state="REQUEUED")).phase == "requeued"
    # a cancel requested, but the job still in the queue: not over yet
    run = _adopted_run(tmp_path / "b", 81, CANCEL)
    assert build_status(run, Job(job_id=81, state="RUNNING")).phase == "training"


def test_advice_for_an_adopted_run_names_the_script_not_run_yaml(tmp_path):
    run = _adopted_run(tmp_path, 81)
    status = build_status(run, Job(job_id=81, state="TIMEOUT", exit_code="0:0", source="sacct"))
    said = " ".join([status.action, status.headline, *status.details, *status.suggestions,
                     (status.diagnosis or {}).get("hint", "")])
    assert "run.yaml" not in said and "#SBATCH --time" in said and "slurmctl adopt" in said
    assert in_script_words("Resume (`slurmctl submit` again), or raise `time_limit` in run.yaml.",
                           "`slurmctl resume r`") == ("Resume (`slurmctl resume r`), or raise `#SBATCH --time` in the "
                                                      "script. Then run the script again with `slurmctl adopt SCRIPT`.")


def test_a_cancelled_program_without_a_checkpoint_is_told_to_adopt_again_not_resume(tmp_path):
    run = _adopted_run(tmp_path, 81, CANCEL)
    (tmp_path / "out" / "ckpt.pt").unlink()  # it never saved
    status = build_status(run, Job(job_id=81, state="CANCELLED", source="sacct"))
    assert status.phase == "cancelled" and "slurmctl resume" in status.action and "would refuse" in status.action
    assert "slurmctl adopt" in status.action and "train.sbatch" in status.action, status.action
    # the history line of the cancelled attempt says so, not "running" or "no end record"
    assert status.history[-1].endswith("; cancelled on request (`slurmctl cancel`)"), status.history


def test_progress_is_read_from_the_checkpoints_when_they_are_newer_than_the_output(tmp_path):
    run = _adopted_run(tmp_path, 81)
    with zipfile.ZipFile(tmp_path / "out" / "ckpt.pt", "w") as archive:  # saved on to 1180; the output says 40
        archive.writestr("ckpt/data.pkl", pickle.dumps({"iter_num": 1180, "model": {}}, protocol=2))
    status = build_status(run, Job(job_id=81, state="RUNNING"))
    assert status.last_step == 1180 and "Last progress in its newest checkpoint: step 1180." in status.details


def test_advice_in_script_words_has_no_run_yaml_field_left():
    from slurmctl.observe.diagnosis_rules import SIGNATURES
    from slurmctl.observe.explain import explain_state

    hints = [sig.hint for sig in SIGNATURES] + [explain_state("COMPLETED").action]
    for hint in hints:
        said = in_script_words(hint, "`slurmctl resume r`")
        for term in ("run.yaml", "`args:`", "`workdir`", "config_files:", "run directory"):
            assert term not in said, (term, said)
    completed = in_script_words(explain_state("COMPLETED").action, "`slurmctl resume r`")
    assert completed == "Nothing to do; results are where the script writes them."


def test_a_completed_job_is_not_told_to_make_its_script_exit_0():
    from slurmctl.observe.diagnose import diagnose_text

    assert diagnose_text("step 9 loss 1.0\n", "COMPLETED", "0:0").hint == "Nothing to fix."


def test_an_adopted_run_shows_the_gpus_its_script_asked_for(tmp_path):
    run = _adopted_run(tmp_path, 81)
    meta = json.loads((run.path / "run.json").read_text())
    meta["adopted"]["shape"] = {"nodes": "2", "gres": "gpu:h100:2", "gpus_total": 4}
    (run.path / "run.json").write_text(json.dumps(meta))
    assert build_status(Run(run.run_id, run.path), Job(job_id=81, state="RUNNING")).gpus == 4
