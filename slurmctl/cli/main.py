"""The click CLI: parse, call the core, print. The one error boundary lives in ``main``."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from .. import __version__
from ..errors import SlurmctlError
from ..runs import RunRegistry
from ..slurm.client import SlurmClient
from ..spec import SiteConfig, load_site_config
from ..status import RunStatus, human_duration

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class Context:
    """Lazily built collaborators, so `init` never touches Slurm or the site config."""

    def __init__(self, debug: bool):
        self.debug = debug
        self._site: SiteConfig | None = None
        self._client: SlurmClient | None = None

    @property
    def site(self) -> SiteConfig:
        if self._site is None:
            self._site = load_site_config()
        return self._site

    @property
    def client(self) -> SlurmClient:
        if self._client is None:
            self._client = SlurmClient()
        return self._client

    @property
    def registry(self) -> RunRegistry:
        return RunRegistry(self.site.runs_root_path)


pass_ctx = click.make_pass_decorator(Context)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(__version__, prog_name="slurmctl")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """slurmctl: my code + some GPUs + a launch script, on Slurm."""
    ctx.obj = Context(debug)


@cli.command()
@click.argument("name")
@click.option("--template", default="torchrun", show_default=True, help="Run template.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the run (default: ./NAME).")
@json_option
def init(name: str, template: str, directory: Path | None, as_json: bool) -> None:
    """Create a run (run.yaml + train.py) from a template. Offline."""
    from ..scaffold import init_run

    written = init_run(name, directory or Path(name), template)
    if as_json:
        print_json({"files": [str(p) for p in written]})
        return
    for path in written:
        out.print(f"wrote {path}")
    out.print(f"next: edit {written[0]}, then `slurmctl submit {written[0]}`")


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_spec", type=click.Path(path_type=Path))
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--dry-run", is_flag=True, help="Validate and print the sbatch script; submit nothing.")
@json_option
@pass_ctx
def submit(ctx: Context, run_spec: Path, sbatch_args: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Validate RUN_SPEC (run.yaml), estimate its cost, and submit it.

    Extra sbatch arguments go after `--`, e.g. `slurmctl submit run.yaml -- --hold`.
    """
    from ..submit import submit as do_submit

    result = do_submit(run_spec, ctx.site, ctx.client, dry_run=dry_run, extra_sbatch_args=sbatch_args)
    if as_json:
        data = result.to_dict()
        if dry_run:
            data["script"] = result.script
        print_json(data)
        return
    for finding in result.findings:
        err.print(f"[yellow]warning:[/] {finding.message} {finding.hint}")
    if dry_run:
        click.echo(result.script, nl=False)
        err.print(f"[bold]dry run[/]: nothing submitted. Cost: {result.estimate.sentence()}")
        return
    out.print(f"[green]submitted[/] run [bold]{result.run_id}[/] as Slurm job {result.job_id}")
    out.print(f"  cost: {result.estimate.sentence()}")
    out.print(f"  run dir: {result.run_dir}")
    out.print(f"  next: slurmctl status {result.run_id}   |   slurmctl logs {result.run_id} -f")


def _print_status(status: RunStatus) -> None:
    colour = {"COMPLETED": "green", "RUNNING": "cyan", "PENDING": "yellow"}.get(status.state, "red")
    job = f"job {status.job_id}" if status.job_id else "no job"
    out.print(f"[bold]{status.run_id}[/] ({job}): [{colour}]{status.state.lower().replace('_', ' ')}[/]")
    out.print(f"  {status.headline}")
    for line in status.details:
        out.print(f"  {line}")
    out.print(f"  [bold]What to do:[/] {status.action.replace('RUN', status.run_id)}")


@cli.command()
@click.argument("run")
@json_option
@pass_ctx
def status(ctx: Context, run: str, as_json: bool) -> None:
    """Explain in plain words what RUN is doing and what to do next."""
    from ..status import run_status

    result = run_status(ctx.registry.get(run), ctx.client)
    if as_json:
        print_json(result.to_dict())
    else:
        _print_status(result)


@cli.command(name="ls")
@click.option("-n", "--limit", default=20, show_default=True, help="Show the newest N runs.")
@json_option
@pass_ctx
def list_runs(ctx: Context, limit: int, as_json: bool) -> None:
    """List your runs, newest last, with their state."""
    from ..status import runs_statuses

    runs = ctx.registry.list()[-limit:]
    statuses = runs_statuses(runs, ctx.client)
    if as_json:
        print_json([s.to_dict() for s in statuses])
        return
    if not statuses:
        out.print(f"no runs under {ctx.registry.root}; start one with `slurmctl init NAME`")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("RUN", "JOB", "STATE", "STEP", "ELAPSED", "WHAT IS HAPPENING"):
        table.add_column(column)
    for s in statuses:
        table.add_row(s.run_id, str(s.job_id or "-"), s.state.lower(), str(s.last_step if s.last_step is not None else "-"),
                      human_duration(s.elapsed_seconds) if s.elapsed_seconds is not None else "-", s.headline)
    out.print(table)


@cli.command()
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("-n", "--lines", default=100, show_default=True, help="Lines from the end (0 = all).")
@click.option("--job", "job_id", type=int, help="A specific job id of the run (default: the latest).")
@pass_ctx
def logs(ctx: Context, run: str, follow: bool, lines: int, job_id: int | None) -> None:
    """Print the log of RUN (all attempts of its job)."""
    from ..logs import follow as follow_log, log_file, tail_lines

    the_run = ctx.registry.get(run)
    if follow:
        state = follow_log(the_run, ctx.client, lambda text: click.echo(text, nl=False))
        err.print(f"[bold]slurmctl:[/] job ended: {state.lower()} — `slurmctl status {the_run.run_id}` explains it")
        return
    path = log_file(the_run, job_id)
    text = tail_lines(path, lines)
    if not text and not path.exists():
        err.print(f"no log yet at {path} (the job has not started writing); try `slurmctl status {the_run.run_id}`")
        return
    click.echo("\n".join(text))


@cli.command()
@click.argument("run")
@json_option
@pass_ctx
def cancel(ctx: Context, run: str, as_json: bool) -> None:
    """Cancel RUN's job and wait until Slurm confirms it stopped."""
    from ..cancel import cancel_run

    result = cancel_run(ctx.registry.get(run), ctx.client)
    if as_json:
        print_json(result.to_dict())
    else:
        out.print(f"job {result.job_id} of {result.run_id} is {result.final_state.lower()} "
                  f"(verified after {result.seconds:.1f} s)")


def main(argv: list[str] | None = None) -> None:
    """Console entry point and the single error boundary."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        code = cli.main(args=args, prog_name="slurmctl", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except SlurmctlError as exc:
        if debug:
            traceback.print_exc()
        if "--json" in args:
            print_json(exc.to_dict())
        err.print(f"[red]error[/] ({exc.code}): {exc.message}" + (f"\n  {exc.hint}" if exc.hint else ""))
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        err.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the boundary: no traceback unless --debug
        if debug:
            traceback.print_exc()
        err.print(f"[red]internal error[/]: {type(exc).__name__}: {exc}\n  Rerun with --debug for the traceback "
                  "and report it to the platform team.")
        sys.exit(70)
