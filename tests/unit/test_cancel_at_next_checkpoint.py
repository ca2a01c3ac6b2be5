"""`slurmctl cancel RUN --at-next-checkpoint` for an adopted program that saves on no signal (litgpt's
`save_interval`): no signal is sent, its next complete checkpoint of its own acknowledges the drain,
and the job is stopped right after it; without the option such a program is refused at once and the
option is named. Slurm's side is replayed from the argv: squeue lists the job RUNNING until scancel."""

import json
import pickle
import time
import zipfile

import pytest

from slurmctl.control.adopted import cancel_adopted
from slurmctl.errors import SlurmctlError
from slurmctl.rundir import Run
from slurmctl.slurm.client import JOB_INFO, SlurmClient

from .fakes import TEST_SEAL, pin_seal, squeue_output


def _save(out, step: int) -> None:
    folder = out / f"step-{step:08d}"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / "lit_model.pth", "w") as archive:  # laid out as torch.save writes it
        archive.writestr("lit_model/data.pkl", pickle.dumps({"iter_num": step, "model": {}}, protocol=2))


class PeriodicSaver:
    """The cluster as the cancel sees it: job 81 runs until a plain scancel; the program saves step 30
    on its own schedule once the cancel is waiting (after it set Requeue=0)."""

    def __init__(self, out):
        self.out, self.calls, self.running = out, [], True

    def run(self, argv, timeout=60.0):
        from slurmctl.slurm.runner import CommandResult

        self.calls.append(list(argv))
        stdout = ""
        if argv[:2] == ["scontrol", "update"]:
            _save(self.out, 30)
        elif argv[0] == "scancel":
            self.running = False
        elif argv[0] == "squeue" and tuple(argv) == ("squeue", "-h", "-t", "all", "-j", "81",
                                                     *JOB_INFO.format_argv(TEST_SEAL)) and self.running:
            stdout = squeue_output([81, "RUNNING", "0:0", 0, "2026-12-02T02:00:00", "N/A", "h100-1", "h100-[1-2]",
                                    "cpu=2,node=2", "/tmp/o", "/tmp", "lit"])
        return CommandResult(tuple(argv), 0, stdout, "")


class DiesOfTheSignal(PeriodicSaver):
    """Told it saves on USR1, which it does not trap: it saved step 30 on its own schedule while the cancel's
    commands ran (before the signal), then the signal kills it."""

    def run(self, argv, timeout=60.0):
        if argv[0] == "scancel" and any(a.startswith("--signal") for a in argv):
            self.running = False  # killed by the signal, without a save
            self.calls.append(list(argv))
            from slurmctl.slurm.runner import CommandResult

            return CommandResult(tuple(argv), 0, "", "")
        return super().run(argv, timeout)


def _adopted_run(tmp_path, signal=None) -> Run:
    path = tmp_path / "runs" / "lit-20261202-abcd"
    (path / "logs").mkdir(parents=True)
    out = tmp_path / "out"
    _save(out, 20)
    block = {"framework": "pytorch", "checkpoint_dir": str(out), "signal": signal, "signal_to": "steps"}
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": time.time(),
                                               "adopted": {"script": "x", "resilience": block}}))
    (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": 81, "time": 1.0}) + "\n")
    (path / "logs" / "81.out").write_text("slurmctl: attempt 1 of job 81 (Slurm restart 0) starting on h100-1\n"
                                         "Epoch 1 | iter 31 step 31 | loss train: 5.1\n")
    return Run(path.name, path)


def test_the_programs_next_checkpoint_acknowledges_and_no_signal_is_sent(tmp_path, monkeypatch):
    pin_seal(monkeypatch)
    run = _adopted_run(tmp_path)
    runner = PeriodicSaver(tmp_path / "out")
    result = cancel_adopted(run, SlurmClient(runner), at_next_checkpoint=True, poll=0.01, drain_timeout=5)
    assert result.drain == "acknowledged" and result.final_state == "CANCELLED" and result.ok
    assert result.ack_step == 30 and result.ack_checkpoint.endswith("step-00000030/lit_model.pth")
    assert (result.last_step, result.kept_step, result.steps_lost) == (31, 30, 1)
    scancels = [c for c in runner.calls if c[0] == "scancel"]
    assert scancels == [["scancel", "81"]], scancels  # no --signal: the program saves on none
    update = next(c for c in runner.calls if c[:2] == ["scontrol", "update"])
    assert "Requeue=0" in update  # a cancel never restarts the job
    assert json.loads((run.path / "drain.request").read_text())["reason"] == "cancel"


def test_without_the_option_such_a_program_is_refused_at_once_and_the_option_named(tmp_path, monkeypatch):
    pin_seal(monkeypatch)
    run = _adopted_run(tmp_path)
    runner = PeriodicSaver(tmp_path / "out")
    with pytest.raises(SlurmctlError) as refused:
        cancel_adopted(run, SlurmClient(runner), poll=0.01, drain_timeout=5)
    assert "Nothing was cancelled" in refused.value.message and "--at-next-checkpoint" in refused.value.hint
    assert not [c for c in runner.calls if c[0] in {"scancel", "scontrol"}]


def test_a_save_before_the_signal_is_sent_is_no_answer_to_it(tmp_path, monkeypatch):
    pin_seal(monkeypatch)
    run = _adopted_run(tmp_path, signal="USR1")
    runner = DiesOfTheSignal(tmp_path / "out")
    result = cancel_adopted(run, SlurmClient(runner), poll=0.01, drain_timeout=5)
    assert result.drain == "unacknowledged", result
    assert any(c[0] == "scancel" and "--signal=USR1" in c for c in runner.calls), runner.calls
