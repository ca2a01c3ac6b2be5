"""Name the cause of a failed attempt from the tail of its log and Slurm's own verdict.

Real logs are messy: ranks interleave, lines carry timestamps, ANSI colours and launcher prefixes
(``[rank3]:``, srun ``--label``'s ``3:``, torchrun ``[default3]:``), and the root cause is often
buried under the launcher's own traceback. We strip the decoration, look for known signatures in
a fixed priority (root causes before their consequences: one rank's CUDA OOM makes every other
rank's NCCL watchdog time out), and fall back to ``unknown`` plus the last traceback rather than
guess. A category may have several signatures, each with its own words (Slurm's cgroup OOM kill and
a data-loader worker out of shared memory are both ``host_oom``). torchrun's ChildFailedError report
only says that a rank died: its traceback is never the evidence, and its "Root Cause" section gives
the rank, exit code and signal. The category vocabulary is a public contract (``slurmctl diagnose
--json``); the rules are scored on real logs from public issue threads by
``benchmarks/diagnose_corpus.py`` (tests/fixtures/diagnose_corpus/).

What the progress watchdog (slurmctl.runtime.watchdog) did is read from ``<run dir>/watchdog/``: its
``state.json`` and the scene folders ``<job>-<time>/`` (stacks, log tails) it leaves when it ends
a hung step; ``watchdog_report`` puts that in words for ``diagnose`` and ``status``.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from slurmctl import rundir
from slurmctl.fsutil import read_json, read_jsonl, tail_bytes

CATEGORIES = (
    "nccl_timeout", "nccl_error", "cuda_oom", "host_oom", "import_error", "arch_mismatch", "missing_config",
    "data_shape", "rendezvous_failure", "time_limit", "preempted", "checkpoint_corrupt", "nan_loss", "disk_full",
    "gpu_hardware", "cuda_illegal_access", "unknown",
)
TAIL_BYTES = 512 * 1024


@dataclass(frozen=True)
class Signature:
    category: str
    regex: str
    summary: str
    hint: str

    @cached_property
    def pattern(self) -> re.Pattern:
        # compiled on first use: status and ls import this module for every run, and most never failed
        return re.compile(self.regex, re.IGNORECASE)


def _sig(category: str, pattern: str, summary: str, hint: str) -> Signature:
    return Signature(category, pattern, summary, hint)


# Highest priority first: a root cause outranks the errors it triggers on other ranks.
SIGNATURES: tuple[Signature, ...] = (
    _sig("gpu_hardware",
         r"uncorrectable ECC error|ECC_UNCORRECTABLE|\bXid\b.{0,40}\b(?:48|63|64|74|79|92|94|95)\b|fallen off the bus|"
         r"GPU is lost|cudaErrorDevicesUnavailable|NVLink error|Unable to determine the device handle for GPU",
         "A GPU failed in hardware (ECC error, Xid, or the GPU fell off the bus); this is not your code.",
         "Resubmit (the platform drains the node); resume from the last checkpoint. "
         "Tell the platform team the node name."),
    _sig("time_limit", r"CANCELLED AT \S+ DUE TO TIME LIMIT|DUE TO TIME LIMIT",
         "The job reached its time limit and Slurm stopped it.",
         "Resume from the last checkpoint (`slurmctl submit` again), or raise `time_limit` in run.yaml."),
    _sig("preempted", r"DUE TO PREEMPTION|DUE TO NODE FAIL|DUE TO JOB REQUEUE|job .* was requeued due to|Preempted by|"
         r"this job is preempted|\bcluster is preempted\b",
         "The scheduler or cloud took the nodes back (preemption or a node failure); this is not your code.",
         "Nothing is wrong with the run: resume from the last checkpoint, or use an on-demand partition."),
    _sig("cuda_illegal_access",
         r"illegal memory access was encountered|CUDA_ERROR_ILLEGAL_ADDRESS|cudaErrorIllegalAddress|"
         r"device-side assert(?:ion)? triggered|misaligned address|an illegal instruction was encountered",
         "A CUDA kernel touched memory it should not (illegal access or a device-side assert).",
         "Rerun on a small config with CUDA_LAUNCH_BLOCKING=1 to find the op; check indices/labels are in range "
         "and custom kernels/extensions match this torch version."),
    _sig("cuda_oom",
         r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|"
         r"Cuda failure '?out of memory|CUDA error: out of memory|HIP out of memory",
         "A GPU ran out of memory.",
         "Lower the per-GPU batch size (keep the global batch with gradient accumulation), enable activation "
         "checkpointing, or shard the model (FSDP/ZeRO). PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps "
         "with fragmentation."),
    _sig("host_oom",
         r"oom[-_]kill event|have been OOM Killed|cgroup out-of-memory handler|task[s]? [\d,-]+: Out Of Memory|"
         r"exceeded memory limit \(\d+ > \d+\), being killed|Exceeded (?:job|step) memory limit",
         "Slurm's memory limit (the job's cgroup) was exceeded, so the kernel killed a training process.",
         "Use fewer data-loader workers or smaller prefetch, avoid loading the whole dataset into RAM, or ask for "
         "more memory per node (the platform team sets it per partition); `slurmctl status RUN` shows the peak."),
    _sig("host_oom",
         r"Out Of Memory|Killed process \d+ .*out of memory|\bMemoryError\b|"
         r"DataLoader worker \(pid[^)]*\) is killed by signal: Killed|Cannot allocate memory",
         "The node ran out of host (CPU) memory and the kernel killed a process.",
         "Use fewer data-loader workers or smaller prefetch, avoid loading the whole dataset into RAM, "
         "or ask for more memory per node."),
    _sig("host_oom",
         r"DataLoader worker \(pid[^)]*\) is killed by signal: Bus error|out of shared memory",
         "A data-loader worker ran out of shared memory (/dev/shm) and was killed.",
         "Use fewer data-loader workers or smaller prefetch, return smaller samples from the dataset, or ask the "
         "platform team for a larger /dev/shm on the nodes."),
    _sig("disk_full", r"No space left on device|Errno 28\b|Disk quota exceeded|Errno 122\b|StorageFull",
         "A disk or quota is full, so writing (often a checkpoint) failed.",
         "Free space or lower `checkpoint.keep_last`; check your quota (the newest checkpoint may be incomplete)."),
    # torch.save reports ENOSPC/EDQUOT only as a failed write of one archive member.
    _sig("disk_full", r"PytorchStreamWriter failed writing file",
         "Writing a checkpoint failed part-way (torch.save's 'file write failed'): almost always a full disk or "
         "quota where it saves.",
         "Check free space and your quota where checkpoints go (`df -h`, `quota`), free space or lower "
         "`checkpoint.keep_last` in run.yaml; the newest checkpoint is incomplete."),
    _sig("checkpoint_corrupt",
         r"PytorchStreamReader\b|failed finding central directory|UnpicklingError|invalid load key|"
         r"SafetensorError: Error while deserializing|MetadataIncompleteBuffer|EOFError: Ran out of input|"
         r"unexpected EOF.*(?:checkpoint|\.pt)",
         "A checkpoint file could not be read: it is truncated or corrupt (usually an interrupted save).",
         "Delete that checkpoint directory so training resumes from the previous valid one; save with "
         "`rt.checkpoints.save()` so a partial save is never marked valid."),
    _sig("arch_mismatch",
         r"no kernel image is available for execution|is not compatible with the current PyTorch installation|"
         r"CUDA driver version is insufficient|NVIDIA driver on your system is too old|"
         r"cudaErrorNoKernelImageForDevice|PTX was compiled with an unsupported|"
         r"Exec format error|GLIBC_\S+' not found",
         "The software was built for a different GPU/CPU architecture or driver than this node has.",
         "Use a torch/CUDA build that supports this GPU (e.g. sm_90 for H100) and the nodes' NVIDIA driver (a cu12x "
         "wheel needs a driver of that CUDA version), or rebuild the image/extension for it."),
    _sig("import_error",
         r"ModuleNotFoundError|ImportError|cannot open shared object file|undefined symbol:",
         "Python could not import a module (missing package or mismatched library) in the job's environment.",
         "Install the package in the environment the job uses (`python:` in run.yaml / the image), "
         "then resubmit; try `slurmctl submit --dry-run` first."),
    _sig("missing_config",
         r"(?:FileNotFoundError|No such file or directory).{0,200}\.(?:ya?ml|json|toml|cfg|ini|conf)\b|"
         r"MissingConfigException|MissingMandatoryValue|ConfigAttributeError|ConfigKeyError|"
         r"ConfigCompositionException|InterpolationKeyError|Key '[^']+' (?:is )?not in (?:struct|'\w+')",
         "A configuration file or setting is missing or misspelt (config file, or a hydra/omegaconf key).",
         "Check the path is correct on the compute nodes (relative to `workdir`) and that the file is on the "
         "shared filesystem (list it under `config_files:` in run.yaml so submit checks it); for a hydra/omegaconf "
         "key, compare the override in `args:` with the config's keys (full_key names it)."),
    _sig("data_shape",
         r"stack expects each tensor to be equal size",
         "The samples of one batch have different shapes, so the data loader could not stack them into a batch.",
         "Make every sample the same shape (resize/crop images, pad or truncate sequences) or pad per batch in a "
         "`collate_fn`; the two sizes in the message are two samples of the same batch."),
    _sig("data_shape",
         r"shapes cannot be multiplied|size mismatch|The size of tensor a \(\d+\) must match|"
         r"Sizes of tensors must match|Expected input batch_size|shape '\[[^\]]*\]' is invalid for input of size|"
         r"Expected .* to have \d+ channels|Target size .* must be the same as input size",
         "Tensor shapes do not match (data, model config or checkpoint disagree).",
         "Check the model config against the data (sequence length, vocab, channels) and that the checkpoint "
         "belongs to this model."),
    _sig("nan_loss",
         r"\bloss\b[^\n]{0,30}?[:=]\s*\(?nan\b|loss is nan|nan loss|NaN or Inf found|non-finite loss|"
         r"Detected (?:nan|inf)|FloatingPointError|Minimum loss scale reached|Loss became infinite or NaN",
         "The loss became NaN/Inf, so training stopped making sense.",
         "Lower the learning rate or add warm-up, enable gradient clipping, use bf16 instead of fp16, and check "
         "the data for bad samples; resume from a checkpoint before the blow-up."),
    _sig("nan_loss",
         r"loss scale already at minimum|cannot decrease (?:loss )?scale anymore",
         "fp16 training overflowed at every step until the dynamic loss scale hit its minimum "
         "(DeepSpeed/apex gave up).",
         "Train in bf16 instead of fp16 (`model.precision: bf16` in run.yaml, and the framework's bf16 switch), or "
         "lower the learning rate / add warm-up and gradient clipping; check the data for bad samples."),
    _sig("rendezvous_failure",
         r"Rendezvous(?:Timeout|Connection|Closed)Error|client socket has timed out.{0,80}trying to connect|"
         r"connect\(\) timed out|DistNetworkError|server socket has failed to (?:listen|bind)|"
         r"Address already in use",
         "The processes of the job could not find each other at start-up (torchrun rendezvous).",
         "Usually a node or network problem, or a port clash: resubmit; if it repeats, tell the platform team "
         "(check MASTER_ADDR resolves on every node)."),
    _sig("nccl_error",
         r"NCCL error|nccl(?:System|Internal|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)Error|"
         r"NCCL WARN .*(?:failed|error)",
         "NCCL (the GPU-to-GPU communication library) failed.",
         "Resubmit; if it repeats on the same nodes, tell the platform team. Rerun with NCCL_DEBUG=INFO "
         "(env: in run.yaml) for details."),
    _sig("nccl_timeout",
         r"Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out|"
         r"ran for \d+ milliseconds before timing out|collective operation timeout",
         "A collective operation (all-reduce etc.) timed out: one rank stopped taking part.",
         "Look for the rank that stalled (data loading, a rank-0-only branch, a dead node); make every rank run "
         "the same collectives. Resubmit from the last checkpoint."),
    # The exception type alone wraps both NCCL errors and watchdog timeouts: only a fallback.
    _sig("nccl_error", r"DistBackendError",
         "NCCL (the GPU-to-GPU communication library) failed.",
         "Resubmit; if it repeats on the same nodes, tell the platform team. Rerun with NCCL_DEBUG=INFO "
         "(env: in run.yaml) for details."),
)
_CATEGORY_RANK = {}  # category -> index of its first (highest-priority) signature
for _i, _s in enumerate(SIGNATURES):
    _CATEGORY_RANK.setdefault(_s.category, _i)

# Slurm's verdict outranks the log for causes outside the training.
_SLURM_STATES = {"TIMEOUT": "time_limit", "PREEMPTED": "preempted", "NODE_FAIL": "preempted",
                 "OUT_OF_MEMORY": "host_oom"}

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
# torch >= 2.4 prefixes every line a rank writes with "[rankN]:", and a rank that re-logs its own output
# doubles it ("[rank0]:[rank0]: ..."); some log collectors put the process id in front ("[80746] [rank0]:").
_PREFIX = re.compile(r"^\s*(?:\[\d+\]\s+(?=\[(?:rank|default)\d+\]:))?(?:\[(?:rank|default)(\d+)\]:|(\d+):\s)\s*")
_EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception|Interrupt|Exit)|RuntimeError|AssertionError)\b.*")
# A traceback through these files is the launcher reporting that a rank died, not the rank's own error.
_LAUNCHER_FRAME = re.compile(r"torch/distributed/(?:run|launch)\.py|distributed/launcher/api\.py|"
                             r"elastic/multiprocessing|accelerate/commands/launch\.py|ChildFailedError")
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\)")
_ROOT_FIELD = re.compile(r"^\s*(rank|exitcode|host|traceback)\s*:\s*(.*)$")


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

    def to_dict(self) -> dict:
        return asdict(self)


def clean_line(line: str) -> tuple[str, int | None]:
    """Strip ANSI codes and launcher rank prefixes (repeated ones too); return (text, rank or None)."""
    text = _ANSI.sub("", line).rstrip()
    rank = None
    while m := _PREFIX.match(text):
        rank = int(m.group(1) or m.group(2)) if rank is None else rank
        text = text[m.end():]
    return text, rank


def launcher_root_cause(lines: list[str]) -> dict | None:
    """torchrun's summary of a failed job: the rank that failed first, its exit code and signal.

    ChildFailedError prints "Root Cause (first observed failure):" then `rank : 3 (local_rank: 3)`,
    `exitcode : -9 (pid: 123)`, `traceback : Signal 9 (SIGKILL) received by PID 123`."""
    for i in range(len(lines) - 1, -1, -1):
        if _ROOT_CAUSE.search(lines[i]):
            fields: dict = {}
            for line in lines[i + 1:i + 10]:
                m = _ROOT_FIELD.match(line)
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


def last_traceback(lines: list[str], limit: int = 12) -> list[str]:
    """The last Python traceback's head and its final exception line, or the log's last lines.

    A launcher's own traceback (torchrun/accelerate raising ChildFailedError) says only that a rank
    died; the rank's traceback above it is the one that explains why, so it wins when there is one."""
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("Traceback (most recent call last)")]
    blocks = []
    for n, start in enumerate(starts):
        block = lines[start:starts[n + 1] if n + 1 < len(starts) else len(lines)]
        end = next((i for i, line in enumerate(block) if i and _EXCEPTION_LINE.match(line)), len(block) - 1)
        blocks.append(block[: end + 1])
    own = [b for b in blocks if not any(_LAUNCHER_FRAME.search(line) for line in b)]
    if own or blocks:
        block = (own or blocks)[-1]
        return block if len(block) <= limit else [block[0], "  ...", *block[-(limit - 2):]]
    return [line for line in lines if line.strip()][-limit:]


def _unknown_summary(exit_code: str, root: dict | None) -> str:
    summary = "slurmctl does not recognise this failure" + (f" (exit code {exit_code})" if exit_code else "")
    if root and root.get("rank") is not None:
        how = f"exit code {root['exitcode']}" if root.get("exitcode") is not None else "an error"
        if root.get("signal") == "SIGKILL":
            how = "SIGKILL (often the out-of-memory killer; `slurmctl status RUN` shows memory)"
        elif root.get("signal"):
            how = root["signal"]
        summary += f"; torchrun reports rank {root['rank']} failed first, with {how}"
    return summary + "; the last error in the log is shown below."


def diagnose_text(text: str, slurm_state: str = "", exit_code: str = "") -> Diagnosis:
    cleaned = [clean_line(line) for line in text.splitlines()]
    lines = [t for t, _ in cleaned]
    hits: dict[int, list[int]] = {}  # signature index -> line numbers
    for i, line in enumerate(lines):
        for n, sig in enumerate(SIGNATURES):
            if sig.pattern.search(line):
                hits.setdefault(n, []).append(i)
    root = launcher_root_cause(lines)
    state = slurm_state.split(" ")[0].upper()
    from_slurm = _SLURM_STATES.get(state)
    hit_categories = {SIGNATURES[n].category for n in hits}
    if from_slurm and not (from_slurm == "preempted" and "gpu_hardware" in hit_categories):
        category, source = from_slurm, "slurm"
        own = [n for n in hits if SIGNATURES[n].category == category]
        sig = SIGNATURES[min(own)] if own else SIGNATURES[_CATEGORY_RANK[category]]
    elif hits:
        sig, source = SIGNATURES[min(hits)], "log"
        category = sig.category
    else:
        return Diagnosis(
            "unknown", _unknown_summary(exit_code, root), last_traceback(lines),
            "Read the traceback above; `slurmctl logs RUN --rank N` shows other ranks.",
            rank=root.get("rank") if root else None, source="none", extra={"root_cause": root} if root else {},
        )
    found = sorted({i for n, idx in hits.items() if SIGNATURES[n].category == category for i in idx})
    if root and root.get("rank") is not None:  # the launcher's first failure leads the evidence
        found.sort(key=lambda i: cleaned[i][1] != root["rank"])
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
    return Diagnosis(category, summary, evidence, sig.hint, rank=rank, source=source,
                     extra={"root_cause": root} if root else {})


def diagnose_file(path: Path, slurm_state: str = "", exit_code: str = "", *, nofollow: bool = True) -> Diagnosis:
    """A run's job log (<run dir>/logs/<job>.out) also brings what the watchdog did to that job.
    `nofollow=False` for a path the user named (`diagnose --log`): a symlink is theirs to follow."""
    text = read_tail(path, nofollow=nofollow)
    result = diagnose_text(text, slurm_state, exit_code)
    run_dir = rundir.run_dir_of_log(path)
    if path.parent.name == rundir.LOGS_DIR and (run_dir / rundir.RUN_JSON).is_file():
        _add_watchdog(result, watchdog_report(run_dir, path.stem), text)
        _add_node_loss(result, run_dir, path.stem)
    return result


def _add_node_loss(result: Diagnosis, run_dir: Path, job_id: str) -> None:
    """A node of this job's allocation lost (runtime.attempt's probe after the step failed): that is the
    cause, whatever the survivors' logs say (their collectives fail once a peer is gone)."""
    lost = [e for e in read_jsonl(run_dir / rundir.ATTEMPTS)
            if e.get("event") == "node-lost" and str(e.get("job_id")) == job_id]
    if not lost:
        return
    last = lost[-1]
    nodes = ", ".join(last.get("nodes_lost") or []) or "a node of the allocation"
    at = f" at step {last['last_step']}" if last.get("last_step") is not None else ""
    ck = last.get("checkpoint_step")
    result.category, result.source = "node_lost", "slurm"
    result.summary = (f"node {nodes} was lost{at}: its slurmd and processes stopped answering, and the other "
                      "ranks' collectives failed or hung.")
    result.evidence = [f"attempts.jsonl: node-lost {nodes}{at}, newest checkpoint {ck}", *result.evidence][:8]
    result.hint = ("Nothing to fix in the training: the run is requeued on healthy nodes (Slurm marks the lost "
                   "node DOWN) and resumes from " + (f"checkpoint step {ck}." if ck is not None else
                                                      "its newest checkpoint."))


# --- the progress watchdog ---------------------------------------------------------------------
_SCENE_DIR = re.compile(r"^(?P<job>\d+|local)-(?P<time>\d+)$")
_WATCHDOG_LINE = re.compile(
    r"slurmctl watchdog \[[\d:]+\]: (?:WARNING|HUNG|CONFIGURATION PROBLEM|no ACK|progress resumed)")


def _clock(epoch) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(epoch)))
    except (TypeError, ValueError, OverflowError):
        return "an unknown time"


def watchdog_report(run_dir: Path, job_id: int | str | None = None) -> dict | None:
    """What the watchdog did (to `job_id`, if given): None when it never warned or acted.

    Keys: state (config-problem | drain-requested | drained | killed), time, job_id, message (plain
    words), scene (newest scene folder or None), scenes (all of them, oldest first)."""
    folder = run_dir / rundir.WATCHDOG_DIR
    if not folder.is_dir():
        return None
    state = read_json(rundir.watchdog_state_path(run_dir))  # None when missing, not JSON, or not a regular file
    if not isinstance(state, dict) or (job_id is not None and str(state.get("job_id")) != str(job_id)):
        state = {}
    scenes = []
    for entry in folder.iterdir():
        m = _SCENE_DIR.match(entry.name)
        if m and entry.is_dir() and (job_id is None or m["job"] == str(job_id)):
            scenes.append((int(m["time"]), entry))
    scenes = [str(p) for _, p in sorted(scenes)]
    if not state and not scenes:
        return None
    kind, when = state.get("state", ""), _clock(state.get("time"))
    scene = state.get("scene") or (scenes[-1] if scenes else None)
    described = f"'{state.get('field', '?')}' in {state.get('source', '?')}"
    if kind == "killed":
        message = (f"the watchdog ended the hung training step at {when} (no progress in {described}, and no "
                   f"answer to its drain request); stacks, log tail and nvidia-smi are in {scene}")
    elif kind == "drain-requested":
        message = (f"the watchdog saw no progress ({state.get('summary') or described}) and asked the training "
                   f"to checkpoint and stop at {when}")
    elif kind == "drained":
        message = f"the watchdog asked the stalled training to stop; it checkpointed and acknowledged at {when}"
    elif kind == "warned":
        message = (f"no progress in {described} for {state.get('stalled_seconds', '?')} s at {when}; the watchdog "
                   f"asks the training to drain after {state.get('window_seconds', '?')} s without progress")
    elif kind == "watching" and not scenes:
        return None  # a warning that progress has since cleared
    elif kind == "config-problem":
        message = (f"the watchdog never found its progress field {described}, so it cannot detect a hang "
                   "(set SLURMCTL_WATCHDOG_STEP_FIELD / SLURMCTL_WATCHDOG_SOURCE; it never ends a job for this)")
    else:
        message = f"the watchdog ended a hung training step earlier; its scene is in {scene}"
        kind = "killed"
    return {"state": kind, "time": state.get("time"), "job_id": state.get("job_id"), "message": message,
            "scene": scene, "scenes": scenes}


def _add_watchdog(result: Diagnosis, report: dict | None, log_text: str) -> None:
    """Lead the evidence with what the watchdog did; a kill explains an otherwise unknown failure."""
    if report is None:
        return
    result.watchdog = report
    said = [ln.strip() for ln in log_text.splitlines() if _WATCHDOG_LINE.search(ln)][-3:]
    lines = [f"watchdog: {report['message']}", *said, *result.evidence]
    result.evidence = list(dict.fromkeys(lines))[:8]  # the watchdog's log lines may be evidence already
    if result.category == "unknown" and report["state"] == "killed":
        result.summary = ("The training stopped making progress and the watchdog ended the hung step "
                          "(no step advanced in its stall window and the drain request went unanswered).")
        result.hint = (f"Open {report['scene']}/{rundir.SCENE_STACKS}: it shows where each rank was stuck (a "
                       "collective, data loading, I/O). Resubmitting resumes from the last valid checkpoint.")
