"""`slurmctl dev`: an interactive allocation on the dev partition (thin: parse, call core, print)."""

from __future__ import annotations

import click

from slurmctl.cli.context import Context, err, escape, json_option, out, pass_ctx, print_json


@click.command()
@click.option("--time", "time_", default="2h", show_default=True, help="TTL: the allocation's Slurm time limit.")
@click.option("--idle", default="30m", show_default=True,
              help="End the session after this long without input (shell) or activity (JupyterLab).")
@click.option("--jupyter", is_flag=True, help="Start JupyterLab on the node and print the ssh -L tunnel and URL.")
@click.option("--partition", help="Dev partition (default: l4-dev, else the site's smoke_partition).")
@click.option("--gpus", default=1, show_default=True, type=click.IntRange(0, 64), help="GPUs on the node.")
@click.option("--port", type=click.IntRange(1024, 65535),
              help="JupyterLab: the tunnel's port on your laptop (default: the free port Jupyter got on the node).")
@click.option("--dry-run", is_flag=True, help="Print the plan (the exact command); allocate nothing.")
@json_option
@pass_ctx
def dev(ctx: Context, time_: str, idle: str, jupyter: bool, partition: str | None, gpus: int, port: int | None,
        dry_run: bool, as_json: bool) -> None:
    """Open a shell (or JupyterLab) on a dev GPU node; the allocation ends at --time or when idle."""
    from slurmctl.control.dev import DevRequest, jupyter_plan, run_shell, shell_plan, start_jupyter

    request = DevRequest(time=time_, idle=idle, jupyter=jupyter, partition=partition, gpus=gpus, local_port=port)
    if dry_run:
        plan = jupyter_plan(ctx.site, request, "<token>") if jupyter else shell_plan(ctx.site, request)
        if as_json:
            print_json(plan.to_dict())
        else:
            click.echo(" ".join(plan.command))
        return
    if jupyter:
        session = start_jupyter(ctx.site, request, ctx.client, ctx.host)
        if as_json:
            print_json(session.to_dict())
            return
        out.print(f"[green]JupyterLab[/] runs as job {session.job_id} on {escape(str(session.node))} "
                  f"(ends after {session.time_limit}, or {session.idle_seconds} s without activity)")
        out.print(f"  1. on your laptop:  {session.tunnel}", markup=False)
        out.print(f"  2. open:            {session.url}", markup=False)
        out.print(f"  stop it early:      scancel {session.job_id}")
        return
    plan = shell_plan(ctx.site, request)
    err.print(f"[bold]slurmctl dev[/]: {escape(str(plan.gpu_type))} on {escape(str(plan.partition))} for "
              f"{escape(str(plan.time_limit))}; the shell "
              f"logs out after {plan.idle_seconds} s idle. Ctrl-D ends the session.")
    code, seconds = run_shell(plan, ctx.client)
    if as_json:
        print_json({"exit_code": code, "seconds": round(seconds, 1), **plan.to_dict()})
    else:
        err.print(f"[bold]slurmctl dev[/]: session ended after {seconds:.0f} s (exit {code}); "
                  "the allocation is released.")

