"""`slurmctl submit`: the preflight checklist, placement table and cost line, then sbatch."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import click
from rich.console import Console

from slurmctl.cli.context import Context, err, escape, json_option, out, pass_ctx, plain_table, print_json
from slurmctl.durations import until
from slurmctl.errors import PreflightFailed
from slurmctl.submit.cost import CostEstimate
from slurmctl.submit.placement import Placement
from slurmctl.submit.preflight import PreflightReport

_MARK = {"ok": "[green]✓[/]", "warning": "[yellow]![/]", "error": "[red]✗[/]"}


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_spec", type=click.Path(path_type=Path))
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--dry-run", is_flag=True, help="Check, place and print the sbatch script; submit nothing.")
@click.option("--smoke", is_flag=True, help="Run it on the smoke partition: 1 GPU, one step; wait for pass/fail.")
@click.option("--where", metavar="PARTITION", help="Use this partition instead of the earliest-start choice.")
@click.option("--force", is_flag=True, help="Submit despite preflight errors (recorded in the run dir).")
@click.option("--allow-mutable-image", is_flag=True, help="Accept an image tag that is not pinned by digest.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask to confirm a cost above the site threshold.")
@click.option("--build", is_flag=True, help="Build the image from the Dockerfile, push it and pin its digest.")
@json_option
@pass_ctx
def submit(ctx: Context, run_spec: Path, sbatch_args: tuple[str, ...], dry_run: bool, smoke: bool,
           where: str | None, force: bool, allow_mutable_image: bool, yes: bool, as_json: bool,
           build: bool = False) -> None:
    """Check RUN_SPEC (run.yaml) before any GPU is spent, pick the partition that starts it
    first, show its cost, and submit it.

    Extra sbatch arguments go after `--`, e.g. `slurmctl submit run.yaml -- --hold`.
    """
    from slurmctl.submit.submission import SubmitOptions
    from slurmctl.submit.submission import submit as do_submit

    def confirm(cost: CostEstimate) -> bool:
        return click.confirm(f"Worst case ${cost.max_usd:,.2f} ({cost.sentence()}) Submit?", default=False,
                             err=True)

    interactive = not as_json and sys.stdin.isatty()
    options = SubmitOptions(dry_run=dry_run, extra_sbatch_args=sbatch_args, force=force,
                            allow_mutable_image=allow_mutable_image, smoke=smoke, where=where, yes=yes, build=build,
                            confirm=confirm if interactive else None)
    result = submit_showing_checks(lambda: do_submit(run_spec, ctx.site, ctx.client, options), as_json, dry_run)
    if as_json:
        return 1 if result.smoke and not result.smoke.passed else None
    console = err if dry_run else out
    console.print(f"[bold]cost[/]: {escape(result.estimate.sentence())}")
    if result.forced:
        console.print(f"[red]forced[/] past: {escape(', '.join(result.forced))} (recorded in the run dir)")
    if dry_run:
        click.echo(result.script, nl=False)
        err.print("[bold]dry run[/]: nothing submitted.")
        return
    out.print(f"[green]submitted[/] run [bold]{escape(result.run_id)}[/] as Slurm job {result.job_id}")
    out.print(f"  run dir: {result.run_dir}", markup=False)
    if result.smoke:
        verdict = result.smoke
        word = "[green]PASSED[/]" if verdict.passed else "[red]FAILED[/]"
        out.print(f"smoke test {word} in {verdict.seconds:.0f} s ({escape(verdict.state.lower())}): "
                  f"{escape(str(verdict.diagnosis))}")
        if not verdict.passed:
            for line in verdict.log_tail:
                out.print(f"  | {line}", markup=False)
            return 1
        if verdict.gate_open is False:
            out.print(f"  code+config {verdict.code_hash} passed, but this site's gate does not see the pass yet "
                      "(root's record or Slurm's accounting is behind): submit the full run again in a minute.",
                      markup=False)
            return
        out.print(f"  code+config {verdict.code_hash} recorded; a full submit of it may follow.")
        return
    out.print(f"  next: slurmctl status {result.run_id}   |   slurmctl logs {result.run_id} -f", markup=False)


def submit_showing_checks(call, as_json: bool, dry_run: bool):
    """Run a submit (one run or a sweep) and show its checks: on a preflight failure the checklist, then
    the error; else the result as JSON, or the checklist and placement table (stderr for a dry run,
    whose stdout is the script)."""
    try:
        result = call()
    except PreflightFailed as exc:
        if not as_json:
            print_checklist(exc.report, err)
        raise
    if as_json:
        data = result.to_dict()
        if dry_run:
            data["script"] = result.script
        print_json(data)
        return result
    console = err if dry_run else out
    print_checklist(result.report, console)
    if result.placement:
        print_placement(result.placement, console)
    return result


def print_checklist(report: PreflightReport, console: Console) -> None:
    console.print("[bold]preflight[/]")
    for check in report.checks:
        note = f" [dim]({escape(check.note)})[/]" if check.note and check.status == "ok" else ""
        console.print(f"  {_MARK[check.status]} {escape(check.title)}{note}")
        for finding in check.findings:
            colour = "red" if finding.level == "error" else "yellow"
            console.print(f"      [{colour}]{escape(finding.code)}[/]: {escape(finding.message)}")
            console.print(f"      [dim]→ {escape(finding.hint)}[/]")


def print_placement(placement: Placement, console: Console) -> None:
    table = plain_table("", "PARTITION", "EST. START", "$/HOUR", "PREEMPTIBLE")
    for option in placement.options:
        chosen = option.partition == placement.chosen
        if option.waits_for_scale_up:
            start = f"unknown: {option.message}"
        else:
            start = _when(option.start_time) if option.ok else f"cannot run: {option.message}"  # a Text cell
        table.add_row("→" if chosen else "", option.partition, start, f"{option.usd_per_hour:,.2f}",
                      "yes" if option.preemptible else "no")
    console.print(f"[bold]placement[/]: {escape(placement.chosen)} ({escape(placement.reason)})")
    console.print(table)


def _when(start: datetime | None) -> str:
    if start is None:
        return "unknown"
    soon = until(start)
    return soon if soon == "now" else f"{start:%Y-%m-%d %H:%M} ({soon})"
