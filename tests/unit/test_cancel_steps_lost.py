"""`cancel` of an adopted Lightning program reports the steps it lost: the last step it logged past the
step of the checkpoint its next start restores (Lightning's hpc_ckpt, laid out as torch.save writes
it, with the Trainer's global_step); the run's story keeps it."""

import json
import pickle
import time
import zipfile

from slurmctl.control.adopted import _steps_lost
from slurmctl.control.cancel import CancelResult
from slurmctl.observe.story import story
from slurmctl.rundir import Run
from slurmctl.runtime.adapters import Resilience


def _run(tmp_path, saved_step: int | None) -> tuple[Run, Resilience]:
    path = tmp_path / "lit-20261201-abcd"
    (path / "logs").mkdir(parents=True)
    out = tmp_path / "lightning_out"
    out.mkdir()
    if saved_step is not None:
        with zipfile.ZipFile(out / "hpc_ckpt_1.ckpt", "w") as archive:
            archive.writestr("hpc_ckpt_1/data.pkl",
                             pickle.dumps({"global_step": saved_step, "state_dict": {}}, protocol=2))
    block = Resilience("lightning", str(out), signal="USR1", signal_to="steps")
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": time.time(),
                                               "adopted": {"script": "/home/alice/l.sbatch",
                                                           "resilience": block.to_dict()}}))
    events = [{"event": "submitted", "job_id": 81}, {"event": "start", "job_id": 81, "restart_count": 0,
                                                     "nodes": "h100-[1-2]", "time": time.time() - 100},
              {"event": "cancel-requested", "job_id": 81, "drain": "unacknowledged"}]
    (path / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (path / "logs" / "81.out").write_text("slurmctl: attempt 0 of job 81 starting on h100-[1-2]\n"
                                          + "".join(f"step {s} loss 0.98\n" for s in range(0, 60, 5)))
    return Run(path.name, path), block


def test_cancel_reports_the_steps_lightning_lost_and_the_story_keeps_them(tmp_path):
    run, block = _run(tmp_path, 40)
    result = CancelResult(run.run_id, 81, "CANCELLED", True, 1.0, drain="unacknowledged")
    _steps_lost(run, 81, block, result)
    assert (result.last_step, result.kept_step, result.steps_lost) == (55, 40, 15)
    (line,) = story(run.events())
    assert line.endswith("cancelled on request (`slurmctl cancel`) at step 55, newest checkpoint 40, 15 steps lost")


def test_without_a_checkpoint_every_step_is_lost(tmp_path):
    run, block = _run(tmp_path, None)
    result = CancelResult(run.run_id, 81, "CANCELLED", True, 1.0)
    _steps_lost(run, 81, block, result)
    assert (result.kept_step, result.steps_lost) == (None, 56)
