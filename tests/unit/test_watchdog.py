"""The progress watchdog against REAL processes and run dirs (no Slurm: --pid is what it ends).

Windows are shrunk to about a second so the whole file runs in ~15 s.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slurmctl.runtime.watchdog import StepReader

# A fake training: writes progress in one of four conventions every 0.2 s; can hang or drain.
TRAINER = textwrap.dedent(r"""
    import faulthandler, json, os, signal, sys, time
    from pathlib import Path
    from slurmctl.runtime import Runtime
    style, hang_after, total, on_hang = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    run_dir = Path(os.environ["SLURMCTL_RUN_DIR"])
    rt = Runtime.from_env()
    log = open(run_dir / "train.log", "a")
    for step in range(1, total + 1):
        while step > hang_after:                   # the hang: no progress ...
            if on_hang == "polls" and (run_dir / "drain.request").exists():
                rt.ack_drain(step - 1)             # ... but the drain flag is still polled
                sys.exit(0)
            time.sleep(0.1 if on_hang == "polls" else 3600)
        if style == "step":
            rt.log(step, loss=1.0 / step)          # heartbeat.json {"step": ...}
        elif style == "global_step":
            tmp = run_dir / ".state.tmp"; tmp.write_text(json.dumps({"global_step": step * 8}))
            os.replace(tmp, run_dir / "trainer_state.json")
        elif style == "iteration":
            with open(run_dir / "events.jsonl", "a") as fh:
                fh.write(json.dumps({"train": {"iteration": step, "lr": 0.1}}) + "\n")
        elif style == "regex":
            print(f"iter {step}/{total} | loss {1.0 / step:.3f}", file=log, flush=True)
        time.sleep(0.2)
""")

CONVENTIONS = {
    "step": ("step", "heartbeat.json"),
    "global_step": ("global_step", "trainer_state.json"),
    "iteration": ("train.iteration", "events.jsonl"),
    "regex": (r"regex:^iter (\d+)/", "train.log"),
}


def start_trainer(run_dir: Path, style: str, hang_after: int, total: int, on_hang="sleeps") -> subprocess.Popen:
    script = run_dir / "trainer.py"
    script.write_text(TRAINER)
    env = {**os.environ, "SLURMCTL_RUN_DIR": str(run_dir)}
    return subprocess.Popen([sys.executable, str(script), style, str(hang_after), str(total), on_hang],
                            env=env,
                            stderr=open(run_dir / "train.log", "a"), start_new_session=True)


def start_watchdog(run_dir: Path, style: str, pid: int, stall="1.2", startup="3", drain="1") -> subprocess.Popen:
    field, source = CONVENTIONS[style]
    argv = [sys.executable, "-m", "slurmctl.runtime.watchdog", "--run-dir", str(run_dir), "--step-field", field,
            "--source", source, "--check", "0.3s", "--stall", f"{stall}s", "--startup", f"{startup}s",
            "--drain-timeout", f"{drain}s", "--pid", str(pid), "--kill-grace", "1", "--log", str(run_dir / "train.log")]
    return subprocess.Popen(argv, stderr=open(run_dir / "watchdog.err", "w"))


def finish(*procs):
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def test_hang_after_step_5_is_caught_within_the_window(tmp_path):
    trainer = start_trainer(tmp_path, "regex", hang_after=5, total=1000)
    dog = start_watchdog(tmp_path, "regex", trainer.pid)
    try:
        assert dog.wait(timeout=30) == 3, (tmp_path / "watchdog.err").read_text()
        killed_at = time.time()
        trainer.wait(timeout=10)
    finally:
        finish(trainer, dog)
    err = (tmp_path / "watchdog.err").read_text()
    assert "WARNING: no progress in field 'regex:^iter (\\d+)/'" in err
    assert "HUNG: no progress" in err and "last value 5" in err
    request = json.loads((tmp_path / "drain.request").read_text())
    assert request["reason"] == "watchdog"
    state = json.loads((tmp_path / "watchdog" / "state.json").read_text())
    assert state["state"] == "killed" and state["last_value"] == 5
    scene = Path(state["scene"])
    stacks = (scene / "stacks.txt").read_text()
    if "faulthandler dump requested" in stacks:  # py-spy cannot attach (e.g. no ptrace)
        assert "Thread" in (tmp_path / "train.log").read_text()
    else:
        assert "trainer.py" in stacks  # py-spy dump of the hung rank
    assert "iter 5/1000" in (scene / "log_tail.txt").read_text()
    last_progress = (tmp_path / "train.log").stat().st_mtime  # approximate; bound generously
    # detection latency: last progress -> step ended, vs stall 1.2 s + drain 1 s + kill grace 1 s, plus 3 s
    # of slack; on a machine with more runnable processes than cores every step of that chain waits its turn
    crowding = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    assert killed_at - last_progress < (1.2 + 1.0 + 1.0 + 3.0) * crowding, err


def test_four_step_conventions_are_never_killed(tmp_path):
    pairs = []
    for style in CONVENTIONS:
        run_dir = tmp_path / style
        run_dir.mkdir()
        trainer = start_trainer(run_dir, style, hang_after=10**6, total=25)  # ~5 s of steady progress
        pairs.append((run_dir, trainer, start_watchdog(run_dir, style, trainer.pid)))
    try:
        for run_dir, trainer, dog in pairs:
            assert trainer.wait(timeout=30) == 0
            assert dog.poll() is None, (run_dir / "watchdog.err").read_text()  # still watching, never fired
            assert not (run_dir / "drain.request").exists()
            assert "HUNG" not in (run_dir / "watchdog.err").read_text()
    finally:
        finish(*(p for _, t, d in pairs for p in (t, d)))


def test_field_that_never_appears_is_a_config_problem_not_a_kill(tmp_path):
    trainer = start_trainer(tmp_path, "step", hang_after=10**6, total=300)
    (tmp_path / "trainer_state.json").write_text(json.dumps({"epoch": 1}))
    dog = start_watchdog(tmp_path, "global_step", trainer.pid, startup="1")
    try:
        deadline = time.monotonic() + 20  # start-up 1 s; a loaded machine may take longer to get there
        while "CONFIGURATION PROBLEM" not in (tmp_path / "watchdog.err").read_text() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert trainer.poll() is None and dog.poll() is None
    finally:
        finish(trainer, dog)
    err = (tmp_path / "watchdog.err").read_text()
    assert "CONFIGURATION PROBLEM: field 'global_step'" in err and "has no such field" in err
    assert not (tmp_path / "drain.request").exists()


def test_a_drain_that_is_acknowledged_ends_the_watchdog_without_a_kill(tmp_path):
    trainer = start_trainer(tmp_path, "step", hang_after=3, total=100, on_hang="polls")
    dog = start_watchdog(tmp_path, "step", trainer.pid, stall="0.6", drain="5")
    try:
        assert dog.wait(timeout=30) == 0, (tmp_path / "watchdog.err").read_text()
        assert trainer.wait(timeout=10) == 0
    finally:
        finish(trainer, dog)
    assert json.loads((tmp_path / "drain.ack").read_text())["step"] == 3
    assert json.loads((tmp_path / "watchdog" / "state.json").read_text())["state"] == "drained"


@pytest.mark.parametrize("text,field,expected", [
    ('{"step": 7, "time": 1}', "step", 7.0),
    ('{"a": {"b": 3}}', "a.b", 3.0),
    ('{"a": 1}', "step", None),
])
def test_step_reader_json(tmp_path, text, field, expected):
    path = tmp_path / "x.json"
    path.write_text(text)
    assert StepReader(field, path).read() == expected


def test_step_reader_jsonl_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"iteration": 4}\n{"iteration": 5}\n{"itera')
    assert StepReader("iteration", path).read() == 5.0
