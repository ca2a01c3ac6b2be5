"""The cost record of an attempt that is being requeued: in its epilog scontrol already describes the
next attempt (StartTime = the requeue time, EndTime = that + the time limit, Restarts and
SLURM_JOB_RESTART_COUNT one up). The record must still be this attempt's: its own restart count, the
start the prolog recorded (records.attempt_start) or none when slurmd skipped the prolog, and the
epilog's clock as its end. Field values below are those the local cluster's epilogs saw (22.05.8).
The real-cluster test that counts records against `sacct --duplicates` is
tests/integration/test_faults_records.py."""

import time

from slurmctl.ops.hooks import epilog, prolog
from slurmctl.ops.hooks.records import attempt_start
from slurmctl.slurm.records import JobInfo

from .test_plugins import cfg_for

BASE = {"SLURM_JOB_ID": "88", "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "u"}


def test_a_requeued_attempts_record_has_its_own_count_and_the_prologs_start(tmp_path):
    cfg = cfg_for(tmp_path)
    assert prolog.run_prolog({**BASE, "SLURM_JOB_RESTART_COUNT": "0"}, cfg).ok
    count, started = attempt_start(cfg.cost_spool, 88)
    assert count == 0 and abs(started - time.time()) < 5
    # the epilog of the preempted attempt 0: Slurm already shows attempt 1 (3-minute limit)
    requeued = JobInfo(88, state="COMPLETING", restarts=1, start_time=started + 40, end_time=started + 220)
    record = epilog.build_record(cfg, {**BASE, "SLURM_JOB_RESTART_COUNT": "1"}, requeued, started + 41)
    assert (record.restart_count, record.start_time, record.end_time) == (0, started, started + 41)
    assert record.filename == f"88.0.{int(started)}.json" and record.elapsed_seconds == 41


def test_when_slurmd_skipped_the_prolog_the_start_is_unknown_but_the_count_is_right(tmp_path):
    cfg = cfg_for(tmp_path)
    assert prolog.run_prolog({**BASE, "SLURM_JOB_RESTART_COUNT": "1"}, cfg).ok  # attempt 1's, now stale
    now = time.time()
    requeued = JobInfo(88, state="COMPLETING", restarts=3, start_time=now, end_time=now + 180)
    record = epilog.build_record(cfg, {**BASE, "SLURM_JOB_RESTART_COUNT": "3"}, requeued, now)
    assert (record.restart_count, record.start_time, record.filename) == (2, None, "88.2.0.json")


def test_the_last_attempt_keeps_slurms_own_start_and_end(tmp_path):
    cfg = cfg_for(tmp_path)
    assert prolog.run_prolog({**BASE, "SLURM_JOB_RESTART_COUNT": "4"}, cfg).ok
    now = time.time()
    done = JobInfo(88, state="COMPLETING", restarts=4, start_time=now - 18, end_time=now - 1)
    record = epilog.build_record(cfg, {**BASE, "SLURM_JOB_RESTART_COUNT": "4"}, done, now)
    assert (record.restart_count, record.start_time, record.end_time) == (4, now - 18, now - 1)


def test_after_the_jobs_own_requeue_the_record_is_still_this_attempts(tmp_path):
    """What the epilog of an adopted Lightning program's attempt saw after Lightning ran `scontrol
    requeue` on SIGUSR1 (local cluster, 22.05.8): COMPLETING, Restarts=1, no start and no end yet."""
    cfg = cfg_for(tmp_path)
    assert prolog.run_prolog({**BASE, "SLURM_JOB_RESTART_COUNT": "0"}, cfg).ok
    count, started = attempt_start(cfg.cost_spool, 88)
    requeued = JobInfo(88, state="COMPLETING", restarts=1, start_time=None, end_time=None)
    record = epilog.build_record(cfg, {**BASE, "SLURM_JOB_RESTART_COUNT": "1"}, requeued, started + 45)
    assert (record.restart_count, record.start_time, record.end_time) == (0, started, started + 45)
    assert record.filename == f"88.0.{int(started)}.json"
