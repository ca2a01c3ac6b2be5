"""The requeue-or-stop policy at the end of an attempt (slurmctl/runtime/policy.py)."""

from slurmctl.runtime.policy import REQUEUE, STOP, decide


def d(**kw):
    args = {"exit_code": 1, "drain": None, "acked": False, "checkpoint_step": 10, "previous_ends": [],
            "max_restarts": 3}
    return decide(**{**args, **kw})


def test_completed_run_stops():
    out = d(exit_code=0)
    assert (out.action, out.outcome) == (STOP, "completed")


def test_crash_before_first_checkpoint_never_requeues():
    out = d(checkpoint_step=None)
    assert out.action == STOP and "before the first valid checkpoint" in out.reason


def test_crash_after_checkpoint_requeues_until_the_cap():
    assert d().action == REQUEUE
    ends = [{"outcome": "failed", "checkpoint_step": s} for s in (2, 4, 6)]
    capped = d(previous_ends=ends, checkpoint_step=8)
    assert capped.action == STOP and capped.failures == 4 and "max_restarts=3" in capped.reason


def test_two_failures_without_a_new_checkpoint_stop_the_loop():
    out = d(previous_ends=[{"outcome": "failed", "checkpoint_step": 10}], checkpoint_step=10)
    assert out.action == STOP and "without a new checkpoint" in out.reason


def test_acknowledged_preemption_and_time_limit_requeue_and_do_not_count_as_failures():
    ends = [{"outcome": "failed", "checkpoint_step": 5}] * 3
    pre = d(drain={"reason": "preemption"}, acked=True, previous_ends=ends)
    assert (pre.action, pre.outcome, pre.failures, pre.preemptions) == (REQUEUE, "preemption", 3, 1)
    tl = d(drain={"reason": "time-limit"}, acked=True, exit_code=0)
    assert (tl.action, tl.outcome) == (REQUEUE, "time-limit")


def test_cancel_drain_stops_and_says_whether_it_was_acknowledged():
    assert d(drain={"reason": "cancel"}, acked=True).action == STOP
    assert "NOT acknowledged" in d(drain={"reason": "cancel"}, acked=False).reason


def test_unacknowledged_drain_is_a_failure():
    out = d(drain={"reason": "preemption"}, acked=False, exit_code=143)
    assert out.outcome == "failed" and "NOT acknowledged" in out.reason
