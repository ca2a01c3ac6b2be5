"""The cost record of an attempt that is being requeued: in its epilog scontrol already describes the
next attempt (StartTime = the requeue time, Restarts one up). The prolog's view of the attempt
(records.attempt_start) gives the record its real start and restart count, so each attempt has its
own record that the ledger matches to its sacct row. The real-cluster test that counts records
against `sacct --duplicates` is tests/integration/test_faults_records.py."""

import time

from slurmctl.ops.hooks import epilog, prolog
from slurmctl.ops.hooks.records import attempt_start
from slurmctl.slurm.scontrol import JobInfo

from .test_plugins import cfg_for


def test_a_requeued_attempts_record_has_the_prologs_start_and_restart_count(tmp_path):
    cfg = cfg_for(tmp_path)
    base = {"SLURM_JOB_ID": "88", "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "u"}
    assert prolog.run_prolog({**base, "SLURM_JOB_RESTART_COUNT": "0"}, cfg).ok
    count, started = attempt_start(cfg.cost_spool, 88)
    assert count == 0 and abs(started - time.time()) < 5
    # the epilog of the preempted attempt: Slurm already says restart 1, start = the requeue time
    requeued = JobInfo(88, state="PENDING", restarts=1, start_time=started + 40, end_time=None)
    record = epilog.build_record(cfg, {**base, "SLURM_JOB_RESTART_COUNT": "1"}, requeued, started + 41)
    assert (record.restart_count, record.start_time) == (0, started)
    assert record.filename == f"88.0.{int(started)}.json" and record.elapsed_seconds == 41
    # the next attempt: its prolog records it, and Slurm's own (earlier) start is kept
    assert prolog.run_prolog({**base, "SLURM_JOB_RESTART_COUNT": "1"}, cfg).ok
    count, second = attempt_start(cfg.cost_spool, 88)
    running = JobInfo(88, state="COMPLETING", restarts=1, start_time=second - 1, end_time=second + 30)
    record = epilog.build_record(cfg, {**base, "SLURM_JOB_RESTART_COUNT": "1"}, running, second + 31)
    assert (count, record.restart_count, record.start_time) == (1, 1, second - 1)


def test_without_a_prolog_marker_the_record_is_built_from_slurm_as_before(tmp_path):
    cfg = cfg_for(tmp_path)
    info = JobInfo(89, state="COMPLETED", restarts=0, start_time=1000.0, end_time=1060.0)
    record = epilog.build_record(cfg, {"SLURM_JOB_ID": "89", "SLURM_JOB_RESTART_COUNT": "0"}, info, 1061.0)
    assert (record.restart_count, record.start_time, record.elapsed_seconds) == (0, 1000.0, 60.0)
    assert attempt_start(cfg.cost_spool, 89) is None
