"""The CLI boundary: exit codes, --json from what click parsed, errors printed as text, lazy commands."""

import json
import subprocess
import sys

import click
import pytest

from slurmctl.cli.main import _COMMANDS, cli, main


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmctl.cli", *args], capture_output=True, text=True,
                          timeout=60, env=env)


def test_a_message_with_markup_characters_is_printed_as_text(tmp_path):
    result = _run("init", "x", "--template", "[/][bold]t[/]", "--dir", str(tmp_path / "x"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert "unknown template '[/][bold]t[/]'" in result.stderr


def test_json_comes_from_the_parsed_option_not_from_argv(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "run.yaml").write_text("name: x\n")
    assert main(["init", "x", "--dir", str(tmp_path / "x"), "--json"]) == 2
    assert json.loads(capsys.readouterr().out) == {"error": "init-exists", "exit_code": 2,
                                                   "message": f"{tmp_path / 'x' / 'run.yaml'} already exist; "
                                                              "init never overwrites.",
                                                   "hint": "Pick another --dir, or delete the files first."}
    # a value spelled --json (here a run directory named so) does not switch the error to JSON
    (tmp_path / "--json").mkdir()
    (tmp_path / "--json" / "run.yaml").write_text("name: x\n")
    assert main(["init", "x", "--dir", str(tmp_path / "--json")]) == 2
    assert capsys.readouterr().out == ""


def test_success_returns_zero_and_unknown_commands_are_usage_errors(tmp_path):
    assert main(["init", "ok", "--dir", str(tmp_path / "ok")]) == 0
    assert main(["no-such-command"]) == 2
    assert main(["--help"]) == 0


def test_help_lists_every_command_without_importing_them():
    code = ("import sys; from slurmctl.cli.main import main; main(['--help']); "
            "print(sorted(m for m in sys.modules if m.startswith('slurmctl.cli.') and m != 'slurmctl.cli.main'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "[]"
    for name in _COMMANDS:
        assert f"  {name} " in result.stdout


@pytest.mark.parametrize("name", sorted(_COMMANDS))
def test_the_lazy_help_line_is_the_commands_own(name):
    command = cli.get_command(click.Context(cli), name)
    assert command is not None and command.name == name
    assert _COMMANDS[name][1] == (command.help or "").strip().splitlines()[0]


def test_core_imports_without_click():
    code = ("import sys; sys.modules['click'] = None; import slurmctl.slurm.client, slurmctl.errors, "
            "slurmctl.durations, slurmctl.lineage, slurmctl.slurm.parsing, slurmctl.slurm.records")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0


def test_python_dash_m_slurmctl_is_the_installed_command():
    """`python -m slurmctl` runs the same main as pyproject's [project.scripts] entry point."""
    import os
    import tomllib
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    entry = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["scripts"]["slurmctl"]
    assert entry == "slurmctl.cli.main:main"
    out = subprocess.run([sys.executable, "-m", "slurmctl", "--help"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    assert out.returncode == 0 and out.stdout.startswith("Usage: slurmctl"), out.stderr
