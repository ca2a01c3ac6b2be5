"""A checkpoint the filesystem refuses, for real: a training process under a file size limit
(RLIMIT_FSIZE, what `ulimit -f` sets; no root, no mount) saves a small checkpoint, then one too large.
The failed save raises CheckpointSaveFailed (the training catches it and keeps stepping), leaves no
partial directory, `latest` stays the previous checkpoint, the failure is noted in attempts.jsonl and
`status` shows it until a later save succeeds."""

import json
import subprocess
import sys
import textwrap
import time

from slurmctl.observe.status import build_status
from slurmctl.slurm.client import Job

from .test_status_observe import _run

TRAINING = textwrap.dedent("""
    import json, resource, sys
    from slurmctl.runtime import Runtime
    from slurmctl.errors import CheckpointSaveFailed

    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))  # ulimit -f 256
    rt = Runtime.from_env(handle_sigterm=False)
    rt.checkpoints.save(10, lambda d: (d / "state.bin").write_bytes(b"x" * 1024))
    try:
        rt.checkpoints.save(20, lambda d: (d / "state.bin").write_bytes(b"x" * (1024 * 1024)))
    except CheckpointSaveFailed as exc:  # the training is told and goes on
        print(json.dumps({"step": exc.step, "disk_full": exc.disk_full, "reason": exc.reason,
                          "previous": exc.previous.step, "message": str(exc)}))
    rt.log(25, loss=0.5)
    sys.exit(0)
""")


def test_a_save_over_the_file_size_limit_fails_cleanly_and_status_shows_it(tmp_path):
    run = _run(tmp_path, "r", 7)
    env = {"SLURMCTL_RUN_DIR": str(run.path), "SLURM_JOB_ID": "7", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", TRAINING], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    told = json.loads(done.stdout)
    assert (told["step"], told["disk_full"], told["previous"]) == (20, True, 10)
    assert told["reason"] == "file size limit reached"
    assert "checkpoint step 10 is still the latest" in told["message"]
    ck_root = run.path / "checkpoints"
    assert sorted(p.name for p in ck_root.iterdir()) == ["checkpoint-10", "latest"]  # no partial tmp or dir
    assert (ck_root / "latest").read_text().strip() == "checkpoint-10"
    (failure,) = [e for e in run.events() if e.get("event") == "checkpoint-failed"]
    assert (failure["step"], failure["previous_step"], failure["job_id"]) == (20, 10, 7)

    status = build_status(run, Job(job_id=7, name="r", state="RUNNING"))
    assert status.latest_checkpoint_step == 10 and status.phase == "training"
    assert status.health == "checkpoint failing: file size limit reached"
    assert any(d.startswith("CHECKPOINT FAILED at step 20") and "checkpoint step 10 is still" in d
               for d in status.details), status.details
    # a later save succeeds: the failure is history, not health
    from slurmctl.runtime.checkpoint import CheckpointManager

    time.sleep(0.05)
    CheckpointManager(ck_root).save(30, lambda d: (d / "state.bin").write_bytes(b"y"))
    again = build_status(run, Job(job_id=7, name="r", state="RUNNING"))
    assert again.health == "ok" and not any("CHECKPOINT FAILED" in d for d in again.details)


def test_async_save_failure_is_raised_at_wait_as_the_same_error(tmp_path):
    import errno

    from slurmctl.errors import CheckpointSaveFailed
    from slurmctl.runtime.checkpoint import CheckpointManager

    mgr = CheckpointManager(tmp_path / "ck")
    seen = []
    mgr.on_failure = seen.append
    mgr.save(1, lambda d: (d / "a").write_text("1"))

    def full(directory):
        (directory / "part").write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device", str(directory / "part"))

    mgr.save_async(2, full)
    try:
        mgr.wait()
    except CheckpointSaveFailed as exc:
        assert exc.disk_full and exc.reason == "disk full" and exc.previous.step == 1
    else:
        raise AssertionError("the failed background save was not raised")
    assert seen and seen[0].step == 2
    assert mgr.latest().step == 1 and not (tmp_path / "ck" / "checkpoint-2.tmp").exists()
