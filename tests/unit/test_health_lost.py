"""GPU-hours lost per node (health/lost.py) from accounting lines captured on the local cluster
(sacct --duplicates attempts, sacctmgr node events of 2026-12-01): which attempts are the node's
loss, which node of a multi-node NODE_FAIL is charged, which drained time counts."""

from __future__ import annotations

from datetime import datetime

import pytest

from slurmctl.ops.health.lost import ATTEMPT_FIELDS, gpu_hours_lost
from slurmctl.slurm.client import SlurmClient

from .fakes import ReplayRunner, pin_seal, sacct_output

ATTEMPTS = [  # JobIDRaw State NodeList ElapsedRaw AllocTRES Start End UID (AdminComment)
    ["1007", "NODE_FAIL", "h100-[1-2]", "182", "billing=16,cpu=16,gres/gpu:h100=16,gres/gpu=16,mem=16000M,node=2",
     "2026-12-01T15:30:59", "2026-12-01T15:34:01", "1001"],  # h100-2 went down at its end: h100-2's loss alone
    ["14", "FAILED", "h100-[1-2]", "3600", "billing=2,cpu=2,gres/gpu:h100=16,gres/gpu=16,mem=2000M,node=2",
     "2026-12-01T14:48:28", "2026-12-01T15:48:28", "1001"],  # nccl_timeout: h100-2 (it went down) takes it all
    ["15", "FAILED", "h100-1", "3600", "billing=1,cpu=1,gres/gpu=8,mem=1000M,node=1",
     "2026-12-01T14:48:28", "2026-12-01T15:48:28", "1001"],  # diagnosed import_error: the user's, not the node's
    ["9", "FAILED", "l4-1", "1", "billing=1,cpu=1,mem=1000M,node=1", "2026-12-01T14:48:12", "2026-12-01T14:48:13",
     "1001"],
    ["16", "COMPLETED", "h100-1", "3600", "billing=1,cpu=1,gres/gpu=8,mem=1000M,node=1",
     "2026-12-01T14:48:28", "2026-12-01T15:48:28", "1001"],
]
EVENTS = "\n".join([
    "|2026-12-01T14:47:16|Unknown||Cluster Registered TRES",
    "h100-2|2026-12-01T15:34:01|2026-12-01T15:35:25|DOWN*|Not responding",  # 84 s x 8 GPUs
    "h100-3|2026-12-01T19:17:19|2026-12-01T19:47:19|DRAIN|maint",  # an operator's: not the node's loss
    "h100-3|2026-12-01T20:00:00|Unknown|DRAIN|slurmctl:[node_problem] disk: /scratch has 3 MB free",  # open: to now
    "h100-1|2026-12-01T20:00:00|2026-12-01T21:00:00|DRAIN|slurmctl:[user_problem] shm: uid 1001 holds 90%",
]) + "\n"


def replaying(attempts, events) -> SlurmClient:
    hosts = {"h100-[1-2]": "h100-1\nh100-2\n", "h100-[2-3]": "h100-2\nh100-3\n", "h100-1": "h100-1\n",
             "h100-2": "h100-2\n", "h100-3": "h100-3\n", "l4-1": "l4-1\n", "h100-[1,3]": "h100-1\nh100-3\n"}

    class Runner(ReplayRunner):
        def run(self, argv, timeout=60.0):
            if argv[:3] == ["scontrol", "show", "hostnames"]:
                self.outputs = {**self.outputs, "scontrol": hosts[argv[3]]}
            return super().run(argv, timeout)

    # a row holds the fields the client asks for: AdminComment is empty but for our health jobs
    padded = [[*r, *[""] * len(ATTEMPT_FIELDS)][:len(ATTEMPT_FIELDS)] for r in attempts]
    return SlurmClient(Runner({"sacct": sacct_output(*padded), "sacctmgr": events}))


@pytest.fixture
def client(monkeypatch):
    pin_seal(monkeypatch)
    return replaying(ATTEMPTS, EVENTS)


def test_the_nodes_own_losses_only(client):
    categories = {(14, "2026-12-01T14:48:28"): "nccl_timeout", (15, "2026-12-01T14:48:28"): "import_error"}
    lost = gpu_hours_lost(client, {"h100-1": 8, "h100-2": 8, "h100-3": 8, "l4-1": 1}, categories,
                          datetime(2026, 12, 1, 22, 0, 0))
    node_fail = 16 * 182 / 3600
    # job 14's NCCL failure on h100-[1-2]: h100-2 went down (a suspect), h100-1 has no evidence against it
    assert lost["h100-2"].failed_jobs == pytest.approx(node_fail + 16.0) and lost["h100-2"].jobs == 2
    assert lost["h100-1"].failed_jobs == 0 and lost["h100-1"].jobs == 0
    assert lost["h100-2"].drained == pytest.approx(84 / 3600 * 8)
    assert lost["h100-1"].drained == 0  # a [user_problem] drain is the user's doing
    assert lost["h100-3"].drained == pytest.approx(2 * 8)  # ours, still open at 22:00; maint not counted
    assert lost["l4-1"].total == 0
    argv = client.runner.calls
    assert argv[0][:5] == ["sacctmgr", "-n", "-P", "show", "event"]
    assert argv[0][5:] == ["start=2026-11-24T22:00:00", "end=2026-12-01T22:00:00",
                           "format=NodeName,TimeStart,TimeEnd,State,Reason"]
    assert argv[1][:5] == ["sacct", "-a", "-X", "--duplicates", "-n"]
    assert argv[1][8] == "JobIDRaw,State,NodeList,ElapsedRaw,AllocTRES,Start,End,UID,AdminComment,JobIDRaw"
    # from 30 h before the week: the evidence and passed verifications the drain rule still weighs then
    assert argv[1][9:] == ["-S", "2026-11-23T16:00:00", "-E", "2026-12-01T22:00:00",
                           "-s", "CA,CD,F,NF,OOM,PR,RQ,TO,DL,BF"]  # ended attempts, by their end time


def test_no_diagnosis_no_charge_for_a_failed_job(client):
    lost = gpu_hours_lost(client, {"h100-1": 8, "h100-2": 8}, {}, datetime(2026, 12, 1, 22, 0, 0))
    assert lost["h100-1"].failed_jobs == 0 and lost["h100-2"].jobs == 1


GPU2 = "billing=2,cpu=2,gres/gpu=2,mem=2000M,node=1"
GPU4 = "billing=4,cpu=4,gres/gpu=4,mem=4000M,node=2"
NOW = datetime(2026, 12, 1, 23, 0, 0)


def nccl(job, node, uid, state="FAILED", tres=GPU2, start="2026-12-01T22:38:00", end="2026-12-01T22:38:31"):
    return [str(job), state, node, "31", tres, start, end, str(uid)], ((job, start), "nccl_error")


def lost_of(monkeypatch, rows, events="", now=NOW) -> dict:
    pin_seal(monkeypatch)
    client = replaying([r for r, _ in rows], events)
    nodes = {"h100-1": 2, "h100-2": 2, "h100-3": 2}
    return gpu_hours_lost(client, nodes, dict(c for _, c in rows), now)


def test_one_users_printed_nccl_lines_charge_no_node(monkeypatch):
    """bob's two jobs on h100-1 that echo an NCCL line and exit 1: a diagnosis is what the job
    printed; the same user on the same node again and again is no evidence against the node."""
    lost = lost_of(monkeypatch, [nccl(9, "h100-1", 1002), nccl(10, "h100-1", 1002)])
    assert lost["h100-1"].failed_jobs == 0 and lost["h100-1"].jobs == 0


def test_two_users_failures_charge_the_common_node_only(monkeypatch):
    lost = lost_of(monkeypatch, [nccl(8, "h100-1", 1001), nccl(9, "h100-1", 1002)])
    assert lost["h100-1"].failed_jobs == pytest.approx(2 * 2 * 31 / 3600) and lost["h100-1"].jobs == 2
    # a two-node job shared with the suspect: charged to the suspect alone, never its healthy peer
    lost = lost_of(monkeypatch, [nccl(8, "h100-1", 1001), nccl(9, "h100-1", 1002),
                                 nccl(11, "h100-[1-2]", 1001, tres=GPU4)])
    assert lost["h100-1"].failed_jobs == pytest.approx((2 + 2 + 4) * 31 / 3600)
    assert lost["h100-2"].failed_jobs == 0


def test_a_requeued_attempt_with_a_gpu_diagnosis_is_charged(monkeypatch):
    """A slurmctl run's `end` requeues its failed attempt: sacct says REQUEUED, the cost record says nccl_error."""
    lost = lost_of(monkeypatch, [nccl(8, "h100-1", 1001), nccl(89, "h100-1", 1002, state="REQUEUED")])
    assert lost["h100-1"].failed_jobs == pytest.approx(2 * 2 * 31 / 3600) and lost["h100-1"].jobs == 2
    alone = lost_of(monkeypatch, [nccl(89, "h100-1", 1002, state="REQUEUED")],
                    "h100-1|2026-12-01T22:39:00|2026-12-01T22:40:00|DRAIN|slurmctl:[node_problem] verify: "
                    "allreduce: too slow\n")
    assert alone["h100-1"].failed_jobs == pytest.approx(2 * 31 / 3600)  # a failed verification is evidence


def test_one_users_jobs_on_different_node_sets_charge_the_common_node(monkeypatch):
    """The documented residual, the same rule as blame: one user's failures on {1}, {1,2} and {1,3}."""
    lost = lost_of(monkeypatch, [nccl(9, "h100-1", 1002), nccl(13, "h100-[1-2]", 1002, tres=GPU4)])
    assert lost["h100-1"].jobs == 2 and lost["h100-2"].jobs == 0


def test_an_operators_down_is_no_loss_and_moves_no_node_fail_charge(monkeypatch):
    node_fail = ["90", "NODE_FAIL", "h100-[2-3]", "59", GPU4, "2026-12-01T22:52:27", "2026-12-01T22:53:26", "1001"]
    events = "\n".join([
        "h100-3|2026-12-01T22:54:01|Unknown|DOWN*|Not responding",
        "h100-2|2026-12-01T22:54:37|2026-12-01T22:56:37|DOWN|maint-down",  # the operator's, within 120 s
        "h100-1|2026-12-01T22:00:00|2026-12-01T22:30:00|FAIL|maint-fail",
    ]) + "\n"
    lost = lost_of(monkeypatch, [(node_fail, ((90, "x"), ""))], events)
    assert lost["h100-3"].failed_jobs == pytest.approx(4 * 59 / 3600) and lost["h100-2"].failed_jobs == 0
    assert lost["h100-2"].drained == 0 and lost["h100-1"].drained == 0
    assert lost["h100-3"].drained == pytest.approx(2 * (6 * 60 - 1) / 3600)


def test_the_table_shows_a_small_loss_as_a_loss():
    from slurmctl.cli.ops import gpu_hours_text

    assert [gpu_hours_text(h) for h in (0.0, 0.001, 0.017, 0.0656, 16.0)] == ["0", "<0.01", "0.02", "0.07", "16.00"]


def test_records_without_a_uid_are_no_second_user_and_no_gpu_is_the_jobs_own():
    from slurmctl.ops.health.blame import Failure, suspect

    now = 1_000_000.0
    one_user = [Failure(1, "nccl_error", now - 60, uid=1001), Failure(2, "nccl_error", now - 30, uid=-1)]
    assert not suspect("l4-1", one_user, now).suspect  # alice plus an old record is still one user
    two_users = [Failure(1, "no_gpu", now - 60, uid=1001), Failure(2, "no_gpu", now - 30, uid=1002)]
    assert not suspect("l4-1", two_users, now).suspect  # a CPU-only torch build is not the node's fault


# --- After a passed verification the rule starts afresh (blame.accepted), as the drain side does ---

def failed_at(job, node, uid, hhmmss, tres=GPU2, day=1):
    """A 31 s attempt of `job` that ended at `hhmmss` on 2026-12-`day` with an NCCL diagnosis."""
    end = datetime.fromisoformat(f"2026-12-{day:02d}T{hhmmss}")
    start = datetime.fromtimestamp(end.timestamp() - 31).isoformat()
    return nccl(job, node, uid, tres=tres, start=start, end=end.isoformat())


def verified(job, node, hhmmss, action="passed", uid=0, state="COMPLETED", day=1):
    """Our verification job on `node`, its outcome in its AdminComment (only an admin can write it)."""
    end = f"2026-12-{day:02d}T{hhmmss}"
    return [str(job), state, node, "40", "billing=1,cpu=1,mem=100M,node=1", end, end, str(uid),
            f"slurmctl:health verify {action} {node}"], ((job, end), "")


SUSPECT_DRAIN = "h100-1|2026-12-01T20:10:32|2026-12-01T20:12:00|DRAIN|slurmctl:[node_problem] suspect: 3 jobs\n"
ONE_GPU_JOB = 2 * 31 / 3600  # GPU2 x 31 s
BOBS_CYCLE = [failed_at(7, "h100-1", 1002, "20:00:31"), failed_at(8, "h100-1", 1002, "20:05:31"),
              failed_at(9, "h100-[1-2]", 1002, "20:10:31", tres=GPU4), verified(900, "h100-1", "20:13:00")]
BOBS_CYCLE_HOURS = (2 + 2 + 4) * 31 / 3600


def test_one_users_failures_after_a_pass_charge_nothing(monkeypatch):
    """The checker's pattern: bob's failures on {n}, {n}, {n,m} make n a suspect, it is drained and
    passes its verification; then bob's jobs 10-12 on n alone. The drain rule never accepts those
    (one user, one node set), so they must not move n's figure."""
    before = lost_of(monkeypatch, BOBS_CYCLE, SUSPECT_DRAIN)["h100-1"]
    assert before.failed_jobs == pytest.approx(BOBS_CYCLE_HOURS) and before.jobs == 3
    later = [failed_at(10, "h100-1", 1002, "21:00:31"), failed_at(11, "h100-1", 1002, "21:30:31"),
             failed_at(12, "h100-1", 1002, "22:00:31")]
    after = lost_of(monkeypatch, BOBS_CYCLE + later, SUSPECT_DRAIN)["h100-1"]
    assert (after.failed_jobs, after.jobs) == (pytest.approx(BOBS_CYCLE_HOURS), 3)


def test_one_users_fresh_evidence_counts_only_after_the_hold(monkeypatch):
    """bob's new failures on two node sets after the pass: the drain rule holds one user's failures
    for 6 h after a pass, then accepts them (the node would be drained again), and so does the charge."""
    fresh = [failed_at(10, "h100-1", 1002, "21:00:31"), failed_at(11, "h100-[1,3]", 1002, "21:30:31", tres=GPU4)]
    held = lost_of(monkeypatch, BOBS_CYCLE + fresh, SUSPECT_DRAIN)["h100-1"]  # 23:00, within 6 h of 20:13
    assert held.jobs == 3 and held.failed_jobs == pytest.approx(BOBS_CYCLE_HOURS)
    after_hold = lost_of(monkeypatch, BOBS_CYCLE + fresh, SUSPECT_DRAIN, now=datetime(2026, 12, 2, 3, 0, 0))
    assert after_hold["h100-1"].jobs == 5
    assert after_hold["h100-1"].failed_jobs == pytest.approx(BOBS_CYCLE_HOURS + (2 + 4) * 31 / 3600)
    assert after_hold["h100-3"].jobs == 0


def test_two_users_after_a_pass_are_fresh_evidence_at_once(monkeypatch):
    fresh = [failed_at(10, "h100-1", 1002, "21:00:31"), failed_at(11, "h100-1", 1001, "21:30:31")]
    lost = lost_of(monkeypatch, BOBS_CYCLE + fresh, SUSPECT_DRAIN)["h100-1"]
    assert lost.jobs == 5 and lost.failed_jobs == pytest.approx(BOBS_CYCLE_HOURS + 2 * ONE_GPU_JOB)


def test_evidence_before_the_pass_charges_no_later_failure(monkeypatch):
    """Two users' failures and a failed disk check before the pass: the node was the suspect then.
    After its pass, one user's jobs on it alone are not chargeable on that old evidence."""
    events = ("h100-1|2026-12-01T19:00:00|2026-12-01T20:10:00|DRAIN|slurmctl:[node_problem] disk: /scratch 3 MB\n"
              "h100-1|2026-12-01T20:10:00|2026-12-01T20:12:00|DRAIN|slurmctl:[node_problem] suspect: 2 jobs\n")
    before = [failed_at(7, "h100-1", 1001, "18:00:31"), failed_at(8, "h100-1", 1002, "18:30:31"),
              verified(900, "h100-1", "20:13:00")]
    later = [failed_at(10, "h100-1", 1002, f"{h}:00:31") for h in (21, 22)]
    lost = lost_of(monkeypatch, before + later, events)["h100-1"]
    assert lost.jobs == 2 and lost.failed_jobs == pytest.approx(2 * ONE_GPU_JOB)


def test_only_roots_passed_verification_starts_the_rule_afresh(monkeypatch):
    """A pass is our verification job's own word: root's COMPLETED job whose AdminComment says
    passed. A failed verification, or the same words on anyone else's job, reset nothing."""
    fresh = [failed_at(10, "h100-1", 1001, "21:00:31")]  # one more job of a second user: the rule holds on
    for not_a_pass in (verified(900, "h100-1", "20:13:00", action="failed", state="FAILED"),
                       verified(900, "h100-1", "20:13:00", uid=1002)):
        lost = lost_of(monkeypatch, [*BOBS_CYCLE[:3], not_a_pass, *fresh], SUSPECT_DRAIN)["h100-1"]
        assert lost.jobs == 4


def test_a_node_that_went_down_and_came_back_needs_fresh_evidence(monkeypatch):
    """Slurm took h100-1 down once (not responding) and returned it: the attempt running there then
    is its loss; the same user's failures on it after it came back are not."""
    events = "h100-1|2026-12-01T20:00:00|2026-12-01T20:05:00|DOWN*|Not responding\n"
    during = nccl(7, "h100-1", 1002, start="2026-12-01T19:30:00", end="2026-12-01T20:10:00")
    during[0][3] = "2400"
    later = [failed_at(10, "h100-1", 1002, f"{h}:00:31") for h in (21, 22)]
    lost = lost_of(monkeypatch, [during, *later], events)["h100-1"]
    assert lost.jobs == 1 and lost.failed_jobs == pytest.approx(2 * 2400 / 3600)


def test_a_nodes_fault_covers_the_attempts_around_it_not_the_whole_week(monkeypatch):
    """A failed disk check (one user can fill a scratch disk) is evidence for the attempts that ran
    while it was on or ended within the hour before it, not for one user's failures all week."""
    events = "h100-1|2026-12-01T22:00:00|2026-12-01T22:30:00|DRAIN|slurmctl:[node_problem] disk: /scratch 3 MB\n"
    rows = [failed_at(10, "h100-1", 1002, "12:00:31"), failed_at(11, "h100-1", 1002, "21:30:31")]
    lost = lost_of(monkeypatch, rows, events)["h100-1"]
    assert lost.jobs == 1 and lost.failed_jobs == pytest.approx(ONE_GPU_JOB)


def test_the_sliding_window_judges_as_suspect_does_at_every_moment():
    """blame.accepted slides its window (linear in the failures); judged afresh with `suspect` at
    every moment over the same failures it must take the same ones, on random histories of a few
    users, node sets, requeued attempts (one job, several failures) and passes."""
    import random

    from slurmctl.ops.health import blame

    def by_suspect(node, failures, passes, now):
        found = set()
        bounds = [float("-inf"), *sorted(p for p in passes if p <= now), float("inf")]
        for since, until in zip(bounds, bounds[1:]):
            last_pass = since if since != float("-inf") else None
            epoch = sorted((f for f in failures if since < f.end_time <= until), key=lambda f: (f.end_time, f.job_id))
            moments = {f.end_time for f in epoch} | ({since + blame.RESUSPECT_HOLD_SECONDS} if last_pass else set())
            for m in sorted(m for m in moments if since < m <= min(until, now)):
                if blame.suspect(node, epoch, m, last_pass).suspect:
                    found |= {f for f in epoch if m - blame.WINDOW_SECONDS <= f.end_time <= m + 60}
        return found

    rng = random.Random(7)
    sets = [("n1",), ("n1", "n2"), ("n1", "n3"), ("n1", "n2", "n3"), ()]
    took_some = 0
    for _ in range(300):
        t0 = 1_000_000.0
        failures = [blame.Failure(rng.randint(1, 12), "nccl_error", t0 + rng.randint(0, 3 * 86400),
                                  rng.choice([1001, 1002, 1002, -1]), rng.choice(sets))
                    for _ in range(rng.randint(0, 25))]
        passes = [t0 + rng.randint(0, 3 * 86400) for _ in range(rng.randint(0, 2))]
        now = t0 + 3 * 86400 + rng.choice([0, 3600, 86400])
        expected = by_suspect("n1", failures, passes, now)
        assert blame.accepted("n1", failures, passes, now) == expected
        took_some += bool(expected)
    assert 30 < took_some < 270  # the histories exercise both verdicts
