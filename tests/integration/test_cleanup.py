"""The orphan sweeper releases a placeholder held for a failed run with no checkpoint, and keeps
one whose run can still resume from a valid checkpoint. The runs and held jobs are alice's; the
sweeper runs as root, as the cron does."""

import json
import shutil
import subprocess
import time

from slurmctl.rundir import new_run_id
from slurmctl.runtime.checkpoint import CheckpointManager

from .conftest import User, give, slurmctl_json


def make_failed_run(owner: User, name: str, with_checkpoint: bool):
    """A run that ended without success in the owner's runs root, plus a held placeholder job of theirs."""
    run_id = new_run_id(name)
    path = owner.runs_root / run_id
    (path / "logs").mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"run_id": run_id, "name": name, "created": time.time()}))
    (path / "run.yaml").write_text(f"name: {name}\nentrypoint: train.py\npartition: l4-dev\n")
    (path / "attempts.jsonl").write_text(json.dumps({"event": "end", "job_id": 1, "exit_code": 1}) + "\n")
    if with_checkpoint:
        CheckpointManager(path / "checkpoints").save(10, lambda d: (d / "state.pt").write_text("x"))
    give(path, (owner.uid, owner.gid))
    held = owner.sbatch("--hold", "-p", "l4-dev", f"--job-name={run_id}", f"--comment=slurmctl:{run_id}",
                        "-o", "/dev/null", "--wrap", "true")
    return run_id, held


def test_sweeper_releases_the_placeholder_of_a_failed_run_without_checkpoint(alice):
    dead, dead_job = make_failed_run(alice, "sweep-dead", with_checkpoint=False)
    alive, alive_job = make_failed_run(alice, "sweep-ckpt", with_checkpoint=True)
    try:
        listing = slurmctl_json("cleanup", "--run", dead, user="root")
        assert not listing["applied"]
        assert [(o["kind"], o["job_id"]) for o in listing["orphans"]] == [("held-job", dead_job)]
        assert "no valid checkpoint" in listing["orphans"][0]["reason"]
        assert slurmctl_json("cleanup", "--run", alive, user="root")["orphans"] == []

        applied = slurmctl_json("cleanup", "--run", dead, "--apply", user="root")
        assert applied["orphans"][0]["released"] is True
        state = subprocess.run(["squeue", "-h", "-j", str(dead_job), "-o", "%T"], capture_output=True, text=True)
        assert state.stdout.strip() in ("", "CANCELLED")
        state = subprocess.run(["squeue", "-h", "-j", str(alive_job), "-o", "%T"], capture_output=True, text=True)
        assert state.stdout.strip() == "PENDING"
    finally:
        alice.scancel(dead_job, alive_job)
        for run_id in (dead, alive):  # fabricated runs must not show up in alice's `slurmctl ls`
            shutil.rmtree(alice.runs_root / run_id, ignore_errors=True)
