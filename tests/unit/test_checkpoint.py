import os

import pytest

from slurmctl.checkpoint import COMPLETE_MARKER, CheckpointManager


def write_payload(value):
    def write(d):
        (d / "state.txt").write_text(str(value))
    return write


def test_save_then_latest(tmp_path):
    mgr = CheckpointManager(tmp_path, keep_last=2)
    mgr.save(10, write_payload(10))
    ck = mgr.save(20, write_payload(20))
    assert mgr.latest() == ck and (ck.path / "state.txt").read_text() == "20"
    assert (ck.path / COMPLETE_MARKER).is_file()
    assert (tmp_path / "latest").read_text().strip() == "checkpoint-20"
    assert not list(tmp_path.glob("*.tmp"))


def test_unmarked_checkpoint_is_never_latest(tmp_path):
    mgr = CheckpointManager(tmp_path)
    mgr.save(10, write_payload(10))
    torn = tmp_path / "checkpoint-20"  # renamed but .complete never written (killed in between)
    torn.mkdir()
    (torn / "state.txt").write_text("half")
    assert mgr.latest().step == 10
    # and a leftover .tmp from a killed writer is ignored, then cleaned by the next save of that step
    (tmp_path / "checkpoint-30.tmp").mkdir()
    assert mgr.latest().step == 10
    mgr.save(30, write_payload(30))
    assert mgr.latest().step == 30 and not (tmp_path / "checkpoint-30.tmp").exists()


def test_keep_last_prunes_old_valid_and_stale_invalid(tmp_path):
    mgr = CheckpointManager(tmp_path, keep_last=2)
    (tmp_path / "checkpoint-5").mkdir(parents=True)  # invalid, older than anything valid
    for step in (10, 20, 30):
        mgr.save(step, write_payload(step))
    assert [c.step for c in mgr.all()] == [20, 30]


def test_write_failure_leaves_previous_latest(tmp_path):
    mgr = CheckpointManager(tmp_path)
    mgr.save(1, write_payload(1))

    def boom(d):
        (d / "partial").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError):
        mgr.save(2, boom)
    assert mgr.latest().step == 1
    assert (tmp_path / "latest").read_text().strip() == "checkpoint-1"


def test_resave_same_step_replaces(tmp_path):
    mgr = CheckpointManager(tmp_path)
    mgr.save(7, write_payload("a"))
    mgr.save(7, write_payload("b"))
    assert (mgr.latest().path / "state.txt").read_text() == "b"


def test_empty_root(tmp_path):
    assert CheckpointManager(tmp_path / "none").latest() is None
    with pytest.raises(ValueError):
        CheckpointManager(tmp_path, keep_last=0)
