"""Cost records under requeues, on the real cluster: one run of alice's is requeued by a crash, by a
preemption (bob's on-demand job takes her spot node) and by its time limit, and the epilog must leave
exactly one record per attempt, the same attempts `sacct --duplicates` lists.

Records are keyed by the attempt's identity (job id, restart count, start time): the epilog of an
attempt that was preempted already sees the next restart count, so a key of the restart count alone
let the next attempt's epilog overwrite the previous record and `slurmctl cost` said "no epilog
record (node lost?)" for an attempt whose node was fine.
"""

import json
import subprocess
import time
from pathlib import Path

from slurmctl.ops.hooks.records import read_records

from .conftest import as_user, slurmctl, slurmctl_json, start_requeued_now, wait_for_state
from .test_reliability import ENDED, events, submit, wait_for_event
from .test_root_side import SPOOL


def _sacct_attempts(job_id: int, count: int, timeout: float = 90) -> list[list[str]]:
    """sacct's allocation rows of every attempt (--duplicates) once `count` of them have ended."""
    deadline = time.monotonic() + timeout
    rows: list[list[str]] = []
    while time.monotonic() < deadline:
        out = subprocess.run(["sacct", "-X", "--duplicates", "-n", "-P", "-o", "JobID,Start,End,State",
                              "-j", str(job_id)], capture_output=True, text=True, timeout=60).stdout
        rows = [line.split("|") for line in out.splitlines() if line.strip()]
        if len(rows) >= count and all(r[2] not in {"Unknown", ""} for r in rows):
            return rows
        time.sleep(1)
    raise AssertionError(f"sacct did not show {count} ended attempts of job {job_id}: {rows}")


def _records(job_id: int, count: int, timeout: float = 30) -> list:
    """The spool's records of `job_id` once `count` are there (the last epilog may still be writing)."""
    deadline = time.monotonic() + timeout
    mine: list = []
    while time.monotonic() < deadline:
        mine = [r for r in read_records(SPOOL) if r.job_id == job_id]
        if len(mine) >= count:
            return mine
        time.sleep(0.5)
    return mine


def test_crash_preemption_and_time_limit_leave_one_cost_record_per_attempt(workdir):
    # USR1@100 of a 3-minute limit comes 50-80 s into each allocation (slurmctld checks signals every
    # ~30 s): 1200 steps of 0.1 s need more than one allocation after the crash and the preemption,
    # so the limit drains at least one attempt.
    run = submit(workdir, "faults-records", ["--steps", "1200", "--sleep", "0.1", "--crash-at", "12", "--crash-once"],
                 partition="h100-spot", gpus_per_node=8, procs_per_node=1, time_limit="3m", max_restarts=8,
                 checkpoint={"interval_steps": 10}, env={"SLURMCTL_RESTART_IN_ALLOCATION": "0"},
                 sbatch=("--nodelist=h100-3", "--signal=B:USR1@100"))
    job_id, run_dir = run["job_id"], run["run_dir"]
    bob, preemptor = as_user("bob"), None
    try:
        first = wait_for_event(run_dir, "end", 1, timeout=120)[0]
        assert (first["outcome"], first["action"]) == ("failed", "requeue"), first
        start_requeued_now(job_id, restarts=1)
        # second attempt: preempted once it has a checkpoint of its own (step 19)
        ck_root = Path(run_dir) / "checkpoints"
        deadline = time.monotonic() + 120
        while not (ck_root / "checkpoint-19" / ".complete").exists():
            assert time.monotonic() < deadline, "the second attempt never checkpointed step 19"
            time.sleep(0.3)
        preemptor = bob.sbatch("-p", "h100-ondemand", "-w", "h100-3", "--gres=gpu:h100:8", "-t", "1",
                               "-J", "faults-preemptor", "-o", "/dev/null", "--wrap", "sleep 2")
        second = wait_for_event(run_dir, "end", 2, timeout=120)[1]
        assert (second["outcome"], second["action"]) == ("preemption", "requeue"), second
        ends = [first, second]
        while ends[-1]["action"] == "requeue":  # the time limit drains an allocation until the run is done
            start_requeued_now(job_id, restarts=len(ends))
            ends = wait_for_event(run_dir, "end", len(ends) + 1, timeout=240)
        status = wait_for_state(run["run_id"], ENDED, timeout=60)
    finally:
        bob.scancel(preemptor)
        if slurmctl_json("status", run["run_id"])["state"] not in ENDED:
            slurmctl("cancel", run["run_id"], "--now", check=False)
    assert status["state"] == "COMPLETED", slurmctl("logs", run["run_id"], "-n", "0").stdout
    outcomes = [e["outcome"] for e in ends]
    # every attempt logged its steps, but a last one that found the training already done: a time-limit drain
    # that reaches the program during its final steps goes unacknowledged (it finished instead), so the run
    # is requeued from that final checkpoint and the next attempt ends at once, with no step of its own
    finished_at_once = ends[-1]["outcome"] == "completed" and ends[-1].get("last_step") is None
    assert all(e.get("last_step") is not None and e.get("steps_lost") is not None
               for e in (ends[:-1] if finished_at_once else ends)), ends
    assert ends[1]["steps_lost"] == 0 and ends[0]["steps_lost"] == 12 - 9, ends[:2]  # drained vs crashed
    assert "time-limit" in outcomes[2:], outcomes

    attempts = _sacct_attempts(job_id, len(ends))
    assert len(attempts) == len(ends) == len(events(run_dir, "start")), (attempts, ends)
    records = _records(job_id, len(attempts))
    # exactly one record per sacct attempt, matched by the attempt's start time
    assert len(records) == len(attempts), ([r.filename for r in records], attempts)
    # restart counts 0..n-1 (a requeued attempt's epilog sees the next count), and each known start is
    # its attempt's: Slurm's, or the prolog's clock (within 3 s after sacct's Start) for a requeued
    # attempt, whose epilog used to record the requeue time; none when slurmd skipped the prolog
    records.sort(key=lambda r: r.restart_count)
    assert [r.restart_count for r in records] == list(range(len(attempts))), [r.filename for r in records]
    sacct_starts = sorted(time.mktime(time.strptime(a[1], "%Y-%m-%dT%H:%M:%S")) for a in attempts)
    assert all(r.start_time is None or 0 <= r.start_time - s < 3 for r, s in zip(records, sacct_starts)), \
        ([r.start_time for r in records], sacct_starts)
    assert records[-1].start_time == sacct_starts[-1]  # the last attempt: Slurm's own start
    assert len({r.filename for r in records}) == len(records)
    # the run's own copies (what alice's `slurmctl cost` reads) agree, and cost finds every attempt's record
    copies = sorted(p.name for p in (Path(run_dir) / "cost-records").glob(f"{job_id}.*.json"))
    assert copies == sorted(r.filename for r in records)
    cost = slurmctl_json("cost", run["run_id"])
    assert len(cost["attempts"]) == len(attempts)
    assert all(a["epilog_record"] == 1 for a in cost["attempts"]), cost["attempts"]
    assert not any("no epilog record" in n for n in cost["notes"]), cost["notes"]
    print(f"attempts {len(attempts)} ({', '.join(outcomes)}), records {len(records)}: "
          + json.dumps(sorted(r.filename for r in records)))
