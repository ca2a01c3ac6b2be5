"""The `slurmctl` command: lazy registration of every subcommand, and the one error boundary.

A command module is imported only when that command runs (``_COMMANDS`` names it and carries its
one-line help), so `slurmctl --help` and `slurmctl ls` do not pay for importing every feature.
Commands return an exit code (or None for success); only ``main`` ends the process.
"""

from __future__ import annotations

import importlib
import os
import select
import sys

import click

from slurmctl import __version__
from slurmctl.errors import EXIT_CLOSED_PIPE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, SlurmctlError

# name -> (module:attribute, short help shown by `slurmctl --help` without importing the module)
_COMMANDS: dict[str, tuple[str, str]] = {
    "submit": ("slurmctl.cli.submit:submit",
                "Check RUN_SPEC (run.yaml) before any GPU is spent, pick the partition that starts it"),
    "adopt": ("slurmctl.cli.adopt:adopt",
              "Run an existing sbatch SCRIPT as written, with run dir, logs, status, cost and drain around it."),
    "sweep": ("slurmctl.cli.sweep:sweep",
               "Submit RUN_SPEC once per combination of grid values, as ONE Slurm array."),
    "status": ("slurmctl.cli.observe:status",
                "Explain in plain words what RUN is doing and what to do next."),
    "ls": ("slurmctl.cli.observe:list_runs",
            "List your runs (one Slurm query for all): phase, progress, GPUs, age, cost so far."),
    "logs": ("slurmctl.cli.observe:logs",
              "Print the training output of RUN (rank 0 by default)."),
    "explain": ("slurmctl.cli.observe:explain",
                 "Explain any Slurm state or reason (PD, Resources, QOSMaxGRESPerUser, ...) in plain words."),
    "diagnose": ("slurmctl.cli.observe:diagnose",
                  "Name why RUN (or --log FILE) failed, with the evidence and a fix."),
    "queue": ("slurmctl.cli.observe:queue",
               "The whole queue, every user, with the reason in plain words and the estimated start."),
    "compare": ("slurmctl.cli.observe:compare",
                 "Compare two runs: steps, loss and throughput, a sparkline each, and a PNG plot."),
    "cancel": ("slurmctl.cli.reliability:cancel",
                "Stop RUN: ask it to checkpoint and acknowledge, wait for that, then cancel and verify."),
    "resume": ("slurmctl.cli.reliability:resume",
                "Start a new job for an ended RUN from its newest valid checkpoint (same run id)."),
    "fork": ("slurmctl.cli.reliability:fork",
              "Start a new run NEW_NAME from a checkpoint of SOURCE (SOURCE is not changed)."),
    "merge": ("slurmctl.cli.merge:merge",
               "Fold RUN's LoRA adapter (template hf-lora) into its base model and save the merged weights."),
    "dev": ("slurmctl.cli.dev:dev",
             "Open a shell (or JupyterLab) on a dev GPU node; the allocation ends at --time or when idle."),
    "cost": ("slurmctl.cli.accounting:cost",
              "What RUN cost: every attempt (requeues, resumes, forks), GPU-hours, dollars and waste."),
    "report": ("slurmctl.cli.accounting:report",
                "Showback: GPU-hours, dollars, waste and queue wait by account, user, partition, GPU or run."),
    "accounting": ("slurmctl.cli.accounting:accounting",
                    "The cost ledger (admins and cron)."),
    "exporter": ("slurmctl.cli.monitoring:exporter",
                  "Serve Prometheus metrics: queue, GPUs, nodes, active runs' progress and cost."),
    "web": ("slurmctl.cli.web:web",
             "Serve your runs, stories, charts, queue and compare as web pages (tunnel with the printed ssh -L)."),
    "data": ("slurmctl.cli.data:data",
              "Object-store datasets in the node caches: list them, or stage one ahead of a run."),
    "cleanup": ("slurmctl.cli.ops:cleanup",
                 "Find held jobs of dead runs, dev allocations past their TTL and stale drain requests."),
    "nodes": ("slurmctl.cli.ops:nodes",
              "Nodes as an operator sees them: state, who drained each and why, checks, verification, suspect score."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*_COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        if name not in _COMMANDS:
            return None
        module, attr = _COMMANDS[name][0].split(":")
        command = getattr(importlib.import_module(module), attr)
        self.commands[name] = command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, _COMMANDS[name][1] if name in _COMMANDS else self.commands[name].get_short_help_str(limit=100))
                for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("--host", metavar="[USER@]HOST[:PORT]", envvar="SLURMCTL_HOST",
              help="Run Slurm commands on this SSH login node (default: login_host in ~/.config/slurmctl/config.yaml).")
@click.version_option(__version__, prog_name="slurmctl")
@click.pass_context
def cli(ctx: click.Context, debug: bool, host: str | None) -> None:
    """slurmctl: my code + some GPUs + a launch script, on Slurm."""
    from slurmctl.cli.context import Context

    ctx.obj = Context(debug, host)
    ctx.call_on_close(ctx.obj.close)


def _remember_json(ctx: click.Context, value: bool) -> bool:
    if value and ctx.obj is not None:
        ctx.obj.as_json = True
    return value


@cli.command()
@click.argument("name")
@click.option("--template", default="torchrun", show_default=True,
              help="Run template: torchrun (DDP), fsdp, hf-lora (Trainer + LoRA) or deepspeed (ZeRO).")
@click.option("--dir", "directory", type=click.Path(file_okay=False), help="Where to write the run (default: ./NAME).")
@click.option("--json", "as_json", is_flag=True, callback=lambda ctx, _p, v: _remember_json(ctx, v),
              help="Machine-readable output.")
def init(name: str, template: str, directory: str | None, as_json: bool) -> None:
    """Create a run (run.yaml + train.py) from a template. Offline."""
    from pathlib import Path

    from slurmctl.cli.context import out, print_json, text
    from slurmctl.submit.scaffold import init_run

    written = init_run(name, Path(directory or name), template)
    if as_json:
        print_json({"files": [str(p) for p in written]})
        return
    for path in written:
        out.print(text(f"wrote {path}"))
    out.print(text(f"next: edit {written[0]}, then `slurmctl submit {written[0]}`"))


def _print_error(exc: SlurmctlError, as_json: bool) -> None:
    from rich.text import Text

    from slurmctl.cli.context import err, print_json

    if as_json:
        print_json(exc.to_dict())
    line = Text("error", style="red")  # Text, not markup: a message may contain '[/]'
    line.append(f" ({exc.code}): {exc.message}" + (f"\n  {exc.hint}" if exc.hint else ""))
    err.print(line)


def main(argv: list[str] | None = None) -> int:
    """Console entry point and the single error boundary: runs the command, returns its exit code.

    --debug and --json are read from what click parsed (the Context), never by scanning argv: an
    sbatch argument after `--` may well be spelled --json."""
    args = sys.argv[1:] if argv is None else argv
    state = {"debug": False, "as_json": False}

    def remember(ctx_obj) -> None:
        if ctx_obj is not None:
            state["debug"], state["as_json"] = ctx_obj.debug, ctx_obj.as_json

    try:
        with cli.make_context("slurmctl", list(args)) as ctx:
            try:
                code = cli.invoke(ctx)
            finally:
                remember(ctx.obj)
        sys.stdout.flush()  # what is still buffered meets a closed pipe here, inside the boundary, not at exit
        return code if isinstance(code, int) else EXIT_OK
    except SlurmctlError as exc:
        if state["debug"]:
            import traceback

            traceback.print_exc()
        try:
            _print_error(exc, state["as_json"])
        except BrokenPipeError:  # nowhere left to say it: the exit code still does
            if _stdout_reader_gone():
                _end_on_closed_pipe()
        return exc.exit_code
    except click.exceptions.Exit as exc:  # --help, --version
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the boundary: no traceback unless --debug
        if isinstance(exc, BrokenPipeError) and _stdout_reader_gone():
            return _end_on_closed_pipe()
        if state["debug"]:
            import traceback

            traceback.print_exc()
        click.echo(f"internal error: {type(exc).__name__}: {exc}\n  Rerun with --debug for the traceback "
                   "and report it to the platform team.", err=True)
        return EXIT_INTERNAL


def _stdout_reader_gone() -> bool:
    """stdout is a pipe whose reader closed it (`slurmctl ls | head -1`). Asked of the pipe itself, so a
    BrokenPipeError from anything else (an SSH channel, a child's stdin) is still an internal error:
    the write end of a pipe without readers polls as POLLERR."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no stdout, or not a file descriptor
        return False


def _end_on_closed_pipe() -> int:
    """A closed pipe is a normal end: no message, and the exit status of a tool that SIGPIPE ended.
    stdout now points at /dev/null so the interpreter's last flush of what is buffered cannot fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE
