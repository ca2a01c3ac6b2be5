"""Node health's pure parts: the drain-reason contract, the blame score, the fault stub's trust
rule, the verification job's command line (run through a real shell)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from slurmctl.ops.health import blame, checks, reasons
from slurmctl.ops.health.agent import verify_command
from slurmctl.ops.hooks.config import HookConfig


def test_only_our_prefix_is_ours():
    ours = reasons.DrainReason(reasons.NODE_PROBLEM, "shm", "full\nof\x1b[31m junk").text()
    assert ours == "slurmctl:[node_problem] shm: full of [31m junk"
    assert reasons.parse(ours) == reasons.DrainReason("node_problem", "shm", "full of [31m junk")
    for theirs in ("maint", "Prolog error", "slurmctl prolog: old style", "slurmctl:[other] x: y",
                   "Kill task failed", "", "slurmctl:[node_problem]shm: no space"):
        assert not reasons.is_ours(theirs), theirs
    assert len(reasons.DrainReason("user_problem", "disk", "x" * 1000).text()) == reasons.MAX_REASON


def test_user_code_failures_never_make_a_suspect():
    now = 1_000_000.0
    user_code = [blame.Failure(i, c, now - 60) for i, c in
                 enumerate(["import_error", "cuda_oom", "nan_loss", "data_shape", "host_oom", "unknown"])]
    assert blame.score(user_code, now) == 0
    nccl = [blame.Failure(7, "nccl_error", now - 60), blame.Failure(7, "nccl_timeout", now - 50)]
    assert blame.score(nccl, now) == 1  # one job, however many records
    two = nccl + [blame.Failure(8, "gpu_hardware", now - 10)]
    assert blame.score(two, now) == 2 >= blame.SUSPECT_SCORE
    old = [blame.Failure(9, "nccl_error", now - blame.WINDOW_SECONDS - 1), blame.Failure(8, "gpu_hardware", now)]
    assert blame.score(old, now) == 1


def test_failure_records_round_trip_and_clear(tmp_path):
    spool = tmp_path / "failures"
    blame.record(spool, blame.Failure(12, "nccl_error", 5.0))
    (spool / "junk.json").write_text("{not json")
    assert blame.read(spool) == [blame.Failure(12, "nccl_error", 5.0)]
    blame.clear(spool, blame.read(spool))
    assert blame.read(spool) == []


def cfg(tmp_path, **env) -> HookConfig:
    c = HookConfig.from_env({"SLURMD_NODENAME": "n1", "SLURMCTL_LOCAL_DIR": str(tmp_path),
                             "SLURMCTL_SLURM_BIN_DIR": "/nonexistent", "SLURMCTL_DATA_CACHE_DIRS": "", **env})
    c.slurm, c.nvidia_smi = None, None
    return c


def test_fault_stub_counts_only_in_a_directory_only_root_can_write(tmp_path):
    c = cfg(tmp_path)
    faults = tmp_path / "health-faults"
    (faults / "n1").mkdir(parents=True)
    faults.chmod(0o755)
    (faults / "n1").chmod(0o755)
    (faults / "n1" / "shm").write_text("simulated\n")
    (faults / "disk").write_text("")
    assert checks.injected_fault(c, "shm") == "injected fault: simulated"
    assert checks.injected_fault(c, "disk") == "injected fault"  # every node of this host
    assert checks.injected_fault(c, "gpu") is None
    (faults / "n1" / "gpu").symlink_to("/etc/hostname")
    assert checks.injected_fault(c, "gpu") is None  # a symlink is no fault file
    faults.chmod(0o777)  # anyone could plant a fault: none counts
    assert checks.injected_fault(c, "shm") is None
    assert checks.injected_fault(cfg(tmp_path, SLURMCTL_HEALTH_FAULTS="clock,shm"), "clock").startswith("injected")


def test_periodic_checks_report_every_check_and_the_first_failure(tmp_path):
    c = cfg(tmp_path, SLURMCTL_MIN_FREE_SCRATCH_MB="1", SLURMCTL_MIN_FREE_SHM_MB="1", SLURMCTL_HEALTH_FAULTS="disk")
    found = checks.run_checks(checks.Subject(c, moment="periodic"))
    assert [f.check for f in found] == ["shm", "disk", "leftovers"]  # no Slurm, no nvidia-smi: no verdict there
    expected = "slurmctl:[node_problem] disk: injected fault (SLURMCTL_HEALTH_FAULTS)"
    assert checks.first_failure(found).reason().text() == expected


def test_verify_command_survives_a_shell_with_awkward_settings(tmp_path):
    env = {"SLURM_CONF": str(tmp_path / "a b'c$(touch x)"), "SLURMCTL_LOCAL_DIR": "/x;y", "HOME": "/nope",
           "SLURMCTL_BAD": "two\nlines"}
    show = ("import os; e = os.environ; print(e['SLURM_CONF']); print(e['SLURMCTL_LOCAL_DIR']); "
            "print('SLURMCTL_BAD' in e, 'HOME' in e)")
    line = verify_command(env).replace(" -m slurmctl.ops.health verify", f' -c "{show}"')
    out = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, env={}, cwd=tmp_path)
    assert out.stdout.splitlines() == [env["SLURM_CONF"], "/x;y", "False False"], out.stderr
    assert not os.path.exists(tmp_path / "x")


def test_epilog_shm_cleanup_judges_by_ctime_which_a_user_cannot_set_back(tmp_path):
    import time

    from slurmctl.ops.hooks.epilog import clean_shm
    from slurmctl.ops.hooks.prolog import HookResult

    shm = tmp_path / "shm"
    shm.mkdir()
    c = cfg(tmp_path, SLURMCTL_SHM_DIR=str(shm))
    env = {"SLURM_JOB_UID": str(os.getuid())}
    backdated = shm / "segment-backdated"
    backdated.write_bytes(b"x" * 4096)
    day_ago = time.time() - 86400
    os.utime(backdated, (day_ago, day_ago))  # what `touch -d yesterday` does: mtime in the past
    assert backdated.stat().st_mtime < time.time() - 3600
    started = time.time() - 10  # the job started before the file was made
    result = HookResult()
    clean_shm(c, env, started, result)
    assert not backdated.exists(), "a file made during the job escaped the cleanup by its mtime"
    assert result.notes == ["removed 1 /dev/shm entry"]

    before = shm / "segment-of-an-earlier-job"
    before.write_bytes(b"y")
    clean_shm(c, env, time.time() + 60, HookResult())  # a job that started after the file was last changed
    assert before.exists()


def test_epilog_shm_cleanup_keeps_a_live_named_semaphore_of_another_job(tmp_path):
    """sem_open maps a temporary file, then links it under its name and unlinks the temporary one: the
    live process's maps name `sem.XXXXXX (deleted)`, never `sem.<name>`. Judged by inode, it is kept
    (litdata's spawned workers of a concurrent job of the same user failed on their vanished locks)."""
    import sys
    import time

    from slurmctl.ops.hooks.epilog import clean_shm
    from slurmctl.ops.hooks.prolog import HookResult

    shm = tmp_path / "shm"
    shm.mkdir()
    c = cfg(tmp_path, SLURMCTL_SHM_DIR=str(shm))
    started = time.time() - 10
    holder = subprocess.Popen([sys.executable, "-c", f"""
import mmap, os, sys, time
tmp, live = {str(shm / "sem.Ab12Cd")!r}, {str(shm / "sem.mp-live")!r}
fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, bytes(32))
mapped = mmap.mmap(fd, 32)  # as sem_open: map, close the fd, link under the name, drop the temporary one
os.close(fd)
os.link(tmp, live)
os.unlink(tmp)
print("ready", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        left = shm / "sem.mp-left-behind"  # the ended job's own: nobody holds it
        left.write_bytes(bytes(32))
        result = HookResult()
        clean_shm(c, {"SLURM_JOB_UID": str(os.getuid())}, started, result)
        assert (shm / "sem.mp-live").exists(), "a semaphore another live process maps was removed"
        assert not left.exists() and result.notes == ["removed 1 /dev/shm entry"]
    finally:
        holder.kill()
        holder.wait()


def test_a_suspect_needs_the_node_to_be_the_common_factor_not_one_users_repeats():
    now = 1_000_000.0
    alice, bob = 1001, 1002

    def f(job, uid, *nodes):
        return blame.Failure(job, "nccl_error", now - 60, uid, tuple(nodes))

    # one user, the same node again and again (--nodelist): nothing the user could not arrange
    assert not blame.suspect("n1", [f(1, alice, "n1"), f(2, alice, "n1"), f(3, alice, "n1")], now).suspect
    # two users on that node: a suspect
    two_users = blame.suspect("n1", [f(1, alice, "n1"), f(2, bob, "n1")], now)
    assert two_users.suspect and "2 jobs of 2 user(s) on 1 node set(s)" in two_users.why
    # one user, jobs on different node sets whose only common node is n1: the others were clean
    assert blame.suspect("n1", [f(1, alice, "n1", "n2"), f(2, alice, "n1", "n3")], now).suspect
    # a bad n1 fails two multi-node jobs: its peers n2 and n3 each hold one failure, not a suspect
    assert not blame.suspect("n2", [f(1, alice, "n1", "n2")], now).suspect
    # the same pair failing together (even for two users): no single node to blame
    pair = blame.suspect("n1", [f(1, alice, "n1", "n2"), f(2, bob, "n1", "n2")], now)
    assert not pair.suspect and "together" in pair.why
    # just passed a verification: one user's failures alone do not drain it again for a while
    fresh = [f(1, alice, "n1", "n2"), f(2, alice, "n1", "n3")]
    assert not blame.suspect("n1", fresh, now, last_pass=now - 600).suspect
    assert blame.suspect("n1", fresh, now, last_pass=now - blame.RESUSPECT_HOLD_SECONDS - 1).suspect
    assert blame.suspect("n1", [f(1, alice, "n1"), f(2, bob, "n1")], now, last_pass=now - 600).suspect


def test_failure_records_keep_user_and_nodes_and_old_records_still_read(tmp_path):
    spool = tmp_path / "failures"
    blame.record(spool, blame.Failure(12, "nccl_error", 5.0, 1001, ("n1", "n2")))
    (spool / "11.json").write_text('{"job_id": 11, "category": "nccl_error", "end_time": 4.0}')
    assert sorted(blame.read(spool), key=lambda x: x.job_id) == [
        blame.Failure(11, "nccl_error", 4.0), blame.Failure(12, "nccl_error", 5.0, 1001, ("n1", "n2"))]
    assert blame.passed_at(spool) is None
    blame.mark_passed(spool, 123.0)
    assert blame.passed_at(spool) == 123.0
    assert len(blame.read(spool)) == 2  # the mark is no failure record


def _wait_until_exec(children, argv0: bytes, timeout_s: float = 10.0) -> None:
    """Popen returns once the child is forked, before it has exec'd: until then its environment is still this
    process's own (without the job's variables), so a scan on a loaded machine could miss it."""
    deadline = time.monotonic() + timeout_s
    for child in children:
        while Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")[0] != argv0:
            assert time.monotonic() < deadline, f"child {child.pid} did not exec {argv0!r} in {timeout_s} s"
            time.sleep(0.01)


def test_the_prologs_leftover_scan_reads_a_bounded_number_of_processes():
    from slurmctl.ops.hooks import procs

    env = {"SLURM_JOB_ID": "424242", "SLURMD_NODENAME": "unit-leftover-node", "PATH": "/usr/bin:/bin"}
    children = [subprocess.Popen(["/bin/sleep", "60"], env=env) for _ in range(20)]
    try:
        _wait_until_exec(children, b"/bin/sleep")
        found = procs.job_processes(node="unit-leftover-node")
        assert {p.pid for p in found} == {c.pid for c in children}
        assert all(p.job_id == 424242 and p.node == "unit-leftover-node" for p in found)
        assert len(procs.job_processes(node="unit-leftover-node", max_reads=5)) <= 5
    finally:
        for c in children:
            c.kill()
            c.wait()
    assert checks.PROLOG_MAX_ENVIRON_READS <= 1024


def test_a_requeued_attempt_is_judged_on_its_own_lines(tmp_path):
    """The requeue banner is Slurm's word for the requeue (diagnose: preempted); what failed is the
    attempt's own lines before it, and never an earlier attempt's."""
    from slurmctl.ops.hooks.epilog import requeued_attempt_category

    nccl = ("[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
            "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n")
    banner = "slurmstepd: error: *** JOB 7 ON hn1 CANCELLED AT 2026-12-01T22:12:12 DUE TO JOB REQUEUE ***\n"
    log = tmp_path / "7.out"
    log.write_text("step 1 loss 2.0\n" + nccl + banner)
    assert requeued_attempt_category(str(log)) == "nccl_error"
    log.write_text("step 1 loss 2.0\n" + nccl + banner + "step 2 loss 1.9\ndrain requested (preemption)\n" + banner)
    assert requeued_attempt_category(str(log)) == "unknown"  # the second attempt shows no failure of its own
