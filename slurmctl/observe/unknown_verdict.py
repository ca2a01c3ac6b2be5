"""What an `unknown` verdict says instead of a category: the root error and where to look, the rank's own
traceback (or, without one, what the log does say), and the leads a symptom gives without naming a cause (a kill
without a message, a data-loader worker that died, two tensors of the model that disagree in size).
observe/diagnose.py decides the verdict; this module words it."""

from __future__ import annotations

import re

from slurmctl.observe.diagnosis_families import TENSORS_DISAGREE
from slurmctl.observe.failure_structure import WORKER_EXITED, launcher_said_sigkill
from slurmctl.observe.log_reading import (
    ROOT_CAUSE,
    ROOT_FIELD,
    LogReading,
    is_launcher_block,
    last_traceback,
    traceback_blocks,
)

_EMPTY_DIVISOR = re.compile(r"^ZeroDivisionError\b")
# the divisor (or modulus) is a count of samples or batches: len(...), a size, a number of steps or iterations
_BY_A_COUNT = re.compile(r"[/%]\s*\(?\s*(?:len\(|[\w.]*(?:size|count|num|steps|iters|total)\w*\b)", re.IGNORECASE)


def unknown_evidence(lines: list[str], reading: LogReading) -> list[str]:
    """The rank's own traceback; without one (a kill, a signal), what the log does say: the last training
    progress, the launcher's verdict on the failed rank, Slurm's and the kernel's lines."""
    blocks = [b for _, b in traceback_blocks(lines) if not is_launcher_block(b)]
    if blocks or reading.exception:
        # ranks in the log: the failing rank's own traceback, not a later one of a peer it left hanging
        return last_traceback(lines, ending_at=reading.exception_line if reading.root_rank is not None else None)
    said = [lines[reading.last_progress].strip()] if reading.last_progress is not None else []
    for i, line in enumerate(lines):
        if ROOT_CAUSE.search(line):
            said += [f.strip() for f in lines[i + 1:i + 10] if ROOT_FIELD.match(f)]
    said += reading.slurm + reading.kernel
    if reading.bare_kill is not None:
        said.append(lines[reading.bare_kill].strip())
    return list(dict.fromkeys(said))[:10] or last_traceback(lines)


def unknown_hint(reading: LogReading, root: dict | None) -> str:
    if reading.exception and not launcher_said_sigkill(reading):
        return "Read the root error above; `slurmctl logs RUN --rank N` shows other ranks."
    if (root and root.get("signal") == "SIGKILL") or reading.bare_kill is not None or launcher_said_sigkill(reading):
        return ("Compare the memory peak with the limit (`slurmctl status RUN`; `sacct -j JOB -o State,MaxRSS,ReqMem`) "
                "and ask the platform team for the node's kernel log at that time; if it was memory, use fewer "
                "data-loader workers or ask for more memory per node.")
    return "The log shows no error of its own: read every rank's output with `slurmctl logs RUN --rank all`."


def _where_to_look(reading: LogReading) -> str:
    if reading.user_frame:
        return f"the error was raised from your code at {reading.user_frame}: start there"
    if reading.library_frame:
        return f"it was raised inside a library ({reading.library_frame}): check what your code passed to it"
    return "the log shows no traceback: rerun with the full output of every rank (`slurmctl logs RUN --rank N`)"


def unknown_summary(exit_code: str, root: dict | None, reading: LogReading, slurm_state: str = "") -> str:
    summary = "slurmctl does not recognise this failure" + (f" (exit code {exit_code})" if exit_code else "")
    killed = (bool(root and root.get("signal") == "SIGKILL") or launcher_said_sigkill(reading)
              or (reading.bare_kill is not None and not reading.exception))
    if root and root.get("rank") is not None:
        how = f"exit code {root['exitcode']}" if root.get("exitcode") is not None else "an error"
        if root.get("signal"):
            how = root["signal"]
        summary += f"; torchrun reports rank {root['rank']} failed first, with {how}"
    if killed:
        summary += ("; the process was killed without a message (SIGKILL from outside the program"
                    + (", after normal training progress" if reading.last_progress is not None else "") + ")")
        if slurm_state:
            # Slurm's verdict is the record: OUT_OF_MEMORY would have been named host_oom before this point
            summary += (f": Slurm recorded {slurm_state.split(' ')[0]}, not OUT_OF_MEMORY, so the job's memory limit "
                        "did not kill it; look for who sent SIGKILL (the node's kernel log for the system OOM "
                        "killer, a watchdog, a `kill -9`)")
        else:
            summary += (": often the kernel's out-of-memory killer, but the log does not say so: look at Slurm's "
                        "record (`sacct -j JOB -o State,MaxRSS,ReqMem`; `slurmctl status RUN` shows the memory peak) "
                        "or the node's kernel log before calling it host OOM")
    if reading.exception and WORKER_EXITED.search(reading.exception):
        # torch's data loader saw a worker die without an error of its own: memory (RAM or /dev/shm) in half
        # the threads scored, the other half never showed it in the log, so it is a lead, not a verdict
        summary += ("; a data-loader worker died without a Python error of its own: often memory (host RAM or a "
                    "small /dev/shm), but the log does not say so; rerun with num_workers=0 to see the worker's "
                    "own error, and compare the memory peak with the limit (`slurmctl status RUN`)")
    if reading.exception and TENSORS_DISAGREE.search(reading.exception):
        summary += ("; two tensors inside the model disagree in size: look at what sizes them (the data's shapes, a "
                    "setting such as the image size, number of classes or sequence length, a checkpoint loaded into "
                    "the model) and at the code where they meet")
    if reading.exception and _EMPTY_DIVISOR.search(reading.exception) and reading.raising_code \
            and _BY_A_COUNT.search(reading.raising_code):
        # in the scored threads a data set (or a split of it) that held nothing: too few samples for the split or
        # the batch, or a data path that points at the wrong folder
        summary += ("; the code divided by a count that was zero (`" + reading.raising_code[:120] + "`): usually a "
                    "data set or a split of it that is empty; check the data path, and that the data set has more "
                    "samples than the batch size and the validation split take")
    if any("memory limit at some point" in line for line in reading.slurm):
        summary += ("; Slurm warned that the step exceeded its memory limit at some point (memory was reclaimed or "
                    "swapped, nothing was killed for it): if the job failed, memory is the first suspect "
                    "(`sacct -j JOB -o State,MaxRSS,ReqMem`)")
    if reading.exception:
        on = f" on rank {reading.root_rank}" if reading.root_rank is not None else ""
        summary += f"; the root error{on} is `{reading.exception[:300]}`; {_where_to_look(reading)}"
    return summary + "."
