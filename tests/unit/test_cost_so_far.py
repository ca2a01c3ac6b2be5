"""status's "cost so far" counts every attempt of a requeued or resumed job, as `slurmctl cost` does
(one source: accounting's --duplicates records), plus the attempt still running."""

import json
from datetime import datetime
from pathlib import Path

from slurmctl.ops.accounting import run_attempts
from slurmctl.ops.cost_so_far import cost_so_far
from slurmctl.slurm.client import SlurmClient

from .fakes import ReplayRunner, pin_seal

CAPTURED = json.loads((Path(__file__).parent.parent / "fixtures" / "slurm" /
                       "requeued_plain_job_attempts.json").read_text())


def _client(monkeypatch):
    pin_seal(monkeypatch, CAPTURED["seal"])
    return SlurmClient(ReplayRunner({tuple(CAPTURED["call"]["argv"]): CAPTURED["call"]["stdout"]}))


def test_a_requeued_jobs_cost_so_far_is_every_attempts(local_site, monkeypatch):
    client = _client(monkeypatch)
    attempts = run_attempts(local_site, client, [4226])
    assert [a.state for a in attempts] == ["REQUEUED", "CANCELLED"]
    newest = attempts[-1]
    # status priced the newest attempt alone; the run's total is both, as `cost` says ($0.26)
    total = cost_so_far(local_site, client, [4226], 4226, datetime.fromisoformat(newest.start), newest.cost_usd)
    assert round(total, 2) == 0.26 and abs(total - sum(a.cost_usd for a in attempts)) < 1e-9
    # while the newest attempt still runs, accounting lists only the ended one: its cost is added
    running_since = datetime(2026, 12, 1, 23, 30, 0)
    assert abs(cost_so_far(local_site, client, [4226], 4226, running_since, 0.05)
               - (sum(a.cost_usd for a in attempts) + 0.05)) < 1e-9


def test_cost_says_cpu_only_instead_of_zero_gpu_hours(local_site, monkeypatch):
    from slurmctl.ops.accounting import Attempt, RunCost

    cpu = Attempt("c", 4137, "2026-12-01T23:07:00", "2026-12-01T23:07:06", "2026-12-01T23:07:00", "", "ok", "alice",
                  "a", "l4-dev", "", 0, 1, 6, 300, "COMPLETED", "0:0", 0, cost_usd=7e-05)
    assert RunCost("job 4137", [], [cpu], 0.0, 7e-05, 0.0, 0.0, []).held == "CPU only (priced by its CPUs)"
    gpu = RunCost("job 4226", [], run_attempts(local_site, _client(monkeypatch), [4226]), 0.26, 0.26, 0, 0, [])
    assert gpu.held == "0.26 GPU-hours"


def test_status_and_ls_show_the_cost_so_far_while_a_requeued_job_waits_and_after_its_cancel(local_site, monkeypatch):
    """The newest attempt, not started (a requeued job waiting, or cancelled while it waited), has no cost
    of its own; the attempts before it were paid for: the cost so far is theirs, as `slurmctl cost` says."""
    from types import SimpleNamespace

    from slurmctl.observe.status import RunStatus
    from slurmctl.ops.cost_so_far import price_every_attempt

    ctx = SimpleNamespace(site_view=local_site, client=_client(monkeypatch))
    run = SimpleNamespace(priced_job_ids=lambda: [4226])
    for state in ("PENDING", "CANCELLED"):
        waiting = RunStatus("r", "/runs/r", 4226, state, "", "", requeues=1)
        assert waiting.cost_usd is None
        price_every_attempt(ctx.site_view, ctx.client, [run], [waiting])
        expected = sum(a.cost_usd for a in run_attempts(local_site, ctx.client, [4226]))
        assert waiting.cost_usd is not None and abs(waiting.cost_usd - expected) < 1e-9 and round(expected, 2) == 0.26


def test_ls_uses_the_attempts_it_asked_for_while_the_statuses_were_read(local_site, monkeypatch):
    """`ls` asks for the attempts of the runs whose records show several in a thread, beside their
    statuses; the figure is the same, and no second sacct is made for jobs it asked for."""
    from types import SimpleNamespace

    from slurmctl.observe.status import RunStatus
    from slurmctl.ops.cost_so_far import price_every_attempt

    attempts = run_attempts(local_site, _client(monkeypatch), [4226])
    runner = ReplayRunner({})  # any Slurm call here would be answered with nothing: it must not be made
    ctx = SimpleNamespace(site_view=local_site, client=SlurmClient(runner))
    run = SimpleNamespace(priced_job_ids=lambda: [4226])
    waiting = RunStatus("r", "/runs/r", 4226, "PENDING", "", "", requeues=1)
    price_every_attempt(ctx.site_view, ctx.client, [run], [waiting], (attempts, {4226}))
    assert runner.calls == [] and round(waiting.cost_usd, 2) == 0.26
