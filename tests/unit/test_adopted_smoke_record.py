"""A passed `adopt --smoke` test is recorded before its cancel, so diagnose says it passed instead of
reading the cancel that ended it as a failure."""

from slurmctl.control.adopted_smoke import judge
from slurmctl.observe.diagnose import diagnose_text, smoke_passed
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
    found = smoke_passed(passed[0]["why"], cancelled)
    assert found.category == "success" and "smoke test passed" in found.summary
