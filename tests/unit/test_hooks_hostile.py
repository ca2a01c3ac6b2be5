"""Root-side hooks and the root cleanup sweep against files a hostile user planted.

Runs as root (as slurmd runs the hooks); the hostile user is `nobody` (65534), a second user is
`daemon`. Every test here failed on the code before the hooks went through directory fds, the
root-owned spool, the uid-dropping reader and Slurm-confirmed cleanup.
"""

import json
import os
import pwd
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest

from slurmctl.errors import AsUserError
from slurmctl.ops import cleanup
from slurmctl.ops.hooks import asuser, epilog, prolog, run_records
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.ops.hooks.records import read_records
from slurmctl.rundir import run_id_from_comment
from slurmctl.slurm.client import JOB_INFO, QUEUE, SEP, SlurmClient
from slurmctl.slurm.runner import CommandResult

from .fakes import TEST_SEAL, squeue_output

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root-side hooks: the attacks need root and a second uid")

NOBODY = pwd.getpwnam("nobody")
DAEMON = pwd.getpwnam("daemon")
RUN_ID = "victim-20261130-0abc"


@pytest.fixture
def world(tmp_path):
    """A directory every uid can traverse (pytest's tmp_path is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="hostile-", dir="/tmp"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def cfg_for(base: Path) -> HookConfig:
    cfg = HookConfig.from_env({"SLURMD_NODENAME": "n1", "SLURMCTL_LOCAL_DIR": str(base / "state"),
                               "SLURMCTL_SLURM_BIN_DIR": "/nonexistent", "SLURMCTL_MIN_FREE_SCRATCH_MB": "1",
                               "SLURMCTL_MIN_FREE_SHM_MB": "1", "SLURMCTL_RUNS_ROOT": str(base / "runs"),
                               "SLURMCTL_SHM_DIR": str(base / "shm"), "SLURMCTL_DATA_CACHE_DIRS": ""})
    cfg.slurm, cfg.nvidia_smi, cfg.test_trigger_dir = None, None, None
    cfg.scratch_root, cfg.cost_spool = base / "scratch", base / "spool"
    (base / "shm").mkdir(mode=0o1777)
    return cfg


def job_env(job_id: int = 4242, uid: int = NOBODY.pw_uid, **over) -> dict:
    return {"SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": str(uid), "SLURM_JOB_USER": pwd.getpwuid(uid).pw_name,
            "SLURM_JOB_COMMENT": f"slurmctl:{RUN_ID}", "SLURM_JOB_EXIT_CODE2": "0:0", **over}


def as_nobody(fn, *args):
    """Plant something as the hostile user (returns what fn returns)."""
    return asuser.run_as(NOBODY.pw_uid, NOBODY.pw_gid, fn, *args, timeout=5)


# --- prolog: scratch ------------------------------------------------------------------------------
def test_scratch_symlink_in_a_user_writable_root_does_not_hand_over_a_root_directory(world):
    cfg = cfg_for(world)
    cfg.scratch_root.mkdir(mode=0o777)
    os.chmod(cfg.scratch_root, 0o1777)  # a "shared /scratch"
    victim = world / "etc-like"
    victim.mkdir(mode=0o755)
    as_nobody(os.symlink, str(victim), str(cfg.scratch_root / "4242"))
    result = prolog.run_prolog(job_env(), cfg)
    assert result.ok
    assert os.stat(victim).st_uid == 0 and stat.S_IMODE(os.stat(victim).st_mode) == 0o755
    assert any("scratch skipped" in n and "writable by other users" in n for n in result.notes), result.notes


def test_scratch_entry_planted_earlier_is_replaced_by_a_fresh_directory_owned_by_the_job_user(world):
    cfg = cfg_for(world)
    cfg.scratch_root.mkdir(mode=0o755)
    victim = world / "root-dir"
    victim.mkdir(mode=0o755)
    os.symlink(victim, cfg.scratch_root / "4242")  # left from when the root was writable
    result = prolog.run_prolog(job_env(), cfg)
    assert result.ok, result.reason
    made = os.stat(cfg.scratch_root / "4242", follow_symlinks=False)
    assert stat.S_ISDIR(made.st_mode) and (made.st_uid, stat.S_IMODE(made.st_mode)) == (NOBODY.pw_uid, 0o700)
    assert os.stat(victim).st_uid == 0
    epilog.run_epilog(job_env(), cfg)
    assert not (cfg.scratch_root / "4242").exists() and victim.is_dir()


def test_test_trigger_comment_dotdot_does_not_fail_the_prolog(world):
    cfg = cfg_for(world)
    cfg.test_trigger_dir = world / "triggers"
    (world / "triggers" / "prolog-fail").mkdir(parents=True)
    assert prolog.run_prolog(job_env(SLURM_JOB_COMMENT=".."), cfg).ok


# --- epilog: the cost record ----------------------------------------------------------------------
def test_record_is_not_written_through_a_user_writable_spool_nor_to_var_tmp(world):
    cfg = cfg_for(world)
    cfg.cost_spool.mkdir(mode=0o777)
    os.chmod(cfg.cost_spool, 0o777)
    victim = world / "victim-file"
    victim.write_text("precious\n")
    for pid in range(os.getpid() - 50, os.getpid() + 50):  # every tmp name the old epilog could pick
        os.symlink(victim, cfg.cost_spool / f".4242.0.json.n1.{pid}.tmp")
    result = epilog.run_epilog(job_env(), cfg)
    assert victim.read_text() == "precious\n"
    assert any(n.startswith("cost record NOT written") and "writable by other users" in n for n in result.notes)
    assert not list(Path("/var/tmp").glob("slurmctl-cost-records/4242.*"))


def test_spool_that_is_a_symlink_is_refused(world):
    cfg = cfg_for(world)
    elsewhere = world / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, cfg.cost_spool)
    result = epilog.run_epilog(job_env(), cfg)
    assert os.listdir(elsewhere) == []
    assert any("is a symbolic link" in n for n in result.notes), result.notes


def test_spool_is_root_only_and_a_requeued_attempt_keeps_the_first_record(world):
    cfg = cfg_for(world)
    cfg.cost_spool.mkdir(mode=0o755)  # an older version made it 0755: tightened
    first = {"start_time": "2026-11-30T10:00:00"}
    second = {"start_time": "2026-11-30T11:00:00"}
    for fields in (first, second):  # the same job, restart count not bumped yet in the hook's env
        cfg.slurm = SlurmClient(Argv({job_info_argv(): job_info_output(**fields)}))
        epilog.run_epilog(job_env(SLURM_JOB_RESTART_COUNT="0"), cfg)
    st = os.stat(cfg.cost_spool)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
    records = read_records(cfg.cost_spool)
    assert len(records) == 2 and len({r.start_time for r in records}) == 2
    assert all(stat.S_IMODE(os.stat(cfg.cost_spool / n).st_mode) == 0o600 for n in os.listdir(cfg.cost_spool))


def test_a_user_cannot_read_the_spool_and_read_records_says_empty(world):
    cfg = cfg_for(world)
    epilog.run_epilog(job_env(), cfg)
    assert len(read_records(cfg.cost_spool)) == 1
    assert as_nobody(lambda p: len(read_records(Path(p))), str(cfg.cost_spool)) == 0


# --- epilog: the user's run directory -------------------------------------------------------------
def make_run(base: Path, user=NOBODY, run_id=RUN_ID) -> Path:
    (base / "runs").mkdir(mode=0o755, exist_ok=True)
    user_dir = base / "runs" / user.pw_name
    user_dir.mkdir(mode=0o700, exist_ok=True)
    os.chown(user_dir, user.pw_uid, user.pw_gid)

    def build(path):
        os.makedirs(os.path.join(path, "checkpoints"))
        with open(os.path.join(path, "run.json"), "w") as fh:
            json.dump({"run_id": run_id, "name": "victim"}, fh)

    asuser.run_as(user.pw_uid, user.pw_gid, build, str(user_dir / run_id), timeout=5)
    return user_dir / run_id


def test_epilog_never_opens_a_fifo_or_dev_zero_in_the_run_dir_as_root(world):
    """Before: the epilog read job.sbatch (a FIFO here) as root and hung forever."""
    cfg = cfg_for(world)
    run = make_run(world)
    as_nobody(os.mkfifo, str(run / "job.sbatch"))
    as_nobody(os.mkfifo, str(run / "drain.request"))
    as_nobody(os.symlink, "/dev/zero", str(run / "drain.ack"))
    good = run / "checkpoints" / "checkpoint-5"
    as_nobody(os.makedirs, str(good))
    as_nobody(lambda p: Path(p).write_text('{"time": 123.0}'), str(good / ".complete"))
    ck = run / "checkpoints" / "checkpoint-7"
    as_nobody(os.makedirs, str(ck))
    as_nobody(os.mkfifo, str(ck / ".complete"))
    line = job_info_output(std_out=f"{run}/logs/4242.out")
    cfg.slurm = SlurmClient(Argv({job_info_argv(): line}))
    done: list = []
    worker = threading.Thread(target=lambda: done.append(epilog.run_epilog(job_env(), cfg)), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(timeout=10)
    try:
        assert done, "the epilog hung on a file the user planted"
    finally:
        for fifo in (run / "job.sbatch", run / "drain.request", ck / ".complete"):  # free a hung old epilog
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    assert time.monotonic() - started < 3
    [record] = read_records(cfg.cost_spool)
    assert record.run_id == RUN_ID and record.drain_requested  # present (a FIFO), never opened
    assert (record.last_checkpoint_step, record.last_checkpoint_time) == (5, 123.0)  # a FIFO marker is no marker


def test_run_facts_are_read_as_the_job_user_not_as_root(world):
    cfg = cfg_for(world)
    run = make_run(world)
    secret = world / "root-only.json"
    secret.write_text(json.dumps({"run_id": RUN_ID}))
    os.chmod(secret, 0o600)
    os.rename(run / "run.json", run / "run.json.orig")
    os.symlink(secret, run / "run.json")  # root would follow a path; the user's child cannot read it
    (run / "drain.request").touch()
    record = epilog.build_record(cfg, job_env(), None, time.time())
    assert record.drain_requested is False  # run.json unreadable as the user: no facts from this dir
    os.unlink(run / "run.json")
    os.rename(run / "run.json.orig", run / "run.json")
    assert epilog.build_record(cfg, job_env(), None, time.time()).drain_requested is True


def test_run_id_from_the_comment_must_be_a_run_id():
    assert run_records.run_id_of({"SLURM_JOB_COMMENT": "slurmctl:.."}) is None
    assert run_records.run_id_of({"SLURM_JOB_COMMENT": "slurmctl:../../etc"}) is None
    assert run_records.run_id_of({"SLURM_JOB_COMMENT": f"slurmctl:x/{RUN_ID}"}) is None
    assert run_records.run_id_of({"SLURM_JOB_COMMENT": f"slurmctl:{RUN_ID}"}) == RUN_ID


def test_run_as_drops_privileges_and_bounds_a_hang(world):
    assert asuser.run_as(NOBODY.pw_uid, NOBODY.pw_gid, lambda: (os.getuid(), os.geteuid(), os.getgroups())) \
        == [NOBODY.pw_uid, NOBODY.pw_uid, []]
    (world / "secret").write_text("x")
    os.chmod(world / "secret", 0o600)
    with pytest.raises(AsUserError, match="PermissionError"):
        asuser.run_as(NOBODY.pw_uid, NOBODY.pw_gid, lambda p: open(p).read(), str(world / "secret"))
    started = time.monotonic()
    with pytest.raises(AsUserError, match="timed out"):
        asuser.run_as(NOBODY.pw_uid, NOBODY.pw_gid, time.sleep, 30, timeout=0.3)
    assert time.monotonic() - started < 2


# --- cleanup (root's cron) ------------------------------------------------------------------------
class Argv:
    """Replays stdout by FULL argv; an unexpected command fails the test (and is recorded)."""

    def __init__(self, outputs: dict[tuple, str]):
        self.outputs, self.calls = outputs, []

    def run(self, argv, timeout=60.0):
        self.calls.append(list(argv))
        key = tuple(argv)
        if key not in self.outputs and argv[0] == "scancel":
            return CommandResult(key, 0, "", "")
        assert key in self.outputs, f"unexpected command {argv}"
        return CommandResult(key, 0, self.outputs[key], "")


def job_info_argv(job_id="4242") -> tuple:
    return ("squeue", "-h", "-t", "all", "-j", str(job_id), *JOB_INFO.format_argv(TEST_SEAL))


def job_info_output(**fields) -> str:
    """The hooks' sealed squeue record of one job (SlurmClient.job_info), defaults overridden by attr."""
    base = {"job_id": "4242", "state": "COMPLETING", "exit_code": "0", "restarts": "0",
            "start_time": "2026-11-30T10:00:00", "end_time": "Unknown", "batch_host": "n1", "nodelist": "n1",
            "tres": "cpu=1,gres/gpu=1", "std_out": "/dev/null", "work_dir": "/tmp",
            "name": "train-20261130-0001"}
    base.update(fields)
    return squeue_output([base[attr] for attr in JOB_INFO.attrs])


SQUEUE_QUEUE = ("squeue", "-h", *QUEUE.format_argv(TEST_SEAL))


def queue_fields(job_id, name, state, reason, comment, user, partition="l4-dev", elapsed="0:00") -> list[str]:
    values = {"job_id": str(job_id), "state": state, "reason": reason, "partition": partition, "num_nodes": "1",
              "elapsed_seconds": elapsed, "time_limit_seconds": "1:00:00", "submit_time": "N/A",
              "start_time": "N/A", "user": user, "name": name, "comment": comment}
    return [values.get(attr, "") for attr in QUEUE.attrs]


def squeue_line(job_id, name, state, reason, comment, user, partition="l4-dev", elapsed="0:00") -> str:
    """One record of the sweep's sealed squeue listing, in the client's own field order."""
    fields = queue_fields(job_id, name, state, reason, comment, user, partition, elapsed)
    return squeue_output(fields).removesuffix("\n")


def confirm_argv(job_id) -> tuple:
    return ("squeue", "-h", "-j", str(job_id), "-o", SEP.join(["%A", "%U", "%T", "%r", "%P", "%M", "%k"]))


def site_for(world):
    from slurmctl.config.models import SiteConfig

    return SiteConfig.model_validate({"cluster": "t", "runs_root": str(world / "runs"), "dev_allocation_ttl": "8h",
                                      "partitions": {
        "l4-dev": {"capacity": "dev", "gpu_type": "l4", "gpus_per_node": 1, "price_per_gpu_hour": 0.35}}})


def test_forged_job_name_in_squeue_does_not_make_root_cancel_another_users_job(world):
    """bob (nobody) names his job so that squeue would print a fake line for alice's (daemon's) job 555:
    held, of a run whose directory is gone. Without the seal it stays his job's name; and the
    controller, asked again before any scancel, says 555 is RUNNING: nothing is cancelled."""
    make_run(world, DAEMON, "alice-20261130-aaaa")
    forged = queue_fields(555, "y", "PENDING", "JobHeldUser", "slurmctl:gone-20261130-dead", "daemon")
    forged_name = "x\n" + "\x1f".join(forged[:-1])  # bob's own comment completes the forged line
    queue = squeue_line(777, forged_name, "RUNNING", "None", "slurmctl:gone-20261130-dead", "nobody") + "\n" + \
        squeue_line(555, "alice", "RUNNING", "None", "slurmctl:alice-20261130-aaaa", "daemon") + "\n"
    runner = Argv({SQUEUE_QUEUE: queue,
                   confirm_argv(555): SEP.join(["555", str(DAEMON.pw_uid), "RUNNING", "None", "l4-dev", "5:00",
                                                "slurmctl:alice-20261130-aaaa"]) + "\n",
                   confirm_argv(777): SEP.join(["777", str(NOBODY.pw_uid), "RUNNING", "None", "l4-dev", "5:00",
                                                "slurmctl:gone-20261130-dead"]) + "\n"})
    client = SlurmClient(runner)
    listed = {j.job_id: j for j in client.queue(mine=False)}
    assert run_id_from_comment(listed[555].comment) == "alice-20261130-aaaa" and listed[777].name == forged_name
    orphans = cleanup.find_orphans(site_for(world), client)
    cleanup.release(orphans, client)
    assert not [c for c in runner.calls if c[0] == "scancel"], runner.calls
    assert [o for o in orphans if o.job_id == 555] == []


def test_held_job_is_cancelled_only_after_the_controller_confirms_owner_and_run(world):
    runner = Argv({SQUEUE_QUEUE: squeue_line(600, "gone", "PENDING", "JobHeldUser",
                                             "slurmctl:gone-20261130-dead", "nobody") + "\n",
                   confirm_argv(600): SEP.join(["600", str(NOBODY.pw_uid), "PENDING", "JobHeldUser", "l4-dev", "0:00",
                                                "slurmctl:gone-20261130-dead"]) + "\n"})
    (world / "runs").mkdir(mode=0o755)
    client = SlurmClient(runner)
    orphans = cleanup.find_orphans(site_for(world), client)
    assert [(o.kind, o.job_id, o.user) for o in orphans] == [("held-job", 600, "nobody")]
    cleanup.release(orphans, client)
    assert runner.calls[-1] == ["scancel", "600"] and orphans[0].released
    assert runner.calls.count(list(confirm_argv(600))) == 2  # when found, and again right before scancel


def test_symlinked_run_dir_does_not_make_cleanup_delete_another_users_drain_request(world):
    """bob (nobody) links a run id in his own runs directory to alice's (daemon's) live run."""
    alice_run = make_run(world, DAEMON, "alice-20261130-aaaa")
    asuser.run_as(DAEMON.pw_uid, DAEMON.pw_gid, lambda p: open(p, "w").close(), str(alice_run / "drain.request"))
    make_run(world, NOBODY, "other-20261130-bbbb")  # bob's own dir exists
    as_nobody(os.symlink, str(alice_run), str(world / "runs" / "nobody" / "evil-20261130-cccc"))
    os.chmod(world / "runs" / "daemon", 0o755)  # even where bob could traverse into alice's runs
    runner = Argv({SQUEUE_QUEUE: ""})
    client = SlurmClient(runner)
    orphans = cleanup.find_orphans(site_for(world), client)
    assert [(o.user, o.run_id) for o in orphans] == [("daemon", "alice-20261130-aaaa")]  # hers, no live job
    runner.outputs[SQUEUE_QUEUE] = squeue_line(900, "a", "RUNNING", "None", "slurmctl:alice-20261130-aaaa",
                                               "daemon", partition="h100-ondemand") + "\n"
    assert cleanup.find_orphans(site_for(world), client) == []
    assert (alice_run / "drain.request").exists()


def test_cleanup_skips_a_user_dir_not_owned_by_its_user_and_survives_a_fifo(world):
    make_run(world, DAEMON, "alice-20261130-aaaa")
    os.mkfifo(world / "runs" / "daemon" / "alice-20261130-aaaa" / "attempts.jsonl")
    (world / "runs" / "nobody").symlink_to(world / "runs" / "daemon")  # bob's "directory" is alice's
    runner = Argv({SQUEUE_QUEUE: squeue_line(601, "a", "PENDING", "JobHeldUser", "slurmctl:alice-20261130-aaaa",
                                             "daemon") + "\n",
                   confirm_argv(601): SEP.join(["601", str(DAEMON.pw_uid), "PENDING", "JobHeldUser", "l4-dev",
                                                "0:00", "slurmctl:alice-20261130-aaaa"]) + "\n"})
    cleanup_pass = cleanup.CleanupPass()
    started = time.monotonic()
    orphans = cleanup.find_orphans(site_for(world), SlurmClient(runner), cleanup_pass=cleanup_pass)
    assert time.monotonic() - started < 3
    assert orphans == []  # attempts.jsonl unreadable (a FIFO): no "ended" evidence, nothing released
    assert any("nobody" in n and "not a directory owned by nobody" in n for n in cleanup_pass.notes), cleanup_pass.notes


# --- the entry points -----------------------------------------------------------------------------
@pytest.mark.parametrize("hook", ["prolog", "epilog"])
def test_a_broken_package_never_fails_the_hook(world, hook):
    """slurmd drains the node when a hook fails: an import error of ours must exit 0."""
    repo = Path(__file__).resolve().parents[2]
    (world / "plugins").mkdir()
    shutil.copy(repo / "plugins" / f"{hook}.py", world / "plugins")
    (world / "slurmctl").mkdir()
    (world / "slurmctl" / "__init__.py").write_text("raise ImportError('half-installed')\n")
    import subprocess

    out = subprocess.run(["/usr/bin/python3", str(world / "plugins" / f"{hook}.py")], env={"SLURM_JOB_ID": "1"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "half-installed" in out.stderr


def test_dev_ttl_ends_only_slurmctl_dev_allocations_the_controller_confirms_past_the_ttl(world):
    """A queue line says 9 hours for three dev jobs: 701 is a `slurmctl dev` allocation (confirmed 9 h),
    702 is not slurmctl's, 703 is slurmctl's but the controller says 5 minutes (a forged line)."""
    (world / "runs").mkdir(mode=0o755)
    queue = "\n".join(squeue_line(j, "d", "RUNNING", "None", c, "daemon", elapsed="9:00:00") for j, c in
                      ((701, "slurmctl-dev:daemon"), (702, "someone-else"), (703, "slurmctl-dev:daemon"))) + "\n"

    def confirmed(job_id, comment, elapsed):
        return SEP.join([str(job_id), str(DAEMON.pw_uid), "RUNNING", "None", "l4-dev", elapsed, comment]) + "\n"

    runner = Argv({SQUEUE_QUEUE: queue, confirm_argv(701): confirmed(701, "slurmctl-dev:daemon", "9:00:00"),
                   confirm_argv(702): confirmed(702, "someone-else", "9:00:00"),
                   confirm_argv(703): confirmed(703, "slurmctl-dev:daemon", "5:00")})
    client = SlurmClient(runner)
    orphans = cleanup.find_orphans(site_for(world), client)
    assert [(o.kind, o.job_id, o.user) for o in orphans] == [("dev-ttl", 701, "daemon")]
    cleanup.release(orphans, client)
    assert [c for c in runner.calls if c[0] == "scancel"] == [["scancel", "701"]]


def test_the_user_gets_a_copy_of_the_record_in_the_run_dir_written_as_the_user(world):
    # The spool is root's 0700, so a user's `slurmctl cost` reads this copy for drain/checkpoint facts.
    from slurmctl.ops.accounting import read_epilog_records

    cfg = cfg_for(world)
    run = make_run(world)
    (run / "drain.request").touch()
    record = epilog.build_record(cfg, job_env(), None, time.time())
    copy = run / "cost-records" / record.filename
    assert copy.stat().st_uid == NOBODY.pw_uid and copy.stat().st_mode & 0o077 == 0
    assert json.loads(copy.read_text())["drain_requested"] is True
    assert read_epilog_records(None, [run / "cost-records"])[(4242, "0")]["run_id"] == RUN_ID
    assert read_epilog_records(cfg.cost_spool, [world / "missing"]) == {}
