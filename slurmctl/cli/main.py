"""The click CLI: parse, call the core, print. The one error boundary lives in ``main``."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from slurmctl import __version__
from slurmctl.errors import SlurmctlError
from slurmctl.rundir import RunRegistry
from slurmctl.slurm.client import SlurmClient
from slurmctl.submit.spec import SiteConfig, load_site_config

# Piped or logged output (not a terminal) gets a wide console so tables never wrap mid-identifier.
_WIDTH = None if sys.stdout.isatty() else 200
out = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 200)


class _PlainTable(Table):
    """Identifiers and numbers keep their full width (min_width grows with each row); only the last,
    free-text column is cut with an ellipsis on a narrow terminal."""

    def add_row(self, *cells, **kwargs) -> None:
        super().add_row(*cells, **kwargs)
        for column, cell in zip(self.columns[:-1], cells):
            column.min_width = max(column.min_width or len(str(column.header)), len(str(cell or "")))


def plain_table(*columns: str, title: str | None = None) -> Table:
    table = _PlainTable(box=None, pad_edge=False, title=title, title_justify="left")
    for i, name in enumerate(columns):
        table.add_column(name, no_wrap=True, overflow="ellipsis" if i == len(columns) - 1 else "fold")
    return table


class Context:
    """Lazily built collaborators, so `init` never touches Slurm or the site config."""

    def __init__(self, debug: bool, host: str | None = None):
        self.debug = debug
        self.host = host  # --host: run Slurm commands on this SSH login node (else login_host in user config)
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
            from slurmctl.userconfig import ssh_runner_for

            runner = ssh_runner_for(self.host)
            if runner is None:
                self._client = SlurmClient()
            else:
                from slurmctl.slurm.ssh import RemoteSlurmClient

                self._client = RemoteSlurmClient(runner)
        return self._client

    @property
    def registry(self) -> RunRegistry:
        # through a login node, run dirs are read from the cluster (mirrored on demand: slurm/ssh.py)
        mirrored = getattr(self.client, "mirrored_registry", None)
        return mirrored(self.site.runs_root_path) if mirrored else RunRegistry(self.site.runs_root_path)

    def close(self) -> None:
        """At the end of every command: a remote client syncs its run dirs and hangs up."""
        close = getattr(self._client, "close", None)
        if close is not None:
            close()


pass_ctx = click.make_pass_decorator(Context)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("--host", metavar="[USER@]HOST[:PORT]", envvar="SLURMCTL_HOST",
              help="Run Slurm commands on this SSH login node (default: login_host in ~/.config/slurmctl/config.yaml).")
@click.version_option(__version__, prog_name="slurmctl")
@click.pass_context
def cli(ctx: click.Context, debug: bool, host: str | None) -> None:
    """slurmctl: my code + some GPUs + a launch script, on Slurm."""
    ctx.obj = Context(debug, host)
    ctx.call_on_close(ctx.obj.close)


@cli.command()
@click.argument("name")
@click.option("--template", default="torchrun", show_default=True, help="Run template.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the run (default: ./NAME).")
@json_option
def init(name: str, template: str, directory: Path | None, as_json: bool) -> None:
    """Create a run (run.yaml + train.py) from a template. Offline."""
    from slurmctl.submit.scaffold import init_run

    written = init_run(name, directory or Path(name), template)
    if as_json:
        print_json({"files": [str(p) for p in written]})
        return
    for path in written:
        out.print(f"wrote {path}")
    out.print(f"next: edit {written[0]}, then `slurmctl submit {written[0]}`")


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


# --- cost accounting (issue 7) ---
from slurmctl.cli.accounting import accounting as _accounting, cost as _cost, report as _report  # noqa: E402

cli.add_command(_cost)
cli.add_command(_report)
cli.add_command(_accounting)

# --- monitoring (issue 8) ---
from slurmctl.cli.monitoring import exporter as _exporter  # noqa: E402

cli.add_command(_exporter)

# --- reliability (issue 3) ---
from slurmctl.cli.reliability import cancel as _cancel, fork as _fork, resume as _resume  # noqa: E402

cli.add_command(_cancel)
cli.add_command(_resume)
cli.add_command(_fork)

# --- issue 9: dev sessions ------------------------------------------------------------------
from slurmctl.cli.dev import dev  # noqa: E402

cli.add_command(dev)

# --- preflight and submit (issue 5) ---
from slurmctl.cli.submit import submit as _submit  # noqa: E402

cli.add_command(_submit)

# --- observe: status, ls, logs, explain, diagnose, queue, compare (issue 4) ---
from slurmctl.cli.observe import compare, diagnose, explain, list_runs, logs, queue, status  # noqa: E402

for _command in (status, list_runs, logs, explain, diagnose, queue, compare):
    cli.add_command(_command)

# --- ops: cleanup (issue 6) ---
from slurmctl.cli.ops import cleanup as _cleanup  # noqa: E402

cli.add_command(_cleanup)
