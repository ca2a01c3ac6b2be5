"""runtime.attempt.expedite_requeue: what it asks Slurm while a requeued job goes COMPLETING ->
PENDING (BeginTime) -> RUNNING, by full argv. The real-cluster proof is
tests/integration/test_requeue_wait.py."""

from slurmctl.runtime.attempt import expedite_requeue
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.runner import CommandResult

SQUEUE = ["squeue", "-h", "-j", "77", "-o", "%T|%r|%x"]


class Sequence:
    """squeue answers one line after another (the last repeats); every other call prints `others`."""

    def __init__(self, states: list[str], others: dict | None = None):
        self.states, self.others, self.calls = list(states), others or {}, []

    def run(self, argv, timeout=60.0):
        self.calls.append(list(argv))
        if list(argv) == SQUEUE:
            line = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            return CommandResult(tuple(argv), 0 if line else 1, line, "" if line else "Invalid job id")
        return CommandResult(tuple(argv), 0, self.others.get(tuple(argv), ""), "")


def updates(runner):
    return [c for c in runner.calls if c[:2] == ["scontrol", "update"]]


def test_start_now_once_the_requeued_job_waits_for_its_begin_time():
    runner = Sequence(["RUNNING|None|\n", "COMPLETING|None|\n", "PENDING|BeginTime|\n", "PENDING|BeginTime|\n",
                       "RUNNING|None|\n"])
    assert expedite_requeue(SlurmClient(runner), 77, [], limit=10, poll=0) == 0
    assert updates(runner) == [["scontrol", "update", "JobId=77", "StartTime=now"]]


def test_the_lost_node_joins_the_nodes_the_job_already_excludes():
    hostnames = ("scontrol", "show", "hostnames", "h100-[1,3]")
    runner = Sequence(["COMPLETING|None|h100-[1,3]\n", "PENDING|BeginTime|h100-[1,3]\n", "RUNNING|None|\n"],
                      {hostnames: "h100-1\nh100-3\n"})
    assert expedite_requeue(SlurmClient(runner), 77, ["h100-2", "h100-3"], limit=10, poll=0) == 0
    assert updates(runner) == [["scontrol", "update", "JobId=77", "StartTime=now", "ExcNodeList=h100-1,h100-3,h100-2"]]


def test_a_held_cancelled_or_forgotten_job_is_left_alone():
    for states in (["PENDING|JobHeldUser|\n"], ["CANCELLED|None|\n"], [""]):
        runner = Sequence(states)
        assert expedite_requeue(SlurmClient(runner), 77, [], limit=0.05, poll=0.01) == 1
        assert updates(runner) == []


def test_a_preemption_signal_starts_the_expediter_a_time_limit_signal_does_not(tmp_path, monkeypatch):
    from slurmctl.runtime import attempt

    started = []
    monkeypatch.setattr(attempt, "start_expediter", lambda exclude=None: started.append(exclude))
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    for left, expected in (("1:00:00", [None]), ("1:30", [None])):  # 1 h left: preemption; 90 s: time limit
        runner = Sequence(["x"], {("squeue", "-h", "-j", "77", "-o", "%L"): left + "\n"})
        assert attempt.drain_signal(tmp_path, SlurmClient(runner)) == 0
        assert started == expected
