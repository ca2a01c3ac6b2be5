"""In-allocation restart on the real cluster (the default; run.yaml env SLURMCTL_RESTART_IN_ALLOCATION=0
turns it off): a training that crashes after a checkpoint on a healthy allocation is launched again
by the batch script inside it from its newest checkpoint -- no Slurm requeue, no ~2 minute requeue delay. The
failure cap and the no-progress rule still apply: the second crash at the same checkpoint ends the
run instead of looping."""

import json
import subprocess
from pathlib import Path

from .conftest import slurmctl, slurmctl_json, wait_ended_in_sacct, wait_for_state
from .test_reliability import ENDED, events, submit


def test_a_crash_is_restarted_inside_the_allocation_and_the_loop_is_capped(workdir):
    run = submit(workdir, "faults-inalloc", ["--crash-at", "8", "--sleep", "0.05"], max_restarts=3)
    try:
        status = wait_for_state(run["run_id"], ENDED, timeout=180)
    finally:
        if slurmctl_json("status", run["run_id"])["state"] not in ENDED:
            slurmctl("cancel", run["run_id"], "--now", check=False)
    (restart,) = events(run["run_dir"], "step-restart")
    assert (restart["checkpoint_step"], restart["last_step"], restart["steps_lost"]) == (5, 8, 3), restart
    (end,) = events(run["run_dir"], "end")  # one Slurm attempt: the restart happened inside it
    assert end["action"] == "stop" and "two failures in a row" in end["reason"], end
    assert end["failures"] == 2 and status["state"] == "FAILED"
    assert len(events(run["run_dir"], "start")) == 1
    sacct = subprocess.run(["sacct", "-X", "--duplicates", "-n", "-P", "-o", "JobID", "-j", str(run["job_id"])],
                           capture_output=True, text=True, timeout=60).stdout.split()
    assert len(sacct) == 1, sacct
    # time from the crash being handled to the first new step of the relaunched training
    metrics = [json.loads(line) for line in (Path(run["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    first_new = next(m for m in metrics if m["time"] > restart["time"])
    assert first_new["step"] == 6  # resumed right after checkpoint step 5
    took = first_new["time"] - restart["time"]
    print(f"in-allocation restart: first new step {took:.1f} s after the crash was handled")
    assert took <= 30
    shown = slurmctl_json("status", run["run_id"])
    history = shown["history"]
    assert len(history) == 1 and "restarted in the allocation from checkpoint step 5" in history[0], history
    assert (shown["restarts_in_allocation"], shown["requeues"]) == (1, 0), shown
    # cost: one Slurm attempt, the restart inside it counted apart from Slurm requeues
    wait_ended_in_sacct({run["job_id"]: run["run_id"]})
    cost = slurmctl_json("cost", run["run_id"])
    assert (len(cost["attempts"]), cost["requeues"], cost["restarts_in_allocation"]) == (1, 0, 1), cost
