"""A passed `adopt --smoke` test is recorded before its cancel, so diagnose says it passed instead of
reading the cancel that ended it as a failure."""

from slurmctl.control.adopted_smoke import judge
from slurmctl.observe.diagnose import diagnose_text
from slurmctl.observe.run_diagnosis import in_run_words
from slurmctl.rundir import Run
from slurmctl.slurm.client import JOB_INFO, SlurmClient

from .fakes import TEST_SEAL, ReplayRunner, pin_seal, squeue_output


def test_a_passed_smoke_test_is_recorded_before_the_cancel_and_diagnosed_as_passed(tmp_path, monkeypatch):
    pin_seal(monkeypatch)
    run = Run("hf-20261201-abcd", tmp_path / "hf-20261201-abcd")
    run.log_path(77).parent.mkdir(parents=True)
    run.log_path(77).write_text("{'loss': 2.1, 'step': 1}\nstep 1\nstep 2\nstep 3\n")
    info = squeue_output(["77", "RUNNING", "0", "0", "2026-12-01T23:31:00", "N/A", "l4-1", "l4-1", "cpu=1", "/x.out",
                          "/x", "hf"])
    runner = ReplayRunner({("squeue", "-h", "-t", "all", "-j", "77", *JOB_INFO.format_argv(TEST_SEAL)): info})
    verdict = judge(run, SlurmClient(runner), 77, None, timeout=5, poll=0.01)
    assert verdict.passed and ["scancel", "77"] in runner.calls
    passed = [e for e in run.events() if e.get("event") == "smoke-passed"]
    assert passed and passed[0]["job_id"] == 77 and "steps advanced 1 -> 3" in passed[0]["why"]
    cancelled = diagnose_text("step 3\nslurmstepd: error: *** JOB 77 ON l4-1 CANCELLED AT 2026-12-01T23:31:40 ***\n",
                              "CANCELLED", "0:15")
    assert cancelled.category == "cancelled"
    found = in_run_words(cancelled, run.events(), 77)
    assert found.category == "success" and "smoke test passed" in found.summary


def test_a_run_cancelled_by_its_user_says_so_with_the_step():
    log = "iter 148\nslurmstepd: error: *** JOB 4207 ON h100-1 CANCELLED AT 2026-12-01T23:17:04 ***\n"
    events = [{"event": "start", "job_id": 4207, "restart_count": 0},
              {"event": "cancel-requested", "job_id": 4207, "drain": "skipped"},
              {"event": "cancel-result", "job_id": 4207, "last_step": 148, "checkpoint_step": 140, "steps_lost": 8}]
    found = in_run_words(diagnose_text(log, "CANCELLED", "0:15"), events, 4207)
    assert found.category == "cancelled"
    assert found.summary == ("You cancelled it (`slurmctl cancel`) at step 148; nothing failed before that "
                             "(8 steps lost since its checkpoint).")
