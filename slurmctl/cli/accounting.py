"""Cost commands: `cost RUN`, `report`, `accounting ingest` (the cron entry point)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import click

from slurmctl import lineage
from slurmctl.cli.context import Context, err, escape, json_option, out, pass_ctx, plain_table, print_json
from slurmctl.durations import parse_when
from slurmctl.errors import SlurmctlError, SpecError


@click.command()
@click.argument("run")
@json_option
@pass_ctx
def cost(ctx: Context, run: str, as_json: bool) -> None:
    """What RUN cost: every attempt (requeues, resumes, forks), GPU-hours, dollars and waste."""
    from slurmctl.observe.sweep import element_runs, sweep_for
    from slurmctl.ops.accounting import run_cost

    registry = ctx.registry
    if (swept := sweep_for(registry, run)) is not None:  # a sweep: the sum of its elements
        family, names = [r for _, r in element_runs(swept, registry)], [swept.sweep_id]
    else:
        from slurmctl.cli.plain_job import PlainJob, cost_plain, resolve_ref

        target = resolve_ref(ctx, run)  # a run, or one of the caller's own plain sbatch jobs by id
        if isinstance(target, PlainJob):
            return cost_plain(ctx, target, as_json)
        family, names = lineage.family(registry.list(), target.run_id), []
    job_ids = [j for r in family for j in r.priced_job_ids()]
    result = run_cost(names + [r.run_id for r in family], job_ids, ctx.site, ctx.client,
                      [r.cost_records_dir for r in family],
                      {a for r in family for a in r.drain_acknowledged_attempts()},
                      {a for r in family for a in r.lost_on_cancel_attempts()},
                      {k: e for r in family for k, e in r.attempt_ends().items()})
    # Both kinds of restart: Slurm requeues are attempts of their own above; a crash restarted inside
    # its allocation (step-restart in attempts.jsonl) is paid for inside the attempt it happened in.
    in_allocation = sum(1 for r in family for e in r.events() if e.get("event") == "step-restart")
    requeues = len(result.attempts) - len({a.job_id for a in result.attempts})
    if as_json:
        print_json({**result.to_dict(), "requeues": requeues, "restarts_in_allocation": in_allocation})
        return
    table = plain_table("JOB", "RUN", "STATE", "PARTITION", "GPUS", "START", "HOURS", "COST", "WASTE")
    for a in result.attempts:
        table.add_row(str(a.job_id), a.run_id, a.state.lower(), a.partition, a.shape, a.start,
                      f"{a.elapsed_s / 3600:.2f}", f"${a.cost_usd:,.2f}",
                      f"${a.waste_usd:,.2f} {a.waste_cause}" if a.waste_usd else "-")
    out.print(table)
    jobs = len({a.job_id for a in result.attempts})  # an array's tasks, a resume: jobs of their own
    out.print(f"[bold]{escape(result.run_id)}[/]: {f'{jobs} jobs, ' if jobs > 1 else ''}"
              f"{len(result.attempts)} attempt(s), "
              f"{result.held}, [bold]${result.cost_usd:,.2f}[/]; "
              f"waste ${result.waste_usd:,.2f} ({result.waste_gpu_hours:.2f} GPU-hours)")
    out.print(f"Restarts: {requeues} Slurm requeue(s) (attempts above); {in_allocation} inside the allocation "
              "(within the attempt they happened in)")
    for note in result.notes:
        out.print(f"  note: {note}", markup=False)


def _parse_when(option: str, value: str | None, default: datetime) -> datetime:
    if not value:
        return default
    try:
        return parse_when(value)
    except ValueError as exc:
        raise SpecError(f"{option}: {exc}.", f"For example `{option} 2026-11-01` or `{option} 7d`.",
                        code="invalid-date") from None


@click.command()
@click.option("--since", help="Start: YYYY-MM-DD[THH:MM] or an age such as '7d' or '12h' (default: 7 days ago).")
@click.option("--until", help="End (default: now).")
@click.option("--by", type=click.Choice(["account", "user", "partition", "gpu", "run"]), default="account",
              show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "html"]), default="table",
              show_default=True)
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to a file (never overwrites).")
@click.option("--no-ingest", is_flag=True, help="Report from the ledger as it is; do not ask sacct first.")
@pass_ctx
def report(ctx: Context, since: str | None, until: str | None, by: str, fmt: str, output: Path | None,
           no_ingest: bool) -> None:
    """Showback: GPU-hours, dollars, waste and queue wait by account, user, partition, GPU or run."""
    from slurmctl.ops import report as reports
    from slurmctl.ops.accounting import Ledger, cost_records_dir, ingest, may_write_ledger, own_showback_ledger

    now = datetime.now().replace(microsecond=0)
    start, end = _parse_when("--since", since, now - timedelta(days=7)), _parse_when("--until", until, now)
    if may_write_ledger(ctx.site):
        if not no_ingest:
            ingest(ctx.site, ctx.client, spool=cost_records_dir(ctx.site))
        ledger = Ledger(Path(ctx.site.accounting.ledger_path), ctx.site.accounting.operators_group)
        result = reports.build_report(ledger, by, start, end, ctx.client.gpu_utilization(start, end))
    elif ctx.site.accounting.researcher_showback:
        import getpass

        with own_showback_ledger(ctx.site, ctx.client, getpass.getuser(), start, end) as ledger:
            result = reports.build_report(ledger, by, start, end)
    else:
        raise SlurmctlError(
            f"the cost ledger ({ctx.site.accounting.ledger_path}) holds every user's spend and is the operators' "
            "only; this site does not offer researchers their own showback.",
            "`slurmctl cost RUN` prices your own runs; ask your admin for the team's showback report, or to set "
            "accounting.researcher_showback: true in site.yaml.", code="operators-only")
    if fmt == "table":
        _print_report(result)
        return
    text = {"csv": reports.to_csv, "json": reports.to_json, "html": reports.to_html}[fmt](result)
    if output:
        with open(output, "x") as fh:  # "x": a report file is never clobbered
            fh.write(text)
        err.print(f"wrote {output}", markup=False)
    else:
        click.echo(text, nl=False)


def _print_report(result) -> None:
    table = plain_table(result.by.upper(), "ATTEMPTS", "GPU-H", "COST", "WASTE", "WAIT P50", "WAIT P95",
                        title=f"GPU showback {result.since} .. {result.until}")
    for g in [*result.groups, result.totals]:
        table.add_row(g.group, str(g.attempts), f"{g.gpu_hours:,.2f}", f"${g.cost_usd:,.2f}", f"${g.waste_usd:,.2f}",
                      f"{g.queue_wait_p50_s / 60:.1f}m", f"{g.queue_wait_p95_s / 60:.1f}m")
    out.print(table)
    if result.waste_by_cause:
        out.print("waste by cause: " + ", ".join(f"{k} ${v:,.2f}" for k, v in result.waste_by_cause.items()),
                  markup=False)


@click.group()
def accounting() -> None:
    """The cost ledger (admins and cron)."""


@accounting.command("ingest")
@click.option("--since", help="Re-read from this date instead of the high-water mark.")
@json_option
@pass_ctx
def ingest_command(ctx: Context, since: str | None, as_json: bool) -> None:
    """Ingest new sacct attempts and epilog records into the ledger (idempotent)."""
    from slurmctl.ops.accounting import cost_records_dir, ingest

    start = _parse_when("--since", since, datetime.now()) if since else None
    result = ingest(ctx.site, ctx.client, since=start, spool=cost_records_dir(ctx.site))
    if as_json:
        print_json(result.to_dict())
    else:
        out.print(f"ingested {result.attempts} attempt(s) from {result.window_start} to {result.window_end}"
                  f" ({result.missing_epilog} without an epilog record)")


@accounting.command("showback")
@click.option("--days", default=7, show_default=True, help="Window: the last N days.")
@json_option
@pass_ctx
def showback_command(ctx: Context, days: int, as_json: bool) -> None:
    """Ingest, then write dated showback files (html/csv/json by account, user, partition, run)."""
    from slurmctl.ops.accounting import Ledger, cost_records_dir, ingest
    from slurmctl.ops.report import write_dated_reports

    now = datetime.now().replace(microsecond=0)
    ingested = ingest(ctx.site, ctx.client, spool=cost_records_dir(ctx.site))
    start = now - timedelta(days=days)
    written = write_dated_reports(Ledger(Path(ctx.site.accounting.ledger_path)), ctx.site.accounting.reports_dir,
                                  start, now, ctx.client.gpu_utilization(start, now))
    if as_json:
        print_json({"ingest": ingested.to_dict(), "files": [str(p) for p in written]})
    else:
        out.print(f"ingested {ingested.attempts} attempt(s); wrote {len(written)} files to {written[0].parent}",
                  markup=False)
