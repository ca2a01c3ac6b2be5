"""rundir is the only place that spells a run-dir file name or path: outside slurmctl/rundir, no
module (runtime/ included: it runs inside the job, and rundir is standard library only at import,
so the job imports it like the CLI and the node hooks do) and no job-script template writes a
name of the run directory's layout as a literal; they use rundir's constants and path functions.

A literal counts when it is a path (a piece between slashes, in a string without spaces, names a
run-dir file or directory) or
when a bare name is joined (`x / "logs"`), passed to a call, or compared with a `.name`. Prose in
messages and docstrings does not count.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from slurmctl.rundir import layout, sweep

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "slurmctl"
# Not the run dir's names, though spelled alike: (file, literal) -> why.
ELSEWHERE = {
    ("slurmctl/ops/hooks/config.py", "cost-records"): "root's spool of cost records, not a run directory",
    ("slurmctl/ops/hooks/config.py", "/var/spool/slurmctl/cost-records"): "the same spool's default",
    ("slurmctl/config/models.py", "/var/spool/slurmctl/cost-records"): "the same spool's default (site.yaml)",
    ("slurmctl/submit/smoke.py", "checkpoints"): "a folder the code hash skips in the user's workdir",
    ("slurmctl/submit/scaffold.py", "run.yaml"): "the project file `init` writes, before any run exists",
    ("slurmctl/cli/main.py", "logs"): "the name of the `logs` command",
}


def run_dir_names() -> set[str]:
    """Every file and directory name of the layout (patterns by their fixed part)."""
    names = set()
    for module in (layout, sweep):
        for key, value in vars(module).items():
            if key.isupper() and isinstance(value, str) and key not in {"COMMENT_PREFIX"}:
                names.add(value.split("{")[0] if value.startswith("rank-") else value)
    names.discard(layout.JOB_LOG)  # "{job_id}.out": the logs/ part is what a caller would spell
    return names


def _is_name(text: str, names: set[str]) -> bool:
    return text in names or any(text.startswith(n) and n.endswith("-") for n in names)


def findings(path: Path, names: set[str]) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    joined = set()  # bare names used as path pieces: `/` operands, call arguments, `x.name == "..."`
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            joined.update({id(node.left), id(node.right)})
        elif isinstance(node, ast.Call):
            joined.update(id(arg) for arg in node.args)
        elif isinstance(node, ast.Compare) and any(isinstance(side, ast.Attribute) and side.attr == "name"
                                                   for side in (node.left, *node.comparators)):
            joined.update(id(side) for side in (node.left, *node.comparators))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
            continue
        text = node.value
        pieces = [p for p in text.split("/") if p] if "/" in text and " " not in text else []  # prose has spaces
        if any(_is_name(p, names) for p in pieces) or (id(node) in joined and _is_name(text, names)):
            out.append((node.lineno, text))
    return sorted(out)


def test_no_run_dir_name_is_spelled_outside_rundir():
    names = run_dir_names()
    assert {"run.json", "logs", "drain.request", "state.json", "sweep.json", "rank-"} <= names
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel.startswith("slurmctl/rundir/") or "init_templates" in path.parts:
            continue
        found += [f"{rel}:{line} {text!r}" for line, text in findings(path, names) if (rel, text) not in ELSEWHERE]
    assert found == [], "use rundir's constants or path functions (Run, run_path, job_log_path, ...)"


def test_job_script_templates_take_run_dir_paths_from_the_context():
    """`{{ run_dir }}/logs/...` in a template would be a second spelling: the context carries the path."""
    names = run_dir_names()
    pattern = re.compile(r"\}\}/(" + "|".join(re.escape(n) for n in sorted(names)) + r")\b")
    found = []
    for path in sorted((PACKAGE / "submit" / "sbatch_templates").glob("*.j2")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            prose = line.lstrip().startswith("#") and not line.startswith("#SBATCH")
            if not prose and pattern.search(line):
                found.append(f"{path.name}:{number} {line.strip()}")
    assert found == []


def test_the_check_finds_a_literal(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('"""logs/run.json in prose is fine."""\n'
                       'from pathlib import Path\n'
                       'a = Path("/r") / "logs"\n'
                       'b = "runs/x/drain.request"\n'
                       'c = {"reason": "watchdog"}\n'
                       'd = "no drain.request left"\n')
    assert [line for line, _ in findings(planted, run_dir_names())] == [3, 4]
