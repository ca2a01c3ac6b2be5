"""Reading a failure log's structure, before any category is decided (observe/diagnose.py decides):
the lines without ANSI codes and rank prefixes, the launcher's root-cause summary, the tracebacks, and
one LogReading per log (the root rank, its exception and frames, NCCL/Slurm/kernel lines, progress,
launcher noise). Pure functions over text, apart from read_tail, which reads a bounded tail of a file."""

from __future__ import annotations

import re
import re._parser as sre_parse  # the stdlib's own regex parser: what a pattern must contain, read from its tree
from bisect import bisect_right
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from slurmctl.fsutil import tail_bytes

TAIL_BYTES = 512 * 1024
TRACEBACK_HEAD = "Traceback (most recent call last)"  # a traceback's first line, without its ":"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
# torch >= 2.4 prefixes every line a rank writes with "[rankN]:", and a rank that re-logs its own output
# doubles it ("[rank0]:[rank0]: ..."); some log collectors put the process id in front ("[80746] [rank0]:").
_PREFIX = re.compile(r"^\s*(?:\[\d+\]\s+(?=\[(?:rank|default)\d+\]:))?(?:\[(?:rank|default)(\d+)\]:|(\d+):\s)\s*")
# Ray puts the worker in front of each line it forwards: "(RayWorker pid=123, ip=10.0.0.2) ...", SkyPilot
# "(head, rank=0, pid=4773) ...".
_RAY_PREFIX = re.compile(r"^\s*\([^()]*\bpid=\d+[^()]*\)\s?")
_RAY_RANK = re.compile(r"\brank=(\d+)")
# a log pasted into an issue or a chat (`diagnose --log`): Markdown's quote markers and inline code around a line
_MARKDOWN_QUOTE = re.compile(r"^(?:> ?)+")
_MARKDOWN_CODE = re.compile(r"^`+([^`].*?)`+[.:]?$")
# (not IPython's header, "TypeError      Traceback (most recent call last)", which only says that one follows)
_EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception|Interrupt|Exit)|RuntimeError|AssertionError)\b"
                             r"(?!\s+Traceback \(most recent call last\)).*")
# A C++ exception that ended the process: "terminate called after throwing ..." then "  what():  <message>".
_WHAT_LINE = re.compile(r"^\s*what\(\):\s+(.*)")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>\S+))?|'
                    # IPython/Jupyter (a notebook's or Colab's traceback, pasted): "path.py in func(args)", a Markdown
                    # link "[path.py](url) in func(...)", IPython 8's "File path.py:63, in func(...)", and the
                    # notebook's own cells ("<ipython-input-8-a1c9> in <module>", "Cell In[3], line 5")
                    r'^\s*(?:File )?\[?(?P<ipath>[^\s"\[\]()]+\.py|<ipython-input-[\w-]+>)\]?(?:\(\S*\))?'
                    r'(?::(?P<iline>\d+))?,? in (?P<ifunc><[^>]*>|[\w.]+)(?:\(|\s*$)|'
                    r'^\s*Cell (?P<cell>In ?\[\d+\]), line (?P<cline>\d+)')
# IPython marks the line of each frame that ran with an arrow ("---> 63     model = Arguments(...)")
_IPYTHON_CODE = re.compile(r"^\s*-+>\s*\d+\s?(.*)$")
_ANY_FRAME = re.compile(r'(?:File ")?([^"\s]+\.py)", line (\d+)(?:, in (\S+))?')
# An exception pasted on one line with its frame ('File "u.py", line 3, in f x = y[0] IndexError: ...').
_INLINE_EXCEPTION = re.compile(r"\b([A-Z]\w*(?:Error|Exception)): (.*)$")
# Frames in installed libraries, the interpreter or a launcher; the last frame outside these is the user's.
_LIBRARY_PATH = re.compile(r"site-packages|dist-packages|/lib/python\d|<frozen |^<(?!ipython-input)|/usr/lib/|"
                           r"/\.?conda/|/envs/\w+/lib/")
# A traceback through these files is the launcher reporting that a rank died, not the rank's own error.
_LAUNCHER_FRAME = re.compile(r"torch/distributed/(?:run|launch)\.py|distributed/launcher/api\.py|"
                             r"elastic/multiprocessing|accelerate/commands/launch\.py|ChildFailedError")
# torchrun's agents print these whenever one node's agent exits before the others: never a cause.
_LAUNCHER_NOISE = re.compile(r"failed to shutdown the rendezvous|Sending process \d+ closing signal|"
                             r"Received \w+ death signal, shutting down workers|"
                             r"Failed to (?:check|get) whether the rendezvous is closed", re.IGNORECASE)
_IPYTHON_HEAD = re.compile(r"^\s*[\w.]+\s+Traceback \(most recent call last\)")
ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\)")
ROOT_FIELD = re.compile(r"^\s*(rank|exitcode|host|traceback)\s*:\s*(.*)$")
# A training step reported (loss value, progress bar past zero): a group that trained had formed.
_PROGRESS = re.compile(r"\bloss\b['\"]?\s*[:=]?\s*[-+]?\d|\b[1-9]\d*/\d+ \[\d+:\d+<|\b(?:iter|iteration|step)\s*"
                       r"[:=]?\s*\d+\b.{0,40}\bloss", re.IGNORECASE)
_FINISHED = re.compile(r"\btraining (?:is )?(?:complete|completed|finished|done)\b|\bfinished training\b|"
                       r"`Trainer\.fit` stopped: `max_(?:epochs|steps)=\d+` reached|['\"]?train_runtime['\"]?\s*[:=]",
                       re.IGNORECASE)
# Exit codes and signals said by srun, slurmstepd, the shell or the launcher.
_EXIT_LINE = re.compile(r"srun: error: \S+: tasks? [\d,-]+: (?:Exited with exit code (\d+)|Killed|Terminated)|"
                        r"exited with (?:exit )?code (-?\d+)|exitcode\s*:\s*(-?\d+)|^(?:.*\s)?(Killed|Aborted|"
                        r"Segmentation fault|Bus error)(?: \(core dumped\))?(?:\s+\S.*)?$|signal: (\w+)",
                        re.IGNORECASE)
# bash's job-status word for SIGKILL ("Killed: 9" on macOS), also in the shell's locale
# (zh_CN "已杀死", ja "強制終了", ru "Убито", de "Getötet").
# A progress bar without a newline runs into it (tqdm's "... 1/2 [00:10<00:10, 10.1s/it]Killed", Keras'
# "165376/296960 [====>....] - ETA: 365s - loss: 2.1371Killed"); an issue's Markdown may embolden it ("**Killed**").
_BARE_KILL = re.compile(r"^\**(?:.*\bline \d+:\s+\d+\s+)?(?:Killed(?:: 9)?|已杀死|強制終了|Убито|Getötet)\**"
                        r"(?:\s+.*)?$|"
                        r"^srun: error: \S+: tasks? [\d,-]+: Killed$|^.*\d(?:it/s|s/it)\]\s*Killed$|"
                        r"^\s*\d+/\d+ \[[=>.]*\].*\dKilled$|"
                        # zsh's job control ("[1]    2843557 killed     python train.py"); an IDE's run window
                        # (PyCharm: "Process finished with exit code 137 (interrupted by signal 9: SIGKILL)")
                        r"^\[\d+\]\s+\d+ killed\b|^Process finished with exit code 137 \(interrupted by signal 9")
# A launcher or shell saying a process died of SIGKILL: torchrun's agent "failed (exitcode: -9) local_rank: 0",
# the DeepSpeed launcher's "sigkill_handler] exits with return code = -9", subprocess's "died with
# <Signals.SIGKILL: 9>", 128+9 = 137 from a shell, a container runtime or an IDE ("exit code 137 (interrupted by
# signal 9: SIGKILL)"), Go's exec "signal: killed" and torch.multiprocessing.spawn's "process 1 terminated with
# signal SIGKILL".
_SIGKILL_EXIT = re.compile(r"\bexitcode\s*:\s*-9\b|\breturn code\s*=\s*-9\b|<Signals\.SIGKILL: 9>|"
                           r"\bexit(?:ed with)? (?:status|code)\s*:?\s*(?:137|-9)\b|interrupted by signal 9|"
                           r"\bsignal: killed\b|\bSignal 9 \(SIGKILL\)|\bterminated with signal SIGKILL\b",
                           re.IGNORECASE)
_SLURMSTEPD = re.compile(r"^\s*(?:slurmstepd|srun|sbatch|salloc)(?:-\S+)?: (?:error|fatal)\b", re.IGNORECASE)
_KERNEL = re.compile(r"\bNVRM\b|\bXid\b|oom-kill|Out of memory: Killed process|invoked oom-killer")
_NCCL_WARN = re.compile(r"\bNCCL WARN\b")


# --- a literal prefilter: a log of thousands of lines is searched by dozens of patterns of dozens of
# alternatives each; running every pattern on every line costs ~100 us a line a pattern. Each pattern's
# parse tree tells which literal strings every match must contain (all of a sequence's, one of an
# alternation's); a casefolded str.find over the whole text finds the few lines that hold them, and only
# those lines run the pattern. A requirement is a literal, ("all", parts) or ("any", parts).
Requirement = str | tuple


@cache
def required_literals(pattern: re.Pattern) -> Requirement | None:
    """What every text `pattern` matches contains (casefolded literals, see Requirement); None when the
    parse tree shows nothing usable (the caller then runs the pattern on every line)."""
    try:
        return _required(sre_parse.parse(pattern.pattern, pattern.flags))
    except Exception:  # a construct this Python's parser spells otherwise: no prefilter, only slower
        return None


def _required(seq) -> Requirement | None:
    parts: list[Requirement] = []
    runs: list[str] = []
    run = ""
    for op, av in [*seq, (None, None)]:
        if op is sre_parse.LITERAL:
            run += chr(av)
            continue
        if run:  # anything but a literal ends a run: each run is required on its own
            runs.append(run.casefold())
            run = ""
        if op is sre_parse.SUBPATTERN:
            inner = _required(av[3])
        elif op is sre_parse.ATOMIC_GROUP:
            inner = _required(av)
        elif op is sre_parse.BRANCH:
            alternatives = [_required(branch) for branch in av[1]]
            inner = ("any", tuple(alternatives)) if all(alternatives) else None
        elif op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, sre_parse.POSSESSIVE_REPEAT) and av[0] >= 1:
            inner = _required(av[2])
        else:
            inner = None
        if inner:
            parts.append(inner)
    # runs of one or two characters are in almost every line: kept only when nothing else is required
    parts += [r for r in runs if len(r) >= 3] or ([max(runs, key=len)] if runs and not parts else [])
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else ("all", tuple(parts))


class LineIndex:
    """The lines of a log casefolded and joined into one UTF-8 text, to find which lines hold a literal with
    bytes.find (several times faster than str.find on text with any non-ASCII character in it)."""

    COMMON = 64  # a literal in more lines than this is tested line by line, and only where it must be

    def __init__(self, lines: list[str]):
        self.folded = [line.casefold() for line in lines]
        encoded = [line.encode("utf-8", "surrogatepass") for line in self.folded]
        self.text = b"\n".join(encoded)
        self.starts, at = [], 0
        for line in encoded:
            self.starts.append(at)
            at += len(line) + 1
        self._cache: dict[str, set[int] | None] = {}

    def lines_with(self, literal: str) -> set[int] | None:
        """The lines that hold `literal`, or None when it is in more than COMMON lines."""
        if literal not in self._cache:
            needle, found = literal.encode("utf-8", "surrogatepass"), set()
            at = self.text.find(needle)
            while at >= 0 and found is not None:
                if len(found) == self.COMMON:
                    found = None
                    break
                n = bisect_right(self.starts, at) - 1
                found.add(n)
                at = self.text.find(needle, self.starts[n + 1] if n + 1 < len(self.starts) else len(self.text))
            self._cache[literal] = found
        return self._cache[literal]

    def _meets(self, need: Requirement, n: int) -> bool:
        if isinstance(need, str):
            return need in self.folded[n]
        test = any if need[0] == "any" else all
        return test(self._meets(part, n) for part in need[1])

    def _lines_meeting(self, need: Requirement, *, listing: bool = False) -> set[int] | None:
        """The lines that meet `need`; None when one of its literals is too common to list, unless `listing`
        (then such a literal is listed by a membership test a line)."""
        if isinstance(need, str):
            lines = self.lines_with(need)
            if lines is None and listing:
                lines = self._cache[need] = {n for n, line in enumerate(self.folded) if need in line}
            return lines
        kind, parts = need
        if kind == "any":
            found: set[int] = set()
            for part in parts:
                lines = self._lines_meeting(part, listing=listing)
                if lines is None:
                    return None
                found |= lines
            return found
        known = [(part, self._lines_meeting(part)) for part in parts]
        sets = sorted((lines for _, lines in known if lines is not None), key=len)
        if not sets:
            return self._lines_meeting(parts[0], listing=True) if listing else None
        found = set.intersection(*sets)
        common = [part for part, lines in known if lines is None]  # tested on the few lines left only
        return {n for n in found if all(self._meets(part, n) for part in common)}

    def candidates(self, need: Requirement | None) -> list[int]:
        """Line numbers, in order, that may match a pattern with this requirement (every line without one)."""
        if need is None:
            return list(range(len(self.folded)))
        lines = self._lines_meeting(need)
        return sorted(lines if lines is not None else self._lines_meeting(need, listing=True))

    def where(self, pattern: re.Pattern, lines: list[str], *, strip: bool = False) -> list[int]:
        """The numbers of the lines `pattern` matches (searches; `match`es a pattern anchored with ^ alike)."""
        test = pattern.search
        return [i for i in self.candidates(required_literals(pattern))
                if test(lines[i].strip() if strip else lines[i])]


def clean_line(line: str) -> tuple[str, int | None]:
    """Strip ANSI codes, Markdown quoting and launcher rank prefixes (repeated ones too); return (text, rank or
    None)."""
    text = _ANSI.sub("", line).rstrip()
    text = _MARKDOWN_CODE.sub(r"\1", _MARKDOWN_QUOTE.sub("", text))
    rank = None
    if m := _RAY_PREFIX.match(text):
        found = _RAY_RANK.search(m[0])
        rank = int(found[1]) if found else None
        text = text[m.end():]
    while m := _PREFIX.match(text):
        rank = int(m.group(1) or m.group(2)) if rank is None else rank
        text = text[m.end():]
    return text, rank


def launcher_root_cause(lines: list[str]) -> dict | None:
    """torchrun's summary of a failed job: the rank that failed first, its exit code and signal.

    ChildFailedError prints "Root Cause (first observed failure):" then `rank : 3 (local_rank: 3)`,
    `exitcode : -9 (pid: 123)`, `traceback : Signal 9 (SIGKILL) received by PID 123`."""
    for i in range(len(lines) - 1, -1, -1):
        if ROOT_CAUSE.search(lines[i]):
            fields: dict = {}
            for line in lines[i + 1:i + 10]:
                m = ROOT_FIELD.match(line)
                if m:
                    fields[m[1]] = m[2].strip()
            rank = re.match(r"-?\d+", fields.get("rank", ""))
            code = re.match(r"-?\d+", fields.get("exitcode", ""))
            signal = re.search(r"Signal (\d+) \((\w+)\)", fields.get("traceback", ""))
            if not (rank or code):
                return None
            result = {"rank": int(rank[0]) if rank else None, "exitcode": int(code[0]) if code else None,
                      "host": fields.get("host") or None, "signal": signal[2] if signal else None}
            if result["signal"] is None and result["exitcode"] is not None and result["exitcode"] < 0:
                result["signal"] = {-9: "SIGKILL", -6: "SIGABRT", -11: "SIGSEGV", -15: "SIGTERM",
                                    -7: "SIGBUS"}.get(result["exitcode"], f"signal {-result['exitcode']}")
            return result
    return None


def read_tail(path: Path, max_bytes: int = TAIL_BYTES, *, nofollow: bool = True) -> str:
    """The end of a log. A FIFO, /dev/zero or other non-regular file raises UnsafeFile at once
    (non-blocking open, then fstat) instead of hanging; reads are capped at `max_bytes`."""
    try:
        data, _ = tail_bytes(path, max_bytes, nofollow=nofollow)
    except FileNotFoundError:
        return ""
    return data.decode(errors="replace")


def traceback_blocks(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(start line, lines up to and including its exception line) for every Python traceback."""
    starts = [i for i, line in enumerate(lines)
              if line.lstrip().startswith(TRACEBACK_HEAD) or _IPYTHON_HEAD.match(line)]
    blocks = []
    for n, start in enumerate(starts):
        block = lines[start:starts[n + 1] if n + 1 < len(starts) else len(lines)]
        end = next((i for i, line in enumerate(block) if i and _EXCEPTION_LINE.match(line)), len(block) - 1)
        blocks.append((start, block[: end + 1]))
    return blocks


def is_launcher_block(block: list[str]) -> bool:
    return any(_LAUNCHER_FRAME.search(line) for line in block)


def last_traceback(lines: list[str], limit: int = 12, ending_at: int | None = None) -> list[str]:
    """The last Python traceback's head and its final exception line, or the log's last lines;
    with `ending_at` (the root error's line, LogReading.exception_line), the traceback that ends there:
    the failing rank's own, not a later one of a peer it left hanging.

    A launcher's own traceback (torchrun/accelerate raising ChildFailedError) says only that a rank
    died; the rank's traceback above it is the one that explains why, so it wins when there is one."""
    found = traceback_blocks(lines)
    blocks = [b for _, b in found]
    own = [b for b in blocks if not is_launcher_block(b)]
    root = [b for start, b in found if start + len(b) - 1 == ending_at]
    if root or own or blocks:
        block = (root or own or blocks)[-1]
        return block if len(block) <= limit else [block[0], "  ...", *block[-(limit - 2):]]
    return [line for line in lines if line.strip()][-limit:]


@dataclass
class LogReading:
    """The structure of a failure log: who failed first, with what, where, and what the launcher, Slurm and
    the kernel said. Line numbers index the cleaned lines."""
    root_rank: int | None = None
    exception: str | None = None  # "Type: message" of the root error (Python or C++ what())
    exception_line: int | None = None
    user_frame: str | None = None  # 'file:line in func' of the deepest frame outside installed libraries
    library_frame: str | None = None  # the frame that raised, when it is in a library
    raising_frame: str | None = None  # the deepest frame of the root traceback, library or not
    frames: list[str] = field(default_factory=list)  # every frame of the root traceback, outermost first
    exit: str | None = None  # the failing rank's exit code or signal, in words
    nccl_warn: list[str] = field(default_factory=list)
    slurm: list[str] = field(default_factory=list)
    kernel: list[str] = field(default_factory=list)
    noise: set[int] = field(default_factory=set)  # launcher shutdown lines: never evidence
    code: set[int] = field(default_factory=set)  # source lines a traceback quotes under a frame: shown last
    first_progress: int | None = None
    last_progress: int | None = None
    finished: int | None = None  # the training said it finished
    bare_kill: int | None = None  # a "Killed" with no message (SIGKILL from outside the program)
    sigkill: int | None = None  # a launcher/shell line saying a process died of SIGKILL (exit -9 or 137)
    raising_code: str | None = None  # the source line the traceback quotes under its deepest frame
    # raised inside an installed library while the program was still importing it: every frame of the program's
    # own code is an import statement
    while_importing: bool = False
    failure_markers: int = 0  # tracebacks, exception lines, fatal launcher/Slurm lines

    def to_dict(self) -> dict:
        """The findings as JSON-able values (the line-number sets are the reader's own bookkeeping)."""
        d = asdict(self)
        d.pop("noise"), d.pop("code")
        return {k: v for k, v in d.items() if v not in (None, [], 0)}


# A collective that failed because a PEER went away (gloo's transport closed or reset, NCCL's remote
# process gone): the consequence of another rank's error, never the root of it when that rank's
# own exception is in the log.
_PEER_TEARDOWN = re.compile(r"gloo/transport/|Connection (?:closed|reset) by peer|[Rr]emote process exited|"
                            r"NCCL communicator was aborted|DistNetworkError|Broken pipe")


def real_error_first(chosen: tuple[int, list[str]] | None,
                     blocks: list[tuple[int, list[str]]]) -> tuple[int, list[str]] | None:
    """`chosen`, unless its exception is a peer's teardown and another traceback of the log ends in a
    real exception: then the first such one (the rank that failed, not the ones it left hanging)."""
    if chosen is None or not _PEER_TEARDOWN.search(chosen[1][-1]):
        return chosen
    real = [(s, b) for s, b in blocks if _EXCEPTION_LINE.match(b[-1].strip()) and not _PEER_TEARDOWN.search(b[-1])]
    return real[0] if real else chosen


_IMPORT_STATEMENT = re.compile(r"^\s*(?:from\s+\S+\s+)?import\s")


def _while_importing(block: list[str]) -> bool:
    """The traceback runs from the program's own import statements into a library that raised: each frame
    outside installed libraries quotes an import as its code, and the deepest frame is a library's."""
    quoted = [(frame, _frame_code(block, n)) for n, line in enumerate(block) if (frame := _frame(line))]
    own = [code for frame, code in quoted if not _LIBRARY_PATH.search(frame[0])]
    return bool(quoted and own and _LIBRARY_PATH.search(quoted[-1][0][0])
                and all(_IMPORT_STATEMENT.match(code) for code in own))


def _frame(line: str) -> tuple[str, str | None, str | None] | None:
    """(file, line number, function) of a traceback frame line, Python's or IPython's; None for other lines."""
    m = _FRAME.match(line)
    if m is None:
        return None
    if m["path"]:
        return m["path"], m["line"], m["func"]
    if m["ipath"]:
        return m["ipath"], m["iline"], m["ifunc"]
    return m["cell"], m["cline"], None


def _frame_code(block: list[str], n: int) -> str:
    """The source line a frame quotes: the next line in Python's traceback, the arrowed one in IPython's."""
    for line in block[n + 1:]:
        if _FRAME.match(line):
            break
        if m := _IPYTHON_CODE.match(line):
            return m[1].strip()
    return block[n + 1] if n + 1 < len(block) else ""


def _frame_text(frame: tuple[str, str | None, str | None]) -> str:
    path, number, func = frame
    return path + (f":{number}" if number else "") + (f" in {func}" if func else "")


# Longer lines are read up to this many characters: a frame or exception pattern scanned across a
# megabyte-long line (a progress bar without newlines, binary junk) costs quadratic time.
MAX_LINE_CHARS = 4096


def read_log(cleaned: list[tuple[str, int | None]], index: LineIndex | None = None) -> LogReading:
    """`index`: a LineIndex of the same lines, shared with the caller when no line is longer than MAX_LINE_CHARS."""
    lines = [t[:MAX_LINE_CHARS] for t, _ in cleaned]
    r = LogReading()
    root = launcher_root_cause(lines)
    index = index or LineIndex(lines)
    r.noise = set(index.where(_LAUNCHER_NOISE, lines))

    def where(pattern: re.Pattern, *, strip: bool = False) -> list[int]:
        return [i for i in index.where(pattern, lines, strip=strip) if i not in r.noise]

    frames = set(index.where(_FRAME, lines))
    exceptions = set(where(_EXCEPTION_LINE))
    r.code = {i + 1 for i in frames if i + 1 < len(lines) and i + 1 not in frames | exceptions | r.noise}
    progress = where(_PROGRESS)
    if progress:
        r.first_progress, r.last_progress = progress[0], progress[-1]
    r.finished = next(reversed(where(_FINISHED)), None)
    r.nccl_warn = [lines[i].strip() for i in where(_NCCL_WARN)[:5]]
    slurm = where(_SLURMSTEPD)
    r.slurm = [lines[i].strip() for i in slurm[:5]]
    r.kernel = [lines[i].strip() for i in where(_KERNEL)[:5]]
    r.bare_kill = next(reversed(where(_BARE_KILL, strip=True)), None)
    r.sigkill = next(reversed(where(_SIGKILL_EXIT)), None)
    r.failure_markers = len(exceptions | set(where(_WHAT_LINE)) | set(slurm))
    # The root error: the launcher's first-failed rank's own traceback, else the first rank traceback in the
    # log (one rank's error makes the others fail after it), never the launcher's ChildFailedError.
    blocks = [(s, b) for s, b in traceback_blocks(lines) if not is_launcher_block(b)]
    r.failure_markers += len(blocks)
    every = blocks
    if root and root.get("rank") is not None:
        r.root_rank = root["rank"]
        own = [(s, b) for s, b in blocks if cleaned[s][1] == root["rank"]]
        blocks = own or blocks
    chosen = real_error_first(blocks[0] if blocks else None, every)
    if chosen is not None and blocks and chosen is not blocks[0]:
        r.root_rank = cleaned[chosen[0]][1]  # the rank whose own error left the launcher's first failure hanging
    if chosen is not None:
        start, block = chosen
        last = block[-1].strip()
        if _EXCEPTION_LINE.match(last):
            r.exception, r.exception_line = last, start + len(block) - 1
        frames = [f for f in (_frame(line) for line in block) if f]
        users = [f for f in frames if not _LIBRARY_PATH.search(f[0])]
        r.user_frame = _frame_text(users[-1]) if users else None
        r.library_frame = _frame_text(frames[-1]) if frames and _LIBRARY_PATH.search(frames[-1][0]) else None
        r.raising_frame = _frame_text(frames[-1]) if frames else None
        r.frames = [_frame_text(f) for f in frames]
        last_frame = max((n for n, line in enumerate(block) if _FRAME.match(line)), default=None)
        if last_frame is not None and last_frame + 1 < len(block) - 1:
            r.raising_code = _frame_code(block[:-1], last_frame).strip() or None
        r.while_importing = _while_importing(block)
        if r.root_rank is None:
            r.root_rank = cleaned[start][1]
    if r.exception is None:  # no traceback header posted: the first exception or C++ what() line
        for i in sorted(set(where(_WHAT_LINE)) | exceptions):
            line = lines[i]
            m = _WHAT_LINE.match(line)
            if not _LAUNCHER_FRAME.search(line):
                r.exception, r.exception_line = (m[1] if m else line).strip(), i
                r.root_rank = cleaned[i][1] if r.root_rank is None else r.root_rank
                break
        else:
            for i in reversed(where(_INLINE_EXCEPTION)):
                m = _INLINE_EXCEPTION.search(lines[i])
                if m:
                    r.exception, r.exception_line = f"{m[1]}: {m[2]}".strip(), i
                    break
    if r.exception_line is not None and r.raising_frame is None:  # a traceback pasted without its header
        frames = [(m[1], m[2], m[3]) for line in lines[max(0, r.exception_line - 30):r.exception_line + 1]
                  for m in _ANY_FRAME.finditer(line)] or [
            f for f in (_frame(line) for line in lines[max(0, r.exception_line - 30):r.exception_line]) if f]
        users = [f for f in frames if not _LIBRARY_PATH.search(f[0])]
        r.user_frame = r.user_frame or (_frame_text(users[-1]) if users else None)
        r.raising_frame = _frame_text(frames[-1]) if frames else None
        r.library_frame = r.raising_frame if frames and _LIBRARY_PATH.search(frames[-1][0]) else None
        r.frames = [_frame_text(f) for f in frames]
        window = lines[max(0, r.exception_line - 30):r.exception_line]
        last_frame = max((n for n, line in enumerate(window) if _FRAME.match(line)), default=None)
        if last_frame is not None and last_frame + 1 < len(window):
            r.raising_code = _frame_code(window, last_frame).strip() or None
    if root and (root.get("signal") or root.get("exitcode") is not None):
        r.exit = (f"{root['signal']} (exit code {root['exitcode']})" if root.get("signal")
                  else f"exit code {root['exitcode']}")
    else:
        for i in index.where(_EXIT_LINE, lines):
            m = _EXIT_LINE.search(lines[i])
            if m:
                said = next((g for g in m.groups() if g), None) or m[0].strip()
                r.exit = f"exit code {said}" if said.lstrip("-").isdigit() else said
                break
    return r
