"""The watchdog's peer check: in a job whose ranks on this node are all gone while its srun step still
runs (srun waits for a lost node's task), the step is ended after PEER_LOST_SECONDS instead of the
stall window, and the watchdog goes on watching (the batch script may launch the training again).
A relaunch's first seconds without ranks, or ranks that are alive, never trigger it."""

import json

from slurmctl.runtime import watchdog
from slurmctl.runtime.watchdog import Settings, StepReader, Watchdog


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _setup(tmp_path, monkeypatch, ranks, steps=True, seen=True):
    beat = tmp_path / "heartbeat.json"
    beat.write_text(json.dumps({"step": 1}))
    ended = []
    alive = [4242] if seen else []  # while the training steps, its ranks are there (or never visible)
    monkeypatch.setattr(watchdog, "rank_pids", lambda s: list(alive))
    monkeypatch.setattr(watchdog, "_steps_running", lambda s: steps)
    monkeypatch.setattr(watchdog, "end_step", lambda s: ended.append(s.job_id))
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
