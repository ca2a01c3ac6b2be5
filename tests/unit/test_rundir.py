"""slurmctl.rundir and slurmctl.fsutil: the layout, the checkpoint-dir rule, the one step rate, who
may open a run, and readers that never block or follow a planted file."""

import json
import os
import signal
import stat
import sys
import time
from contextlib import contextmanager

import pytest

from slurmctl.config.models import RunSpec
from slurmctl.errors import ConfigError, RunNotFound, RunNotOwned, UnsafeFile
from slurmctl.fsutil import append_jsonl, read_json, read_jsonl, tail_jsonl, tail_text_lines, write_atomic
from slurmctl.rundir import (
    Run,
    RunRegistry,
    current_user,
    is_run_id,
    resolve_checkpoint_dir,
    run_id_from_comment,
    step_rate,
)
from slurmctl.runtime.checkpoint import CheckpointManager

SPEC = RunSpec(name="demo", entrypoint="train.py", partition="l4-dev")
OTHER_UID = 54321  # a caller that owns nothing here


@contextmanager
def deadline(seconds: int = 3):
    """Fail instead of hanging when a reader blocks (a FIFO with no writer blocks a plain open forever)."""
    def hung(signum, frame):
        raise AssertionError(f"blocked for more than {seconds} s")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def make_run(registry: RunRegistry, name: str = "demo", created: float | None = None, **meta) -> Run:
    run = registry.create(SPEC.model_copy(update={"name": name}))
    write_atomic(run.meta_path, json.dumps({"run_id": run.run_id, "name": name, "created": created or time.time(),
                                            **meta}))
    return run


# --- layout ---------------------------------------------------------------------------------------

def test_every_file_name_comes_from_rundir(tmp_path):
    run = Run("demo-20261130-abcd", tmp_path)
    names = {p.name for p in (run.spec_path, run.meta_path, run.script_path, run.attempts_path, run.logs_dir,
                              run.heartbeat_path, run.metrics_path, run.drain_request_path, run.drain_ack_path,
                              run.default_checkpoint_dir, run.watchdog_dir, run.preflight_path)}
    assert names == {"run.yaml", "run.json", "job.sbatch", "attempts.jsonl", "logs", "heartbeat.json", "metrics.jsonl",
                     "drain.request", "drain.ack", "checkpoints", "watchdog", "preflight.json"}
    assert run.log_path(42) == tmp_path / "logs" / "42.out"


def test_rundir_imports_only_the_standard_library():
    import subprocess
    code = ("import sys; import slurmctl.rundir, slurmctl.fsutil, slurmctl.runtime, slurmctl.runtime.attempt; "
            "bad = [m for m in sys.modules if m.split('.')[0] in {'yaml', 'pydantic', 'click', 'rich'}]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_run_ids_and_comments():
    assert is_run_id("demo-20261130-0bad") and is_run_id("a.b_c-20261130-ffff")
    for bad in ("..", ".", "demo", "demo-20261130-0bad/x", "../demo-20261130-0bad", "demo-20261130-0bad\n",
                "Demo-20261130-0bad", "-x-20261130-0bad", ""):
        assert not is_run_id(bad), bad
    assert run_id_from_comment("slurmctl:demo-20261130-0bad") == "demo-20261130-0bad"
    for comment in ("slurmctl:..", "slurmctl:", "slurmctl:../../etc", "slurmctl:a/b-20261130-0bad", "other:x", None):
        assert run_id_from_comment(comment) is None, comment


# --- the checkpoint dir -----------------------------------------------------------------------------

def test_checkpoint_dir_rule(tmp_path):
    work, run_dir = tmp_path / "work", tmp_path / "runs" / "alice" / "demo-20261130-abcd"
    assert resolve_checkpoint_dir(None, work, run_dir) == run_dir / "checkpoints"
    assert resolve_checkpoint_dir("ckpts/a", work, run_dir) == work / "ckpts" / "a"  # the job's cwd is the workdir
    assert resolve_checkpoint_dir("../shared/ck", work, run_dir) == tmp_path / "shared" / "ck"
    assert resolve_checkpoint_dir("/data/ck", work, run_dir) == tmp_path.root / __import__("pathlib").Path("data/ck")


def test_run_reads_the_recorded_checkpoint_dir_and_falls_back_for_old_runs(tmp_path):
    run = Run("demo-20261130-abcd", tmp_path / "run")
    run.path.mkdir()
    assert run.checkpoint_dir == run.path / "checkpoints"  # nothing recorded
    run.spec_path.write_text(f"name: demo\nworkdir: {tmp_path / 'work'}\ncheckpoint: {{dir: ck}}\n")
    assert run.checkpoint_dir == tmp_path / "work" / "ck"  # an old run: run.yaml, same rule
    run.meta_path.write_text(json.dumps({"checkpoint_dir": str(tmp_path / "elsewhere")}))
    assert run.checkpoint_dir == tmp_path / "elsewhere"  # run.json wins
    CheckpointManager(tmp_path / "elsewhere").save(7, lambda d: (d / "x").write_text("x"))
    assert CheckpointManager(run.checkpoint_dir).latest().step == 7
    run.meta_path.write_text(json.dumps({"checkpoint_dir": "relative/is/ignored"}))
    assert run.checkpoint_dir == tmp_path / "work" / "ck"


# --- the one step rate ------------------------------------------------------------------------------

def test_step_rate_counts_only_the_current_attempt(tmp_path):
    run = Run("demo-20261130-abcd", tmp_path)
    now = 10_000.0
    for step in range(0, 41):  # attempt 1: 1 step/s
        append_jsonl(run.metrics_path, {"step": step, "time": now + step})
    # queued for 1000 s, then resumed from the checkpoint at step 40: 0.5 steps/s, steps continue
    for i, step in enumerate(range(41, 61)):
        append_jsonl(run.metrics_path, {"step": step, "time": now + 1040 + 2.0 * i})
    append_jsonl(run.attempts_path, {"event": "start", "time": now - 1})
    append_jsonl(run.attempts_path, {"event": "start", "time": now + 1030})
    assert run.step_rate() == pytest.approx(0.5)
    # without the attempt boundary the queue wait would count as training time
    assert step_rate(run.metrics_tail()) < 0.2
    # a resume that replays steps (from an older checkpoint) restarts the window too
    assert step_rate([{"step": s, "time": float(s)} for s in range(10)] +
                     [{"step": s, "time": 100.0 + 4 * (s - 5)} for s in range(5, 10)]) == pytest.approx(0.25)
    assert step_rate([{"step": 1, "time": 1.0}]) is None


# --- ownership --------------------------------------------------------------------------------------

def test_create_makes_a_private_user_dir_and_run_dir(tmp_path):
    registry = RunRegistry(tmp_path)
    run = make_run(registry)
    assert registry.root == tmp_path / current_user()
    assert stat.S_IMODE(os.lstat(registry.root).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(run.path).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(run.meta_path).st_mode) == 0o600  # the CLI's umask for run files
    assert registry.get("demo").run_id == run.run_id and registry.get(run.run_id[:8]).path == run.path
    assert registry.get(str(run.path)).run_id == run.run_id


def test_shared_runs_are_group_readable(tmp_path):
    registry = RunRegistry(tmp_path)
    run = registry.create(SPEC, share_with_group=True)
    write_atomic(run.meta_path, "{}")
    assert stat.S_IMODE(os.lstat(run.path).st_mode) == 0o750
    assert stat.S_IMODE(os.lstat(run.meta_path).st_mode) == 0o640
    os.umask(0o077)


def test_missing_user_dir_that_cannot_be_created_names_the_operator(tmp_path):
    registry = RunRegistry(tmp_path / "no-such-root")
    assert registry.list() == []
    with pytest.raises(ConfigError, match="cannot be created") as exc:
        registry.create(SPEC)
    assert "Ask the operator" in exc.value.hint and "install -d -m 0700" in exc.value.hint


def test_symlinked_user_dir_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / current_user()).symlink_to(elsewhere)
    registry = RunRegistry(tmp_path / "runs")
    for action in (registry.list, lambda: registry.get("demo"), lambda: registry.create(SPEC)):
        with pytest.raises(RunNotOwned, match="symbolic link"):
            action()


def test_group_writable_user_dir_is_refused(tmp_path):
    user_dir = tmp_path / current_user()
    user_dir.mkdir()
    os.chmod(user_dir, 0o770)
    with pytest.raises(RunNotOwned, match="writable by group or others"):
        RunRegistry(tmp_path).list()


def test_runs_of_another_user_are_never_found_or_opened(tmp_path):
    """The planted-run attack: the victim's `resume demo` must not reach the planter's run."""
    planter = RunRegistry(tmp_path)  # owns everything created here
    planted = make_run(planter, created=time.time() + 10 ** 8)  # "newest" demo run, far in the future
    victim = RunRegistry(tmp_path, user="victim", uid=OTHER_UID)
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir(mode=0o700)
    os.chown(victim_dir, OTHER_UID, -1) if os.geteuid() == 0 else pytest.skip("needs root to chown")
    assert victim.list() == []
    with pytest.raises(RunNotFound):
        victim.get("demo")
    with pytest.raises(RunNotOwned, match="not to you"):
        victim.get(str(planted.path))  # an explicit path the caller does not own
    # planted inside the victim's dir (only root could): skipped by the listing, refused by id
    inside = victim_dir / planted.run_id
    inside.mkdir()
    (inside / "run.json").write_text(json.dumps({"name": "demo"}))
    assert victim.list() == []
    with pytest.raises(RunNotOwned):
        victim.get(planted.run_id)


def test_explicit_paths_through_symlinks_are_refused(tmp_path):
    registry = RunRegistry(tmp_path)
    run = make_run(registry)
    link = tmp_path / "link-to-run"
    link.symlink_to(run.path)
    with pytest.raises(RunNotOwned, match="symbolic link"):
        registry.get(str(link))
    (registry.root / "alias-20261130-0000").symlink_to(run.path)
    assert [r.run_id for r in registry.list()] == [run.run_id]  # a symlink is no run
    with pytest.raises(RunNotOwned):
        registry.get("alias-20261130-0000")


def test_all_users_is_the_operators_view(tmp_path, monkeypatch):
    registry = RunRegistry(tmp_path)
    run = make_run(registry)
    (tmp_path / "stray-link").symlink_to(registry.root)  # a symlinked "user dir" is skipped
    if os.geteuid() == 0:
        assert registry.list_all_users() == [(current_user(), run)]
    monkeypatch.setattr(os, "geteuid", lambda: OTHER_UID)
    with pytest.raises(RunNotOwned, match="operator"):
        registry.list_all_users()


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's files need root to make")
def test_a_reader_who_is_not_the_owner_reads_bounded_tails_and_a_bounded_listing(tmp_path, monkeypatch):
    """root (the operator's ls, status, web view) reads the newest bytes of another user's
    attempts.jsonl and metrics.jsonl and looks at a bounded number of their run directories; the
    owner reads all of it."""
    from slurmctl.rundir import layout
    from slurmctl.rundir import registry as registry_module

    owner = RunRegistry(tmp_path, "mallory", uid=OTHER_UID)
    owner.root.mkdir(mode=0o700)
    os.chown(owner.root, OTHER_UID, OTHER_UID)
    run_dir = owner.root / "big-20261201-0001"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_dir.name, "created": 1.0}))
    event = json.dumps({"event": "submitted", "job_id": 7}) + "\n"
    (run_dir / "attempts.jsonl").write_text(event * 20000)  # ~600 KiB
    (run_dir / "metrics.jsonl").write_text((json.dumps({"step": 1, "loss": 0.5}) + "\n") * 60000)  # ~1.6 MiB
    for path in (run_dir, *run_dir.iterdir()):
        os.chown(path, OTHER_UID, OTHER_UID)
    run = Run(run_dir.name, run_dir)
    events, metrics = run.events(), run.metrics_records()
    assert 0 < len(events) * len(event) <= layout.OTHERS_EVENTS_BYTES < 20000 * len(event)
    assert 0 < len(metrics) < 60000 and run.job_ids() == [7]
    monkeypatch.setattr(os, "geteuid", lambda: OTHER_UID)  # the owner reads everything
    assert len(run.events()) == 20000 and len(run.metrics_records()) == 60000
    monkeypatch.undo()

    monkeypatch.setattr(registry_module, "OTHERS_DIR_ENTRIES", 50)
    for i in range(200):  # many run dirs of one day: only the newest `limit` run.json are read
        extra = owner.root / f"many-20261201-{i:04x}"
        extra.mkdir()
        (extra / "run.json").write_text(json.dumps({"run_id": extra.name, "created": 2.0 + i}))
        os.chown(extra, OTHER_UID, OTHER_UID)
    listed = RunRegistry(tmp_path).list_all_users(limit=5)
    assert len(listed) == 5 and {u for u, _ in listed} == {"mallory"}
    reads = []
    monkeypatch.setattr(Run, "meta", property(lambda r: reads.append(r.run_id) or {"created": 0}))
    RunRegistry(tmp_path).list_all_users(limit=5)
    assert len(set(reads)) <= 5 + 1  # the newest 5 of the first 50 entries looked at (+ run_dir's day)


# --- readers that never block -----------------------------------------------------------------------

def test_tail_refuses_fifo_dev_zero_and_symlinks_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    link = tmp_path / "link.log"
    link.symlink_to("/etc/passwd")
    with deadline():
        with pytest.raises(UnsafeFile, match="FIFO"):
            tail_text_lines(fifo, 10)
        with pytest.raises(UnsafeFile, match="device"):
            tail_text_lines("/dev/zero", 10)
        with pytest.raises(UnsafeFile, match="symbolic link"):
            tail_text_lines(link, 10)
        assert read_json(fifo) is None and read_json("/dev/zero") is None
        assert tail_jsonl(fifo) == [] and read_jsonl(fifo) == []
    assert tail_text_lines(tmp_path / "missing.log") == []


def test_run_readers_survive_planted_fifos(tmp_path):
    run = Run("demo-20261130-abcd", tmp_path)
    for path in (run.heartbeat_path, run.metrics_path, run.attempts_path, run.meta_path, run.drain_request_path):
        os.mkfifo(path)
    with deadline():
        assert run.heartbeat() is None and run.metrics_tail() == [] and run.events() == [] and run.meta == {}
        assert run.drain_request() == {"reason": "unknown"} and run.step_rate() is None


def test_tail_caps_bytes_and_drops_the_cut_line(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    lines = tail_text_lines(log, 0, max_bytes=1000)
    assert lines[-1] == "line 99999" and len(lines) < 130 and all(line.startswith("line ") for line in lines)
    assert tail_text_lines(log, 3) == ["line 99997", "line 99998", "line 99999"]


def test_write_atomic_never_follows_a_planted_temp_name(tmp_path, monkeypatch):
    target = tmp_path / "victim"
    target.write_text("keep")
    monkeypatch.setattr(os, "urandom", lambda n: b"\0" * n)
    tmp_name = tmp_path / f".heartbeat.json.{os.getpid()}.{'00' * 4}.tmp"
    tmp_name.symlink_to(target)
    with pytest.raises(FileExistsError):
        write_atomic(tmp_path / "heartbeat.json", "{}")
    assert target.read_text() == "keep"


# --- load_torch --------------------------------------------------------------------------------------

class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/slurmctl-load-torch-pwned",))


def test_load_torch_refuses_code_in_a_checkpoint(tmp_path):
    torch = pytest.importorskip("torch")
    from slurmctl.runtime.checkpoint import load_torch

    ck = CheckpointManager(tmp_path).save(1, lambda d: torch.save({"w": torch.ones(2), "x": _Boom()}, d / "state.pt"))
    if os.path.exists("/tmp/slurmctl-load-torch-pwned"):
        os.unlink("/tmp/slurmctl-load-torch-pwned")
    with pytest.raises(Exception, match="[Ww]eights only|weights_only"):
        load_torch(ck)
    assert not os.path.exists("/tmp/slurmctl-load-torch-pwned")
    CheckpointManager(tmp_path).save(2, lambda d: torch.save({"w": torch.ones(2)}, d / "state.pt"))
    assert torch.equal(load_torch(CheckpointManager(tmp_path).latest())["w"], torch.ones(2))


def test_old_run_with_a_broken_or_hostile_run_yaml_uses_the_default_checkpoint_dir(tmp_path):
    run = Run("demo-20261130-abcd", tmp_path)
    run.spec_path.write_text("checkpoint: {dir: [unclosed\n")
    assert run.checkpoint_dir == tmp_path / "checkpoints"
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))
    run.spec_path.write_text(bomb + "checkpoint: {dir: /elsewhere}\n")
    with deadline(5):
        assert run.checkpoint_dir == tmp_path / "checkpoints"


def test_status_and_exporter_show_the_same_rate_after_a_resume(tmp_path, local_site):
    from slurmctl.observe.status import build_status
    from slurmctl.ops.run_sample import read_run
    from slurmctl.slurm.records import Job

    run = Run("demo-20261130-abcd", tmp_path)
    now = time.time()
    # attempt 1 at 4 steps/s and a checkpoint at its last step (29); ~16 min queued; the resume
    # continues at step 30 with 0.5 steps/s: the steps stay monotone across the gap
    for step in range(0, 30):
        append_jsonl(run.metrics_path, {"step": step, "time": now - 1000 + step / 4})
    for i, step in enumerate(range(30, 41)):
        append_jsonl(run.metrics_path, {"step": step, "time": now - 22 + 2 * i})
    append_jsonl(run.attempts_path, {"event": "start", "time": now - 1001})
    append_jsonl(run.attempts_path, {"event": "start", "time": now - 45})
    write_atomic(run.heartbeat_path, json.dumps({"step": 40, "time": now - 2}))
    status = build_status(run, None, now)
    sample = read_run(run, Job(job_id=1, state="RUNNING", partition="l4-dev", comment=f"slurmctl:{run.run_id}",
                               user=current_user()), local_site, now)
    assert status.steps_per_second == pytest.approx(0.5)
    assert sample.step_seconds == pytest.approx(1 / status.steps_per_second)


def test_recent_starts_counts_start_events_and_parses_only_the_newest(tmp_path):
    run = Run("demo-20261130-abcd", tmp_path)
    assert run.recent_starts() == (0, None)
    for t in (1.0, 2.0, 3.0):
        append_jsonl(run.attempts_path, {"event": "start", "time": t})
        append_jsonl(run.attempts_path, {"event": "end", "time": t + 0.5, "note": '"event": "start"'})
    with open(run.attempts_path, "a") as fh:
        fh.write('{"event": "start", "time": 9.0, "torn')  # a killed writer's last line
    assert run.recent_starts() == (3, 3.0)  # the torn line is cut off; the quoted mark inside a note is no start
    pinned_counts = None
    with run.pinned_as(os.geteuid()) as pinned:
        pinned_counts = pinned.recent_starts()
    assert pinned_counts == (3, 3.0)
