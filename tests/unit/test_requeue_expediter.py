"""runtime.expediter.expedite_requeue: what it asks Slurm while a requeued job goes COMPLETING ->
PENDING (BeginTime) -> RUNNING, by full argv. The real-cluster proof is
tests/integration/test_requeue_wait.py."""

import subprocess
import sys
import time

from slurmctl.ops.hooks.epilog import EPILOG_EXPEDITER_SECONDS, expediter_env
from slurmctl.runtime.expediter import expedite_requeue, expediter_argv
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
    assert expedite_requeue(SlurmClient(runner), 77, [], limit=10, poll=0, settle=0) == 0
    assert updates(runner) == [["scontrol", "update", "JobId=77", "StartTime=now"]]


# sacct -j of a job Slurm requeued at 20:44:41, as the local cluster answers it: the first attempt and its steps
# (a step still running has End "Unknown"), then the pending attempt
SACCT_STEPS = ("sacct", "-j", "77", "--duplicates", "-n", "-P", "-o", "JobID,End")
STEPS_RUNNING = "77|2026-12-02T20:44:41\n77.batch|Unknown\n77.0|Unknown\n77|Unknown\n"
STEPS_ENDED = "77|2026-12-02T20:44:41\n77.batch|2026-12-02T20:44:41\n77.0|2026-12-02T20:44:41\n77|Unknown\n"


class Accounting(Sequence):
    """squeue says PENDING|BeginTime; sacct's step records answer one after another (the last repeats)."""

    def __init__(self, steps: list[str]):
        super().__init__(["PENDING|BeginTime|\n"])
        self.steps = list(steps)

    def run(self, argv, timeout=60.0):
        if tuple(argv) == SACCT_STEPS:
            self.calls.append(list(argv))
            return CommandResult(tuple(argv), 0, self.steps.pop(0) if len(self.steps) > 1 else self.steps[0], "")
        return super().run(argv, timeout)


def test_the_job_is_started_only_after_its_earlier_steps_ended_and_a_second_passed():
    """Started at once (0.1 s after Slurm's requeue), the job was allocated in the second its earlier attempt's
    credential was revoked, and slurmd killed it: "Killing non-startable batch JobId=2655: Job credential revoked"."""
    runner = Accounting([STEPS_RUNNING, STEPS_RUNNING, STEPS_ENDED])
    began = time.monotonic()
    assert expedite_requeue(SlurmClient(runner), 77, [], limit=1.5, poll=0.01, settle=0.3) == 0
    sacct = [i for i, c in enumerate(runner.calls) if tuple(c) == SACCT_STEPS]
    update = runner.calls.index(["scontrol", "update", "JobId=77", "StartTime=now"])
    assert len(sacct) == 3 and update > sacct[-1] and time.monotonic() - began >= 0.3
    # steps that never end in accounting: the job is left to Slurm's own wait
    runner = Accounting([STEPS_RUNNING])
    assert expedite_requeue(SlurmClient(runner), 77, [], limit=0.3, poll=0.01, settle=0) == 1
    assert updates(runner) == []


def test_the_lost_node_joins_the_nodes_the_job_already_excludes():
    hostnames = ("scontrol", "show", "hostnames", "h100-[1,3]")
    runner = Sequence(["COMPLETING|None|h100-[1,3]\n", "PENDING|BeginTime|h100-[1,3]\n", "RUNNING|None|\n"],
                      {hostnames: "h100-1\nh100-3\n"})
    assert expedite_requeue(SlurmClient(runner), 77, ["h100-2", "h100-3"], limit=10, poll=0, settle=0) == 0
    assert updates(runner) == [["scontrol", "update", "JobId=77", "StartTime=now", "ExcNodeList=h100-1,h100-3,h100-2"]]


def test_a_held_cancelled_or_forgotten_job_is_left_alone():
    for states in (["PENDING|JobHeldUser|\n"], ["CANCELLED|None|\n"], [""]):
        runner = Sequence(states)
        assert expedite_requeue(SlurmClient(runner), 77, [], limit=0.05, poll=0.01, settle=0) == 1
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


class Refusing(Sequence):
    """squeue says PENDING|BeginTime; scontrol update is refused with `stderr`."""

    def __init__(self, stderr: str):
        super().__init__(["PENDING|BeginTime|\n"])
        self.stderr = stderr

    def run(self, argv, timeout=60.0):
        if list(argv[:2]) == ["scontrol", "update"]:
            self.calls.append(list(argv))
            return CommandResult(tuple(argv), 1, "", self.stderr)
        return super().run(argv, timeout)


def test_a_refusal_that_cannot_change_ends_it_after_one_line(capsys):
    runner = Refusing("slurm_update error: Invalid user id for job 77\n")
    assert expedite_requeue(SlurmClient(runner), 77, [], limit=5, poll=0.01, settle=0) == 1
    assert len(updates(runner)) == 1
    said = capsys.readouterr().out.splitlines()
    assert len(said) == 2 and "Invalid user id" in said[0] and "for good" in said[1], said


def test_another_refusal_is_retried_with_a_growing_wait_and_said_once(capsys):
    runner = Refusing("slurm_update error: Requested node configuration is not available\n")
    started = time.monotonic()
    assert expedite_requeue(SlurmClient(runner), 77, [], limit=3.5, poll=0.01, settle=0) == 1
    assert time.monotonic() - started >= 3.4
    assert 2 <= len(updates(runner)) <= 3  # at 0, ~1 s, ~3 s: not one per poll (350 polls)
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_the_expediter_runs_none_of_the_users_python(tmp_path):
    """The epilog starts it as the user outside the job's cgroup: their user site-packages (.pth),
    PYTHONPATH, PYTHONSTARTUP and current directory must not run. The real command line, run with
    a home, PYTHONPATH and cwd that would each run the user's code under a plain `python -m`."""
    marker = tmp_path / "ran"
    evil = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('user code ran')\n"
    site = tmp_path / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True)
    (site / "evil.pth").write_text(evil.replace("\n", "") + "\n")
    (site / "usercustomize.py").write_text(evil)
    for where in (tmp_path / "pp", tmp_path):  # a slurmctl shadow on PYTHONPATH and in the cwd
        (where / "slurmctl").mkdir(parents=True, exist_ok=True)
        (where / "slurmctl" / "__init__.py").write_text(evil)
    (tmp_path / "empty.conf").write_text("")  # squeue gives up at once (a missing file: 60 s of retries)
    env = {**expediter_env({"SLURM_CONF": str(tmp_path / "empty.conf")}), "HOME": str(tmp_path),
           "PYTHONPATH": str(tmp_path / "pp"), "PYTHONSTARTUP": str(site / "usercustomize.py")}
    argv = expediter_argv(77, limit=EPILOG_EXPEDITER_SECONDS, python=sys.executable)
    assert argv[1] == "-I" and "--limit" in argv
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr  # ran, found no job (no cluster in that SLURM_CONF)
    assert not marker.exists()
    assert set(expediter_env({"SLURM_CONF": "/etc/slurm/slurm.conf", "HOME": "/home/bob", "PYTHONPATH": "/x"})) \
        == {"PATH", "LC_ALL", "HOME", "SLURM_CONF"}
    # the hard bound: SIGALRM's default action ends it whatever it waits for
    sleepy = argv[3].replace("from slurmctl", "import time; time.sleep(30); from slurmctl")
    bounded = [sys.executable, "-I", "-c", sleepy, "1", *argv[5:]]
    started = time.monotonic()
    assert subprocess.run(bounded, env=env, cwd="/", timeout=60).returncode == -14  # SIGALRM
    assert time.monotonic() - started < 10


def test_a_job_that_left_a_lost_node_gets_its_size_back_before_it_is_released():
    # `end` shrank it to its surviving node and requeued it held (squeue's words for that reason)
    runner = Sequence(["COMPLETING|None|\n", "PENDING|job requeued in held state|\n", "RUNNING|None|\n"])
    assert expedite_requeue(SlurmClient(runner), 77, ["h100-3"], limit=10, poll=0, shape=(2, 2), settle=0) == 0
    assert updates(runner) == [["scontrol", "update", "JobId=77", "NumNodes=2", "NumTasks=2", "StartTime=now",
                                "ExcNodeList=h100-3"]]
    assert ["scontrol", "release", "77"] in runner.calls
    assert runner.calls.index(["scontrol", "release", "77"]) > runner.calls.index(updates(runner)[0])


def test_a_shrunk_job_whose_size_cannot_be_given_back_stays_held(capsys):
    runner = Refusing("scontrol: error: Access/permission denied for job 77")
    runner.states = ["PENDING|job requeued in held state|\n"]
    assert expedite_requeue(SlurmClient(runner), 77, ["h100-3"], limit=5, poll=0, shape=(2, None), settle=0) == 1
    assert not [c for c in runner.calls if c[:2] == ["scontrol", "release"]]
    assert "stays held" in capsys.readouterr().out


def test_the_shape_travels_on_the_expediter_command_line():
    argv = expediter_argv(77, ["h100-3"], shape=(2, 4))
    assert argv[argv.index("--shape") + 1] == "2,4" and argv[argv.index("--exclude") + 1] == "h100-3"
    assert "--shape" not in expediter_argv(77)


def test_the_expediter_ignores_the_requeues_sigterm_from_its_first_instruction(monkeypatch):
    # `end` requeues right after starting it: Slurm's SIGTERM to the job's processes may come before
    # its own main() runs, so the disposition is set before exec (and kept by it)
    from slurmctl.runtime import expediter

    started = []
    real_popen = subprocess.Popen
    monkeypatch.setattr(expediter, "expediter_argv", lambda job, exclude, shape=None: ["sleep", "5"])
    monkeypatch.setattr(expediter.subprocess, "Popen", lambda *a, **k: started.append(real_popen(*a, **k)))
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    expediter.start_expediter(["h100-3"], shape=(2, 2))
    (child,) = started
    try:
        deadline = time.monotonic() + 5
        while True:  # until exec'd (the forked child briefly shows the parent's dispositions)
            status = open(f"/proc/{child.pid}/status").read()
            if "Name:\tsleep" in status or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        ignored = int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
        assert ignored & (1 << (15 - 1)) and ignored & (1 << (1 - 1)), hex(ignored)  # SIGTERM, SIGHUP
    finally:
        child.kill()
        child.wait()
