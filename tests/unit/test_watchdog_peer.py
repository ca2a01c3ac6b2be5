"""The watchdog's peer check: in a job whose ranks on this node are all gone while its srun step still
runs (srun waits for a lost node's task), the step is ended after PEER_LOST_SECONDS instead of the
stall window, and the watchdog goes on watching (the batch script may launch the training again).
Before that floor only when a probe step cannot run on every node (a second signal), and then the
local srun is ended too. A relaunch's first seconds without ranks, or ranks that are alive, never
trigger it."""

import json

from slurmctl.observe.watchdog_report import watchdog_report
from slurmctl.runtime import watchdog
from slurmctl.runtime.watchdog import Settings, StepReader, Watchdog


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _setup(tmp_path, monkeypatch, ranks, steps=True, seen=True, unreachable=None):
    beat = tmp_path / "heartbeat.json"
    beat.write_text(json.dumps({"step": 1}))
    ended = []
    alive = [4242] if seen else []  # while the training steps, its ranks are there (or never visible)
    monkeypatch.setattr(watchdog, "rank_pids", lambda s: list(alive))
    monkeypatch.setattr(watchdog, "_steps_running", lambda s: steps)
    monkeypatch.setattr(watchdog, "end_step", lambda s: ended.append(s.job_id))
    monkeypatch.setattr(watchdog, "_allocation_unreachable", lambda: unreachable)
    monkeypatch.setattr(watchdog, "end_launcher", lambda s: ended.append("srun"))
    monkeypatch.setattr(watchdog, "capture_scene", lambda s, now: tmp_path / "scene")
    clock = Clock()
    dog = Watchdog(Settings(run_dir=tmp_path, reader=StepReader("step", beat), check_seconds=2, stall_seconds=900,
                            job_id="7"), clock=clock)
    beat.write_text(json.dumps({"step": 2}))
    dog.check()  # progress: the training ran
    alive[:] = ranks
    return dog, clock, ended, beat


def test_ranks_gone_while_the_step_runs_end_it_after_the_floor_and_watching_goes_on(tmp_path, monkeypatch):
    dog, clock, ended, beat = _setup(tmp_path, monkeypatch, ranks=[])
    for dt in (3, 10, 20):  # gone seen at +3 s; under PEER_LOST_SECONDS nothing happens
        clock.now = 1000 + dt
        assert dog.check() is None and ended == []
    clock.now = 1000 + 3 + watchdog.PEER_LOST_SECONDS
    assert dog.check() is None and ended == ["7"]
    state = json.loads((tmp_path / "watchdog" / "state.json").read_text())
    assert state["state"] == "killed" and "waited for another node" in state["summary"]
    assert not (tmp_path / "drain.request").exists()  # no drain: nobody is left to acknowledge it
    clock.now += 100  # watching again, from scratch: no progress since is not yet a peer loss
    assert dog.check() is None and ended == ["7"]


def test_live_ranks_or_no_step_never_trigger_it(tmp_path, monkeypatch):
    dog, clock, ended, _ = _setup(tmp_path, monkeypatch, ranks=[4242])
    for dt in (3, 40, 80):
        clock.now = 1000 + dt
        dog.check()
    assert ended == []
    (tmp_path / "b").mkdir()
    dog, clock, ended, _ = _setup(tmp_path / "b", monkeypatch, ranks=[], steps=False)  # srun has returned
    for dt in (3, 40, 80):
        clock.now = 1000 + dt
        dog.check()
    assert ended == []


def test_a_launcher_whose_ranks_are_never_visible_is_left_to_the_stall_window(tmp_path, monkeypatch):
    # plain `srun python train.py` sets no RANK: "no rank here" says nothing, even for slow steps
    dog, clock, ended, _ = _setup(tmp_path, monkeypatch, ranks=[], seen=False)
    for dt in (3, 40, 80, 200):
        clock.now = 1000 + dt
        dog.check()
    assert ended == []


def test_a_node_that_cannot_run_a_probe_step_ends_it_before_the_floor_with_the_evidence(tmp_path, monkeypatch):
    said = "srun: error: Task launch for StepId=7.2 failed on node h100-3: Communication connection failure"
    dog, clock, ended, _ = _setup(tmp_path, monkeypatch, ranks=[], unreachable=said)
    clock.now = 1003  # ranks gone seen: not yet one check interval
    assert dog.check() is None and ended == []
    clock.now = 1005
    assert dog.check() is None and ended == ["7", "srun"]  # the step, then the srun that would wait KillWait
    state = json.loads((tmp_path / "watchdog" / "state.json").read_text())
    assert state["state"] == "killed" and any(said in e for e in state["evidence"]), state
    assert "does not answer" in state["summary"]
    report = watchdog_report(tmp_path, "7")  # what status and diagnose show
    assert said in report["message"] and "does not answer" in report["message"], report


def test_a_healthy_allocation_waits_for_the_floor_and_keeps_its_srun(tmp_path, monkeypatch):
    dog, clock, ended, _ = _setup(tmp_path, monkeypatch, ranks=[], unreachable=None)  # a relaunch: probe runs
    for dt in (3, 5, 10, 20, 30):
        clock.now = 1000 + dt
        assert dog.check() is None and ended == []
    clock.now = 1000 + 3 + watchdog.PEER_LOST_SECONDS
    assert dog.check() is None and ended == ["7"]  # the floor's rule, as before: srun is left to wind down


def test_only_a_launch_that_failed_on_a_node_is_evidence_not_a_refused_or_slow_probe(monkeypatch):
    from slurmctl.errors import SlurmUnreachable
    from slurmctl.slurm.client import SlurmClient
    from slurmctl.slurm.runner import CommandResult

    class Runner:
        def __init__(self, stderr):
            self.stderr, self.calls = stderr, []

        def run(self, argv, timeout=60.0):
            self.calls.append(list(argv))
            if self.stderr is None:  # what the real runner raises when srun outlives its timeout
                raise SlurmUnreachable("`srun` did not answer within 20 s.", "")
            return CommandResult(tuple(argv), 1, "", self.stderr)

    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    lost = ("srun: error: Task launch for StepId=7.2 failed on node h100-3: Communication connection failure\n"
            "srun: error: Application launch failed: Communication connection failure\n")
    refused = "srun: error: Unable to create step for job 7: Memory required by task is not available\n"
    for stderr, expected in ((lost, lost.splitlines()[0]), (refused, None), (None, None)):
        runner = Runner(stderr)
        monkeypatch.setattr("slurmctl.slurm.client.SlurmClient", lambda r=runner: SlurmClient(r))
        assert watchdog._allocation_unreachable() == expected
        # beside the running step, which holds the job's memory: --overlap and --mem=0
        assert runner.calls == [["srun", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--gres=none",
                                 "--mem=0", "--kill-on-bad-exit=1", "true"]]


def test_a_relaunch_whose_ranks_take_longer_than_the_floor_is_not_a_lost_peer(tmp_path, monkeypatch):
    launchers = {100}  # the batch shell's srun of the first launch, seen with its ranks
    monkeypatch.setattr(watchdog, "_launchers", lambda s: set(launchers))
    dog, clock, ended, _ = _setup(tmp_path, monkeypatch, ranks=[])
    launchers.clear()
    launchers.add(200)  # restart-step launched the training again; its torchrun is still importing torch
    for dt in (3, 10, 40, 80):
        clock.now = 1000 + dt
        assert dog.check() is None and ended == [], dt
    monkeypatch.setattr(watchdog, "rank_pids", lambda s: [4343])  # its ranks came: armed again
    clock.now = 1090
    dog.check()
    monkeypatch.setattr(watchdog, "rank_pids", lambda s: [])  # and this launch's peer is lost
    for dt in (95, 100, 95 + watchdog.PEER_LOST_SECONDS):
        clock.now = 1000 + dt
        dog.check()
    assert ended == ["7"]
