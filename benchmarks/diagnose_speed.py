"""How long `diagnose_text` takes on a long log, before and after the literal prefilter, side by side in one run.

"before" is the reading and deciding code of a commit that ran every pattern on every line (default: the last
commit before the prefilter), loaded from git into private modules; "now" is the working tree. The verdicts of
the prefiltered code are asserted identical to the same rules run the old way (every pattern on every line, the
prefilter switched off) on the regression corpus, on the long log and on every case directory given.

    .venv/bin/python benchmarks/diagnose_speed.py [--before REF] [--cases DIR ...]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
import types
from pathlib import Path

from slurmctl.observe import diagnose, log_reading

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "diagnose_corpus"
BEFORE = "d6271a3"  # the last commit whose diagnosis ran every signature on every line
LOG_BYTES = 531 * 1024
LOG_LINES = 6000


def long_log() -> str:
    """A 6000-line, 531 KiB training log: progress lines of eight ranks interleaved with lines of the corpus's
    real logs (NCCL INFO, warnings, tracebacks), ending with a CUDA out-of-memory traceback. Deterministic."""
    pick = random.Random(0)
    real = [line for path in sorted(CORPUS.glob("*.log"))
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    ending = ["Traceback (most recent call last):", '  File "train.py", line 88, in <module>',
              "    loss.backward()", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    lines: list[str] = []
    size = sum(len(line) + 1 for line in ending)
    step = 0
    while len(lines) < LOG_LINES - len(ending) and size < LOG_BYTES:
        line = (f"[rank{step % 8}]: step {step} | loss {pick.random():.4f} | lr 3.0e-4 | grad_norm "
                f"{pick.random():.2f} | tokens/s {pick.randrange(10**5, 10**6)}"
                if step % 2 == 0 else pick.choice(real)[:240])
        lines.append(line)
        size += len(line) + 1
        step += 1
    return "\n".join(lines + ending)


def load_before(ref: str) -> types.ModuleType:
    """diagnose.py and log_reading.py as they were at `ref`, as private modules (the rest is today's)."""
    def source(path: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], check=True, capture_output=True,
                              text=True).stdout
    reading = types.ModuleType("_before_log_reading")
    sys.modules[reading.__name__] = reading  # dataclasses look their module up while the class is built
    exec(compile(source("slurmctl/observe/log_reading.py"), "before/log_reading.py", "exec"), reading.__dict__)
    deciding = types.ModuleType("_before_diagnose")
    text = source("slurmctl/observe/diagnose.py").replace("from slurmctl.observe.log_reading import",
                                                         "from _before_log_reading import")
    sys.modules[deciding.__name__] = deciding
    exec(compile(text, "before/diagnose.py", "exec"), deciding.__dict__)
    return deciding


def timed(fn, text: str, repeat: int = 3) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(text)
        best = min(best, time.perf_counter() - start)
    return best, result


def without_prefilter(text: str) -> diagnose.Diagnosis:
    """The same rules with every pattern run on every line (the prefilter's requirement switched off)."""
    kept = log_reading.required_literals
    log_reading.required_literals = lambda pattern: None
    try:
        return diagnose.diagnose_text(text)
    finally:
        log_reading.required_literals = kept


def case_logs(folders: list[Path]) -> list[tuple[str, str]]:
    logs = []
    for folder in folders:
        for case in json.loads((folder / "index.json").read_text(encoding="utf-8"))["cases"]:
            path = folder / f"{case['id']}.log"
            logs.append((f"{folder.name}/{case['id']}", path.read_text(encoding="utf-8", errors="replace")))
    return logs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="git commit to compare with (default %(default)s)")
    parser.add_argument("--cases", type=Path, nargs="*", default=[], help="more case directories (index.json)")
    args = parser.parse_args(argv)
    text = long_log()
    before = load_before(args.before)
    # best of several runs each, interleaved: the machine's load changes from second to second
    slow, fast = float("inf"), float("inf")
    for _ in range(2):
        took, old = timed(before.diagnose_text, text, repeat=1)
        slow = min(slow, took)
        took, new = timed(diagnose.diagnose_text, text, repeat=3)
        fast = min(fast, took)
    print(f"long log: {len(text.splitlines())} lines, {len(text.encode()) / 1024:.0f} KiB")
    print(f"  before ({args.before}): {slow:7.3f} s   now: {fast:7.3f} s   {slow / fast:5.1f}x faster "
          f"(verdicts: {old.category} / {new.category})")
    checked = 0
    for name, log in [("long log", text), *case_logs([CORPUS, *args.cases])]:
        expected, got = without_prefilter(log).to_dict(), diagnose.diagnose_text(log).to_dict()
        assert got == expected, f"{name}: the prefilter changed the verdict: {expected} != {got}"
        checked += 1
    print(f"  verdicts identical with and without the prefilter on {checked} logs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
