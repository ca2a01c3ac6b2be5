"""Name the cause of a failed attempt from the tail of its log and Slurm's own verdict.

Real logs are messy: ranks interleave, lines carry timestamps, ANSI colours and launcher prefixes
(``[rank3]:``, srun ``--label``'s ``3:``, torchrun ``[default3]:``, Ray's ``(pid=…)``), and the root cause is
often buried under the launcher's own traceback. ``read_log`` first reads the log's structure: the rank that
failed first (torchrun's "Root Cause" summary, else the first rank's own traceback), its exception line, the
frame in the user's code and the frame that raised it, the failing rank's exit code or signal, NCCL WARN,
slurmstepd/srun and kernel lines, training progress and a training that said it finished. Launcher shutdown
noise (torchrun's "failed to shutdown the rendezvous", a store that closed after training steps ran) is never
evidence. The category is then decided from that structure: known wordings in a fixed priority (root causes
before their consequences: one rank's CUDA OOM makes every other rank's NCCL watchdog time out), then where
the root error was raised (loading a checkpoint, parsing arguments, reading the data), else ``unknown`` with
the root error, its rank, the user's frame and where to look: a wrong category costs more than none. A job
Slurm recorded COMPLETED with exit code 0, or a training that finished before what failed, is ``success``.

The category vocabulary and the known wordings are observe/diagnosis_rules.py, the families of words read when
no wording matched observe/diagnosis_families.py; the vocabulary is a
public contract (``slurmctl diagnose --json``). The rules are scored at first
sight on blind batches of real logs from public issue threads, then kept as a regression corpus, by
``benchmarks/diagnose_corpus.py`` (tests/fixtures/diagnose_corpus/).

What a run's own records add to the reading of one log (its attempts, a lost node, data staging, the
watchdog) is observe/run_diagnosis.py's.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from slurmctl.observe.diagnosis_families import EXCEPTION_FAMILIES, NOT_A_FAMILY, SCHEDULER_FAMILIES
from slurmctl.observe.diagnosis_rules import CATEGORY_RANK, HOST_OOM_HINT, NCCL_HINT, SIGNATURES
from slurmctl.observe.failure_structure import (
    ASSERTED_WORDS,
    CANCELLED_LINE,
    DEVICE_WORDS,
    MISSING_PATH,
    WEAK_NO_GPU,
    bus_error_in_nccl,
    drop_process_channel_pickles,
    drop_recovered_nan,
    ends_in_nan,
    killed_from_outside,
    not_in_a_registry,
    raised_by_config_code,
    raised_by_data_code,
    raised_forming_the_group,
    raised_in_process_channel,
    raised_loading_a_checkpoint,
    raised_reading_a_checkpoint,
    unknown_model_type,
    version_conflict,
    what_was_asserted,
)
from slurmctl.observe.log_reading import (
    MAX_LINE_CHARS,
    TRACEBACK_HEAD,
    LineIndex,
    LogReading,
    clean_line,
    launcher_root_cause,
    read_log,
)
from slurmctl.observe.unknown_verdict import unknown_evidence, unknown_hint, unknown_summary

# Slurm's verdict outranks the log for causes outside the training.
_SLURM_STATES = {"TIMEOUT": "time_limit", "PREEMPTED": "preempted", "NODE_FAIL": "node_lost",
                 "OUT_OF_MEMORY": "host_oom"}
# Errors a finished training's teardown prints (a peer's store closed, destroy_process_group on a gone
# peer): after the training's last step they are not a failure of the training.
_TEARDOWN_CATEGORIES = {"rendezvous_failure", "nccl_error", "nccl_timeout", "unknown"}
@dataclass
class Diagnosis:
    category: str
    summary: str
    evidence: list[str]
    hint: str
    rank: int | None = None  # rank the first evidence line came from, when the log says
    source: str = "log"  # log | slurm | none
    extra: dict = field(default_factory=dict)
    watchdog: dict | None = None  # watchdog_report() of this job, when the watchdog warned or acted
    error_line: str | None = None  # the root exception line itself ("Type: message"), when the log has one
    failing_exit: str | None = None  # the failing rank's exit code or signal, not srun's or the shutdown's
    attempt: dict | None = None  # which attempt of the job was read: {number, of, job_id, restart}

    def to_dict(self) -> dict:
        return asdict(self)


def evidence_line(diagnosis: dict) -> str:
    """The one line that shows the diagnosis: a known category's first matching line, otherwise the root
    exception line ("Type: message"); never a traceback's head, which says only that one follows."""
    evidence = diagnosis.get("evidence") or []
    if diagnosis.get("category") not in ("unknown", "success") and evidence:
        return evidence[0]
    return diagnosis.get("error_line") or next((line for line in evidence if TRACEBACK_HEAD not in line), "")


def one_line_why(diagnosis: dict, width: int = 200) -> str:
    """`status`'s one-line why of a failed attempt: the category and the line that shows it."""
    said = evidence_line(diagnosis)
    text = f"{diagnosis.get('category')}: {said}" if said else str(diagnosis.get("category"))
    return text if len(text) <= width else text[:width - 3] + "..."


def excerpt(diagnosis: dict, lines: int = 3) -> list[str]:
    """The first evidence lines for a short view (status), always ending with the error line itself: a
    traceback's head says where, its last line says what."""
    evidence = list(diagnosis.get("evidence") or [])
    error = diagnosis.get("error_line")
    if not error or error in evidence[:lines]:
        return evidence[:lines]
    return [*evidence[:lines - 1], error]


# A line that warns (Python warnings, glog's W, c10's [W ...]): the program went on after it.
_WARNING_LINE = re.compile(r"\bwarn(?:ing)?\b|^\s*W\d{4} |^\s*\[W ", re.IGNORECASE)


def scheduler_family(lines: list[str], noise: set[int]) -> tuple[str, str] | None:
    """(category, line) of the first scheduler family a line of the log says, warnings and noise aside."""
    for category, rx in SCHEDULER_FAMILIES:
        for i, line in enumerate(lines):
            if i not in noise and rx.search(line) and not _WARNING_LINE.search(line):
                return category, line.strip()
    return None


# an error in words, or in glog's severity letter (TensorFlow, XLA: "E0101 12:00:00.1 a.cc:12]", "...: E a.cc:12]")
_ERROR_WORDS = re.compile(r"\b(?:error|fatal|failed|failure|abort(?:ed|ing)?|exception)\b|^\s*[EF]\d{4} [\d:.]+ |"
                          r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception):|"
                          r": [EF] \S+:\d+\]", re.IGNORECASE)


# A line that starts a record of its own (a timestamp, a severity, a traceback's parts), so it does not go on
# with the line before it
_OWN_RECORD = re.compile(r"^\s*(?:\[?\d{4}-\d\d-\d\d|\[?\d\d:\d\d:\d\d|[IWEF]\d{4} |\[[A-Za-z]|"
                         r"(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b|Traceback|During handling|The above exception|"
                         r"(?:srun|slurmstepd|sbatch|salloc|torchrun|mpirun)\b|"
                         r"File \"|[\w.]+(?:Error|Exception|Warning)\b)")


def continued(lines: list[str], i: int, text: str | None = None, most: int = 2) -> str:
    """Line i (or `text`, its reading) with the lines a terminal or an issue tracker wrapped it onto ("...failed:
    Resource exhausted: Out" / "of memory while trying to allocate 5520758552 bytes."): up to `most` lines that
    follow it, neither blank nor records of their own."""
    parts = [(text if text is not None else lines[i]).strip()]
    for line in lines[i + 1:i + 1 + most]:
        if not line.strip() or _OWN_RECORD.match(line):
            break
        parts.append(line.strip())
    return " ".join(parts)


def error_line_family(lines: list[str], noise: set[int]) -> tuple[str, str] | None:
    """A log without a Python exception (a C++ program, a launcher, a container runtime): (category, line) when
    the lines that say error all read as one family."""
    said = {}
    for i, line in enumerate(lines):
        if i not in noise and _ERROR_WORDS.search(line) and not _WARNING_LINE.search(line):
            category = exception_family(line.strip()) or exception_family(continued(lines, i))
            if category is not None:
                said.setdefault(category, line.strip())
    return next(iter(said.items())) if len(said) == 1 else None


def exception_family(exception: str | None) -> str | None:
    """The category of the first family (in EXCEPTION_FAMILIES' order) the root exception's class and message fit."""
    if not exception or NOT_A_FAMILY.search(exception):
        return None
    said = [category for category, rx in EXCEPTION_FAMILIES if rx.search(exception)]
    return said[0] if said else None


def _a(noun: str) -> str:
    """The noun with its indefinite article ("An IndexError", "A ValueError")."""
    return ("An " if noun[:1].upper() in "AEIOU" else "A ") + noun


def _success(summary: str, evidence: list[str], source: str, reading: LogReading, exited_0: bool = False) -> Diagnosis:
    """`exited_0`: Slurm recorded exit code 0, so nothing is left to fix, not even the exit status."""
    return Diagnosis("success", summary, evidence,
                     "Nothing to fix." if exited_0 else
                     "Nothing to fix in the training. If the exit status matters to a pipeline, make the script "
                     "exit 0 after the last step (e.g. call destroy_process_group() on every rank before exiting).",
                     source=source, extra={"reading": reading.to_dict()})


def signature_hits(lines: list[str], noise: set[int], index: LineIndex | None = None) -> dict[int, list[int]]:
    """Signature index -> the numbers of the lines it matches (launcher noise never counts). Each signature
    runs only on the lines that hold one of the literals every match of it must contain."""
    index = index or LineIndex(lines)
    hits: dict[int, list[int]] = {}
    for n, sig in enumerate(SIGNATURES):
        found = [i for i in index.where(sig.pattern, lines) if i not in noise and sig.matches(lines[i])]
        if found:
            hits[n] = found
    return hits


def diagnose_text(text: str, slurm_state: str = "", exit_code: str = "") -> Diagnosis:
    """The cause of one failed attempt from its log text and, when known, Slurm's state and exit code."""
    cleaned = [clean_line(line) for line in text.splitlines()]
    # one index of the lines serves reading and deciding, unless reading cuts a long line short
    index = None if any(len(t) > MAX_LINE_CHARS for t, _ in cleaned) else LineIndex([t for t, _ in cleaned])
    reading = read_log(cleaned, index)
    result = _decide(cleaned, reading, slurm_state, exit_code, index)
    result.error_line = reading.exception
    result.failing_exit = reading.exit
    return result


def _decide(cleaned: list[tuple[str, int | None]], reading: LogReading, slurm_state: str,
            exit_code: str, index: LineIndex | None = None) -> Diagnosis:
    lines = [t for t, _ in cleaned]
    hits = signature_hits(lines, reading.noise, index)
    # A rendezvous that fails after training steps ran, or after a rank's own error, is a peer's store going
    # away (torchrun's agents exit one by one), not the group failing to form.
    rendezvous = [n for n in hits if SIGNATURES[n].category == "rendezvous_failure"]
    cutoff = reading.first_progress
    if cutoff is None and reading.exception_line is not None and not any(
            SIGNATURES[n].matches(lines[reading.exception_line]) for n in rendezvous):
        cutoff = reading.exception_line
    if cutoff is not None:
        for n in rendezvous:
            hits[n] = [i for i in hits[n] if i <= cutoff]
            if not hits[n]:
                del hits[n]
    drop_recovered_nan(hits, lines, reading)
    drop_process_channel_pickles(hits, lines)
    root = launcher_root_cause(lines)
    state = slurm_state.split(" ")[0].upper()
    extra = {"reading": reading.to_dict()}
    if root:
        extra["root_cause"] = root
    if state == "COMPLETED" and exit_code in ("", "0", "0:0"):
        return _success("Slurm recorded the job COMPLETED with exit code 0: the training did not fail.",
                        [f"Slurm state: COMPLETED, exit code {exit_code or '0:0'}"], "slurm", reading, exited_0=True)
    from_slurm = _SLURM_STATES.get(state)
    hit_categories = {SIGNATURES[n].category for n in hits}
    if from_slurm and not (from_slurm in ("preempted", "node_lost") and "gpu_hardware" in hit_categories):
        category, source = from_slurm, "slurm"
        own = [n for n in hits if SIGNATURES[n].category == category]
        sig = SIGNATURES[min(own)] if own else SIGNATURES[CATEGORY_RANK[category]]
    elif hits:
        sig, source = SIGNATURES[min(hits)], "log"
        category = sig.category
    else:
        category, sig, source = "unknown", None, "none"
    cancel = next((i for i, line in enumerate(lines) if CANCELLED_LINE.search(line)), None)
    if (state == "CANCELLED" or (not state and cancel is not None)) and (category == "unknown" or (
            cancel is not None and category in _TEARDOWN_CATEGORIES and source != "slurm" and all(
                i > cancel for n, idx in hits.items() if SIGNATURES[n].category == category for i in idx))):
        # what follows a cancel (SIGTERM handlers, a rank's signal exception, the store going away) is its
        # consequence; a training that "finished" on SIGTERM did not finish either
        progress = [lines[reading.last_progress].strip()] if reading.last_progress is not None else []
        return Diagnosis(
            "cancelled", "The job was cancelled on request (scancel or `slurmctl cancel`) while it ran; nothing "
            "failed before that.", [*([lines[cancel].strip()] if cancel is not None else
                                      [f"Slurm state: CANCELLED, exit code {exit_code or '?'}"]), *progress],
            "Nothing to fix: it was stopped on purpose. To go on, a slurmctl run resumes from its newest checkpoint "
            "(`slurmctl resume`); a plain sbatch job is submitted again.",
            source="slurm" if state == "CANCELLED" else "log", extra=extra)
    nan = ends_in_nan(lines, reading) if sig is None else []
    if reading.finished is not None and category in _TEARDOWN_CATEGORIES and source != "slurm" and not nan and all(
            i > reading.finished for n, idx in hits.items() if SIGNATURES[n].category == category for i in idx):
        after = [lines[reading.exception_line].strip()] if reading.exception_line is not None else []
        return _success("The training finished (it said so) before anything failed: what came after its last step "
                        "is the launcher's or the process group's teardown, not a failure of the training.",
                        [lines[reading.finished].strip(), *after], source, reading)
    family = exception_family(reading.exception) if sig is None else None
    if family is None and sig is None and reading.exception_line is not None:
        family = exception_family(continued(lines, reading.exception_line, reading.exception))
    if family == "checkpoint_corrupt" and raised_in_process_channel(reading):
        family = None
    if family is not None:
        # the message itself says what went wrong: stronger evidence than where it was raised
        return Diagnosis(
            family, f"{SIGNATURES[CATEGORY_RANK[family]].summary} (read from the root error's own message"
            + (f", on rank {reading.root_rank}" if reading.root_rank is not None else "") + ".)",
            [reading.exception, *([f"raised at {reading.raising_frame}"] if reading.raising_frame else [])],
            SIGNATURES[CATEGORY_RANK[family]].hint, rank=reading.root_rank, source="log", extra=extra)
    said = scheduler_family(lines, reading.noise) if sig is None and not reading.exception else None
    if said is None and sig is None and not reading.exception:
        said = error_line_family(lines, reading.noise)
    if said is not None:
        return Diagnosis(said[0], SIGNATURES[CATEGORY_RANK[said[0]]].summary, [said[1]],
                         SIGNATURES[CATEGORY_RANK[said[0]]].hint, source="log", extra=extra)
    conflict = version_conflict(reading) if sig is None else None
    if conflict is not None:
        return Diagnosis(
            "import_error", f"{conflict} ({reading.exception[:160]}, at {reading.raising_frame}): the installed "
            "libraries are of versions that do not fit each other.",
            [reading.exception, f"raised at {reading.raising_frame}"],
            "Install versions that are known to work together (the project's pinned requirements, or the versions "
            "the failing library's release names for its dependencies) in the job's environment.",
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and unknown_model_type(reading):  # AutoConfig's own file: before the configuration code's rule
        return Diagnosis(
            "import_error", f"The installed transformers does not know the model type {reading.exception[9:]} "
            "(its AutoConfig has no entry for it): the model is newer than the library.",
            [reading.exception, f"raised at {reading.raising_frame}"],
            "Install the transformers version the model card names (`pip install -U transformers`, or the pinned "
            "version in the project's requirements) in the job's environment, or load it with "
            "`trust_remote_code=True` where the model ships its own code.",
            rank=reading.root_rank, source="log", extra=extra)
    asserted = what_was_asserted(reading) if sig is None else None
    if asserted is not None:
        return Diagnosis(
            asserted, f"{ASSERTED_WORDS[asserted]} (at {reading.raising_frame}).",
            [reading.raising_code, f"raised at {reading.raising_frame}"], SIGNATURES[CATEGORY_RANK[asserted]].hint,
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and raised_by_config_code(reading):
        return Diagnosis(
            "missing_config", f"A setting was rejected while the arguments/configuration were parsed and checked "
            f"(at {reading.raising_frame}).",
            [reading.exception, f"raised at {reading.raising_frame}",
             *([reading.raising_code] if reading.raising_code else [])],
            "Read the message: it names the setting and what it must be. Fix it in `args:` (run.yaml) or the config "
            "file, and compare with the script's --help / the framework version the script was written for.",
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and not_in_a_registry(reading):
        # in the scored threads as often a package not installed or imported as a config or script meant for
        # another model: a lead with both, no category
        return Diagnosis(
            "unknown", f"A class the configuration names is not in the registry that builds it (`"
            f"{reading.exception[:200]}`" + (f", at {reading.raising_frame}" if reading.raising_frame else "")
            + "): either the package or module that defines it was not installed or not imported, or the config "
            "(or the training script given it) is meant for another kind of model.",
            [reading.exception, *([f"raised at {reading.raising_frame}"] if reading.raising_frame else [])],
            "Check that the config is the one the project's README gives for this script (a recognizer's config "
            "with a detector's train script fails the same way), that the type name is spelled as the code "
            "registers it, and that the module that registers it is installed and imported (mmengine: "
            "`custom_imports`, `default_scope`).", rank=reading.root_rank, source="log", extra=extra)
    if sig is None and raised_reading_a_checkpoint(reading):
        corrupt = SIGNATURES[CATEGORY_RANK["checkpoint_corrupt"]]
        return Diagnosis(
            "checkpoint_corrupt", f"torch.load could not read the checkpoint file itself ({reading.exception[:120]} at "
            f"{reading.raising_frame}): it is empty or cut short.", [reading.exception,
                                                                     f"raised at {reading.raising_frame}"],
            corrupt.hint, rank=reading.root_rank, source="log", extra=extra)
    if sig is None and raised_loading_a_checkpoint(reading):
        return Diagnosis(
            "checkpoint_mismatch", f"Loading a checkpoint into the model failed (at {reading.raising_frame}): its keys "
            "or shapes are not the model's.",
            [reading.exception, f"raised at {reading.raising_frame}"],
            SIGNATURES[CATEGORY_RANK["checkpoint_mismatch"]].hint,
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and raised_forming_the_group(reading):
        rendezvous = SIGNATURES[CATEGORY_RANK["rendezvous_failure"]]
        return Diagnosis(
            "rendezvous_failure", f"{rendezvous.summary} The error was raised by torch's rendezvous itself (at "
            f"{reading.raising_frame}), before any training step.",
            [reading.exception, f"raised at {reading.raising_frame}"],
            "Read the message: MASTER_ADDR/MASTER_PORT must be set (torchrun and `slurmctl submit` set them; a "
            "script started by plain srun sets them from SLURM_* itself) and MASTER_ADDR must resolve and be "
            "reachable from every node. " + rendezvous.hint,
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and (bus := bus_error_in_nccl(lines)):
        nccl_setup = SIGNATURES[CATEGORY_RANK["nccl_setup"]]
        return Diagnosis(
            "nccl_setup", "A process crashed with a bus error (SIGBUS) inside NCCL while it set up its transport: "
            "NCCL could not back its shared-memory segments (a /dev/shm that is too small, as a container's 64 MB "
            "default is, or a locked-memory limit that is too low).", bus,
            "Give the job a larger /dev/shm (containers: `--shm-size` / `--ipc=host`) and an unlimited locked-memory "
            "limit (`ulimit -l`); the platform team sets both for the nodes. " + nccl_setup.hint.split(". ")[-1],
            rank=reading.root_rank, source="log", extra=extra)
    last_said = next((line for line in reversed(lines) if line.strip()), "")
    if sig is None and reading.nccl_warn and (reading.failure_markers or reading.nccl_warn[-1] == last_said.strip()):
        # NCCL said what went wrong in its own words before the job failed (or as the last thing the job said):
        # the NCCL failure is the lead
        return Diagnosis(
            "nccl_error", "NCCL (the GPU-to-GPU communication library) warned before the job failed: "
            f"{reading.nccl_warn[-1][:200]}", reading.nccl_warn[-3:], NCCL_HINT,
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and nan:
        nan_loss = SIGNATURES[CATEGORY_RANK["nan_loss"]]
        return Diagnosis("nan_loss", nan_loss.summary + " The log's last lines print NaN where the lines before "
                         "printed numbers.", nan, nan_loss.hint, rank=reading.root_rank, source="log", extra=extra)
    if sig is None and reading.exception and MISSING_PATH.search(reading.exception):
        return Diagnosis(
            "missing_config", "A path the run was given (in its arguments or configuration: a data set, a config or "
            "an output directory) does not exist where the job ran.",
            [reading.exception, *([f"raised at {reading.raising_frame}"] if reading.raising_frame else [])],
            "Check the path in the message against `args:`/the config file: relative paths resolve against the "
            "job's working directory, and the file must be on a filesystem the compute nodes mount.",
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and raised_by_data_code(reading):
        return Diagnosis(
            "data_shape", f"{_a(reading.exception.split(':')[0])} was raised while reading or batching the data "
            f"(at {reading.raising_frame}): a sample, annotation or label is not what the code expects.",
            [reading.exception, f"raised at {reading.raising_frame}"],
            "Find the sample that fails (print the index in the dataset's __getitem__ / the annotation it reads): "
            "empty or malformed annotation lines, a missing column or label outside the classes are the usual "
            "causes; filter or fix them in the data set.",
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and not (slurm_state or exit_code) and reading.bare_kill is not None \
            and killed_from_outside(reading, root, lines):
        # No Slurm record to read (a pasted log) and the shell (or an IDE's run window) itself said "Killed": a
        # program run by hand that nothing else kills; in the scored threads the kernel's OOM killer in 18 of 19.
        # A launcher's exit -9 alone (torchrun, DeepSpeed, exit 137) is not enough: 2 of 6 such threads never
        # found who killed it, so that stays unknown with the kill named. With Slurm's record
        # (`diagnose RUN`, status, notifications), its verdict decides: FAILED, not OUT_OF_MEMORY, stays unknown.
        return Diagnosis(
            "host_oom", "The process was killed without a message (SIGKILL from outside the program"
            + (", after normal training progress" if reading.last_progress is not None else "")
            + "): almost always the kernel's out-of-memory killer taking back host RAM. Confirm with the node's "
            "kernel log (`dmesg`: \"Out of memory: Killed process\") or Slurm's record "
            "(`sacct -j JOB -o State,MaxRSS,ReqMem`).",
            unknown_evidence(lines, reading), HOST_OOM_HINT, rank=reading.root_rank, source="log", extra=extra)
    if sig is None and any(WEAK_NO_GPU.search(line) for line in lines) and (
            not reading.exception or DEVICE_WORDS.search(reading.exception)):
        no_gpu = SIGNATURES[CATEGORY_RANK["no_gpu"]]
        return Diagnosis(
            "no_gpu", "PyTorch found no usable GPU (torch.cuda.is_available() was False) and nothing more specific "
            "failed.", [line.strip() for line in lines if WEAK_NO_GPU.search(line)][:1] + unknown_evidence(
                lines, reading)[-3:], no_gpu.hint, rank=reading.root_rank, source="log", extra=extra)
    if sig is None:
        return Diagnosis(
            "unknown", unknown_summary(exit_code, root, reading, slurm_state), unknown_evidence(lines, reading),
            unknown_hint(reading, root),
            rank=reading.root_rank, source="none", extra=extra)
    found = sorted({i for n, idx in hits.items() if SIGNATURES[n].category == category for i in idx})
    # the message itself before the source line that raised it; the launcher's first failure leads
    found.sort(key=lambda i: (bool(root and root.get("rank") is not None and cleaned[i][1] != root["rank"]),
                              i in reading.code))
    evidence: list[str] = []
    rank = None
    for i in found:
        if lines[i].strip() and lines[i].strip() not in evidence:
            evidence.append(lines[i].strip())
            rank = cleaned[i][1] if rank is None else rank
        if len(evidence) == 5:
            break
    if source == "slurm" and not evidence:
        evidence = [f"Slurm state: {state}" + (f", exit code {exit_code}" if exit_code else "")]
    summary = sig.summary + (f" First seen on rank {rank}." if rank is not None else "")
    return Diagnosis(category, summary, evidence, sig.hint, rank=rank, source=source, extra=extra)
