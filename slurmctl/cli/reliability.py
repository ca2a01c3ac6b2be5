"""Reliability commands: `cancel` (drain + verified ACK), `resume`, `fork`."""

from __future__ import annotations

import sys

import click

from slurmctl.cli.context import Context, err, escape, json_option, out, pass_ctx, print_json, print_line


@click.command()
@click.argument("run")
@click.option("--now", is_flag=True, help="Skip the drain: stop at once (work since the last checkpoint is lost).")
@click.option("--timeout", "drain_timeout", default=300.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to wait for the training to checkpoint and acknowledge the drain.")
@click.option("--at-next-checkpoint", is_flag=True,
              help="An adopted program that saves on no signal: stop it right after its next checkpoint of its own.")
@json_option
@pass_ctx
def cancel(ctx: Context, run: str, now: bool, drain_timeout: float, as_json: bool,
           at_next_checkpoint: bool = False) -> None:
    """Stop RUN: ask it to checkpoint and acknowledge, wait for that, then cancel and verify."""
    from slurmctl.control.cancel import cancel_run
    from slurmctl.observe.sweep import sweep_for

    if (swept := sweep_for(ctx.registry, run)) is not None:  # a sweep: drain every element, then its array
        _only_adopted(at_next_checkpoint, f"{run} is a sweep")
        from slurmctl.cli.sweep import cancel_sweep_command

        return cancel_sweep_command(ctx, swept, now, drain_timeout, as_json)

    animate = sys.stderr.isatty()  # a log or a pipe gets one line, not hundreds of \r-joined ones
    shown: list[bool] = []

    def progress(waited: float, heartbeat: dict | None) -> None:
        if as_json or (shown and not animate):
            return
        step = heartbeat.get("step") if heartbeat else None
        if animate:
            err.print(f"  waiting for the drain acknowledgement: {waited:.0f}/{drain_timeout:.0f} s"
                      + (f", training at step {escape(str(step))}" if step is not None else ""), end="\r")
        else:
            err.print(f"  waiting up to {drain_timeout:.0f} s for the drain acknowledgement ...", markup=False)
        shown.append(True)

    from slurmctl.cli.plain_job import PlainJob, cancel_plain, resolve_ref

    target = resolve_ref(ctx, run)  # a run, or one of the caller's own plain sbatch jobs by id
    if isinstance(target, PlainJob):
        _only_adopted(at_next_checkpoint, f"job {run} is a plain sbatch job")
        return cancel_plain(ctx, target, as_json)
    from slurmctl.control.adopted import cancel_adopted, is_adopted

    if is_adopted(target):  # the program's own signal and save
        result = cancel_adopted(target, ctx.client, now=now, drain_timeout=drain_timeout, progress=progress,
                                at_next_checkpoint=at_next_checkpoint)
    else:
        _only_adopted(at_next_checkpoint, f"run {target.run_id} was not adopted (its training saves when the drain "
                      "asks it to)")
        result = cancel_run(target, ctx.client, now=now, drain_timeout=drain_timeout, progress=progress)
    if shown and animate:
        err.print("")  # end the progress line: the verdict starts on its own
    if as_json:
        print_json(result.to_dict())
    else:
        if result.drain == "acknowledged":
            out.print(f"drain acknowledged after {result.drain_seconds:.1f} s: checkpoint at step {result.ack_step}"
                      f" ({result.ack_checkpoint})" + (f"; {result.note}" if result.note else ""), markup=False)
        elif result.drain == "unacknowledged" and result.note:
            print_line(("DRAIN NOT ACKNOWLEDGED", "red bold"), f" within {result.drain_seconds:.0f} s: {result.note}.",
                       to_stderr=True)
        elif result.drain == "unacknowledged":
            err.print(f"[red bold]DRAIN NOT ACKNOWLEDGED[/] within {result.drain_seconds:.0f} s: the training did not "
                      "save and confirm; work since its last checkpoint is lost. Make it poll "
                      "`rt.should_stop()` every step (see README), or raise --timeout.")
        if result.steps_lost is not None:
            kept = f"checkpoint step {result.kept_step}" if result.kept_step is not None else "no checkpoint"
            out.print(f"steps lost: {result.steps_lost} (it logged step {result.last_step}; its next start restores "
                      f"{kept})", markup=False)
        out.print(f"job {result.job_id} of {result.run_id} is {result.final_state.lower()} "
                  f"(verified after {result.seconds:.1f} s"
                  + (f"; Slurm records it as {result.slurm_state.lower()}" if result.slurm_state else "") + ")",
                  markup=False)
    if not result.ok:
        return 1


def _only_adopted(at_next_checkpoint: bool, why: str) -> None:
    if at_next_checkpoint:
        from slurmctl.errors import SpecError

        raise SpecError(f"--at-next-checkpoint is for an adopted program that saves on no signal; {why}.",
                        "Run the same cancel without --at-next-checkpoint.")


@click.command()
@click.argument("run")
@click.option("-y", "--yes", is_flag=True, help="Do not ask to confirm a cost above the site threshold.")
@json_option
@pass_ctx
def resume(ctx: Context, run: str, as_json: bool, yes: bool = False) -> None:
    """Start a new job for an ended RUN from its newest valid checkpoint (same run id)."""
    from slurmctl.control.adopted import is_adopted, resume_adopted
    from slurmctl.control.resume import resume_run

    def confirm(max_usd: float) -> bool:
        return click.confirm(f"Worst case ${max_usd:,.2f} Resume?", default=False, err=True)

    the_run = ctx.registry.get(run)
    interactive = not as_json and sys.stdin.isatty()  # as submit: a script gets the error, never a prompt
    result = (resume_adopted if is_adopted(the_run) else resume_run)(the_run, ctx.client, ctx.site, yes=yes,
                                                                     confirm=confirm if interactive else None)
    if as_json:
        print_json(result.to_dict())
        return
    out.print(f"[green]resumed[/] run [bold]{escape(result.run_id)}[/] from checkpoint step {result.from_step} "
              f"as Slurm job {result.job_id}")
    out.print(f"  next: slurmctl status {result.run_id}", markup=False)


@click.command()
@click.argument("source")
@click.argument("new_name")
@click.option("--from", "from_step", type=click.IntRange(min=0), help="Checkpoint step (default: the newest valid).")
@json_option
@pass_ctx
def fork(ctx: Context, source: str, new_name: str, from_step: int | None, as_json: bool) -> None:
    """Start a new run NEW_NAME from a checkpoint of SOURCE (SOURCE is not changed)."""
    from slurmctl.control.resume import fork_run

    result = fork_run(ctx.registry.get(source), new_name, ctx.registry, ctx.site, ctx.client, from_step)
    if as_json:
        print_json(result.to_dict())
        return
    out.print(f"[green]forked[/] {escape(result.source_run_id)} at step {result.from_step} into run "
              f"[bold]{escape(result.run_id)}[/] (Slurm job {result.job_id})")
    out.print(f"  run dir: {result.run_dir}", markup=False)
    out.print(f"  next: slurmctl status {result.run_id}", markup=False)
