"""`slurmctl adopt SCRIPT [-- sbatch options]`: what slurmctl understood of an existing sbatch script,
then the script run as written inside the platform. Thin: the core is slurmctl.submit.adopt."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from slurmctl.cli.context import Context, err, json_option, out, pass_ctx, print_json, print_line


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("script", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--dry-run", is_flag=True, help="Show what was understood and the job that would run; submit nothing.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask to confirm a cost above the site threshold.")
@click.option("--smoke", "smoke_minutes", type=click.IntRange(1, 60), default=None, metavar="MINUTES",
              help="Run it for at most MINUTES and judge it by its own success signal (exit 0, or steps advancing "
              "and, with a checkpoint adapter, a checkpoint of its own); stopped as soon as that is seen.")
@click.option("--convert", "convert_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Instead: write DIR/run.yaml, the job script it renders and a line-by-line MAPPING.txt.")
@click.option("--framework", help="How the program checkpoints: lightning, hf-trainer, pytorch or none "
              "(default: detected from the program's imports).")
@click.option("--checkpoint-dir", help="Where the program writes its checkpoints (default: its own output dir "
              "when its command line or text names one, else the directory the job starts in).")
@click.option("--signal", "program_signal", help="The signal the program saves on (default: the framework's).")
@click.option("--step-pattern", help="Regex with a group named step for the program's progress lines.")
@json_option
@pass_ctx
def adopt(ctx: Context, script: Path, sbatch_args: tuple[str, ...], dry_run: bool, yes: bool, framework: str | None,
          checkpoint_dir: str | None, program_signal: str | None, step_pattern: str | None, as_json: bool,
          convert_dir: Path | None = None, smoke_minutes: int | None = None):
    """Run an existing sbatch SCRIPT as written, with run dir, logs, status, cost and drain around it.

    The platform gives it a run id and run dir, logs per attempt, status, diagnose, cost, the drain signal.

    Every #SBATCH line is kept; extra sbatch options go after `--`, e.g.
    `slurmctl adopt train.sbatch -- --time=2:00:00`.
    """
    if convert_dir is not None:
        from slurmctl.submit.adopt.convert import write_conversion

        written = write_conversion(script, list(sbatch_args), ctx.site, convert_dir)
        if as_json:
            print_json(written)
            return
        for line in written["mapping"]:
            print_line(f"  {line}")
        print_line(("wrote", "bold"), f" {written['run_yaml']}, {written['job_script']}, {written['mapping_file']}")
        print_line(("next:", "bold"), f" {written['submit']}")
        return
    from slurmctl.submit.adopt import adopt as do_adopt

    def confirm(plan) -> bool:
        return click.confirm(f"Worst case ${plan.cost['max_usd']:,.2f} Submit?", default=False, err=True)

    interactive = not as_json and sys.stdin.isatty()
    if smoke_minutes is not None:  # the command line wins over the script's own --time
        sbatch_args = (*sbatch_args, f"--time={smoke_minutes}")
    plan = do_adopt(script, list(sbatch_args), ctx.site, ctx.client, dry_run=dry_run, yes=yes,
                    confirm=confirm if interactive else None, framework=framework, checkpoint_dir=checkpoint_dir,
                    signal=program_signal, step_pattern=step_pattern)
    if smoke_minutes is not None and not dry_run:
        from slurmctl.control.adopted_smoke import judge
        from slurmctl.rundir import Run
        from slurmctl.runtime.adapters import Resilience

        verdict = judge(Run(plan.run_id, Path(plan.run_dir)), ctx.client, plan.job_id,
                        Resilience.from_dict(plan.resilience), smoke_minutes * 60 + 120)
        plan.smoke = verdict.to_dict()
    if as_json:
        print_json(plan.to_dict())
        return (1 if plan.smoke and not plan.smoke["passed"] else None)
    _print_plan(plan)
    if dry_run:
        print_line(("dry run:", "bold"), " nothing submitted. The job that would run:", to_stderr=True)
        click.echo(plan.wrapper, nl=False)
        return
    out.print(f"adopted {plan.script} as run {plan.run_id}, Slurm job {plan.job_id}", markup=False)
    out.print(f"  run dir: {plan.run_dir}", markup=False)
    out.print(f"  next: slurmctl status {plan.run_id}   |   slurmctl logs {plan.run_id}", markup=False)
    if plan.smoke:
        word = "PASSED" if plan.smoke["passed"] else "FAILED"
        out.print(f"smoke test {word} in {plan.smoke['seconds']:.0f} s: {plan.smoke['why']}", markup=False)
        if plan.smoke["diagnosis"]:
            out.print(f"  {plan.smoke['diagnosis']['category']}: {plan.smoke['diagnosis']['summary']}", markup=False)
        return None if plan.smoke["passed"] else 1


def _print_plan(plan) -> None:
    s = plan.shape
    shape = [f"{s.nodes or 'Slurm-chosen'} node(s)"]
    for label, value in (("tasks", s.ntasks), ("tasks/node", s.ntasks_per_node), ("cpus/task", s.cpus_per_task),
                         ("gres", s.gres), ("gpus", s.gpus), ("gpus/node", s.gpus_per_node), ("mem", s.mem)):
        if value:
            shape.append(f"{label} {value}")
    print_line(("Script:", "bold"), f" {plan.script}", to_stderr=True)
    print_line(("Shape:", "bold"), " " + ", ".join(shape), to_stderr=True)
    print_line(("Where:", "bold"), f" partition {s.partition or '(default)'} · time {s.time or '(partition default)'}"
               f"{f' · account {s.account}' if s.account else ''}{f' · qos {s.qos}' if s.qos else ''}", to_stderr=True)
    if s.array:
        print_line(("Array:", "bold"), f" {s.array} ({s.array_tasks} task(s)"
                   f"{f', at most {s.array_throttle} at once' if s.array_throttle else ''})", to_stderr=True)
    if s.dependency:
        print_line(("Dependency:", "bold"), f" {s.dependency} (passed to Slurm unchanged)", to_stderr=True)
    slurm = plan.slurm_original
    if slurm["ok"]:
        print_line(("Slurm (--test-only of the original):", "bold"), f" starts {slurm['start']} on "
                   f"{slurm['nodelist']} in {slurm['partition']}, {slurm['processors']} processor(s)", to_stderr=True)
    else:
        print_line(("Slurm (--test-only of the original):", "bold"), " ", (f"refused: {slurm['message']}", "red"),
                   to_stderr=True)
    cost = plan.cost
    priced = (f"{cost['cpus']} CPU(s) x ${cost['price_per_cpu_hour']:.3f}/CPU-hour" if cost.get("cpus") else
              f"{cost['gpus']} GPU(s) x ${cost['price_per_gpu_hour']:.2f}/GPU-hour")
    unit = "CPU" if cost.get("cpus") else "GPU"
    listed = cost["price_per_cpu_hour"] if cost.get("cpus") else cost["price_per_gpu_hour"]
    now = (f"; now ${cost['price_now']:.{3 if cost.get('cpus') else 2}f}/{unit}-hour after the site's discount, as "
           f"`cost` charges: ${cost['if_started_now_usd']:,.2f} if it started now and ran its whole time"
           if cost.get("if_started_now_usd") is not None and cost["price_now"] < listed else "")
    print_line(("Cost:", "bold"), f" {priced} x {cost['hours']:.2f} h = worst case ${cost['max_usd']:,.2f} at the "
               f"list price{now}{' (' + cost['note'] + ')' if cost['note'] else ''}", to_stderr=True)
    print_line(("Directives:", "bold"), to_stderr=True)
    for d in plan.directives:
        print_line(f"  {d['where']:>14}  {d['raw']}  -> {d['status']}", to_stderr=True)
    for launch in plan.body["launches"]:
        print_line(("Launch:", "bold"), f" line {launch['line']}: {' + '.join(launch['launchers'])}"
                   f"{' running ' + launch['program'] if launch['program'] else ''}", to_stderr=True)
    for env in plan.body["environment"]:
        print_line(("Environment:", "bold"), f" line {env['line']} ({env['kind']}): {env['text']}", to_stderr=True)
    print_line(("Platform:", "bold"), " " + " ".join(plan.platform_args), to_stderr=True)
    for note in plan.notes:
        print_line(("Note:", "bold"), f" {note}", to_stderr=True)
    if plan.differences:
        err.print("Slurm reads the original differently from slurmctl:", style="yellow", markup=False)
        for line in plan.differences:
            print_line(f"  {line}", to_stderr=True)
    else:
        print_line(("Check:", "bold"), " slurmctl's reading equals Slurm's (sbatch -v --test-only) in every option.",
                   to_stderr=True)
