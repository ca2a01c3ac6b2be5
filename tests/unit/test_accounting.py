"""Pricing, sacct parsing, waste and the ledger. Sacct records hold the values the local cluster's
`sacct -a -X --duplicates -P` printed (Slurm 22.05.8, 2026-11-29), sealed as SlurmClient asks."""

import json
from datetime import datetime
from pathlib import Path

import pytest

from slurmctl.config.pricing import Discounts, allocation_cost
from slurmctl.errors import ForgedSlurmOutput
from slurmctl.ops.accounting import SACCT_FIELDS, Ledger, attempts_from_records, ingest, parse_gpus, stream_sacct
from slurmctl.ops.report import build_report, to_csv, to_html
from slurmctl.slurm.client import SlurmClient

from .fakes import ReplayRunner, sacct_output


def line(job_id, state, start, end, gpus=4, partition="h100-ondemand", user="alice", account="ml-research",
         comment="slurmctl:tiny-lm-20261129-6340", submit=None):
    tres = f"billing={gpus},cpu={gpus},gres/gpu:h100={gpus},gres/gpu={gpus},mem=4000M,node=2" if gpus else ""
    values = [str(job_id), user, account, partition, tres, "2", submit or start,
              submit or start, start, end, "0", "00:15:00", state, "0:0", "tiny-lm-20261129-6340", comment]
    assert len(values) == len(SACCT_FIELDS)
    return values


@pytest.fixture
def site(local_site, tmp_path):
    acc = local_site.accounting.model_copy(update={"ledger_path": str(tmp_path / "ledger.sqlite"),
                                                   "discounts": Discounts()})
    return local_site.model_copy(update={"accounting": acc})


def test_parse_gpus_from_real_alloc_tres():
    assert parse_gpus("billing=4,cpu=4,gres/gpu:h100=4,gres/gpu=4,mem=4000M,node=2") == (4, "h100")
    assert parse_gpus("billing=1,cpu=1,mem=1000M,node=1") == (0, "")


def test_cost_is_gpus_times_hours_times_price(site):
    [a] = attempts_from_records([line(1, "COMPLETED", "2026-11-27T10:00:00", "2026-11-27T12:30:00")], site, {})
    assert a.gpus == 4 and a.elapsed_s == 9000 and a.gpu_hours == pytest.approx(10.0)
    assert a.cost_usd == pytest.approx(10.0 * 3.90)  # h100-ondemand list price in deploy/local/site.yaml


def test_offpeak_and_weekend_discounts_split_at_boundaries():
    d = Discounts(offpeak=0.5, weekend=0.25)
    # Friday 21:00 -> 23:00: one hour full price, one hour off-peak
    assert allocation_cost(1, datetime(2026, 11, 27, 21), datetime(2026, 11, 27, 23), 10.0, d) == pytest.approx(15.0)
    # Saturday noon, 1 hour: weekend discount only
    assert allocation_cost(2, datetime(2026, 11, 28, 12), datetime(2026, 11, 28, 13), 10.0, d) == pytest.approx(15.0)
    # Saturday 23:00: the larger discount wins, they do not stack
    assert allocation_cost(1, datetime(2026, 11, 28, 23), datetime(2026, 11, 29, 0), 10.0, d) == pytest.approx(5.0)


def test_pending_running_and_unallocated_rows_are_not_costed(site):
    lines = [line(2, "RUNNING", "2026-11-27T10:00:00", "Unknown"),
             line(3, "CANCELLED by 0", "None", "2026-11-27T10:00:00", gpus=0),
             line(4, "FAILED", "2026-11-27T10:00:00", "2026-11-27T10:00:00", gpus=0)]
    costed = list(attempts_from_records(lines, site, {}))
    assert [(a.job_id, a.cost_usd) for a in costed] == [(4, 0.0)]


def test_requeued_job_costs_the_sum_of_its_attempts_and_waste_uses_checkpoints(site):
    lines = [line(9, "PREEMPTED", "2026-11-27T10:00:00", "2026-11-27T11:00:00", partition="h100-spot"),
             line(9, "COMPLETED", "2026-11-27T11:05:00", "2026-11-27T12:05:00", partition="h100-spot")]
    ckpt_time = datetime(2026, 11, 27, 10, 45).timestamp()
    records = {(9, "0"): {"job_id": 9, "restart_count": 0, "last_checkpoint_step": 450,
                          "last_checkpoint_time": ckpt_time, "drain_requested": True, "drain_acknowledged": True},
               (9, "1"): {"job_id": 9, "restart_count": 1}}
    first, second = attempts_from_records(lines, site, records)
    assert first.cost_usd + second.cost_usd == pytest.approx(2 * 4 * 1.40)
    assert first.waste_cause == "lost-since-checkpoint" and first.waste_gpu_hours == pytest.approx(4 * 0.25)
    assert second.waste_usd == 0 and not first.missing_epilog


def test_failure_before_first_checkpoint_is_all_waste_and_missing_records_are_flagged(site):
    lines = [line(10, "FAILED", "2026-11-27T10:00:00", "2026-11-27T10:30:00"),
             line(11, "NODE_FAIL", "2026-11-27T10:00:00", "2026-11-27T10:30:00")]
    records = {(10, "0"): {"job_id": 10, "restart_count": 0, "last_checkpoint_step": None}}
    failed, crashed = attempts_from_records(lines, site, records)
    assert failed.waste_cause == "failed-before-checkpoint" and failed.waste_usd == pytest.approx(failed.cost_usd)
    assert crashed.missing_epilog == 1 and crashed.cost_usd > 0  # costed from sacct alone, flagged


def test_unacknowledged_drain_is_its_own_waste_cause(site):
    records = {(12, "0"): {"job_id": 12, "drain_requested": True, "drain_acknowledged": False,
                           "last_checkpoint_time": datetime(2026, 11, 27, 10, 10).timestamp()}}
    [a] = attempts_from_records([line(12, "TIMEOUT", "2026-11-27T10:00:00", "2026-11-27T10:30:00")], site, records)
    assert a.waste_cause == "drain-unacknowledged" and a.waste_gpu_hours == pytest.approx(4 * 20 / 60)


def test_ingest_is_idempotent_and_report_totals_do_not_change(site):
    lines = [line(20 + i, "COMPLETED", f"2026-11-2{i}T10:00:00", f"2026-11-2{i}T11:00:00",
                  user=f"u{i % 2}", account=f"team{i % 3}") for i in range(1, 6)]
    when = dict(since=datetime(2026, 11, 20), now=datetime(2026, 11, 29))
    first = ingest(site, None, rows=lines, **when)
    again = ingest(site, None, rows=lines, **when)
    assert first.attempts == again.attempts == 5
    ledger = Ledger(Path(site.accounting.ledger_path))
    report = build_report(ledger, "account", datetime(2026, 11, 20), datetime(2026, 11, 30))
    assert report.totals.attempts == 5 and report.totals.cost_usd == pytest.approx(5 * 4 * 3.90)
    assert {g.group for g in report.groups} == {"team0", "team1", "team2"}
    assert "team1" in to_csv(report) and "<svg" in to_html(report)
    assert ledger.high_water_mark() == datetime(2026, 11, 29)


def test_dated_reports_never_clobber(site, tmp_path):
    from slurmctl.ops.report import write_dated_reports

    ingest(site, None, rows=[line(30, "COMPLETED", "2026-11-27T10:00:00", "2026-11-27T11:00:00")],
           since=datetime(2026, 11, 20), now=datetime(2026, 11, 29))
    ledger = Ledger(Path(site.accounting.ledger_path))
    window = (datetime(2026, 11, 20), datetime(2026, 11, 29, 6, 10))
    first = write_dated_reports(ledger, tmp_path / "reports", *window, {})
    second = write_dated_reports(ledger, tmp_path / "reports", *window, {})
    assert len(first) == len(second) == 12
    assert first[0].parent.name == "2026-11-29" and second[0].parent.name == "2026-11-29_061000"
    assert first[0].read_text() == second[0].read_text()


def test_discounted_cost_matches_a_minute_by_minute_reference():
    import random
    from datetime import timedelta

    d = Discounts(offpeak=0.3, weekend=0.2)

    def reference(gpus, start, end, price):
        total, at = 0.0, start
        while at < end:
            off = max(0.3 if (at.hour >= 22 or at.hour < 7) else 0.0, 0.2 if at.weekday() >= 5 else 0.0)
            total += price / 60 * (1 - off)
            at += timedelta(minutes=1)
        return gpus * total

    rng = random.Random(3)
    for _ in range(150):
        start = datetime(2026, 11, 20) + timedelta(minutes=rng.randrange(14 * 24 * 60))
        end = start + timedelta(minutes=rng.randrange(1, 3 * 24 * 60))
        assert allocation_cost(8, start, end, 3.9, d) == pytest.approx(reference(8, start, end, 3.9), rel=1e-9)


def _sacct(*records):
    return SlurmClient(ReplayRunner({"sacct": sacct_output(*records)}))


def test_a_hostile_job_name_or_comment_cannot_hide_or_forge_an_attempt(site):
    """The job name and comment are written by the user: with separators, newlines and a whole forged
    16-field line for alice's job in them, bob's attempts are costed to bob and alice's stays hers."""
    def named(job_id, name, comment="slurmctl:r-20261129-0001", user="bob"):
        values = line(job_id, "COMPLETED", "2026-11-29T10:00:00", "2026-11-29T11:00:00", user=user, comment=comment)
        return [*values[:-2], name, comment]

    forged = "\x1f".join(line(40, "COMPLETED", "2026-11-29T10:00:00", "2026-11-29T12:00:00", gpus=512,
                              user="alice"))
    client = _sacct(named(30, "plain"), named(31, "a\x1falice\x1fx"), named(32, f"evil\n{forged}"),
                    named(33, "n", comment=f"c\n{forged}\n"), named(40, "hers", user="alice"))
    attempts = list(attempts_from_records(stream_sacct(client, datetime(2026, 11, 29), datetime(2026, 11, 30)),
                                          site, {}))
    assert [(a.job_id, a.user, a.gpus) for a in attempts] == [
        (30, "bob", 4), (31, "bob", 4), (32, "bob", 4), (33, "bob", 4), (40, "alice", 4)]
    assert attempts[1].job_name == "a\x1falice\x1fx" and client.rejects.total == 0


def test_an_attempt_listed_twice_is_refused_and_nothing_is_ingested(site):
    mine = line(50, "COMPLETED", "2026-11-29T10:00:00", "2026-11-29T11:00:00", user="alice")
    forged = line(50, "COMPLETED", "2026-11-29T10:00:00", "2026-11-29T23:00:00", gpus=512, user="alice")
    client = _sacct(line(49, "COMPLETED", "2026-11-29T09:00:00", "2026-11-29T10:00:00"), mine, forged)
    with pytest.raises(ForgedSlurmOutput, match="listed attempt 2026-11-29T10:00:00 of job 50 twice"):
        ingest(site, client, since=datetime(2026, 11, 29), now=datetime(2026, 11, 30))
    assert Ledger(Path(site.accounting.ledger_path)).db.execute("SELECT COUNT(*) FROM attempts").fetchone() == (0,)


def test_a_resized_jobs_records_with_one_start_are_one_attempt_not_a_forgery(site):
    """As 22.05 lists a job shrunk while it ran (seen on the local cluster, job 5456: RESIZING and
    CANCELLED with the same start): the later record stands for the attempt, and the answer is used."""
    resized = line(56, "RESIZING", "2026-11-29T10:00:00", "2026-11-29T10:10:00", user="alice")
    between = line(55, "FAILED", "2026-11-29T10:00:00", "2026-11-29T10:05:00", user="alice")  # an array's task
    after = line(56, "CANCELLED", "2026-11-29T10:00:00", "2026-11-29T11:00:00", gpus=2, user="alice")
    ingest(site, _sacct(resized, between, after), since=datetime(2026, 11, 29), now=datetime(2026, 11, 30))
    rows = Ledger(Path(site.accounting.ledger_path)).db.execute(
        "SELECT job_id, gpus, end FROM attempts ORDER BY job_id").fetchall()
    assert rows == [(55, 4, "2026-11-29T10:05:00"), (56, 2, "2026-11-29T11:00:00")]


def test_a_resized_jobs_attempt_keeps_the_jobs_own_submit_time(site, monkeypatch):
    """Replayed from the local cluster (alice's job 5820, shrunk from 2 nodes to 1 while it ran, then
    cancelled): the record after the RESIZING one carries the resize's time as its Submit, 5 s after the
    job started; the attempt is submitted when the job was, 1 s before its start."""
    from slurmctl.ops.accounting import run_attempts

    from .fakes import pin_seal

    captured = json.loads((Path(__file__).parents[1] / "fixtures" / "slurm" / "resized_job_cost.json").read_text())
    pin_seal(monkeypatch, captured["seal"])
    runner = ReplayRunner({tuple(captured["sacct"]["argv"]): captured["sacct"]["stdout"]})
    runner.strict = True
    [attempt] = run_attempts(site, SlurmClient(runner), [5820])
    assert runner.calls == [captured["sacct"]["argv"]]
    assert (attempt.state, attempt.start, attempt.end) == ("CANCELLED", "2026-12-02T04:20:11", "2026-12-02T04:20:26")
    assert (attempt.submit, attempt.queue_wait_s) == ("2026-12-02T04:20:10", 1)  # sacct's last record: 04:20:16


def test_the_ledger_never_replaces_an_attempt_with_a_record_of_another_user(site):
    when = dict(since=datetime(2026, 11, 20), now=datetime(2026, 11, 29))
    ingest(site, None, rows=[line(60, "COMPLETED", "2026-11-27T10:00:00", "2026-11-27T11:00:00", user="alice")],
           **when)
    ingest(site, None, rows=[line(60, "COMPLETED", "2026-11-27T10:00:00", "2026-11-27T23:00:00", gpus=512,
                                  user="bob")], **when)
    ingest(site, None, rows=[line(60, "COMPLETED", "2026-11-27T10:00:00", "2026-11-27T12:00:00", user="alice")],
           **when)  # the same user's fresher record of the same attempt still updates it
    rows = Ledger(Path(site.accounting.ledger_path)).db.execute("SELECT user, gpus, end FROM attempts").fetchall()
    assert rows == [("alice", 4, "2026-11-27T12:00:00")]


def test_showback_by_run_keeps_two_users_runs_of_the_same_id_apart(site):
    same = "slurmctl:shared-20261127-0001"
    rows = [line(70, "COMPLETED", "2026-11-27T10:00:00", "2026-11-27T11:00:00", user="alice", comment=same),
            line(71, "COMPLETED", "2026-11-27T10:00:00", "2026-11-27T12:00:00", user="bob", comment=same)]
    ingest(site, None, rows=rows, since=datetime(2026, 11, 20), now=datetime(2026, 11, 29))
    report = build_report(Ledger(Path(site.accounting.ledger_path)), "run", datetime(2026, 11, 20),
                          datetime(2026, 11, 30))
    assert {g.group: g.gpu_hours for g in report.groups} == {"alice/shared-20261127-0001": 4.0,
                                                            "bob/shared-20261127-0001": 8.0}


def test_the_ledger_and_the_hooks_log_are_the_operators_not_the_users(site, tmp_path):
    import os
    import stat
    import time

    from slurmctl.ops.hooks.hooklog import log_hook

    ingest(site, None, rows=[line(80, "COMPLETED", "2026-11-27T10:00:00", "2026-11-27T11:00:00")],
           since=datetime(2026, 11, 20), now=datetime(2026, 11, 29))
    ledger = Path(site.accounting.ledger_path)
    if os.geteuid() == 0:
        assert stat.S_IMODE(ledger.stat().st_mode) == 0o600
    log = tmp_path / "hooks.jsonl"
    log.write_text("")
    log.chmod(0o644)  # an older version made it world-readable: tightened on the next write
    log_hook({"SLURMCTL_HOOKS_LOG": str(log), "SLURM_JOB_ID": "1"}, "prolog", time.monotonic())
    assert stat.S_IMODE(log.stat().st_mode) == 0o640 and log.read_text().count("\n") == 1


def test_cost_reads_an_adopted_programs_acknowledged_drain_from_the_runs_story(site, tmp_path, monkeypatch):
    """An adopted program acknowledges with its own checkpoint: no drain.ack, so the epilog's record says
    unacknowledged; the run's attempts.jsonl (cancel's drain-acknowledged, the end record) says otherwise."""
    import json

    from slurmctl.ops import accounting
    from slurmctl.ops.accounting import run_cost

    from .test_status_observe import _run
    run = _run(tmp_path, "adopted", 21)
    with (run.path / "attempts.jsonl").open("a") as f:
        for e in ({"event": "start", "job_id": 21, "restart_count": 0},
                  {"event": "drain-acknowledged", "job_id": 21, "step": 240, "by": "the program's own checkpoint"},
                  {"event": "end", "job_id": 21, "restart_count": 0, "outcome": "cancelled", "drain_acked": True},
                  {"event": "submitted", "job_id": 22},
                  {"event": "start", "job_id": 22, "restart_count": 0},
                  {"event": "end", "job_id": 22, "restart_count": 0, "outcome": "time-limit", "drain_acked": False}):
            f.write(json.dumps(e) + "\n")
    assert run.drain_acknowledged_attempts() == {(21, 0)}
    ck = datetime(2026, 11, 27, 10, 10).timestamp()
    epilog = {(job, "0"): {"job_id": job, "restart_count": 0, "drain_requested": True, "drain_acknowledged": False,
                           "last_checkpoint_time": ck} for job in (21, 22)}
    monkeypatch.setattr(accounting, "read_epilog_records",
                        lambda spool, copies=(): {k: dict(v) for k, v in epilog.items()})
    client = _sacct(line(21, "CANCELLED by 1000", "2026-11-27T10:00:00", "2026-11-27T10:30:00"),
                    line(22, "TIMEOUT", "2026-11-27T11:00:00", "2026-11-27T11:30:00"))
    cost = run_cost(["adopted"], [21, 22], site, client, (), run.drain_acknowledged_attempts())
    told = " ".join(cost.notes)
    assert "job 21: a drain was requested but never acknowledged" not in told, told
    assert "job 22: a drain was requested but never acknowledged" in told, told  # a real one still says so
    by_job = {a.job_id: a for a in cost.attempts}
    assert by_job[21].drain_acked == 1 and by_job[21].waste_cause != "drain-unacknowledged"


def test_the_ledger_uses_the_rollback_journal_on_a_network_filesystem(tmp_path, monkeypatch):
    """SQLite's WAL needs memory shared by every process that opens the database: not the case for a
    ledger on Filestore read on the login pods and written by the cron pods."""
    from slurmctl.ops import accounting

    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\n10.0.0.2:/runs {tmp_path}/nfs nfs rw,vers=3,hard 0 0\n")
    (tmp_path / "nfs" / "acct").mkdir(parents=True)
    assert accounting.on_network_filesystem(tmp_path / "nfs" / "acct", str(mounts))
    assert not accounting.on_network_filesystem(tmp_path / "nfs-other", str(mounts))
    assert not accounting.on_network_filesystem(tmp_path / "nfs", str(tmp_path / "missing"))
    real = accounting.on_network_filesystem
    monkeypatch.setattr(accounting, "on_network_filesystem", lambda path: real(path, str(mounts)))
    nfs = accounting.Ledger(tmp_path / "nfs" / "acct" / "ledger.sqlite")
    assert nfs.db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    local = accounting.Ledger(tmp_path / "local" / "ledger.sqlite")
    assert local.db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
