"""`slurmctl sweep` (submit a grid as one Slurm array) and what status/compare/cancel/cost print for a
sweep id (those commands call the functions here when their argument names a sweep)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from slurmctl.cli.context import Context, err, escape, json_option, out, pass_ctx, print_json, print_table


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_spec", type=click.Path(path_type=Path))
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--grid", "grid", multiple=True, metavar="KEY=V1,V2,...",
              help="Values of one args option (--KEY) or env variable; repeat for more keys. Replaces run.yaml's "
                   "sweep.grid.")
@click.option("--max-parallel", type=click.IntRange(min=1), help="Elements running at once (sbatch --array=...%N).")
@click.option("--metric", help="Metric `compare SWEEP` ranks by (default: run.yaml sweep.metric, else loss).")
@click.option("--dry-run", is_flag=True, help="Check, place and print the array's script; submit nothing.")
@click.option("--where", metavar="PARTITION", help="Use this partition instead of the earliest-start choice.")
@click.option("--force", is_flag=True, help="Submit despite preflight errors (recorded in every run dir).")
@click.option("--allow-mutable-image", is_flag=True, help="Accept an image tag that is not pinned by digest.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask to confirm a cost above the site threshold.")
@json_option
@pass_ctx
def sweep(ctx: Context, run_spec: Path, sbatch_args: tuple[str, ...], grid: tuple[str, ...],
          max_parallel: int | None, metric: str | None, dry_run: bool, where: str | None, force: bool,
          allow_mutable_image: bool, yes: bool, as_json: bool) -> None:
    """Submit RUN_SPEC once per combination of grid values, as ONE Slurm array.

    `slurmctl sweep run.yaml --grid lr=1e-4,3e-4 --grid seed=1,2,3 --max-parallel 2` runs 6 elements,
    each its own run (run dir, checkpoints, tracked run), grouped under one sweep id.
    """
    from slurmctl.cli.submit import submit_showing_checks
    from slurmctl.submit.submission import SubmitOptions
    from slurmctl.submit.sweep import submit_sweep

    def confirm(cost) -> bool:
        return click.confirm(f"Worst case ${cost.max_usd:,.2f} for the whole sweep. Submit?", default=False, err=True)

    from slurmctl.errors import ConfigError
    from slurmctl.rundir.remote import RemoteSlurmClient

    if isinstance(ctx.client, RemoteSlurmClient):
        # Its submit copies one run dir and its workdir; a sweep has one per element plus its own.
        raise ConfigError("`slurmctl sweep` does not run through an SSH login node yet (--host / login_host).",
                          "Run it on the login node itself, or submit the elements one by one with `submit`.")
    interactive = not as_json and sys.stdin.isatty()
    options = SubmitOptions(dry_run=dry_run, extra_sbatch_args=sbatch_args, force=force,
                            allow_mutable_image=allow_mutable_image, where=where, yes=yes,
                            confirm=confirm if interactive else None)
    result = submit_showing_checks(
        lambda: submit_sweep(run_spec, ctx.site, ctx.client, grid, max_parallel, metric, options), as_json, dry_run)
    if as_json:
        return
    console = err if dry_run else out
    n = len(result.run_ids)
    console.print(f"[bold]cost[/]: {n} elements x {escape(result.estimate.sentence())} Whole sweep worst case "
                  f"[bold]${result.total_max_usd:,.2f}[/].")
    if result.forced:
        console.print(f"[red]forced[/] past: {escape(', '.join(result.forced))} (recorded in every run dir)")
    rows = [(str(i), rid, " ".join(f"{k}={v}" for k, v in values.items()))
            for i, (rid, values) in enumerate(zip(result.run_ids, result.plan.combinations, strict=True))]
    if dry_run:
        click.echo(result.script, nl=False)
        err.print(f"[bold]dry run[/]: nothing submitted; array {escape(result.plan.array)} of {n} elements.")
        return
    print_table(("INDEX", "RUN", "VALUES"), rows)
    out.print(f"[green]submitted[/] sweep [bold]{escape(result.sweep_id)}[/] as Slurm array {result.job_id} "
              f"(--array={escape(result.plan.array)})")
    out.print(f"  next: slurmctl status {result.sweep_id}   |   slurmctl compare {result.sweep_id}", markup=False)


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def print_sweep_status(ctx: Context, sweep, as_json: bool) -> int | None:
    from slurmctl.observe.sweep import sweep_status

    result = sweep_status(sweep, ctx.registry, ctx.client, site=ctx.site_view)
    if as_json:
        print_json(result.to_dict())
        return None
    phases = ", ".join(f"{n} {p}" for p, n in sorted(result.phases.items()))
    out.print(f"sweep {result.sweep_id} (Slurm array {result.array_job_id}): {len(result.elements)} elements: "
              f"{phases}", markup=False)
    rows = [(str(e.index), e.run_id, " ".join(f"{k}={v}" for k, v in e.values.items()), e.phase,
             str(e.job_id or "-"), "-" if e.step is None else str(e.step), str(e.requeues),
             "-" if e.checkpoint_step is None else str(e.checkpoint_step), _num(e.best), _num(e.last))
            for e in result.elements]
    metric = result.metric.upper()
    print_table(("INDEX", "RUN", "VALUES", "PHASE", "JOB", "STEP", "REQUEUES", "CKPT", f"BEST {metric}",
                 f"LAST {metric}"), rows)
    return None


def print_sweep_compare(ctx: Context, sweep, metric: str | None, goal: str | None, as_json: bool) -> int | None:
    from slurmctl.observe.sweep import sweep_status

    result = sweep_status(sweep, ctx.registry, ctx.client, site=ctx.site_view, metric=metric, goal=goal)
    ranked = result.ranked()
    if as_json:
        print_json({**result.to_dict(), "ranking": [e.run_id for e in ranked]})
        return None
    rows = [(str(e.rank), e.run_id, " ".join(f"{k}={v}" for k, v in e.values.items()), _num(e.best),
             "-" if e.best_step is None else str(e.best_step), _num(e.last), e.phase) for e in ranked]
    unscored = [e.run_id for e in result.elements if e.best is None]
    metric_name = result.metric.upper()
    print_table(("RANK", "RUN", "VALUES", f"BEST {metric_name}", "AT STEP", f"LAST {metric_name}", "PHASE"), rows,
                title=f"sweep {result.sweep_id}: ranked by {result.metric} ({result.goal} is best)")
    if unscored:
        out.print(f"no {result.metric} logged yet: {', '.join(unscored)}", markup=False)
    return None


def cancel_sweep_command(ctx: Context, sweep, now: bool, drain_timeout: float, as_json: bool) -> int | None:
    from slurmctl.control.sweep import cancel_sweep

    result = cancel_sweep(sweep, ctx.registry, ctx.client, now=now, drain_timeout=drain_timeout)
    if as_json:
        print_json(result.to_dict())
    else:
        for e in result.elements:
            drain = {"acknowledged": f"drain acknowledged at step {e.ack_step}",
                     "unacknowledged": "DRAIN NOT ACKNOWLEDGED: work since its last checkpoint is lost",
                     "skipped": "not drained (--now)"}.get(e.drain, "was not running")
            out.print(f"  [{e.index}] {e.run_id}: {e.state.lower() or 'unknown'}; {drain}", markup=False)
        out.print(f"sweep {result.sweep_id}: array {result.array_job_id} cancelled "
                  f"(verified after {result.seconds:.1f} s)", markup=False)
    return None if result.ok else 1
