"""What the body of an sbatch script does, line by line: how it launches the program (srun,
torchrun / torch.distributed.run, accelerate, deepspeed, mpirun, plain python) and how it prepares the
environment (module, conda, venv, exports). Read only, never run: adopt runs the body as written.

One table, ``LAUNCHERS``: a launcher is a name and the pattern of its command word.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field

# (name, pattern on a command line of the body), in the order a line is tried; a line may launch
# through several (srun torchrun ...): each is reported.
LAUNCHERS: tuple[tuple[str, re.Pattern], ...] = (
    ("srun", re.compile(r"(?:^|[\s;&|(])srun(?:\s|$)")),
    ("torchrun", re.compile(r"(?:^|[\s;&|(/])torchrun(?:\s|$)|-m\s+torch\.distributed\.(?:run|launch)\b")),
    ("accelerate", re.compile(r"(?:^|[\s;&|(/])accelerate\s+launch\b")),
    ("deepspeed", re.compile(r"(?:^|[\s;&|(/])deepspeed(?:\s|$)")),
    ("mpirun", re.compile(r"(?:^|[\s;&|(/])(?:mpirun|mpiexec)(?:\s|$)")),
    ("python", re.compile(r"(?:^|[\s;&|(/])python[0-9.]*\s")),
)
# Tried on each command of a line (`source .../conda.sh && conda activate env` is two), in this
# order: the first kind any of its commands has names the line (conda before venv: conda's own
# bin/activate looks like a venv's).
ENVIRONMENT: tuple[tuple[str, re.Pattern], ...] = (
    ("module", re.compile(r"^\s*(?:module|ml)\s+(?:load|add|purge|use|restore)\b")),
    ("conda", re.compile(r"^\s*(?:conda|mamba|micromamba)\s+activate\b|^\s*(?:source|\.)\s+activate\b"
                         r"|^\s*(?:source|\.)\s+\S*(?:conda|mamba)\S*/(?:bin/activate|etc/profile\.d/\S+\.sh)\b"
                         r"|^\s*eval\s+\S*(?:conda|mamba|micromamba)\s+shell\.", re.IGNORECASE)),
    ("venv", re.compile(r"^\s*(?:source|\.)\s+\S*bin/activate\b")),
    ("export", re.compile(r"^\s*export\s+[A-Za-z_][A-Za-z0-9_]*=")),
    ("cd", re.compile(r"^\s*cd\s")),
)
_CHAIN = re.compile(r"\s*(?:&&|\|\||;)\s*")
_PY_SCRIPT = re.compile(r"(?:^|\s)(\S+\.py)(?:\s|$)")
_STEP_OPTIONS = ("--nnodes", "--nproc-per-node", "--nproc_per_node", "--num_processes", "--num_machines",
                 "--num_gpus", "--num_nodes", "--ntasks", "-n", "-N", "--ntasks-per-node")


_SELF_REQUEUE = re.compile(r"\bscontrol\s+(?:-\S+\s+)*requeue(?:hold)?\b")


@dataclass
class Launch:
    line: int
    text: str
    launchers: list[str]
    program: str | None  # the .py file it runs, when one is named
    options: dict[str, str] = field(default_factory=dict)  # the shape options the launchers were given


@dataclass
class BodyReading:
    launches: list[Launch] = field(default_factory=list)
    environment: list[tuple[int, str, str]] = field(default_factory=list)  # (line, kind, text)
    traps: list[tuple[int, str]] = field(default_factory=list)  # the body's own signal handling
    other: list[tuple[int, str]] = field(default_factory=list)  # every other command, as written
    requeues_itself: bool = False  # the script runs `scontrol requeue` (the usual USR1 trap's handler)

    @property
    def under_srun(self) -> bool:
        return any("srun" in launch.launchers for launch in self.launches)

    def to_dict(self) -> dict:
        return {"launches": [asdict(launch) for launch in self.launches],
                "environment": [{"line": n, "kind": k, "text": t} for n, k, t in self.environment],
                "traps": [{"line": n, "text": t} for n, t in self.traps],
                "other": [{"line": n, "text": t} for n, t in self.other], "under_srun": self.under_srun,
                "requeues_itself": self.requeues_itself}


def _step_options(text: str) -> dict[str, str]:
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        words = text.split()
    found = {}
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in _STEP_OPTIONS:
            found[name] = value if eq else (words[i + 1] if i + 1 < len(words) else "")
    return found


def _commands(body: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Lines with their backslash continuations joined, each numbered by its first line."""
    joined, pending, start = [], "", 0
    for number, line in body:
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append((start, pending + line))
        pending = ""
    if pending:
        joined.append((start, pending))
    return joined


def read_body(body: list[tuple[int, str]]) -> BodyReading:
    reading = BodyReading()
    for number, line in _commands(body):
        text = " ".join(line.split())
        if not text or text.startswith("#"):
            continue
        if _SELF_REQUEUE.search(text):
            reading.requeues_itself = True
        commands = _CHAIN.split(text)
        kind = next((kind for kind, pattern in ENVIRONMENT if any(pattern.search(c) for c in commands)), None)
        if kind:
            reading.environment.append((number, kind, text))
        if re.match(r"trap\s", text):
            reading.traps.append((number, text))
            continue
        used = [name for name, pattern in LAUNCHERS if pattern.search(text)]
        if used and not (used == ["python"] and re.search(r"\s-c\s", text)):
            program = _PY_SCRIPT.search(text)
            reading.launches.append(Launch(number, text, used, program.group(1) if program else None,
                                           _step_options(text)))
        elif not kind:
            reading.other.append((number, text))
    return reading
