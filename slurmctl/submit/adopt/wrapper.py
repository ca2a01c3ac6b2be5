"""The job script `slurmctl adopt` submits around the user's original: the original's #SBATCH lines
verbatim, the platform's attempt bookkeeping and drain traps around the original file (run as its
own process), and the command-line options that name, comment and log the job."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from slurmctl.errors import SpecError
from slurmctl.rundir import ADOPTED_SCRIPT, COMMENT_PREFIX, job_log_path
from slurmctl.submit.adopt.script import SbatchScript

_NAME_RE = re.compile(r"[^a-z0-9._-]+")
CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a script line holding one would break the wrapper


def _safe_line(text: str, what: str) -> str:
    if CONTROL_RE.search(text.rstrip("\r")):
        raise SpecError(f"{what} holds a control character: {text!r}.",
                        "Remove it; a job script line must be plain text.")
    return text.rstrip("\r")


def run_name(script: SbatchScript) -> str:
    name = _NAME_RE.sub("-", (script.value("job-name") or script.path.stem).lower()).strip("-._")
    return (name or "adopted")[:40]


def render_wrapper(script: SbatchScript, run_id: str, run_dir: Path, python: str, drain_margin: int,
                   add_drain_signal: bool, umask: str, pass_on: str | None = None) -> str:
    """The job that runs: the original's #SBATCH lines verbatim, then the platform around the original
    file, run as its own process (its #SBATCH lines are comments to it). `pass_on`: the program's save
    signal, which the batch shell passes on to the processes under the original script (a program it
    starts without srun: no step gets a signal; cancel sends it to the batch shell)."""
    header = [_safe_line(text, f"{script.path} line {number}") for number, text in _header_lines(script)]
    signal = script.value("signal") or ""
    batch_signal = signal.split("@")[0].removeprefix("B:").removeprefix("SIG") if signal.startswith("B:") else ""
    step_signal = signal.split("@")[0].removeprefix("SIG") if signal and not signal.startswith("B:") else ""
    step_signal = step_signal if step_signal.isalnum() else ""
    q = shlex.quote
    margin = re.search(r"@(\d+)$", signal)  # the job's own signal comes this long before the limit
    lines = [
        "#!/bin/bash",
        f"# slurmctl adopt: run {run_id} runs {ADOPTED_SCRIPT} (a copy of the original) as written.",
        "# The original's #SBATCH lines, verbatim; job name, comment and output come from the command line.",
        *header,
        f"umask {umask}",
        f"export SLURMCTL_RUN_ID={q(run_id)}",
        f"export SLURMCTL_RUN_DIR={q(str(run_dir))}",
        f"export SLURMCTL_DRAIN_MARGIN={int(drain_margin)}",
        "export SLURMCTL_ADOPTED=1",
        f"export SLURMCTL_PROGRAM_SIGNAL_MARGIN={int(margin.group(1))}" if margin else "",
        # the job's own signal, which goes to its srun tasks: a program that dies of it was drained
        f"export SLURMCTL_PROGRAM_SIGNAL={step_signal}" if step_signal else "",
        f"PY={q(python)}",
        "trap 'early_drain=1' USR1" if add_drain_signal else "",
        '"$PY" -m slurmctl.runtime.attempt start',
        "# SIGTERM: a requeue by the script's own trap or the program records why this attempt ended",
        "trap '\"$PY\" -m slurmctl.runtime.attempt interrupted; exit 143' TERM",
        f"{q(str(run_dir / ADOPTED_SCRIPT))} &",
        "body_pid=$!",
    ]
    pass_on = pass_on if pass_on and pass_on.isalnum() and pass_on != batch_signal else None
    to_program = f'"$PY" -m slurmctl.runtime.attempt signal-program --parent "$body_pid" --signal {pass_on}'
    if batch_signal:
        # the original asked for a signal to its batch shell: the body is that shell now, it gets it
        # the drain request (why: time limit or preemption) first: the body's trap may requeue at once
        lines.append(f"trap '\"$PY\" -m slurmctl.runtime.attempt drain-signal; "
                     f"kill -{batch_signal} \"$body_pid\" 2>/dev/null' {batch_signal}")
    if add_drain_signal:
        also = f"; {to_program}" if pass_on == "USR1" else ""
        lines += [f"trap '\"$PY\" -m slurmctl.runtime.attempt drain-signal{also}' USR1",
                  'if [ -n "${early_drain:-}" ]; then "$PY" -m slurmctl.runtime.attempt drain-signal'
                  + (f"; {to_program}" if also else "") + "; fi"]
    if pass_on and not (add_drain_signal and pass_on == "USR1"):
        lines.append(f"trap '{to_program}' {pass_on}")
    lines += [
        "# A trapped signal interrupts `wait`; keep waiting until the original script has exited.",
        'while :; do wait "$body_pid"; rc=$?; kill -0 "$body_pid" 2>/dev/null || break; done',
        "# it ended while a trap ran: that `wait` said only that a signal came (>128); bash still has its status",
        'if [ "$rc" -gt 128 ]; then wait "$body_pid"; status=$?; [ "$status" -ne 127 ] && rc=$status; fi',
        '"$PY" -m slurmctl.runtime.attempt end --exit-code "$rc"',
        "exit $?",
    ]
    return "\n".join(line for line in lines if line != "") + "\n"


def _header_lines(script: SbatchScript) -> list[tuple[int, str]]:
    lines = script.text.split("\n")
    return [(d.line, lines[d.line - 1]) for d in _unique_lines(script)]


def _unique_lines(script: SbatchScript):
    seen, found = set(), []
    for d in script.directives:
        if d.line is not None and d.line not in seen:
            seen.add(d.line)
            found.append(d)
    return found


def uses_singleton(script: SbatchScript) -> bool:
    """--dependency=singleton waits for the user's other jobs of the same NAME: renaming the job would
    disarm it."""
    return "singleton" in re.split(r"[,?:]", script.value("dependency") or "")


def job_name(script: SbatchScript, run_id: str) -> str:
    """The run id, or, when the script depends on `singleton`, the name the original would run under
    (its --job-name, else sbatch's default: the script's file name); the run id is in the comment."""
    if not uses_singleton(script):
        return run_id
    return script.value("job-name") or script.path.name


def platform_args(run_id: str, run_dir: Path, add_drain_signal: bool, drain_margin: int,
                   job_name: str | None = None) -> list[str]:
    log = job_log_path(run_dir, "%j")  # every attempt of the job appended to one log, as for runs
    args = [f"--job-name={job_name or run_id}", f"--comment={COMMENT_PREFIX}{run_id}", f"--output={log}",
            f"--error={log}", "--open-mode=append"]
    if add_drain_signal:
        args.append(f"--signal=B:USR1@{int(drain_margin)}")
    return args
