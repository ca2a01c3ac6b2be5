"""status tells the run's story: one history line per attempt from attempts.jsonl, "requeued after
preemption" instead of "queued", a run cancelled while it waited after a requeue reconciled, and
the end record's last step / steps lost written by the job's own end hook (runtime.attempt.end)."""

import json
import time

from slurmctl.errors import SlurmCommandError
from slurmctl.observe.status import build_status
from slurmctl.observe.story import story
from slurmctl.runtime import attempt
from slurmctl.runtime.checkpoint import CheckpointManager
from slurmctl.slurm.client import Job, SlurmClient
from slurmctl.slurm.records import NodeInfo

from .test_status_observe import _run

T0 = time.time() - 600


def _events(run, *events):
    with (run.path / "attempts.jsonl").open("a") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")


def _crash_then_preemption(run):
    _events(run,
            {"event": "start", "job_id": 7, "restart_count": 0, "nodes": "h100-1", "resume_step": None, "time": T0},
            {"event": "end", "job_id": 7, "restart_count": 0, "outcome": "failed", "exit_code": 3, "action": "requeue",
             "last_step": 12, "checkpoint_step": 9, "steps_lost": 3, "time": T0 + 10},
            {"event": "start", "job_id": 7, "restart_count": 1, "nodes": "h100-2", "resume_step": 9, "time": T0 + 20},
            {"event": "end", "job_id": 7, "restart_count": 1, "outcome": "preemption", "exit_code": 0,
             "action": "requeue", "last_step": 23, "checkpoint_step": 23, "steps_lost": 0, "time": T0 + 30})


def test_history_line_per_attempt_and_requeued_after_preemption(tmp_path):
    run = _run(tmp_path, "r", 7)
    _crash_then_preemption(run)
    waiting = Job(job_id=7, name="r", state="PENDING", reason="BeginTime", partition="h100-spot")
    status = build_status(run, waiting)
    first, second = status.history
    assert first.startswith("attempt 1 (job 7): ") and "from scratch" in first
    assert second.startswith("attempt 2 (job 7, Slurm restart 1): ")
    assert "crashed (exit code 3) at step 12, newest checkpoint 9, 3 steps lost; requeued" in first
    assert "from checkpoint step 9" in second and "on h100-2" in second
    assert "preempted at step 23, newest checkpoint 23, 0 steps lost; requeued" in second
    assert status.phase == "requeued after preemption"  # restart count 0 -> 1 used to read "queued"
    assert status.why.startswith("Requeued after preemption at step 23, 0 steps lost; it restarts from "
                                 "checkpoint step 23")


def test_cancelled_while_waiting_after_a_requeue_is_not_requeued_forever(tmp_path):
    run = _run(tmp_path, "r", 7)
    _crash_then_preemption(run)
    CheckpointManager(run.checkpoint_dir).save(23, lambda d: (d / "s").write_text("x"))  # what resume reads
    gone = Job(job_id=7, name="r", state="REQUEUED", partition="h100-spot", source="sacct")
    status = build_status(run, gone)
    assert status.phase == "cancelled" and status.headline.startswith("Cancelled while waiting to restart after")
    assert "slurmctl resume r" in status.action and "checkpoint step 23" in status.action
    # what sacct said on the local cluster after `scancel` of the waiting job: CANCELLED
    cancelled = build_status(run, Job(job_id=7, name="r", state="CANCELLED", partition="h100-spot", source="sacct"))
    assert cancelled.headline.startswith("Cancelled while waiting to restart after preemption")
    # still in the queue (squeue says REQUEUED/PENDING): it is waiting, not cancelled
    queued = Job(job_id=7, name="r", state="REQUEUED", partition="h100-spot", source="squeue")
    assert build_status(run, queued).phase == "requeued after preemption"


def test_an_attempt_without_an_end_record_and_a_running_one():
    events = [{"event": "submitted", "job_id": 9},
              {"event": "start", "job_id": 9, "restart_count": 0, "nodes": "h100-[1-2]", "time": T0},
              {"event": "start", "job_id": 9, "restart_count": 1, "nodes": "h100-[1,3]", "resume_step": 40,
               "time": T0 + 200}]
    lost, running = story(events, Job(job_id=9, name="r", state="RUNNING"))
    # what a plain `scontrol requeue` leaves (the batch script is killed before `attempt end`)
    assert lost.endswith("; requeued by Slurm before slurmctl could record its end (`scontrol requeue`, a lost node, "
                         "or a preemption that did not wait for the drain)")
    assert lost.startswith("attempt 1 (job 9)") and "ended without an end record" not in lost
    assert running.endswith("from checkpoint step 40; running")
    # a resume is a new job of the same run: its attempts follow the earlier job's, which is no longer running
    resumed = story(events + [{"event": "submitted", "job_id": 10},
                              {"event": "start", "job_id": 10, "restart_count": 0, "nodes": "h100-2",
                               "resume_step": 40, "time": T0 + 400}], Job(job_id=10, name="r", state="RUNNING"))
    assert len(resumed) == 3 and resumed[1].endswith("from checkpoint step 40; no end record"), resumed
    # numbered across the run, as status, diagnose and `logs --attempt N` number them: never "attempt 0" twice
    assert [line.split(":")[0] for line in resumed] == ["attempt 1 (job 9)", "attempt 2 (job 9, Slurm restart 1)",
                                                        "attempt 3 (job 10)"]
    assert resumed[2].endswith("; running")


def test_a_cancelled_attempt_without_an_end_record_reads_cancelled():
    events = [{"event": "submitted", "job_id": 9},
              {"event": "start", "job_id": 9, "restart_count": 0, "nodes": "h100-1", "time": T0},
              {"event": "cancel-requested", "job_id": 9, "drain": "skipped", "time": T0 + 50}]
    for job in (None, Job(job_id=9, name="r", state="RUNNING")):  # Slurm may still show it ending
        (line,) = story(events, job)
        assert line.endswith("; cancelled on request (`slurmctl cancel`)"), line


def test_end_hook_records_last_step_and_steps_lost(tmp_path, monkeypatch):
    run = _run(tmp_path, "r", 7)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    monkeypatch.setenv("SLURMCTL_RUN_DIR", str(run.path))
    attempt.start(run.path)
    CheckpointManager(run.path / "checkpoints").save(9, lambda d: (d / "s").write_text("x"))
    (run.path / "heartbeat.json").write_text(json.dumps({"step": 12, "time": time.time(), "job_id": "7"}))

    class NoSlurm:  # a crash after a checkpoint is requeued; the requeue itself: tests/integration
        def update_job(self, *a, **k):
            pass

        def requeue(self, *a):
            pass

    expediters = []  # the detached expediter is tested in test_requeue_expediter / tests/integration
    monkeypatch.setattr(attempt, "start_expediter", lambda exclude=None, shape=None: expediters.append(exclude))
    attempt.end(run.path, NoSlurm(), 3)
    assert expediters == [[]]
    end = [json.loads(line) for line in (run.path / "attempts.jsonl").read_text().splitlines()][-1]
    assert (end["last_step"], end["checkpoint_step"], end["steps_lost"]) == (12, 9, 3)


class Allocation:
    """The Slurm calls restart-step makes: the probe step on every node, then sinfo's node states."""

    def __init__(self, healthy=True, states=None, shrink_refused=False, said=None):
        self.healthy, self.states, self.shrink_refused, self.calls = healthy, states or {}, shrink_refused, []
        self.said = said or ("srun: error: Task launch for StepId=7.2 failed on node h100-2: Communication "
                             "connection failure")

    def allocation_probe_failure(self, nodes, timeout=20.0):
        return None if self.healthy else self.said

    nodes_not_launched = staticmethod(SlurmClient.nodes_not_launched)  # reads srun's words, asks nothing

    def hostnames(self, nodelist):
        return sorted(self.states)

    def nodes(self):
        return [NodeInfo(name=n, state=s) for n, s in self.states.items()]

    def update_job(self, job, **fields):
        self.calls.append(("update", fields))
        if self.shrink_refused and "NodeList" in fields:
            raise SlurmCommandError("`scontrol` failed: Access/permission denied.", "")

    def requeue(self, *a):
        self.calls.append(("requeue",))

    def requeue_held(self, *a):
        self.calls.append(("requeuehold",))


def test_restart_in_allocation_is_the_default_needs_a_checkpoint_and_progress(tmp_path, monkeypatch):
    run = _run(tmp_path, "r", 7)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    attempt.start(run.path)
    healthy = Allocation()
    assert attempt.restart_step(run.path, healthy, 3) == 1  # no checkpoint: it would start from step 0
    CheckpointManager(run.path / "checkpoints").save(5, lambda d: (d / "s").write_text("x"))
    assert attempt.restart_step(run.path, healthy, 0) == 1  # a clean exit is not a crash
    monkeypatch.setenv("SLURMCTL_RESTART_IN_ALLOCATION", "0")
    assert attempt.restart_step(run.path, healthy, 3) == 1  # turned off: the crash goes to `end` (requeue)
    monkeypatch.delenv("SLURMCTL_RESTART_IN_ALLOCATION")
    assert attempt.restart_step(run.path, healthy, 3) == 0
    (restart,) = [e for e in run.events() if e["event"] == "step-restart"]
    assert (restart["checkpoint_step"], restart["failures"], restart["outcome"]) == (5, 1, "failed")
    assert attempt.restart_step(run.path, healthy, 3) == 1  # again at checkpoint 5: no progress, no loop
    CheckpointManager(run.path / "checkpoints").save(8, lambda d: (d / "s").write_text("x"))
    (run.path / "drain.request").write_text(json.dumps({"reason": "preemption"}))
    assert attempt.restart_step(run.path, healthy, 3) == 1  # a drain (preemption, limit, cancel) goes to `end`
    assert not [e for e in run.events() if e["event"] == "node-lost"]
    status = build_status(run, Job(job_id=7, name="r", state="RUNNING"))
    assert status.restarts_in_allocation == 1 and status.requeues == 0
    assert "restarted in the allocation from checkpoint step 5" in status.history[0]


def test_a_lost_node_is_named_recorded_and_requeued_without_counting_a_failure(tmp_path, monkeypatch):
    run = _run(tmp_path, "r", 7)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "h100-[1-2]")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    attempt.start(run.path)
    CheckpointManager(run.path / "checkpoints").save(159, lambda d: (d / "s").write_text("x"))
    (run.path / "heartbeat.json").write_text(json.dumps({"step": 177, "time": time.time(), "job_id": "7"}))
    # sinfo as seen on the local cluster ~15 s after h100-2's slurmd was killed
    lost = Allocation(healthy=False, states={"h100-1": "mixed", "h100-2": "mixed*"})
    # a drain the watchdog asked for (the survivors hung in a collective): still probed
    (run.path / "drain.request").write_text(json.dumps({"reason": "watchdog"}))
    assert attempt.restart_step(run.path, lost, 1) == 1
    (event,) = [e for e in run.events() if e["event"] == "node-lost"]
    assert (event["nodes_lost"], event["last_step"], event["checkpoint_step"]) == (["h100-2"], 177, 159)
    assert event["evidence"][0].startswith("probe step: srun: error: Task launch") and \
        event["evidence"][1] == "sinfo: h100-2 mixed*", event
    waited, expediters = [], []
    monkeypatch.setattr(attempt, "_await_node_failure", lambda client, nodes: waited.append(nodes))
    monkeypatch.setattr(attempt, "start_expediter", lambda exclude=None, shape=None: expediters.append(exclude))
    assert attempt.end(run.path, lost, 1) == 0
    end = run.events()[-1]
    assert (end["outcome"], end["action"], end["failures"], end["nodes_lost"]) == ("node-lost", "requeue", 0,
                                                                                    ["h100-2"])
    assert end["reason"] == "node h100-2 was lost at step 177; requeued on healthy nodes from checkpoint step 159."
    assert waited == [["h100-2"]]  # Slurm's own NODE_FAIL requeue first
    assert expediters == [["h100-2"]]  # the next attempt starts at once, never on the lost node
    status = build_status(run, Job(job_id=7, name="r", state="PENDING", reason="BeginTime"))
    assert status.history[0].endswith("node h100-2 was lost at step 177, newest checkpoint 159, 18 steps lost; "
                                      "requeued (new Slurm attempt)")
    assert status.phase == "requeued after node loss"
    assert status.why.startswith("Requeued after node loss (node h100-2 was lost at step 177), 18 steps lost")


def test_node_loss_story_without_an_end_record():
    events = [{"event": "start", "job_id": 9, "restart_count": 0, "nodes": "h100-[1-2]", "time": T0},
              {"event": "node-lost", "job_id": 9, "nodes_lost": ["h100-2"], "last_step": 40, "time": T0 + 60},
              {"event": "start", "job_id": 9, "restart_count": 1, "nodes": "h100-[1,3]", "resume_step": 39,
               "time": T0 + 200}]
    first, _ = story(events, Job(job_id=9, name="r", state="RUNNING"))
    assert first.endswith("; node h100-2 was lost at step 40")


def test_a_run_cancelled_before_its_first_checkpoint_is_told_to_submit_again_not_resume(tmp_path):
    run = _run(tmp_path, "r", 7)
    _events(run, {"event": "start", "job_id": 7, "restart_count": 0, "nodes": "h100-1", "time": T0},
            {"event": "cancel-requested", "job_id": 7, "drain": "skipped", "time": T0 + 5})
    status = build_status(run, Job(job_id=7, name="r", state="CANCELLED", partition="h100-spot", source="sacct"))
    assert status.phase == "cancelled" and "slurmctl submit" in status.action and "run.yaml" in status.action
    assert "nothing to continue from" in status.action, status.action


def test_a_passed_smoke_test_reads_as_passed_not_as_a_cancelled_job(tmp_path):
    run = _run(tmp_path, "smoke-20261201-abcd", 9)
    _events(run, {"event": "start", "job_id": 9, "restart_count": 0, "nodes": "l4-1", "time": T0 + 1},
            {"event": "smoke-passed", "job_id": 9, "why": "steps advanced 0 -> 25 and it wrote its own checkpoint",
             "time": T0 + 30})
    status = build_status(run, Job(job_id=9, name="r", state="CANCELLED", exit_code="0:15", source="sacct"))
    assert status.phase == "smoke test passed" and status.headline.startswith("Smoke test passed (steps advanced")
    assert "--smoke" in status.action and "slurmctl submit" not in status.action
    assert status.history[-1].endswith("; smoke test passed, stopped there (`adopt --smoke`)")


def _lost_node_end(tmp_path, monkeypatch, allocation):
    run = _run(tmp_path, "r", 7)
    for name, value in (("SLURM_JOB_ID", "7"), ("SLURM_RESTART_COUNT", "0"), ("SLURM_JOB_NODELIST", "h100-[1-2]"),
                        ("SLURM_JOB_NUM_NODES", "2"), ("SLURM_NTASKS", "2"), ("SLURMD_NODENAME", "h100-1")):
        monkeypatch.setenv(name, value)
    attempt.start(run.path)
    CheckpointManager(run.path / "checkpoints").save(159, lambda d: (d / "s").write_text("x"))
    assert attempt.restart_step(run.path, allocation, 1) == 1
    waited, expediters = [], []
    monkeypatch.setattr(attempt, "_await_node_failure", lambda client, nodes: waited.append(nodes))
    monkeypatch.setattr(attempt, "_expediter_dies_with_job", lambda: False)
    monkeypatch.setattr(attempt, "start_expediter",
                        lambda exclude=None, shape=None: expediters.append((exclude, shape)))
    assert attempt.end(run.path, allocation, 1) == 0
    return run.events()[-1], waited, expediters, run


def test_a_lost_node_is_left_and_the_job_requeued_held_instead_of_waiting_for_slurmd_timeout(tmp_path, monkeypatch):
    lost = Allocation(healthy=False, states={"h100-1": "mixed", "h100-2": "mixed*"})
    end, waited, expediters, run = _lost_node_end(tmp_path, monkeypatch, lost)
    assert end["outcome"] == "node-lost" and end["lost_nodes_released"] is True, end
    assert waited == []  # no SlurmdTimeout wait
    # shrunk to the surviving node, then requeued held; the expediter gives it 2 nodes and 2 tasks back
    assert [c for c in lost.calls if c[0] != "update" or "NodeList" in c[1]] == [
        ("update", {"NodeList": "h100-1"}), ("requeuehold",)]
    assert expediters == [(["h100-2"], (2, 2))]
    status = build_status(run, Job(job_id=7, name="r", state="PENDING", reason="JobHeldUser"))
    said = next(d for d in status.details if d.startswith("NODE LOST"))
    assert "left the node and was requeued without waiting" in said and "Evidence: probe step: srun" in said, said


def test_a_refused_shrink_waits_for_slurm_as_before(tmp_path, monkeypatch):
    lost = Allocation(healthy=False, states={"h100-1": "mixed", "h100-2": "mixed*"}, shrink_refused=True)
    end, waited, expediters, _ = _lost_node_end(tmp_path, monkeypatch, lost)
    assert end["lost_nodes_released"] is False and waited == [["h100-2"]], end
    assert ("requeue",) in lost.calls and ("requeuehold",) not in lost.calls
    assert expediters == [(["h100-2"], None)]


def test_a_lost_node_is_named_by_the_failed_launch_or_by_slurmctld_never_by_a_refused_step(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_NODELIST", "h100-[1-2]")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    # seconds after the kill: slurmctld has not pinged the node yet, srun's launch on it failed
    fresh = Allocation(healthy=False, states={"h100-1": "mixed", "h100-2": "mixed"})
    started = time.monotonic()
    assert attempt.lost_nodes(fresh, wait=30) == (["h100-2"], [f"probe step: {fresh.said}"])
    assert time.monotonic() - started < 1  # no wait for slurmctld's ping
    # a step Slurm would not create tried no node: only slurmctld may name one (here: none in time)
    refused = Allocation(healthy=False, states={"h100-1": "mixed", "h100-2": "mixed"},
                         said="srun: error: Unable to create step for job 7: Job/step already completing")
    assert attempt.lost_nodes(refused, wait=0) == ([], [f"probe step: {refused.said}"])
    assert attempt.lost_nodes(Allocation(healthy=True, states={"h100-1": "mixed"})) is None


def test_one_step_lost_is_said_in_the_singular():
    from slurmctl.observe.story import steps_lost_words

    assert steps_lost_words(1) == "1 step lost"
    assert steps_lost_words(0) == "0 steps lost"
    assert steps_lost_words(18) == "18 steps lost"
