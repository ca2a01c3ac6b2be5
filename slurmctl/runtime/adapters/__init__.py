"""How programs that do not use slurmctl.runtime checkpoint, resume and report progress: one small
module per framework, one table (``ADAPTERS``) that lists them. Standard library only: the batch
shell, status, cancel and resume all read the program's own checkpoints through these.

An adapter says
  signal        the signal the program saves on by itself (None: it cannot save on request)
  signal_to     "steps" (srun tasks: Slurm's --signal without B:) or "batch" (the batch shell)
  step_pattern  a regex with a group `step` for its progress lines in the log
  output_names  the settings that name where it saves, in precedence order (adopt reads them from
                the launched command line, a config file on it, or the program's text)
  checkpoints(dir) -> the program's COMPLETE checkpoints in `dir`, oldest first, each with its step
                when the file says it — validity is the adapter's (a loadable archive, the Trainer's
                state), never a guess from a file name alone.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmctl.runtime.adapters import hf_trainer, lightning, pytorch


@dataclass(frozen=True)
class ProgramCheckpoint:
    path: Path
    step: int | None
    mtime: float

    def to_dict(self) -> dict:
        return {**asdict(self), "path": str(self.path)}


ADAPTERS = {module.NAME: module for module in (lightning, hf_trainer, pytorch)}


@dataclass
class Resilience:
    """The adopt block: how this program checkpoints and resumes (recorded in run.json)."""

    framework: str
    checkpoint_dir: str  # absolute
    signal: str | None = None
    signal_to: str = "steps"
    step_pattern: str | None = None
    restore: str | None = None  # which checkpoint the framework restores by itself (lightning.restore_mode)

    @property
    def adapter(self):
        return ADAPTERS[self.framework]

    def checkpoints(self) -> list[ProgramCheckpoint]:
        found = self.adapter.checkpoints(Path(self.checkpoint_dir))
        return [ProgramCheckpoint(path, step, mtime) for path, step, mtime in found]

    def latest(self) -> ProgramCheckpoint | None:
        found = self.checkpoints()
        return found[-1] if found else None

    def restored(self, found: list[ProgramCheckpoint] | None = None) -> ProgramCheckpoint | None:
        """The checkpoint the program's next start restores by itself (the framework's own precedence,
        where the adapter knows it; else its newest complete one), of `found` (default: a new scan)."""
        found = self.checkpoints() if found is None else found
        choose = getattr(self.adapter, "restored", None)
        if choose is None:
            return found[-1] if found else None
        picked = choose([(c.path, c.step, c.mtime) for c in found], self.restore)
        return ProgramCheckpoint(*picked) if picked else None

    def last_step(self, log_lines: list[str]) -> int | None:
        """The newest step the program logged: slurmctl's own lines ('... resuming from checkpoint step
        N') are not the program's progress."""
        pattern = re.compile(self.step_pattern or self.adapter.STEP_PATTERN)
        for line in reversed(log_lines):
            if line.startswith("slurmctl:"):
                continue
            m = pattern.search(line)
            if m:
                found = [v for v in m.groupdict().values() if v is not None]
                if found:
                    return int(found[0])
        return None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> Resilience | None:
        if not isinstance(data, dict) or data.get("framework") not in ADAPTERS:
            return None
        keys = ("framework", "checkpoint_dir", "signal", "signal_to", "step_pattern", "restore")
        return cls(**{k: data.get(k) for k in keys if k in data})


def imports_of(program_text: str) -> set[tuple[str, str]]:
    """(top-level module, imported name or "") of every import in a Python program: `import a.b, c`,
    `from a import x, y`, anywhere in the file (inside try/if/def too). Python's own parser reads it;
    a file it cannot parse (another Python's syntax, a fragment) is read line by line instead."""
    try:
        tree = ast.parse(program_text)
    except (SyntaxError, ValueError):
        return _imports_by_line(program_text)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], "") for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {(node.module.split(".")[0], alias.name) for alias in node.names}
    return found


_IMPORT_LINE = re.compile(r"^\s*import\s+([\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*)", re.MULTILINE)
_FROM_LINE = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+\(?\s*([\w\s,]+)", re.MULTILINE)


def _imports_by_line(program_text: str) -> set[tuple[str, str]]:
    found = set()
    for m in _IMPORT_LINE.finditer(program_text):
        found |= {(part.split()[0].split(".")[0], "") for part in m.group(1).split(",") if part.strip()}
    for m in _FROM_LINE.finditer(program_text):
        found |= {(m.group(1).split(".")[0], name.split()[0]) for name in m.group(2).split(",") if name.strip()}
    return found


def detect(program_text: str) -> str | None:
    """The framework a training program uses, from its imports (the first adapter that claims it)."""
    imports = imports_of(program_text)
    modules = {module for module, _ in imports}
    for name, module in ADAPTERS.items():
        names = getattr(module, "NAMES", None)
        if names is None and modules & module.MODULES:
            return name
        if names is not None and any(m in module.MODULES and n in names for m, n in imports):
            return name
    if "init_from" in program_text:  # nanoGPT's configurator reads torch through an exec'd config file
        return "pytorch"
    return None
