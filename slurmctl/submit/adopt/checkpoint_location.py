"""Where an adopted program writes its checkpoints, read from what the job runs, before it runs.

Each framework names its save directory in a way the adapter table states (``OUTPUT_NAMES``): HF
Trainer's ``output_dir``, Lightning's ``default_root_dir``, nanoGPT's ``out_dir``. The name is looked for,
first place wins, as the program itself would let it override:
  1. the launched command line after the program: ``--output_dir out``, ``--output-dir=out``,
     ``--trainer.default_root_dir out`` (LightningCLI), nanoGPT's ``--out_dir=out``;
  2. a config file on that command line: nanoGPT's ``config/x.py`` (its assignments), an HF
     ``args.json``;
  3. the program's own text: a literal keyword (``TrainingArguments(output_dir="out")``,
     ``Trainer(default_root_dir="lit_out")``) or a module-level assignment (``out_dir = 'out'``).
A value the shell fills in at run time (``$OUT``, a backquote) or a ``cd`` the body makes to a place
only known then cannot be read here: the caller falls back to the working directory and says so.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

_SHELL_EXPANDS = re.compile(r"[$`~*?\[]")
MAX_TEXT = 1024 * 1024  # bytes of a config file read


@dataclass(frozen=True)
class Location:
    """`path` absolute (None: not knowable here); `source` says where it was read, in words."""

    path: Path | None
    source: str


def _words_after_program(text: str, program: str | None) -> list[str]:
    """The program's own arguments; for an entry point that is no .py file (`litgpt pretrain ...`),
    every word of the line (the launchers name no output directory of their own)."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        words = text.split()
    if not program:
        return words
    for i, word in enumerate(words):
        if word == program:
            return words[i + 1:]
    return []


def _spellings(name: str) -> set[str]:
    return {f"--{name}", f"--{name.replace('_', '-')}"}


def _from_command_line(words: list[str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The last value the command line gives one of `names` (argparse keeps the last)."""
    found = None
    for i, word in enumerate(words):
        option, eq, value = word.partition("=")
        # LightningCLI nests it: --trainer.default_root_dir
        base = "--" + option.rsplit(".", 1)[-1] if option.startswith("--") and "." in option else option
        for name in names:
            if base in _spellings(name):
                if not eq:
                    if i + 1 >= len(words):
                        break
                    value = words[i + 1]
                found = (value, f"its command line ({option} {value})")
    return found


def _assignments(text: str, names: tuple[str, ...], module_level: bool) -> str | None:
    """The string literal last assigned (in the file's order) to one of `names`: `name = "x"` at module
    level, and for a program, not a config file, also anywhere and as a keyword `f(name="x")`."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found = []
    for node in tree.body if module_level else ast.walk(tree):
        if isinstance(node, ast.Assign) and _literal(node.value) is not None \
                and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            found.append((node.lineno, _literal(node.value)))
        if isinstance(node, ast.Call):
            found += [(k.value.lineno, _literal(k.value)) for k in node.keywords
                      if k.arg in names and _literal(k.value) is not None]
    return max(found)[1] if found else None


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _read(path: Path) -> str:
    try:
        if path.is_file() and not path.is_symlink():
            with path.open(errors="replace") as handle:
                return handle.read(MAX_TEXT)
    except OSError:
        pass
    return ""


def _from_config_files(words: list[str], names: tuple[str, ...], base: Path) -> tuple[str, str] | None:
    found = None
    for word in words:
        if word.startswith("-") or _SHELL_EXPANDS.search(word):
            continue
        path = base / word
        if word.endswith(".py"):  # nanoGPT's configurator execs each one in turn
            value = _assignments(_read(path), names, module_level=True)
        elif word.endswith(".json"):  # HfArgumentParser.parse_json_file
            try:
                data = json.loads(_read(path) or "null")
            except ValueError:
                data = None
            value = next((data[n] for n in names if isinstance(data, dict) and isinstance(data.get(n), str)), None)
        else:
            continue
        if value is not None:
            found = (value, f"its config file {word} ({value})")
    return found


def program_output_dir(launch_text: str, program: str | None, program_text: str, names: tuple[str, ...],
                       workdir: Path) -> tuple[str, Location] | None:
    """(the name, where) the program launched by `launch_text` saves, by the first of `names` (the
    adapter's precedence) it sets anywhere; None when nothing names it (its default then applies)."""
    words = _words_after_program(launch_text, program)
    for name in names:
        found = _from_command_line(words, (name,)) or _from_config_files(words, (name,), workdir)
        if found is None:
            value = _assignments(program_text, (name,), module_level=False)
            found = (value, f"the program's own text ({name}={value!r})") if value is not None else None
        if found is None:
            continue
        value, source = found
        if not value or _SHELL_EXPANDS.search(value):
            return name, Location(None, f"{source}: the shell fills it in only when the job runs")
        return name, Location((workdir / value).resolve(), source)
    return None


_CHAIN = re.compile(r"\s*(?:&&|\|\||;)\s*")
_SUBMIT_DIR = {"$SLURM_SUBMIT_DIR", "${SLURM_SUBMIT_DIR}"}


def job_workdir(chdir: str | None, cd_lines: list[str], submit_dir: Path) -> Path | None:
    """The directory the program starts in: sbatch's --chdir (else where sbatch runs), then each `cd`
    line the body runs before the launch. None when one of them is only known at run time."""
    workdir = submit_dir
    targets = [chdir] if chdir else []
    for line in cd_lines:
        for command in _CHAIN.split(line):
            try:
                words = shlex.split(command)
            except ValueError:
                return None
            if words and words[0] == "cd":
                targets.append(words[1] if len(words) == 2 else "")
    for target in targets:
        if target in _SUBMIT_DIR:
            workdir = submit_dir
            continue
        if not target or _SHELL_EXPANDS.search(target) or target == "-":
            return None
        workdir = workdir / target
    return workdir.resolve()
