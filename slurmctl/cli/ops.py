"""Admin operations: `slurmctl cleanup`."""

from __future__ import annotations

import click

from slurmctl.cli.context import Context, json_option, out, pass_ctx, print_json


@click.command()
@click.option("--apply", "apply_", is_flag=True, help="Release what is found (default: list only).")
@click.option("--run", "run_ref", default=None, help="Only this run (id, prefix or name).")
@json_option
@pass_ctx
def cleanup(ctx: Context, apply_: bool, run_ref: str | None, as_json: bool) -> None:
    """Find held jobs of dead runs, dev allocations past their TTL and stale drain requests."""
    from slurmctl.ops.cleanup import CleanupPass, find_orphans, release
    from slurmctl.rundir import is_run_id

    # A full run id is taken as given: root's cron looks at every user's runs, not only root's own.
    only_run = run_ref if run_ref and is_run_id(run_ref) else (ctx.registry.get(run_ref).run_id if run_ref else None)
    cleanup_pass = CleanupPass()
    orphans = find_orphans(ctx.site, ctx.client, ctx.registry, only_run, cleanup_pass)
    if apply_:
        release(orphans, ctx.client)
    if as_json:
        print_json({"applied": apply_, "orphans": [o.to_dict() for o in orphans], "notes": cleanup_pass.notes})
        return
    for note in cleanup_pass.notes:  # what the pass refused to trust (a symlinked runs dir, a planted FIFO)
        out.print(f"skipped: {note}", markup=False)
    if not orphans:
        out.print("nothing to clean up")
        return
    for o in orphans:
        what = f"job {o.job_id}" if o.job_id is not None else o.path
        done = ("released" if o.released else f"FAILED: {o.error}") if apply_ else "would release"
        out.print(f"{o.kind:20} {what}: {o.reason} [{done}]", markup=False)  # paths and reasons are data
    if not apply_:
        out.print("dry run: rerun with --apply to release these")


@click.command()
@click.option("--node", "only", default=None, help="Only this node.")
@json_option
@pass_ctx
def nodes(ctx: Context, only: str | None, as_json: bool) -> None:
    """Nodes as an operator sees them: state, who drained each and why, checks, verification, suspect score.

    With the GPU-hours lost to each node this week: attempts that died of it, and its drained time."""
    import os
    from pathlib import Path

    from slurmctl.ops.accounting import cost_records_dir
    from slurmctl.ops.health.view import node_views

    local = os.environ.get("SLURMCTL_LOCAL_DIR")  # the local dev cluster's shared state: the failure spools
    views = node_views(ctx.client, only, Path(local) if local else None, cost_spool=cost_records_dir(ctx.site))
    if as_json:
        print_json([v.to_dict() for v in views])
        return
    out.print(f"{'NODE':12} {'STATE':22} {'DRAINED BY':11} {'CHECK':10} {'SUSPECT':7} {'GPU-H LOST':>10}  WHY",
              markup=False)
    for v in views:
        check = f"{v.check}{' (verifying)' if v.verifying else ''}" if v.check or v.verifying else "-"
        score = "-" if v.suspect_score is None else str(v.suspect_score)
        lost = "?" if v.gpu_hours_lost is None else gpu_hours_text(v.gpu_hours_lost.total)
        why = (f"[{v.blame}] " if v.blame else "") + (v.reason or "") + (f" (since {v.since})" if v.since else "")
        # node names, reasons and users are data, never markup
        out.print(f"{v.node:12} {v.state:22} {v.drained_by or '-':11} {check:10} {score:7} {lost:>10}  {why or '-'}",
                  markup=False)


def gpu_hours_text(hours: float) -> str:
    """GPU-hours for the table: two decimals, a small loss never shown as nothing ("<0.01")."""
    if hours <= 0:
        return "0"
    return "<0.01" if hours < 0.005 else f"{hours:.2f}"
