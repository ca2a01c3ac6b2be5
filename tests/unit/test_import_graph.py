"""The import graph of slurmctl, read from the source with ast (function-level imports included):
every arrow points down the layout (LAYERS: a unit imports only units listed before it; the design
page in docs/ draws the same), no two packages import each other through any path, and an import inside a function
says why it is there (start-up time, a child process) or sits where a reason covers a whole package.

Run this file as a script to print the graph's numbers: `python tests/unit/test_import_graph.py`.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "slurmctl"

# Bottom first: a unit may import only units before it (and itself). The leaves import no other
# slurmctl unit except an earlier leaf (fsutil raises errors' UnsafeFile; usercache writes with fsutil).
LAYERS = (
    "errors", "durations", "safe_yaml", "fsutil", "lineage", "usercache", "sockowner",  # leaves
    "config",   # site.yaml and run.yaml models, loaders, cached views, prices
    "slurm",    # the one way to Slurm
    "rundir",   # the only place that spells a run-dir file name or path
    "runtime",  # inside the job, standard library only
    "submit",
    "observe",
    "notify",   # messages about a run (they carry its diagnosis), sent as the user
    "control",
    "ops",
    "web",
    "cli",
    "__main__",  # python -m slurmctl: the CLI's entry point
)

# Where a function-level import needs no comment of its own: one reason covers the package.
LAZY_BY_DESIGN = {
    "slurmctl/cli/": "each command imports the core it alone needs inside its function, so `slurmctl --help` and "
                     "every other command skip it (tests/unit/test_import_budget.py pins the cost per command)",
}


@dataclass(frozen=True)
class Arrow:
    path: str  # the importing file, relative to the repository
    line: int
    source: str  # the importing module
    target: str  # the imported module (or package)
    in_function: bool
    why: bool  # a `# why` comment on the import or on the line above it


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_unit(name: str) -> bool:
    return (PACKAGE / f"{name}.py").is_file() or (PACKAGE / name / "__init__.py").is_file()


def _inside(tree: ast.AST, kinds: tuple[type, ...], test=lambda node: True) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, kinds) and test(node):
            found.update(id(child) for child in ast.walk(node) if child is not node)
    return found


@cache  # read once per test session: every test below asks
def arrows() -> tuple[Arrow, ...]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "init_templates" in path.parts:  # files `slurmctl init` copies into a user's project
            continue
        source = path.read_text()
        lines, tree, module = source.splitlines(), ast.parse(source), _module_name(path)
        in_function = _inside(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
        type_only = _inside(tree, (ast.If,), lambda node: "TYPE_CHECKING" in ast.unparse(node.test))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:  # relative: resolve against this module's package
                    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                    target = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # `from slurmctl import rundir` imports the unit rundir (`__version__` is the package root's)
                targets = [f"{target}.{a.name}" if _is_unit(a.name) else target for a in node.names] \
                    if target == "slurmctl" else [target]
            why = any("# why" in lines[i] for i in range(node.lineno - 2, node.end_lineno) if i >= 0)
            out += [Arrow(str(path.relative_to(PACKAGE.parent)), node.lineno, module, t, id(node) in in_function, why)
                    for t in targets if t == "slurmctl" or t.startswith("slurmctl.")]
    return tuple(out)


def unit(module: str) -> str | None:
    """The layout unit of a module (`slurmctl.observe.status` -> observe); None for the package root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward(graph: tuple[Arrow, ...]) -> list[Arrow]:
    return [a for a in graph if unit(a.source) and unit(a.target) and unit(a.source) != unit(a.target)
            and LAYERS.index(unit(a.target)) > LAYERS.index(unit(a.source))]


@cache
def module(name: str) -> str:
    """The module an import names: `slurmctl.rundir.Run` is no module, `slurmctl.rundir` is."""
    while name.count(".") and not (PACKAGE.parent / f"{name.replace('.', '/')}.py").is_file() \
            and not (PACKAGE.parent / name.replace(".", "/") / "__init__.py").is_file():
        name = name.rsplit(".", 1)[0]
    return name


def package_cycles(graph: tuple[Arrow, ...]) -> list[list[str]]:
    return cycles(graph, unit)


def module_cycles(graph: tuple[Arrow, ...]) -> list[list[str]]:
    return cycles(graph, module)


def cycles(graph: tuple[Arrow, ...], key) -> list[list[str]]:
    """Strongly connected sets of more than one node (Tarjan), a node being `key` of a module."""
    edges: dict[str, set[str]] = defaultdict(set)
    for a in graph:
        if key(a.source) and key(a.target) and key(a.source) != key(a.target):
            edges[key(a.source)].add(key(a.target))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                cycles.append(sorted(members))

    for node in list(edges):
        if node not in index:
            visit(node)
    return cycles


def unexplained_lazy(graph: tuple[Arrow, ...]) -> list[Arrow]:
    return [a for a in graph if a.in_function and not a.why
            and not any(a.path.startswith(prefix) for prefix in LAZY_BY_DESIGN)]


def test_every_unit_has_a_place_in_the_layout():
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert units - set(LAYERS) == set(), "give the new module or package its place in LAYERS (and docs/)"


def test_no_arrow_points_up_the_layout():
    assert [f"{a.path}:{a.line} {a.source} -> {a.target}" for a in upward(arrows())] == []


def test_no_import_cycle_between_packages():
    assert package_cycles(arrows()) == []


def test_no_import_cycle_between_modules():
    """Not even inside a package: a cycle there is what a bottom-of-file import papers over."""
    assert module_cycles(arrows()) == []


def test_a_function_level_import_says_why():
    found = unexplained_lazy(arrows())
    assert [f"{a.path}:{a.line} {a.target}" for a in found] == [], (
        "import at the top of the module, or add a one-line `# why: ...` (start-up time, a child process)")


def test_the_checks_catch_what_they_look_for():
    """The checks themselves, on arrows made up for them."""
    made = (Arrow("slurmctl/config/x.py", 1, "slurmctl.config.x", "slurmctl.cli.main", True, False),
            Arrow("slurmctl/cli/main.py", 1, "slurmctl.cli.main", "slurmctl.config.x", True, False))
    assert upward(made) == [made[0]]
    assert package_cycles(made) == [["cli", "config"]]
    assert unexplained_lazy(made) == [made[0]]


def summary(graph: tuple[Arrow, ...]) -> str:
    return (f"internal imports {len(graph)}, function-level {sum(a.in_function for a in graph)}, "
            f"upward arrows {len(upward(graph))}, package cycles {len(package_cycles(graph))}, "
            f"module cycles {len(module_cycles(graph))}, "
            f"function-level without a reason {len(unexplained_lazy(graph))}")


if __name__ == "__main__":
    graph = arrows()
    print(summary(graph))
    for a in upward(graph):
        print("up:", a.path, a.line, a.target)
    for cycle in package_cycles(graph) + module_cycles(graph):
        print("cycle:", " <-> ".join(cycle))
    sys.exit(0)
