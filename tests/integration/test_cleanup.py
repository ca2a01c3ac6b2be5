"""The orphan sweeper releases a placeholder held for a failed run with no checkpoint, and keeps
one whose run can still resume from a valid checkpoint."""

import json
import shutil
import subprocess
import time
import uuid

from slurmctl.runtime.checkpoint import CheckpointManager

from .conftest import slurmctl_json


def make_failed_run(runs_root, name: str, with_checkpoint: bool):
    run_id = f"{name}-{uuid.uuid4().hex[:6]}"
    path = runs_root / run_id
    (path / "logs").mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"run_id": run_id, "name": name, "created": time.time()}))
    (path / "run.yaml").write_text(f"name: {name}\nentrypoint: train.py\npartition: l4-dev\n")
    (path / "attempts.jsonl").write_text(json.dumps({"event": "end", "job_id": 1, "exit_code": 1}) + "\n")
    if with_checkpoint:
        CheckpointManager(path / "checkpoints").save(10, lambda d: (d / "state.pt").write_text("x"))
    held = subprocess.run(["sbatch", "--parsable", "--hold", "-p", "l4-dev", f"--job-name={run_id}",
                           f"--comment=slurmctl:{run_id}", "-o", "/dev/null", "--wrap", "true"],
                          capture_output=True, text=True, check=True)
    return run_id, int(held.stdout.strip())


def test_sweeper_releases_the_placeholder_of_a_failed_run_without_checkpoint(cluster):
    runs_root = cluster.runs_root_path
    dead, dead_job = make_failed_run(runs_root, "sweep-dead", with_checkpoint=False)
    alive, alive_job = make_failed_run(runs_root, "sweep-ckpt", with_checkpoint=True)
    try:
        listing = slurmctl_json("cleanup", "--run", dead)
        assert not listing["applied"]
        assert [(o["kind"], o["job_id"]) for o in listing["orphans"]] == [("held-job", dead_job)]
        assert "no valid checkpoint" in listing["orphans"][0]["reason"]
        assert slurmctl_json("cleanup", "--run", alive)["orphans"] == []

        applied = slurmctl_json("cleanup", "--run", dead, "--apply")
        assert applied["orphans"][0]["released"] is True
        state = subprocess.run(["squeue", "-h", "-j", str(dead_job), "-o", "%T"], capture_output=True, text=True)
        assert state.stdout.strip() in ("", "CANCELLED")
        state = subprocess.run(["squeue", "-h", "-j", str(alive_job), "-o", "%T"], capture_output=True, text=True)
        assert state.stdout.strip() == "PENDING"
    finally:
        subprocess.run(["scancel", str(dead_job), str(alive_job)], capture_output=True)
        for run_id in (dead, alive):  # fabricated runs must not show up in other people's `slurmctl ls`
            shutil.rmtree(runs_root / run_id, ignore_errors=True)
