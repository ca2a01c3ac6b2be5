"""status tells the run's story on the real cluster: a run whose training crashes after a checkpoint
is requeued by the runtime; while it waits `status` says "requeued after crash" (not "queued") with
the steps lost; cancelled while it waits (sacct then keeps only the REQUEUED record of the job), it
is shown as cancelled with a resume hint, not as "requeued" forever."""

import time

from .conftest import as_user, slurmctl, slurmctl_json
from .test_reliability import submit, wait_for_event


def _wait_status(run_id: str, check, timeout: float = 90, poll: float = 1.0) -> dict:
    deadline = time.monotonic() + timeout
    status = {}
    while time.monotonic() < deadline:
        status = slurmctl_json("status", run_id)
        if check(status):
            return status
        time.sleep(poll)
    raise AssertionError(f"status of {run_id} never matched: {status}")


def test_requeued_after_a_crash_then_cancelled_while_waiting(workdir):
    # a crash that goes through a Slurm requeue: in-allocation restart turned off
    run = submit(workdir, "faults-story", ["--crash-at", "8", "--sleep", "0.05"], max_restarts=2,
                 env={"SLURMCTL_RESTART_IN_ALLOCATION": "0"})
    try:
        end = wait_for_event(run["run_dir"], "end", 1)[0]
        assert (end["outcome"], end["action"], end["last_step"], end["steps_lost"]) == ("failed", "requeue", 8, 3)
        waiting = _wait_status(run["run_id"], lambda s: s["state"] == "PENDING", poll=0.2)
        # cancelled at once: the requeue expediter gives the job back its start within seconds
        as_user("alice").scancel(run["job_id"])
        assert waiting["phase"] == "requeued after crash", waiting
        assert waiting["why"].startswith("Requeued after crash at step 8, 3 steps lost; it restarts from "
                                         "checkpoint step 5"), waiting["why"]
        (line,) = waiting["history"]
        assert line.startswith("attempt 1 (job ") and "crashed (exit code " in line, line
        assert "at step 8, newest checkpoint 5, 3 steps lost" in line, line
        shown = slurmctl("status", run["run_id"]).stdout
        assert "History:" in shown and "requeued (new Slurm attempt)" in shown
    finally:
        as_user("alice").scancel(run["job_id"])
    gone = _wait_status(run["run_id"], lambda s: s["phase"] != "requeued after crash"
                        and s["state"] not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"))
    assert gone["phase"] == "cancelled", gone
    assert gone["headline"].startswith("Cancelled while waiting to restart after crash"), gone["headline"]
    assert f"slurmctl resume {run['run_id']}" in gone["action"] and "checkpoint step 5" in gone["action"]
