"""What keeps the CLI quick, pinned: read commands import no heavy module, the plain table formatter
prints exactly what rich prints, and `ls` reads only the newest runs' files."""

from __future__ import annotations

import io
import json
import os
import random
import string
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

import slurmctl.cli.context as context
import slurmctl.rundir.layout as run_layout
from slurmctl.rundir import RunRegistry

HEAVY = ("jinja2", "torch", "docker", "paramiko", "matplotlib", "submitit", "prometheus_client")


def _imported_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "SLURMCTL_USER_CONFIG": "/nonexistent/config.yaml"})
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


@pytest.mark.parametrize("command", ["ls", "status", "queue", "logs", "explain"])
def test_read_commands_import_no_heavy_module(command):
    # The command module and every library module the read commands import when they run.
    loaded = _imported_after(
        "from slurmctl.cli.main import cli\n"
        f"cli.get_command(None, {command!r})\n"
        "import slurmctl.observe.status, slurmctl.observe.logs, slurmctl.observe.explain, slurmctl.config.user\n"
        "import slurmctl.durations, slurmctl.errors\n")
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_help_and_explain_import_neither_pydantic_nor_yaml():
    for argv in (["--help"], ["explain", "PD"]):
        loaded = _imported_after(f"from slurmctl.cli.main import main\nmain({argv!r})")
        assert not loaded & {"pydantic", "yaml", *HEAVY}, (argv, loaded & {"pydantic", "yaml", *HEAVY})


def _render(fn, width: int, columns, rows) -> str:
    buf = io.StringIO()
    console = context._text_console_class()(file=buf, highlight=False, soft_wrap=True, width=width)
    saved, context.out = context.out, console
    try:
        fn(columns, rows)
    finally:
        context.out = saved
    return buf.getvalue()


_PLAIN_TABLE = context.plain_table


def _rich(columns, rows) -> None:
    table = _PLAIN_TABLE(*columns)
    for row in rows:
        table.add_row(*row)
    context.out.print(table)


def test_print_table_prints_what_rich_prints(monkeypatch):
    through_rich = []
    monkeypatch.setattr(context, "plain_table", lambda *a, **k: through_rich.append(1) or _PLAIN_TABLE(*a, **k))
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + " []/-:$.\x1b"
    fast = 0
    for _ in range(400):
        columns = tuple(rng.choice(["JOB", "USER", "NAME", "WHAT IS HAPPENING", "X"]) for _ in range(rng.randint(1, 8)))
        rows = [tuple("".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 3, 10, 20, 120])))
                      for _ in columns) for _ in range(rng.randint(0, 30))]
        rows += [tuple(rng.choice(["é", "漢字", "a\tb", "a\nb"]) for _ in columns)] if rng.random() < 0.1 else []
        width = rng.choice([40, 80, 200, 400])
        before = len(through_rich)
        assert _render(context.print_table, width, columns, rows) == _render(_rich, width, columns, rows)
        fast += len(through_rich) == before
    assert fast > 50, fast  # the plain formatter itself was compared, not only rich with rich


def test_print_table_is_linear_in_rows():
    rows = [(str(1000 + i), "alice", f"job-{i}", "l4-dev", "pending", "1", "in 3 min", "Held by its owner.")
            for i in range(2000)]
    columns = ("JOB", "USER", "NAME", "PARTITION", "STATE", "NODES", "START", "WHY")
    started = time.perf_counter()
    fast = _render(context.print_table, 200, columns, rows)
    fast_s = time.perf_counter() - started
    started = time.perf_counter()
    slow = _render(_rich, 200, columns, rows)
    rich_s = time.perf_counter() - started
    assert fast == slow and fast_s * 5 < rich_s, (fast_s, rich_s)


def _make_runs(root, runs: list[tuple[str, float]]) -> None:
    for run_id, created in runs:
        (root / run_id).mkdir(mode=0o700)
        (root / run_id / run_layout.RUN_JSON).write_text(json.dumps({"run_id": run_id, "created": created}))


def test_recent_is_the_tail_of_list_and_reads_only_the_newest_days(tmp_path, monkeypatch):
    runs_root = tmp_path / "runs"
    (runs_root / "me").mkdir(parents=True, mode=0o700)
    root = runs_root / "me"
    now = time.time()
    made = []
    for i in range(600):  # two runs a day for 300 days, and one run just after midnight of its id's day
        created = now - i * 43200
        made.append((f"r{i}-{datetime.fromtimestamp(created, UTC):%Y%m%d}-{i:04x}", created))
    day = datetime.fromtimestamp(now - 5 * 86400, UTC).strftime("%Y%m%d")
    made.append((f"late-{day}-ffff", now - 4.5 * 86400))
    made.append(("not-a-run-id", now - 1000 * 86400))  # a run dir under another name: always read
    _make_runs(root, made)
    (root / "empty-20250101-0000").mkdir()  # no run.json: no run
    registry = RunRegistry(runs_root, "me")
    everything = registry.list()
    assert len(everything) == 602
    for limit, since in [(20, None), (1, None), (7, None), (None, now - 3 * 86400), (3, now - 10 * 86400),
                         (None, None), (2000, None)]:
        want = [r for r in everything if since is None or r.meta["created"] >= since]
        want = want[-limit:] if limit else want
        assert [r.run_id for r in registry.recent(limit, since)] == [r.run_id for r in want], (limit, since)
    reads = []
    real = run_layout.read_json
    monkeypatch.setattr(run_layout, "read_json", lambda path, *a, **k: reads.append(path) or real(path, *a, **k))
    registry.recent(20)
    assert len({p.parent for p in reads}) < 30  # ~11 days of 2 runs, the slack day and the undated run


def _status_text(status, console) -> tuple[str, bool]:
    """`status`'s lines printed through `console` (None: as on a pipe), and whether rich stayed unused."""
    from slurmctl.cli.observe import _print_status

    buf = io.StringIO()
    saved = context.out, sys.stdout
    context.out = context._LazyConsole(stderr=False) if console is None else console(buf)
    sys.stdout = buf
    try:
        _print_status(status)
        plain = isinstance(context.out, context._LazyConsole) and context.out._console is None
    finally:
        context.out, sys.stdout = saved
    return buf.getvalue(), plain


def test_status_plain_lines_are_what_rich_prints(monkeypatch):
    from slurmctl.observe.status import RunStatus

    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    rng = random.Random(11)
    alphabet = string.ascii_letters + " []/-:$.\\\x1b·—é:smile:[bold]"
    word = lambda: "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 3, 12, 60])))  # noqa: E731
    piped = lambda buf: context._text_console_class()(file=buf, highlight=False, soft_wrap=True, width=200)  # noqa: E731
    plain_runs = 0
    for _ in range(200):
        status = RunStatus(word() or "r", "/tmp/r", rng.choice([None, 7]), rng.choice(["PENDING", "RUNNING", "FAILED"]),
                           word(), word(), reason=word(), nodes=word(), partition=word(), phase=word() or "queued",
                           why=word(), gpus=rng.choice([0, 8]), num_nodes=1, cost_usd=rng.choice([None, 1234.5]),
                           last_step=rng.choice([None, 5]), total_steps=10, progress_percent=60.0,
                           last_metrics={"loss": 0.5}, heartbeat_age_seconds=3.0, steps_per_second=1.5,
                           latest_checkpoint_step=rng.choice([None, 4]), checkpoint_age_seconds=9.0,
                           requeues_left=rng.choice([None, 2]), history=[word() for _ in range(rng.randint(0, 3))],
                           diagnosis=rng.choice([None, {"category": word(), "summary": word(), "hint": word(),
                                                        "evidence": [word(), word()]}]),
                           watchdog=rng.choice([None, {"message": word(), "state": "warned"}]),
                           suggestions=[word()] if rng.random() < 0.5 else [], health=word())
        text, plain = _status_text(status, None)
        assert text == _status_text(status, piped)[0], text
        plain_runs += plain
    assert plain_runs == 200  # every one was the plain writer's, compared with rich's


def test_printable_fast_path_is_the_regex():
    rng = random.Random(3)
    for _ in range(20000):
        text = "".join(chr(rng.choice([rng.randint(0, 0x3000), rng.randint(0, 40), rng.randint(0x7F, 0xA0)]))
                       for _ in range(rng.randint(0, 6)))
        assert context.printable(text) == context._CONTROL.sub("?", text), repr(text)


def test_print_line_prints_what_escaped_markup_printed(monkeypatch):
    """print_line((label, style), value) prints what `out.print(f"[style]label[/] {escape(value)}")`
    printed before it (rich drops bell, backspace, VT, FF and CR; other control characters are '?').
    Differences, on purpose (a value is text): markup ate or doubled a backslash before '[' or at the
    end of a value, and turned ':m:'-like emoji codes in a value into emoji."""
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    rng = random.Random(5)
    alphabet = string.ascii_letters + " []/$.·—é\x07\x08\x0b\x0c\r\x1b\x00\x9b"
    for _ in range(500):
        value = "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 2, 9, 40])))
        buf = io.StringIO()
        console = context._text_console_class()(file=buf, highlight=False, soft_wrap=True, width=200)
        console.print(f"[bold]Why:[/] {context.escape(value)}")
        plain = io.StringIO()
        saved = context.out, sys.stdout
        context.out, sys.stdout = context._LazyConsole(stderr=False), plain
        try:
            context.print_line(("Why:", "bold"), f" {value}")
        finally:
            context.out, sys.stdout = saved
        assert plain.getvalue() == buf.getvalue(), repr(value)


def test_a_piped_table_is_never_padded_nor_cut_to_a_width(monkeypatch, capsys):
    monkeypatch.setattr(context, "_plain_stdout", lambda: True)
    rows = [("r1", "running", "x" * 250), ("r2", "failed", "short")]
    context.print_table(("RUN", "PHASE", "WHAT IS HAPPENING"), rows)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].endswith("x" * 250) and lines[2].endswith("failed   short")
    assert not any(line.endswith(" ") for line in lines), lines
