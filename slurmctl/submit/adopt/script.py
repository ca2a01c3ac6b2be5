"""Reading an sbatch script as sbatch does: its #SBATCH lines (up to the first command), then the
options of the command line (after `--`), which win.

Every directive is kept, in order, with its line; nothing is dropped. Options are named by their
long name, as `sbatch -v` prints them, so what we read can be compared with Slurm's own reading
(slurmctl.slurm.sbatch_reading).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from slurmctl.errors import SpecError

_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # tab is fine
MAX_SCRIPT_BYTES = 1024 * 1024  # sbatch itself refuses scripts above 4 MB; a training launcher is tiny

# short option -> long name (sbatch --help, Slurm 22.05)
SHORT = {"A": "account", "a": "array", "b": "begin", "C": "constraint", "c": "cpus-per-task", "D": "chdir",
         "d": "dependency", "e": "error", "G": "gpus", "H": "hold", "i": "input", "J": "job-name",
         "k": "no-kill", "L": "licenses", "M": "clusters", "m": "distribution", "N": "nodes", "n": "ntasks",
         "O": "overcommit", "o": "output", "p": "partition", "Q": "quiet", "q": "qos", "s": "oversubscribe",
         "S": "core-spec", "t": "time", "V": "version", "v": "verbose", "W": "wait", "w": "nodelist",
         "x": "exclude"}
# long options that take no value (a flag); every other option takes one
FLAGS = {"exclusive", "hold", "requeue", "no-requeue", "overcommit", "oversubscribe", "contiguous", "no-kill",
         "parsable", "quiet", "test-only", "wait", "use-min-nodes", "spread-job", "reboot", "ignore-pbs",
         "verbose", "get-user-env"}
# Long spellings sbatch accepts for the same option (sbatch -v prints the first).
ALIASES = {"gpus-per-task": "gpus-per-task", "gres-flags": "gres-flags", "tasks-per-node": "ntasks-per-node",
           "mincpus": "mincpus", "workdir": "chdir", "name": "job-name", "mail-user": "mail-user"}

# What each option means to adopt: the platform sets it (and says so), reads it (shape/placement),
# or passes it through unchanged.
SHAPE = {"nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "gres", "gpus", "gpus-per-node",
         "gpus-per-task", "cpus-per-gpu", "mem", "mem-per-cpu", "mem-per-gpu", "exclusive", "mincpus",
         "ntasks-per-gpu", "sockets-per-node", "cores-per-socket", "threads-per-core"}
PLACEMENT = {"partition", "account", "qos", "time", "time-min", "constraint", "nodelist", "exclude",
             "reservation", "begin", "deadline", "clusters"}
CONTROL = {"array", "dependency", "signal", "requeue", "no-requeue", "kill-on-invalid-dep"}
PLATFORM = {"job-name", "comment", "output", "error", "open-mode"}  # adopt sets these (the originals are shown)


@dataclass
class Directive:
    option: str  # long name, e.g. "nodes"
    value: str | None  # None for a flag
    raw: str  # the text as written (the #SBATCH line, or the command-line words)
    line: int | None = None  # 1-based line in the script; None: from the command line

    @property
    def where(self) -> str:
        return f"line {self.line}" if self.line else "command line"

    @property
    def kind(self) -> str:
        if self.option in PLATFORM:
            return "platform"
        if self.option in SHAPE:
            return "shape"
        if self.option in PLACEMENT:
            return "placement"
        if self.option in CONTROL:
            return "control"
        return "passed-through"

    def to_dict(self) -> dict:
        return {"option": self.option, "value": self.value, "raw": self.raw, "where": self.where, "kind": self.kind}


@dataclass
class SbatchScript:
    path: Path
    text: str
    shebang: str
    directives: list[Directive] = field(default_factory=list)  # script first, command line last
    body: list[tuple[int, str]] = field(default_factory=list)  # (line, text) after the #SBATCH block
    ignored: list[tuple[int, str]] = field(default_factory=list)  # #SBATCH lines after the first command

    def value(self, option: str) -> str | None:
        """The option's effective value: the last one given (the command line wins over the script)."""
        found = [d for d in self.directives if d.option == option]
        return found[-1].value if found else None

    def has(self, option: str) -> bool:
        return any(d.option == option for d in self.directives)


def _split_options(words: list[str], source_line: int | None, raw: str) -> list[Directive]:
    found, i = [], 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            name = ALIASES.get(name, name)
            if not eq and name not in FLAGS and i + 1 < len(words):
                i, value, eq = i + 1, words[i + 1], "="
            found.append(Directive(name, value if eq else None, raw or word, source_line))
        elif word.startswith("-") and len(word) >= 2 and word[1] in SHORT:
            name, value = SHORT[word[1]], word[2:] or None
            if value is None and name not in FLAGS and i + 1 < len(words):
                i, value = i + 1, words[i + 1]
            found.append(Directive(name, value, raw or word, source_line))
        else:
            raise SpecError(f"{'line ' + str(source_line) if source_line else 'the command line'}: "
                            f"{word!r} is not an sbatch option.",
                            "Write each #SBATCH line as `#SBATCH --option=value`; after `--` give sbatch options only.")
        i += 1
    return found


def parse_script(path: Path, cli_args: list[str] | tuple[str, ...] = ()) -> SbatchScript:
    try:
        data = path.read_bytes()[:MAX_SCRIPT_BYTES + 1]
    except OSError as exc:
        raise SpecError(f"cannot read the script {path}: {exc.strerror}.", "Give the path of your sbatch script.") \
            from None
    if len(data) > MAX_SCRIPT_BYTES:
        raise SpecError(f"{path} is larger than {MAX_SCRIPT_BYTES // 1024} KiB; that is no job script.",
                        "Give the sbatch script itself.")
    text = data.decode("utf-8", errors="replace")
    lines = [line.removesuffix("\r") for line in text.split("\n")]  # bash ends lines at \n only
    if not lines or not lines[0].startswith("#!"):
        raise SpecError(f"{path} does not start with '#!' (sbatch refuses such a script).",
                        "Make its first line the interpreter, e.g. #!/bin/bash.")
    script = SbatchScript(path, text, lines[0])
    in_header = True
    for number, line in enumerate(lines[1:], start=2):
        stripped = line.strip()
        if in_header and re.match(r"#SBATCH(\s|$)", stripped):
            if _CONTROL_RE.search(line):
                raise SpecError(f"{path} line {number} holds a control character: {line!r}.",
                                "Remove it: an #SBATCH line is plain text (sbatch and bash would read it apart).")
            try:
                words = shlex.split(stripped[len("#SBATCH"):].split(" #", 1)[0], posix=True)
            except ValueError as exc:  # an unbalanced quote
                raise SpecError(f"{path} line {number}: {exc} in {stripped!r}.",
                                "Close the quote, as sbatch would need it too.") from None
            script.directives += _split_options(words, number, stripped)
            continue
        if in_header and (not stripped or stripped.startswith("#")):
            continue
        in_header = False  # sbatch stops reading #SBATCH at the first command
        if re.match(r"#SBATCH(\s|$)", stripped):
            script.ignored.append((number, line))
        script.body.append((number, line))
    script.directives += _split_options(list(cli_args), None, "")
    for d in script.directives:
        if d.line is None:
            d.raw = f"--{d.option}" + (f"={d.value}" if d.value is not None else "")
    return script
