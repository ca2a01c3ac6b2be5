"""What every command module shares: the consoles, table and JSON helpers, and the Context.

Command modules import from here, never from ``cli.main`` (which only registers them), so the CLI
has no import cycle and `slurmctl --help` imports no command module.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from functools import cache
from typing import TYPE_CHECKING

import click

from slurmctl.rundir import RunRegistry
from slurmctl.slurm.client import SlurmClient

if TYPE_CHECKING:  # pydantic and yaml are imported only by commands that read the site config
    from rich.table import Table
    from rich.text import Text

    from slurmctl.config.models import SiteConfig

# Control characters other than newline and tab are printed as '?': an ESC in a job name or reason
# that another user chose would otherwise reach this user's terminal (recolour, retitle, set the
# clipboard). One character for one, so rich's styles keep their place.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(value: object) -> str:
    text = str(value)
    # str.isprintable is False for every control character (tab and newline too): the common cell
    # skips the regex (a 1,000-job queue prints 8,000 cells)
    return text if text.isprintable() else _CONTROL.sub("?", text)


@cache
def _text_console_class():
    from rich.console import Console

    class _TextConsole(Console):
        """Every printed string (markup or not) has its control characters made visible."""

        def render_str(self, text: str, **kwargs) -> Text:
            rendered = super().render_str(text, **kwargs)
            rendered.plain = printable(rendered.plain)
            return rendered

        def on_broken_pipe(self) -> None:
            """rich would end the process (exit 1) here: the CLI's one boundary decides how a closed pipe ends."""
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")

    return _TextConsole


class _LazyConsole:
    """A rich console built on first use: rich costs ~35 ms to import, and a piped `ls` or `queue`
    prints its table without it (see ``print_table``)."""

    def __init__(self, stderr: bool):
        self._stderr, self._console = stderr, None

    def __getattr__(self, name: str):
        if self._console is None:
            stream = sys.stderr if self._stderr else sys.stdout
            # Piped or logged output (not a terminal) gets a wide console so tables never wrap mid-identifier.
            self._console = _text_console_class()(stderr=self._stderr, highlight=False, soft_wrap=True,
                                                  width=None if stream.isatty() else 200)
        return getattr(self._console, name)


out = _LazyConsole(stderr=False)
err = _LazyConsole(stderr=True)


def escape(markup: str) -> str:
    """rich.markup.escape, imported when a command prints markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(markup)


def text(value: object, style: str = "") -> Text:
    """A printed value as rich Text: brackets in names, reasons or paths are shown, never parsed as markup."""
    from rich.text import Text

    return Text(printable(value), style=style)


@cache
def _plain_table_class():
    from rich.table import Table
    from rich.text import Text

    class _PlainTable(Table):
        """Identifiers and numbers keep their full width (min_width grows with each row); only the last,
        free-text column is cut with an ellipsis on a narrow terminal. Plain str cells are turned into
        Text, so a job named '[/]x' prints as itself."""

        def add_row(self, *cells, **kwargs) -> None:
            cells = tuple(Text(printable(c)) if isinstance(c, str) else c for c in cells)
            super().add_row(*cells, **kwargs)
            for column, cell in zip(self.columns[:-1], cells):
                width = cell.cell_len if isinstance(cell, Text) else len(str(cell or ""))
                column.min_width = max(column.min_width or len(str(column.header)), width)

    return _PlainTable


def plain_table(*columns: str, title: str | None = None) -> Table:
    table = _plain_table_class()(box=None, pad_edge=False, title=title, title_justify="left")
    for i, name in enumerate(columns):
        table.add_column(name, no_wrap=True, overflow="ellipsis" if i == len(columns) - 1 else "fold")
    return table


# Above this many rows a table is printed by ``print_table``'s plain formatter even on a terminal:
# rich lays out a table in time that grows much faster than its rows (about 1 s for 1,000).
FAST_TABLE_ROWS = 300


def print_table(columns: tuple[str, ...], rows: list[tuple[str, ...]], title: str | None = None) -> None:
    """``plain_table(*columns)`` with `rows` printed: the same columns, widths, separators and cut
    of the last column as rich renders, but in time linear in the rows when the output is piped or
    the table is long. A title, cells that rich would lay out differently (non-ASCII, tab, newline)
    and a table wider than the console (rich cuts its last column) go through rich."""
    cells = [tuple(printable(c) for c in row) for row in rows]
    plain_stdout = _plain_stdout()
    width = 200 if plain_stdout else out.width
    piped_or_long = plain_stdout or not out.is_terminal or len(cells) > FAST_TABLE_ROWS
    simple = all(c.isascii() and "\n" not in c and "\t" not in c for row in cells for c in row) and \
        all(c.isascii() for c in columns)
    widths = [len(c) for c in columns]
    for row in cells:
        for i, c in enumerate(row):
            if len(c) > widths[i]:
                widths[i] = len(c)
    # A pipe or a file has no width: its lines are never cut nor padded to one (rich would pad every row
    # to 200 columns once one row is longer), so a reader's grep and diff see whole, trimmed lines.
    fits = plain_stdout or sum(widths) + 2 * (len(columns) - 1) <= width
    if title or not (piped_or_long and simple and fits):
        table = plain_table(*columns, title=title)
        for row in rows:
            table.add_row(*row)
        out.print(table)
        return

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths))

    if plain_stdout:  # rich's layout, without importing it; no trailing spaces
        sys.stdout.write("".join(line(row).rstrip() + "\n" for row in (tuple(columns), *cells)))
        sys.stdout.flush()
        return
    out.print(text(line(tuple(columns)), style="table.header"))
    out.file.write("".join(line(row) + "\n" for row in cells))
    out.file.flush()


# What rich's Text removes outright (bell, backspace, vertical tab, form feed, carriage return,
# rich.control.STRIP_CONTROL_CODES); printable() shows every other control character as '?'.
_RICH_STRIPS = str.maketrans(dict.fromkeys((7, 8, 11, 12, 13)))


def print_line(*parts: str | tuple[str, str], to_stderr: bool = False) -> None:
    """One line made of plain strings and (text, rich style) pairs. Every part is text, never markup.
    Written straight to the stream when rich would write no styles there (``_plain``: a piped
    `status` does not import rich); otherwise printed by rich as one Text, with the styles."""
    texts = [printable((p if isinstance(p, str) else p[0]).translate(_RICH_STRIPS)) for p in parts]
    if _plain(to_stderr) and not any("\t" in t for t in texts):  # rich expands tabs
        stream = sys.stderr if to_stderr else sys.stdout
        stream.write("".join(texts) + "\n")
        stream.flush()
        return
    from rich.text import Text

    (err if to_stderr else out).print(Text.assemble(*(t if isinstance(p, str) else (t, p[1])
                                                      for t, p in zip(texts, parts))))


def _plain_stdout() -> bool:
    return _plain(False)


def _plain(to_stderr: bool) -> bool:
    """The stream is a pipe or a file, rich would write no style codes to it (it honours these
    variables) and its console is not built yet: that console's width there is 200 (see ``_LazyConsole``)."""
    console, stream = (err, sys.stderr) if to_stderr else (out, sys.stdout)
    return (isinstance(console, _LazyConsole) and console._console is None and not stream.isatty()
            and not any(os.environ.get(v) for v in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")))


class Context:
    """Lazily built collaborators, so `init` never touches Slurm or the site config.

    Through an SSH login node (``--host`` or ``login_host``) the client is a RemoteSlurmClient and
    run directories are read from the cluster (slurmctl.rundir.remote); otherwise both are local.
    """

    def __init__(self, debug: bool = False, host: str | None = None, as_json: bool = False):
        self.debug = debug
        self.host = host
        self.as_json = as_json  # set by the command's --json option (see json_option): the error boundary reads it
        self._site: SiteConfig | None = None
        self._site_view = None  # a config.views.View (or the model itself on a first read)
        self._client: SlurmClient | None = None
        self._remote = None  # a slurmctl.rundir.remote.RemoteSlurmClient when Slurm is reached over SSH

    @property
    def site(self) -> SiteConfig:
        """The validated SiteConfig model (pydantic): for commands that submit or change things."""
        if self._site is None:
            from slurmctl.config.models import load_site_config

            self._site = load_site_config()
        return self._site

    @property
    def site_view(self):
        """site.yaml's validated values without importing pydantic when the same file was validated
        before (slurmctl.config.views): what read commands pass around."""
        if self._site is not None:
            return self._site
        if self._site_view is None:
            from slurmctl.config.views import site_view

            self._site_view = site_view()
        return self._site_view

    @property
    def client(self) -> SlurmClient:
        if self._client is None:
            from slurmctl.config.user import login_target

            login = login_target(self.host)
            if login is None:
                self._client = SlurmClient()
            else:
                # why: paramiko (~100 ms) only when Slurm is reached through a login node
                from slurmctl.rundir.remote import RemoteSlurmClient, UploadLimits
                from slurmctl.slurm.ssh import SSHRunner  # why: as above

                runner = SSHRunner.for_login(*login)  # a bad host is refused before site.yaml is read
                limits = UploadLimits(max_bytes=int(self.site_view.ssh_upload_max_mb * 1024 * 1024))
                self._client = self._remote = RemoteSlurmClient(runner, limits)
        return self._client

    @property
    def registry(self) -> RunRegistry:
        remote = self._remote if self.client is self._remote else None  # the client decides: local or SSH
        if remote is not None:
            return remote.registry(self.site_view.runs_root_path)
        return RunRegistry(self.site_view.runs_root_path)

    def close(self) -> None:
        """At the end of every command: a remote client syncs its run dirs and hangs up."""
        if self._remote is not None:
            self._remote.close()


pass_ctx = click.make_pass_decorator(Context)


def _remember_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value and isinstance(ctx.find_object(Context), Context):
        ctx.find_object(Context).as_json = True
    return value


json_option = click.option("--json", "as_json", is_flag=True, callback=_remember_json,
                           help="Machine-readable output.")


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def usd(amount: float | None) -> str:
    """Dollars as ls and status print them: cents, or four decimals under a cent (a short CPU-only job
    costs fractions of one, and "$0.00" would read as free); "-" when there is no price."""
    if amount is None:
        return "-"
    if 0 < amount < 0.0001:
        return "< $0.0001"
    return f"${amount:,.2f}" if amount >= 0.01 or amount == 0 else f"${amount:.4f}"
