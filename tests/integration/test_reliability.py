"""Reliability on the real cluster: crash before/after the first checkpoint, restart cap, cancel with
and without an ACK, preemption loop, time-limit drain chaining, resume and fork.

The runs are alice's (bob's on-demand job preempts her spot run). Requeued jobs wait ~120 s in
PENDING(BeginTime); the tests start them at once, as an operator, with `scontrol update JobId=N
StartTime=now` once they have left COMPLETING.
"""

import json
import time
from pathlib import Path

from .conftest import as_user, slurmctl, slurmctl_json, start_requeued_now, wait_for_state, write_run

STEPS_PY = (Path(__file__).parent / "reliability" / "steps.py").read_text()
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def submit(workdir: Path, name: str, args: list[str], *, sbatch: tuple[str, ...] = (), **spec) -> dict:
    fields = {"name": name, "entrypoint": "steps.py", "args": args, "partition": "h100-ondemand",
              "gpus_per_node": 1, "time_limit": "5m", "checkpoint": {"interval_steps": 3}, **spec}
    path = write_run(workdir / name, fields, {"steps.py": STEPS_PY})
    return slurmctl_json("submit", path, *(("--", *sbatch) if sbatch else ()))


def events(run_dir: str, kind: str | None = None) -> list[dict]:
    lines = (Path(run_dir) / "attempts.jsonl").read_text().splitlines()
    found = [json.loads(line) for line in lines]
    return [e for e in found if kind is None or e["event"] == kind]


def wait_for_event(run_dir: str, kind: str, count: int, timeout: float = 90) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = events(run_dir, kind)
        if len(found) >= count:
            return found
        time.sleep(0.5)
    raise AssertionError(f"no {count}x '{kind}' in {run_dir}: {events(run_dir)}")


def test_crash_before_first_checkpoint_fails_at_once_without_requeue(workdir):
    run = submit(workdir, "rel-early-crash", ["--crash-at", "1", "--sleep", "0.05"],
                 checkpoint={"interval_steps": 100})
    status = wait_for_state(run["run_id"], ENDED, timeout=90)
    assert status["state"] == "FAILED"
    (end,) = events(run["run_dir"], "end")
    assert end["action"] == "stop" and "before the first valid checkpoint" in end["reason"]
    assert end["restart_count"] == 0 and end["checkpoint_step"] is None


def test_crash_after_checkpoint_requeues_resumes_and_is_capped_then_resumes_by_hand(workdir):
    run = submit(workdir, "rel-crash", ["--crash-at", "8", "--sleep", "0.05"], max_restarts=1,
                 env={"SLURMCTL_RESTART_IN_ALLOCATION": "0"})  # the Slurm requeue path
    first_end = wait_for_event(run["run_dir"], "end", 1)[0]
    assert (first_end["action"], first_end["checkpoint_step"]) == ("requeue", 5), first_end
    start_requeued_now(run["job_id"])
    status = wait_for_state(run["run_id"], ENDED, timeout=90)
    starts, ends = events(run["run_dir"], "start"), events(run["run_dir"], "end")
    assert [s["restart_count"] for s in starts] == [0, 1] and starts[1]["resume_step"] == 5
    assert ends[1]["action"] == "stop" and "max_restarts=1" in ends[1]["reason"]
    assert status["state"] == "FAILED"
    # `slurmctl resume`: a new job from the newest valid checkpoint of the ended run
    resumed = slurmctl_json("resume", run["run_id"])
    assert resumed["from_step"] == 5 and resumed["job_id"] != run["job_id"]
    restarted = wait_for_event(run["run_dir"], "start", 3)[-1]
    assert restarted["job_id"] == resumed["job_id"] and restarted["resume_step"] == 5
    assert slurmctl_json("cancel", run["run_id"], "--now")["verified"]


def test_cancel_waits_for_the_drain_ack_and_reports_an_ignored_drain(workdir):
    good = submit(workdir, "rel-cancel-ok", ["--steps", "2000", "--sleep", "0.1"])
    deaf = submit(workdir, "rel-cancel-deaf", ["--steps", "2000", "--sleep", "0.1", "--ignore-drain"])
    for run in (good, deaf):
        wait_for_event(run["run_dir"], "start", 1)
    time.sleep(3)  # both are stepping
    ok = slurmctl("cancel", good["run_id"], "--json", "--timeout", "60")
    result = json.loads(ok.stdout)
    assert ok.returncode == 0 and result["drain"] == "acknowledged" and result["verified"], result
    assert (Path(good["run_dir"]) / "checkpoints" / f"checkpoint-{result['ack_step']}" / ".complete").is_file()
    (end,) = events(good["run_dir"], "end")
    assert end["outcome"] == "cancelled" and end["action"] == "stop" and end["drain_acked"]

    bad = slurmctl("cancel", deaf["run_id"], "--timeout", "4", check=False)
    assert bad.returncode != 0 and "DRAIN NOT ACKNOWLEDGED" in bad.stderr, bad.stderr
    assert slurmctl_json("status", deaf["run_id"])["state"] == "CANCELLED"
    assert events(deaf["run_dir"], "drain-unacknowledged")


def test_preempted_spot_run_checkpoints_requeues_and_resumes(workdir):
    """An on-demand job needs the spot run's node: the run drains, is requeued and resumes."""
    run = submit(workdir, "rel-preempt", ["--steps", "150", "--sleep", "0.1"], partition="h100-spot",
                 gpus_per_node=8, procs_per_node=1, checkpoint={"interval_steps": 10},
                 sbatch=("--nodelist=h100-3",))
    ck_root = Path(run["run_dir"]) / "checkpoints"
    deadline = time.monotonic() + 120
    while not (ck_root / "latest").exists():
        assert time.monotonic() < deadline, "the spot run never wrote its first checkpoint"
        time.sleep(0.5)
    bob = as_user("bob")
    job = bob.sbatch("-p", "h100-ondemand", "-w", "h100-3", "--gres=gpu:h100:8", "-t", "1", "-J", "rel-preemptor",
                     "-o", "/dev/null", "--wrap", "sleep 2")
    try:
        end = wait_for_event(run["run_dir"], "end", 1)[0]
        assert (end["outcome"], end["action"], end["drain_acked"]) == ("preemption", "requeue", True), end
        heartbeat_step = json.loads((Path(run["run_dir"]) / "metrics.jsonl").read_text().splitlines()[-1])["step"]
        start_requeued_now(run["job_id"])
        status = wait_for_state(run["run_id"], ENDED, timeout=120)
    finally:
        bob.scancel(job)
    assert status["state"] == "COMPLETED", slurmctl("logs", run["run_id"], "-n", "0").stdout
    starts = events(run["run_dir"], "start")
    assert starts[1]["restart_count"] == 1 and starts[1]["resume_step"] == end["checkpoint_step"]
    lost = heartbeat_step - end["checkpoint_step"]
    print(f"work lost to the preemption: {lost} steps")
    assert lost == 0


def test_time_limit_drain_chains_into_a_new_allocation_then_fork(workdir):
    # USR1 ~100 s before a 2-minute limit = ~20 s after the start; 120 steps x 0.25 s need two allocations.
    run = submit(workdir, "rel-timelimit", ["--steps", "120", "--sleep", "0.25"], time_limit="2m",
                 checkpoint={"interval_steps": 1000}, sbatch=("--signal=B:USR1@100",))
    first_end = wait_for_event(run["run_dir"], "end", 1, timeout=120)[0]
    assert (first_end["outcome"], first_end["action"], first_end["drain_acked"]) == ("time-limit", "requeue", True)
    drained_at = first_end["checkpoint_step"]
    ends = [first_end]
    while ends[-1]["action"] == "requeue":  # each allocation drains at its limit and requeues until done
        start_requeued_now(run["job_id"])
        ends = wait_for_event(run["run_dir"], "end", len(ends) + 1, timeout=120)
    status = wait_for_state(run["run_id"], ENDED, timeout=60)
    assert status["state"] == "COMPLETED" and status["latest_checkpoint_step"] == 119
    assert events(run["run_dir"], "start")[1]["resume_step"] == drained_at

    forked = slurmctl_json("fork", run["run_id"], "rel-forked", "--from", "119")
    assert forked["from_step"] == 119 and forked["run_id"].startswith("rel-forked-")
    assert wait_for_state(forked["run_id"], ENDED, timeout=90)["state"] == "COMPLETED"
    assert events(forked["run_dir"], "start")[0]["resume_step"] == 119
    assert json.loads((Path(forked["run_dir"]) / "run.json").read_text())["parent_run"] == run["run_id"]
