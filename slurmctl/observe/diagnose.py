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

The category vocabulary is a public contract (``slurmctl diagnose --json``). The rules are scored at first
sight on blind batches of real logs from public issue threads, then kept as a regression corpus, by
``benchmarks/diagnose_corpus.py`` (tests/fixtures/diagnose_corpus/).

What the progress watchdog did to the job is added from ``observe/watchdog_report.py``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from slurmctl import rundir
from slurmctl.fsutil import read_jsonl
from slurmctl.observe.data import failure_headline, in_progress, staging_failures, staging_headlines, staging_progress
from slurmctl.observe.log_reading import (
    MAX_LINE_CHARS,
    ROOT_CAUSE,
    ROOT_FIELD,
    TRACEBACK_HEAD,
    LineIndex,
    LogReading,
    clean_line,
    is_launcher_block,
    last_traceback,
    launcher_root_cause,
    read_log,
    read_tail,
    traceback_blocks,
)
from slurmctl.observe.watchdog_report import add_watchdog, watchdog_report

CATEGORIES = (
    "nccl_timeout", "nccl_error", "nccl_setup", "cuda_oom", "host_oom", "import_error", "arch_mismatch",
    "driver_mismatch", "no_gpu", "missing_config", "permission_denied", "data_shape", "checkpoint_mismatch",
    "checkpoint_corrupt", "rendezvous_failure", "time_limit", "preempted", "node_lost", "nan_loss", "disk_full",
    "gpu_hardware", "cuda_illegal_access", "data_staging", "unknown",
    "success",  # not a failure: Slurm recorded COMPLETED exit 0, or the training finished before what failed
    "cancelled",  # not a failure: someone cancelled the job (scancel, `slurmctl cancel`) and nothing failed before
)


@dataclass(frozen=True)
class Signature:
    category: str
    regex: str
    summary: str
    hint: str
    unless: str = ""  # a line that also matches this is not evidence for the signature

    def matches(self, line: str) -> bool:
        return bool(self.pattern.search(line)) and not (self.unless and re.search(self.unless, line, re.IGNORECASE))

    @cached_property
    def pattern(self) -> re.Pattern:
        # compiled on first use: status and ls import this module for every run, and most never failed
        return re.compile(self.regex, re.IGNORECASE)


def _sig(category: str, pattern: str, summary: str, hint: str, unless: str = "") -> Signature:
    return Signature(category, pattern, summary, hint, unless)


_NCCL_HINT = ("Resubmit; if it repeats on the same nodes, tell the platform team. Rerun with NCCL_DEBUG=INFO "
              "(env: in run.yaml) for details.")
_HOST_OOM_HINT = ("Use fewer data-loader workers or smaller prefetch, avoid loading the whole dataset into RAM, "
                  "or ask for more memory per node.")

# Highest priority first: a root cause outranks the errors it triggers on other ranks.
SIGNATURES: tuple[Signature, ...] = (
    _sig("gpu_hardware",
         r"uncorrectable ECC error|ECC_UNCORRECTABLE|\bXid\b.{0,40}\b(?:48|63|64|74|79|92|94|95)\b|fallen off the bus|"
         r"GPU is lost|cudaErrorDevicesUnavailable|NVLink error|Unable to determine the device handle for GPU|"
         r"CUDA error: (?:an )?ECC error|row remapping failure",
         "A GPU failed in hardware (ECC error, Xid, or the GPU fell off the bus); this is not your code.",
         "Resubmit (the platform drains the node); resume from the last checkpoint. "
         "Tell the platform team the node name."),
    _sig("time_limit", r"CANCELLED AT \S+ DUE TO TIME LIMIT|DUE TO TIME LIMIT|"
         # PBS/Torque's mom ("=>> PBS: job killed: walltime 259217 exceeded limit 259200") and its mail ("Job
         # exceeded its walltime limit"); LSF's exit reason (TERM_RUNLIMIT: job killed after reaching LSF run time
         # limit); Grid Engine's execd (MSG_EXECD_EXCEEDHWALLCLOCK_UU: "job 48.1 exceeded hard wallclock time")
         r"job killed: (?:walltime|cput) \d+ exceeded limit \d+|exceeded its walltime limit|TERM_RUNLIMIT|"
         r"exceeded hard wallclock time",
         "The job reached its time limit and Slurm stopped it.",
         "Resume from the last checkpoint (`slurmctl submit` again), or raise `time_limit` in run.yaml."),
    _sig("node_lost",
         r"DUE TO NODE FAIL|srun: error: Node failure on|\bNODE_FAIL\b|Node \S+ not responding|"
         r"has been marked dead because the detector has missed too many heartbeats|\bNodeDiedError\b|"
         r"The node with node id \S+ .{0,80}has been marked dead|"
         # a scheduler's mail or log saying it ended or requeued the job because its node failed (PBS: "job
         # preempted (node failure)")
         r"\bjob\b.{0,60}\b(?:preempted|requeued|killed|aborted|deleted|rerun)\b.{0,40}\bnode fail(?:ure|ed)\b",
         "A node of the job died or stopped answering (Slurm's NODE_FAIL); the other ranks failed because a peer "
         "was gone. This is not your code.",
         "Resubmit: the run resumes from its last checkpoint on healthy nodes (Slurm marks the lost node DOWN). "
         "Tell the platform team the node name if it repeats."),
    _sig("preempted", r"DUE TO PREEMPTION|DUE TO JOB REQUEUE|job .* was requeued due to|Preempted by|"
         r"this job is preempted|\bcluster is preempted\b|\bwas preempted\b|\bpreemption notice\b|"
         r"\bspot (?:instance |VM )?(?:interruption|termination|reclaim)|termination is imminent",
         "The scheduler or cloud took the nodes back (preemption); this is not your code.",
         "Nothing is wrong with the run: resume from the last checkpoint, or use an on-demand partition."),
    # slurmctl's own staging step (runtime/datastage.py) and the job script after it: the run's object-store
    # dataset could not be put in the node cache, so the training never started
    _sig("data_staging",
         r"^slurmctl data: staging failed on |^slurmctl: staging the run's datasets failed",
         "A dataset of the run (run.yaml `data:`) could not be staged into the node cache, so the training never "
         "started.",
         "Do what the staging step's message says (it names the dataset, the cause and the fix): check `src`, the "
         "bucket's access or the store's endpoint, install the store's client, or use `cache: none` for a dataset "
         "larger than the cache budget."),
    _sig("driver_mismatch",
         r"CUDA driver version is insufficient|NVIDIA driver on your system is too old|cudaErrorInsufficientDriver|"
         r"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|system has unsupported display driver / cuda driver combination|"
         r"forward compatibility was attempted on non supported HW|Driver/library version mismatch|"
         r"PTX was compiled with an unsupported toolchain|CUDA_ERROR_UNSUPPORTED_PTX_VERSION|"
         r"cudaErrorUnsupportedPtxVersion|driver version \S+ is (?:older|lower) than|"
         r"kernel version \S+ does not match DSO version",
         "The node's NVIDIA driver is too old for the CUDA runtime this software was built with.",
         "Use a build for the nodes' CUDA version (`nvidia-smi` shows the highest CUDA the driver supports: pick "
         "the torch wheel/image for it, e.g. cu118 on a 520-series driver), or ask the platform team to update the "
         "driver. Rebuilding for another GPU architecture does not help. In a container the same message comes "
         "when no driver is passed in at all (singularity/apptainer without `--nv`, docker without `--gpus`)."),
    _sig("cuda_illegal_access",
         r"illegal memory access was encountered|CUDA_ERROR_ILLEGAL_ADDRESS|cudaErrorIllegalAddress|"
         r"device-side assert(?:ion)? triggered|misaligned address|an illegal instruction was encountered|"
         r"CUBLAS_STATUS_EXECUTION_FAILED|CUDNN_STATUS_EXECUTION_FAILED|CUDNN_STATUS_MAPPING_ERROR|"
         r"\.cu:\d+: \S+: block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion",
         "A CUDA kernel touched memory it should not (illegal access or a device-side assert).",
         "Rerun on a small config with CUDA_LAUNCH_BLOCKING=1 to find the op; check indices/labels are in range "
         "and custom kernels/extensions match this torch version."),
    _sig("cuda_oom",
         r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|"
         r"Cuda failure '?out of memory|CUDA error: out of memory|HIP out of memory|OOM when allocating tensor|"
         r"ResourceExhaustedError|RESOURCE_EXHAUSTED: Out of memory|CUDNN_STATUS_ALLOC_FAILED|"
         r"MPS backend out of memory|Failed to get convolution algorithm\. This is probably because cuDNN failed|"
         r"cudaMalloc.{0,40}out of memory|"
         # XLA's device allocator (stream_executor: "Failed to allocate request for %s (%uB) on device ordinal %d")
         # and its BFC allocator ("Out of memory while trying to allocate %d bytes"), as JAX raises them
         r"Failed to allocate request for \S+ \(\d+B\) on device ordinal|"
         r"Out of memory while trying to allocate \d+ bytes|"
         # the driver API's name (TensorFlow's and JAX's allocators log it); XLA's status text
         r"CUDA_ERROR_OUT_OF_MEMORY|Resource exhausted: Out of memory",
         "A GPU ran out of memory.",
         "Lower the per-GPU batch size (keep the global batch with gradient accumulation), enable activation "
         "checkpointing, or shard the model (FSDP/ZeRO). PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps "
         "with fragmentation."),
    _sig("permission_denied", r"Permission denied|PermissionError|\[Errno 13\]|\bEACCES\b|"
         # writing where the mount is read-only (a container image, a shared dataset); EPERM from the OS
         r"Read-only file system|\[Errno 30\]|\[Errno 1\] Operation not permitted",
         "The job was refused access to a file, directory, socket or shared memory (/dev/shm): permission denied.",
         "Check who owns the path in the message and its mode (`ls -ld PATH`): write outputs and caches under "
         "your own directories (HF_HOME, TORCH_HOME, TMPDIR), make scripts executable, and ask the platform team "
         "if /dev/shm or a shared path is not writable by you on the nodes."),
    _sig("nccl_setup",
         r"\bibv_\w+\b.{0,80}(?:fail|error|Cannot allocate memory)|(?:fail|error).{0,80}\bibv_\w+|"
         r"\bmemlock\b|NET/IB\s*:.{0,80}(?:fail|No device found|Unable)|Bootstrap : no socket interface found|"
         r"no usable (?:listening )?(?:network )?interface|No socket interface found|NCCL_SOCKET_IFNAME|"
         r"Could not find interface|failed to extend /dev/shm|Failed to open libibverbs|"
         r"no userspace device-specific driver found|"
         r"(?:Error while creating|Unable to allocate|failed to create) shared memory segment (?:/dev/shm|nccl-shm)|"
         # include/shm.h: NCCL sizes its shared-memory segments with posix_fallocate, which fails on a small
         # /dev/shm (a container's 64 MB) with ENOSPC: a transport set-up failure, not a full disk
         r"NCCL WARN Call to posix_fallocate failed|"
         r"Unable to create .{0,40}shared memory .{0,40}/dev/shm|ncclSystemError: System call \(e\.g\. socket, "
         r"malloc\) or external library call failed or device error.{0,200}(?:ibv|IB|socket interface)",
         "NCCL could not set up its transport between GPUs/nodes (InfiniBand verbs, locked-memory limit, or no "
         "usable network interface), before any collective ran.",
         "For `ibv_*`/memlock errors the nodes' locked-memory limit is too low (`ulimit -l` must be unlimited: "
         "the platform team sets it for slurmd); for interface errors set NCCL_SOCKET_IFNAME to an interface the "
         "nodes have (`ip -br link`), or NCCL_IB_DISABLE=1 to fall back to TCP. Rerun with NCCL_DEBUG=INFO."),
    _sig("host_oom",
         r"oom[-_]kill event|have been OOM Killed|cgroup out-of-memory handler|task[s]? [\d,-]+: Out Of Memory|"
         r"exceeded memory limit \(\d+ > \d+\), being killed|Exceeded (?:job|step) memory limit(?! at some point)|"
         # Kubernetes' container status when the container's memory cgroup killed it
         r"\bOOMKilled\b|Reason:\s*OOMKilled|"
         # PBS/Torque's mom ("job killed: mem 9000000kb exceeded limit 8388608kb"), LSF's exit reason
         r"job killed: (?:p?mem|vmem) \d+\w* exceeded limit|TERM_MEMLIMIT|"
         # Ray's memory monitor (raylet node_manager.cc: "N Workers (tasks / actors) killed due to memory pressure
         # (OOM)"; ray.exceptions.OutOfMemoryError: "Task was killed due to the node running low on memory")
         r"killed due to memory pressure \(OOM\)|ray\.exceptions\.OutOfMemoryError",
         # "Exceeded step memory limit at some point" is Slurm's warning that the step swapped, not a kill.
         "Slurm's memory limit (the job's cgroup) was exceeded, so the kernel killed a training process.",
         "Use fewer data-loader workers or smaller prefetch, avoid loading the whole dataset into RAM, or ask for "
         "more memory per node (the platform team sets it per partition); `slurmctl status RUN` shows the peak."),
    _sig("host_oom",
         r"Out Of Memory|Killed process \d+ .*out of memory|\bMemoryError\b|"
         r"DataLoader worker \(pid[^)]*\) is killed by signal: Killed|Cannot allocate memory|std::bad_alloc|"
         r"Unable to allocate [\d.]+ [KMGT]i?B for an array|node running low on memory|Memory cgroup out of memory|"
         # c10/core/CPUAllocator.cpp (Windows words it "not enough memory")
         r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|"
         # c10/core/impl/alloc_cpu.cpp of older torch: posix_memalign's ENOMEM as an enforce failure
         r"\[enforce fail at (?:CPUAllocator|alloc_cpu)\.cpp:\d+\] posix_memalign",
         "The node ran out of host (CPU) memory and the kernel killed a process.", _HOST_OOM_HINT),
    # aten/src/ATen/MapAllocator.cpp: a tensor handed between processes through /dev/shm when it is full
    # ("unable to write to file </torch_1_2>: No space left on device (28)"): ENOSPC, which is what users and
    # threads call it; the bus error of the worker that follows is its consequence.
    _sig("disk_full", r"unable to (?:write to|allocate shared memory\(shm\) for) file </torch_\w+>.{0,40}"
         r"No space left on device|/dev/shm.{0,120}No space left on device",
         "The shared-memory filesystem (/dev/shm) is full: a data-loader worker could not hand a batch over "
         "(No space left on device).",
         "Use fewer data-loader workers or smaller prefetch, or ask the platform team for a larger /dev/shm on the "
         "nodes (a container's default is 64 MB: `--shm-size`); free what other jobs left in /dev/shm."),
    _sig("host_oom",
         r"DataLoader worker \(pid[^)]*\) is killed by signal: Bus error|out of shared memory|"
         r"insufficient shared memory \(shm\)|"
         # aten/src/ATen/MapAllocator.cpp: a tensor handed between processes through a full /dev/shm
         r"unable to (?:write to file|allocate shared memory\(shm\) for file) </torch_\w+>",
         "A data-loader worker ran out of shared memory (/dev/shm) and was killed.",
         "Use fewer data-loader workers or smaller prefetch, return smaller samples from the dataset, or ask the "
         "platform team for a larger /dev/shm on the nodes."),
    _sig("disk_full", r"No space left on device|Errno 28\b|Disk quota exceeded|Errno 122\b|StorageFull|"
         r"not enough (?:free )?disk space|insufficient disk space|"
         # TensorFlow reports ENOSPC as RESOURCE_EXHAUSTED with the file it was writing ("Resource exhausted: /ckpt/..")
         r"Resource exhausted: (?:/|[A-Za-z]:\\)\S+",
         "A disk or quota is full, so writing (often a checkpoint) failed.",
         "Free space or lower `checkpoint.keep_last`; check your quota (the newest checkpoint may be incomplete)."),
    # torch.save reports ENOSPC/EDQUOT only as a failed write of one archive member.
    _sig("disk_full", r"PytorchStreamWriter failed writing file|inline_container\.cc.{0,40}unexpected pos \d+ vs",
         "Writing a checkpoint failed part-way (torch.save's 'file write failed'): almost always a full disk or "
         "quota where it saves.",
         "Check free space and your quota where checkpoints go (`df -h`, `quota`), free space or lower "
         "`checkpoint.keep_last` in run.yaml; the newest checkpoint is incomplete."),
    _sig("checkpoint_corrupt",
         r"PytorchStreamReader\b|failed finding central directory|UnpicklingError(?!: Weights only load failed)|"
         r"invalid load key|"
         r"SafetensorError: Error while deserializing|MetadataIncompleteBuffer|EOFError: Ran out of input|"
         r"unexpected EOF.*(?:checkpoint|\.pt)|Unable to load weights from pytorch checkpoint file|HeaderTooLarge|"
         r"invalid header or archive is corrupted|The file might be corrupted|unexpected EOF, expected \d+ more bytes|"
         r"DataLossError|Checksum does not match: stored",
         "A checkpoint file could not be read: it is truncated or corrupt (usually an interrupted save).",
         "Delete that checkpoint directory so training resumes from the previous valid one; save with "
         "`rt.checkpoints.save()` so a partial save is never marked valid.",
         # pickle reading a JSON text file (a config passed where the checkpoint belongs) is the wrong path
         unless=r"invalid load key, '\{'"),
    _sig("checkpoint_mismatch",
         r"size mismatch for \S+: copying a param|Error\(s\) in loading state_dict|Missing key\(s\) in state_dict|"
         r"Unexpected key\(s\) in state_dict|While copying the parameter named|ignore_mismatched_sizes|"
         r"copying a param (?:with|of) shape|from checkpoint, the shape in current model is|"
         r"expects \d+ weight\(s\), but the saved weights have|due to incompatible shapes|"
         r"in the checkpoint but \S+ in the model|Missing key in checkpoint state_dict|"
         r"checkpoint being loaded used a DP world size of \d+ but the current world size|"
         r"Assign requires shapes of both tensors to match|Key \S+ not found in checkpoint|"
         # accelerate.utils.modeling.set_module_tensor_to_device: a checkpoint tensor that does not fit its parameter
         r"Trying to set a tensor of shape .{0,200}this looks incorrect|"
         # torch.distributed.checkpoint's planner; Keras 2 load_weights; Keras 3 load_own_variables; TF restore
         r"Size mismatch between saved .{0,80} and current:|You are loading a weight file containing \d+ layers into a "
         r"model with \d+ layers|expected \d+ variables, but received \d+ variables during loading|"
         r"Cannot assign value to variable .{0,120}Shape mismatch|Received incompatible tensor with shape",
         "The checkpoint does not fit the model: its parameter names or shapes differ from the model built now "
         "(a different config, vocabulary or architecture).",
         "Build the model with the same config the checkpoint was saved with (hidden size, vocab, layers), point "
         "at the right checkpoint, or load on purpose with `strict=False` / `ignore_mismatched_sizes=True` when "
         "you mean to re-initialise the mismatched layers (e.g. a new classification head)."),
    _sig("arch_mismatch",
         r"no kernel image is available for execution|is not compatible with the current PyTorch installation|"
         r"cudaErrorNoKernelImageForDevice|Exec format error|"
         r"Unsupported gpu architecture '?compute_\d+|CUDA error: invalid device function|"
         # flash-attn's csrc check for sm_80+
         r"FlashAttention only supports Ampere GPUs or newer",
         "The software was built for a different GPU/CPU architecture than this node has.",
         "Use a torch/CUDA build that supports this GPU (e.g. sm_90 for H100), or rebuild the image/extension "
         "for it (TORCH_CUDA_ARCH_LIST)."),
    _sig("no_gpu",
         r"No CUDA GPUs are available|Found no NVIDIA driver on your system|no CUDA-capable device is detected|"
         r"cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|torch\.cuda\.is_available\(\)(?: is|:)\s*False|"
         r"Torch not compiled with CUDA enabled|NVIDIA-SMI has failed because it couldn't communicate with the "
         r"NVIDIA driver|invalid device ordinal|CUDA driver initialization failed|"
         r"You requested gpu.{0,60}not available|No supported gpu backend found|"
         r"(?:GPU|CUDA) (?:is )?not available|requires? (?:a |at least one )?(?:CUDA )?GPU|no GPUs found|"
         r"NCCL is only supported with GPUs|device >= 0 && device < num_gpus|accelerator is not available|"
         r"your machine only has: \[\]|all CUDA-capable devices are busy or unavailable|"
         r"Unable to find available GPUs: requested=\d+, available=0|No NVIDIA GPU found|"
         r"\bNo (?:CUDA )?GPUs? (?:is |are )?(?:available|found|detected)|device_count\(\) (?:is|returned|==) 0|"
         r"Unable to initialize backend 'cuda'|No HIP GPUs are available|"
         # JAX asked for a GPU platform it has not got; TensorFlow pinning to a GPU it cannot see; nvidia-smi with
         # no device; Docker without the NVIDIA container toolkit
         r"no platforms that are instances of gpu are present|Unknown backend:? '?(?:gpu|cuda)'? requested|"
         r"no devices matching that specification are registered in this process|^\s*No devices were found\s*$|"
         r"could not select device driver \S* with capabilities: \[\[gpu\]\]|"
         # ultralytics' select_device (YOLOv5 and YOLOv8 wordings); NVML (pynvml, nvidia-container-cli) without a
         # loaded driver; torch's warning when cuInit fails (a driver in a bad state after suspend, no nvidia-uvm)
         r"CUDA unavailable, invalid device|torch\.cuda\.device_count\(\):?\s*0\b|Driver Not Loaded|"
         r"CUDA unknown error - this may be due to an incorrectly set up environment",
         "No GPU was visible to the program where one was expected (no GPU allocated, CUDA_VISIBLE_DEVICES empty "
         "or short, no driver in the container, or a CPU-only torch build).",
         "Ask for GPUs (`gpus_per_node` in run.yaml / `--gres=gpu:N`) and keep CUDA_VISIBLE_DEVICES as Slurm sets "
         "it; run one process per allocated GPU; use a CUDA build of torch (`python -c 'import torch; "
         "print(torch.version.cuda)'` must not print None); in a container pass the GPUs through.",
         # a program that says so and carries on without a GPU did not fail for it
         unless=r"(?:using|use|running on|run on|fall(?:ing)? back to) (?:the )?CPU"),
    _sig("import_error",
         r"ModuleNotFoundError|ImportError|cannot open shared object file|undefined symbol:|"
         r"Error locating target '|is not in the \w+ registry|GLIBC(?:XX)?_\S+' not found|DLL load failed|"
         r"CUDA Setup failed despite GPU being available|"
         r"Loaded runtime CuDNN library.{0,60}but source was compiled with|DNN library is not found|"
         # jax/_src/lib/__init__.py checking the CUDA libraries against those jaxlib was built with
         r"Found \w+ version \d+, but JAX was built against version \d+|"
         r"No module named '|Could not load library lib\w+\.so|compiled with different CUDA (?:major )?versions|"
         r"requires the \S+ library but it was not found in your environment|Error building extension|"
         r"ninja: build stopped: subcommand failed|"
         # numpy 2 under modules compiled for numpy 1 (numpy/core/_multiarray_umath.py), or the other way round
         r"compiled using NumPy 1\.x cannot be run in|numpy\.core\.multiarray failed to import|_ARRAY_API not found|"
         r"numpy\.dtype size changed, may indicate binary incompatibility|"
         # transformers' lazy module wrapping the real import error; Windows' loader (torch/__init__.py)
         r"Failed to import \S+ because of the following error|\[WinError 126\]|Error loading \S+\.dll|"
         r"Could not find module '[^']+\.dll'|"
         # torch.backends.cudnn's version check; torch.utils.cpp_extension building an extension
         r"cuDNN version incompatibility|mismatches the version that was used to compile|"
         r"CUDA_HOME environment variable is not set|CUDA_HOME does not exist, unable to compile|"
         r"xFormers can't load C\+\+/CUDA extensions|Could not find the bitsandbytes CUDA binary|"
         # torchvision built for another torch (torchvision/extension.py, its C++ ops not registered);
         # a script named like the package it imports
         r"Couldn't load custom C\+\+ ops|operator torchvision::\w+ does not exist|"
         r"most likely due to a circular import",
         "Python could not import a module (missing package or mismatched library) in the job's environment.",
         "Install the package in the environment the job uses (`python:` in run.yaml / the image), "
         "then resubmit; try `slurmctl submit --dry-run` first.",
         # TensorFlow probing for optional GPU libraries: a warning it survives by running on the CPU
         # NCCL's INFO lines report optional plugins it did not find (libnccl-net.so) and carries on
         unless=r"Could not load dynamic library|dso_loader|UserWarning|\bwarn\(|\bNCCL INFO\b|"
         # JAX probing for backends it may not have (xla_bridge: "Unable to initialize backend 'tpu': ...
         # libtpu.so: cannot open shared object file") and carrying on with the others
         r"Unable to initialize backend"),
    _sig("missing_config",
         r"(?:FileNotFoundError|No such file or directory).{0,200}\.(?:ya?ml|json|toml|cfg|ini|conf)\b|"
         r"MissingConfigException|MissingMandatoryValue|ConfigAttributeError|ConfigKeyError|"
         r"ConfigCompositionException|InterpolationKeyError|Key '[^']+' (?:is )?not in (?:struct|'\w+')|"
         r"omegaconf\.errors\.\w+|hydra\.errors\.\w+|InterpolationResolutionError|UnsupportedInterpolationType|"
         r"Environment variable '[^']+' not found|Could not override '[^']+'|Error merging override|"
         r"Cannot find primary config|Could not find '[^'\n]+'\s*$|Could not load '[^']+'|"
         # argparse: every per-argument error is "error: argument --x: ..." (invalid choice/value, expected one
         # argument, not allowed with argument ...); mutually exclusive groups say "one of the arguments"
         r"error: unrecognized arguments|error: the following arguments are required|error: argument \S+: |"
         r"error: one of the arguments .{0,200} is required|error: Parser key|"
         # a setting checked by name (transformers' TrainingArguments.__post_init__: "--load_best_model_at_end
         # requires the save and eval strategy to match", "--logging_steps must be an integer ...")
         r"Error: --[a-z][\w-]* (?:requires|must|should|cannot|can only|needs|is only|is not)\b|"
         r"'(?:Namespace|DictConfig|ConfigDict|Config)' object has no attribute|"
         r"yaml\.(?:scanner|parser|constructor|composer)\.\w+Error|"
         r"Config file .{0,120}(?:not found|does not exist)|Requested node configuration is not available|"
         r"\b\w*Config(?:uration)?Error\b|not used by the HfArgumentParser|Check batch related parameters|"
         r"Invalid generic resource \(gres\) specification|Invalid partition name specified|"
         # Slurm refusing the request as written (sbatch/salloc/srun); the interpreter given a script path that
         # does not exist
         r"Invalid account or account/partition combination|Invalid qos specification|"
         r"Requested time limit is invalid|"
         # any request Slurm refuses at submission (the controller being unreachable is not the request's fault)
         r"Batch job submission failed: (?!.{0,40}(?:Socket timed out|Unable to contact|temporarily unable|"
         r"Zero Bytes were transmitted))|"
         # a container bind path (singularity/apptainer --bind, a site's bindpath setting) that is not there
         r"container creation failed: mount \S+ error: while mounting .{0,80}doesn't exist|"
         r"Memory specification can not be satisfied|can't open file '[^']+': \[Errno 2\]|"
         # omegaconf's exceptions end with the key they failed on ("    full_key: trainer.devices"); its type
         # conversions; argparse's "prog.py: error: ..." after the usage line; yacs/detectron2's config keys;
         # jsonargparse (LightningCLI); Lightning's MisconfigurationException; pydantic settings models
         r"^\s*full_key: \S+|could not be converted to (?:Integer|Float|Boolean|String|\w+Enum)\b|"
         r"^\s*\S+\.py: error: |error: ambiguous option: |Non-existent config key|"
         r"error: (?:Validation failed|Configuration check failed)|MisconfigurationException|"
         r"\d+ validation errors? for \w*(?:Config|Args|Arguments|Settings|Params)\b|"
         # transformers naming a model/config path that holds no config
         r"Can't load (?:config for|the configuration of) '|does not appear to have a file named config\.json|"
         r"is not a local folder and is not a valid model identifier",
         "A configuration is missing or wrong: a config file, a key, an override or a command-line argument "
         "(hydra, omegaconf, argparse).",
         "Check the path is correct on the compute nodes (relative to `workdir`) and that the file is on the "
         "shared filesystem (list it under `config_files:` in run.yaml so submit checks it); for a hydra/omegaconf "
         "key or interpolation, compare the override in `args:` with the config's keys (full_key names it) and set "
         "the environment variables it reads; for argparse, compare `args:` with the script's --help."),
    _sig("data_shape",
         r"stack expects each tensor to be equal size|expected sequence of length \d+ at dim \d+ \(got \d+\)|"

         r"Unable to create tensor, you should probably activate truncation and/or padding|"
         r"default_collate: batch must contain|too many dimensions 'str'|"
         r"each element in list of batch should be of equal size|Trying to resize storage that is not resizable|"
         # numpy >= 1.24 building an array from samples of unequal length
         r"inhomogeneous shape after \d+ dimensions?|could not broadcast input array from shape",
         "The samples of one batch have different shapes, so the data loader could not stack them into a batch.",
         "Make every sample the same shape (resize/crop images, pad or truncate sequences) or pad per batch in a "
         "`collate_fn` (for text, a padding data collator); the two sizes in the message are two samples of the "
         "same batch."),
    _sig("data_shape",
         r"shapes cannot be multiplied|size mismatch|The size of tensor a \(\d+\) must match|"
         r"Sizes of tensors must match|Expected input batch_size|shape '\[[^\]]*\]' is invalid for input of size|"
         r"Expected .* to have \d+ channels|Target size .* must be the same as input size|"
         r"The expanded size of the tensor \(\d+\) must match|"
         r"index out of range in self|Target -?\d+ is out of bounds|too many indices for (?:array|tensor)|"
         # ultralytics YOLOv3/v5/v7 train.py: a label's class id beyond the data set's class count (nc)
         r"Label class \S+ exceeds nc=\d+|"
         r"Expected \d+-dimensional input for \d+-dimensional weight|Given groups=\d+, weight of size|"
         r"Dimension out of range|index \d+ is out of bounds for (?:axis|dimension)|"
         r"num_samples should be a positive integer value, but got num_samples=0|Expected target size|"
         r"shape mismatch: value tensor of shape|operands could not be broadcast together with shapes|"
         r"Input to reshape is a tensor with \d+ values|Incompatible shapes: \[|Dimensions must be equal|"
         r"is incompatible with the layer: expected|"
         # torch.nn conv/rnn/loss/layer_norm input checks (aten/src/ATen/native/Convolution.cpp, RNN.cpp, Loss.cpp)
         r"Expected \d+D \(unbatched\) or \d+D \(batched\) input to \w+, but got input of size|"
         r"input\.size\(-1\) must be equal to input_size|Kernel size can't be greater than actual input size|"
         r"only batches of spatial targets supported|multi-target not supported|"
         r"Given normalized_shape=\[[^\]]*\], expected input with shape|Expected size for first two dimensions of "
         r"batch2 tensor|Expected hidden(?:\[\d\])? size|"
         # numpy reshape/concatenate/stack of samples that differ; sklearn's input check
         r"cannot reshape array of size \d+ into shape|all the input array dimensions except for the concatenation "
         r"axis must match|all input arrays must have the same shape|Expected 2D array, got 1D array|"
         # transformers' padding collator and Trainer given a data set without the columns the model needs;
         # datasets' map() returning columns of unequal length; PIL on a broken image file
         r"You should supply an encoding or a list of encodings to this method that includes input_ids|"
         r"The model did not return a loss from the inputs|expected length \d+ but got length \d+|"
         r"image file is truncated|cannot identify image file",
         "Tensor shapes do not match (data and model config disagree).",
         "Check the model config against the data (sequence length, vocab, channels, number of classes); print the "
         "shapes of one batch next to what the model expects."),
    _sig("nan_loss",
         r"\bloss\b[^\n]{0,30}?[:=]\s*\(?[-+]?nan\b|\bloss\b\s+[-+]?nan\b|loss is (?:nan|inf)|nan loss|"
         r"(?<![a-z])(?:[a-z]+_)*loss(?:_[a-z]+)*['\"]?\s*[:=]\s*(?:tensor)?\(?[-+]?nan\b|^\s*\d+[\s,|]+[-+]?nan\s*$|"
         r"NaN or Inf found|non-finite loss|Detected (?:nan|inf)|FloatingPointError|Minimum loss scale reached|"
         r"Loss became infinite or NaN|returned nan values in its \d+\w* output|\bloss\b[^\n]{0,30}?[:=]\s*\(?inf\b|"
         r"grad_norm['\"]?\s*[:=]\s*nan\b|\bloss (?:became|becomes|went|goes) (?:to )?(?:nan|inf)|\bNaN detected|"
         # torch.nn.utils.clip_grad_norm_(error_if_nonfinite=True); Lightning's EarlyStopping(check_finite=True);
         # Megatron-LM's loss and grad-norm checks and its per-interval count; Keras' TerminateOnNaN;
         # TensorFlow's tf.debugging.check_numerics
         r"is non-finite, so it cannot be clipped|"
         r"Monitored metric \S+ = [^\n]{0,40}?\b(?:nan|inf)\b[^\n]{0,30}is not finite|"
         r"found NaN in local (?:grad norm|forward loss)|number of nan iterations:\s*[1-9]|"
         r"Invalid loss, terminating training|Tensor had (?:NaN|Inf) values",
         "The loss became NaN/Inf, so training stopped making sense.",
         "Lower the learning rate or add warm-up, enable gradient clipping, use bf16 instead of fp16, and check "
         "the data for bad samples; resume from a checkpoint before the blow-up."),
    _sig("nan_loss",
         r"loss scale already at minimum|cannot decrease (?:loss )?scale anymore|"
         r"reducing (?:loss )?scale to (?:0(?:\.0)?\b|1(?:\.0)?\b|0\.\d+|\d(?:\.\d+)?e-\d+)|"
         r"Attempted loss scale: 1(?:\.0)?, reducing to|setting loss scale to:?\s*(?:0\.\d+|\d(?:\.\d+)?e-\d+)",
         "fp16 training overflowed at every step until the dynamic loss scale hit its minimum "
         "(DeepSpeed/apex gave up).",
         "Train in bf16 instead of fp16 (`model.precision: bf16` in run.yaml, and the framework's bf16 switch), or "
         "lower the learning rate / add warm-up and gradient clipping; check the data for bad samples."),
    _sig("rendezvous_failure",
         r"Rendezvous(?:Timeout|Connection|Closed)Error|client socket has timed out.{0,80}trying to connect|"
         r"connect\(\) timed out|DistNetworkError|server socket has failed to (?:listen|bind)|"
         r"Address already in use|Timed out initializing process group in store based barrier|"
         r"socket has failed to connect to|CoordinationService/(?:RegisterTask|Barrier)|Barrier timed out|"
         r"DistStoreError|clients joined|Gloo connectFullMesh failed|TCPStore.{0,80}(?:Connection refused|timed out)",
         "The processes of the job could not find each other at start-up (torchrun rendezvous).",
         "Usually a node or network problem, or a port clash: resubmit; if it repeats, tell the platform team "
         "(check MASTER_ADDR resolves on every node).",
         # c10d logs each connect attempt it will retry as a warning ("[W socket.cpp:663] [c10d] The client socket
         # has failed to connect to ..."); only the error it raises when it gives up says the group did not form
         # (a server socket that cannot bind its port is different: the master port is taken)
         unless=r"^\s*\[W[\d :.]*\s*socket\.cpp:\d+\].{0,40}client socket has failed to connect"),
    _sig("nccl_error",
         r"NCCL error|nccl(?:System|Internal|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)Error|"
         r"NCCL failure \S+ '|"
         r"NCCL WARN .*(?:failed|error)",
         "NCCL (the GPU-to-GPU communication library) failed.", _NCCL_HINT),
    _sig("nccl_timeout",
         r"Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out|"
         r"ran for \d+ milliseconds before timing out|collective operation timeout|Timeout at NCCL work|"
         # the C++ frame of ProcessGroupNCCL's watchdog when the message itself was cut from the paste
         r"WorkNCCL::checkTimeout",
         "A collective operation (all-reduce etc.) timed out: one rank stopped taking part.",
         "Look for the rank that stalled (data loading, a rank-0-only branch, a dead node); make every rank run "
         "the same collectives. Resubmit from the last checkpoint."),
    # The exception type alone wraps both NCCL errors and watchdog timeouts: only a fallback.
    _sig("nccl_error", r"DistBackendError", "NCCL (the GPU-to-GPU communication library) failed.", _NCCL_HINT),
)
_CATEGORY_RANK = {}  # category -> index of its first (highest-priority) signature
for _i, _s in enumerate(SIGNATURES):
    _CATEGORY_RANK.setdefault(_s.category, _i)

# Slurm's verdict outranks the log for causes outside the training.
_SLURM_STATES = {"TIMEOUT": "time_limit", "PREEMPTED": "preempted", "NODE_FAIL": "node_lost",
                 "OUT_OF_MEMORY": "host_oom"}
# Errors a finished training's teardown prints (a peer's store closed, destroy_process_group on a gone
# peer): after the training's last step they are not a failure of the training.
_TEARDOWN_CATEGORIES = {"rendezvous_failure", "nccl_error", "nccl_timeout", "unknown"}
# Where a data set's samples are read and batched (a Dataset's __getitem__, a collate, the data loader's
# _next_data every worker's error passes through): an index, key or value error raised there is the data's.
_DATA_CODE = re.compile(r"__getitem__|getitem|pull_item|collate|annotation|get_random_data|load_data|read_data|"
                        r"get_batch|_next_data|prepare_(?:train|test)_img|get_ann_info|load_image|/datasets?/|"
                        r"dataset\w*\.py|data_?loader\w*\.py", re.IGNORECASE)
_DATA_ERRORS = ("IndexError", "KeyError", "ValueError", "AssertionError", "NotImplementedError", "TypeError")
# Where arguments and configuration are parsed and checked: a ValueError/KeyError raised there is a bad setting.
_CONFIG_CODE = re.compile(r"argparse\.py|hf_argparser\.py|training_args\.py|/omegaconf/|/hydra/|"
                          r"parse_args|__post_init__|validate_args|arguments\.py|config(?:uration)?(?:_\w+)?\.py",
                          re.IGNORECASE)
_CONFIG_ERRORS = ("ValueError", "KeyError", "TypeError", "AttributeError", "AssertionError")
# Where a checkpoint is loaded into the model: a key, shape or size complaint raised there is a checkpoint that
# does not fit (a corrupt file has its own signatures above).
_CHECKPOINT_CODE = re.compile(r"load_checkpoint|load_state_dict|_load_from_state_dict|load_model|resume|"
                              r"from_pretrained|checkpoint\w*\.py|/checkpoint(?:ing)?/", re.IGNORECASE)
_CHECKPOINT_ERRORS = ("KeyError", "RuntimeError", "ValueError", "AssertionError")
_CHECKPOINT_WORDS = re.compile(r"\bkeys?\b|shape|size|mismatch|missing|unexpected|world size", re.IGNORECASE)
# The source line a KeyError was raised on, indexing a loaded checkpoint (`checkpoint["optimizer"]`) or a
# configuration (`cfg["model"]`, `args.config["lr"]`): the key is missing from that checkpoint or config.
_CHECKPOINT_LOOKUP = re.compile(r"\b\w*(?:checkpoint|ckpt|state_dict)\w*\s*\[|torch\.load\([^)]*\)\s*\[", re.IGNORECASE)
_CONFIG_LOOKUP = re.compile(r"\b\w*(?:cfg|config|conf|hparams|hyper_?params|opts?|args|params)\s*\[", re.IGNORECASE)
# A path that does not exist; not a shared library or DLL (a broken install), nor a bare program name such as
# 'nvcc' or 'ninja' (a missing toolchain).
_MISSING_PATH = re.compile(r"^(?:(?:builtins\.)?FileNotFoundError\b|(?:IOError|OSError): \[Errno 2\] No such file "
                           r"or directory: )(?!.*\.(?:so|dll)\b)(?!.*: '[\w+-]+'\s*$)")
# Lines that say Slurm or a person ended the job: a SIGKILL that follows them is not the kernel's.
# slurmstepd's line for a job or step cancelled on request (scancel); a time limit or a preemption adds
# "DUE TO ..." after the time.
_CANCELLED_LINE = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ \*\*\*\s*$")
_ENDED_BY_SLURM = re.compile(r"CANCELLED AT|Job step aborted|DUE TO|scancel", re.IGNORECASE)
# Weak evidence, used only when nothing more specific was found and the error (if any) is about a device:
# torch.utils.cpp_extension logs the first whenever CUDA_HOME is set but torch.cuda.is_available() is False,
# Lightning's Trainer prints the second at start, torch.utils.collect_env the third.
_WEAK_NO_GPU = re.compile(r"No CUDA runtime is found, using CUDA_HOME=|^\s*GPU available: False\b|"
                          r"^\s*Is CUDA available: False\s*$")
_WORKER_EXITED = re.compile(r"DataLoader worker \(pid\(s\) [\d, ]+\) exited unexpectedly")
_DEVICE_WORDS = re.compile(r"cuda|gpu|device|nccl|cudnn|nvidia", re.IGNORECASE)


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


def _raised_loading_a_checkpoint(reading: LogReading) -> bool:
    if reading.exception and reading.exception.startswith("KeyError") and reading.raising_code \
            and _CHECKPOINT_LOOKUP.search(reading.raising_code):
        return True
    return bool(reading.exception and reading.exception.startswith(_CHECKPOINT_ERRORS)
                and (reading.exception.startswith("KeyError") or _CHECKPOINT_WORDS.search(reading.exception))
                and any(_CHECKPOINT_CODE.search(frame) for frame in reading.frames[-3:]))


def _killed_from_outside(reading: LogReading, root: dict | None, lines: list[str]) -> bool:
    """SIGKILL without a message of its own (a bare "Killed", exit -9/137, torchrun's SIGKILL) and nothing
    saying Slurm or a person ended the job."""
    if root and root.get("exitcode") is not None and root.get("signal") != "SIGKILL":
        return False  # the launcher's first failure is not the kill: the -9s are peers it ended after it
    killed = bool(root and root.get("signal") == "SIGKILL") or reading.bare_kill is not None \
        or reading.sigkill is not None
    # the launcher's own exception may be the kill itself (accelerate: "CalledProcessError: ... died with
    # <Signals.SIGKILL: 9>"); any other exception is the program's own error
    own_error = reading.exception and reading.exception_line != reading.sigkill
    return killed and not own_error and not any(_ENDED_BY_SLURM.search(line) for line in lines)


def _launcher_said_sigkill(reading: LogReading) -> bool:
    """A launcher's or shell's line says the process died of SIGKILL, and it is the only error there is."""
    return reading.sigkill is not None and (not reading.exception or reading.exception_line == reading.sigkill)


def _raised_by_data_code(reading: LogReading) -> bool:
    return bool(reading.exception and reading.exception.startswith(_DATA_ERRORS)
                and any(_DATA_CODE.search(frame) for frame in reading.frames))


def _raised_by_config_code(reading: LogReading) -> bool:
    if reading.exception and reading.exception.startswith("KeyError") and reading.raising_code \
            and _CONFIG_LOOKUP.search(reading.raising_code):
        return True
    return bool(reading.exception and reading.raising_frame and reading.exception.startswith(_CONFIG_ERRORS)
                and _CONFIG_CODE.search(reading.raising_frame))


_SIGBUS = re.compile(r"Caught signal 7 \(Bus error|signal 7 \(SIGBUS\)|\bSIGBUS\b")
_NCCL_FRAME = re.compile(r"\bnccl[A-Z]\w*\(\)|libnccl\.so")


def _bus_error_in_nccl(lines: list[str]) -> list[str]:
    """A SIGBUS whose backtrace (the next lines UCX/libunwind print) runs through NCCL: NCCL touching a
    shared-memory segment it could not back, i.e. a /dev/shm too small (a container's 64 MB) or a locked
    memory limit too low. The evidence lines, or [] when the log has no such crash."""
    for i, line in enumerate(lines):
        if _SIGBUS.search(line):
            frame = next((f for f in lines[i + 1:i + 40] if _NCCL_FRAME.search(f)), None)
            if frame is not None:
                return [line.strip(), frame.strip()]
    return []


def _unknown_evidence(lines: list[str], reading: LogReading) -> list[str]:
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


def _unknown_hint(reading: LogReading, root: dict | None) -> str:
    if reading.exception and not _launcher_said_sigkill(reading):
        return "Read the root error above; `slurmctl logs RUN --rank N` shows other ranks."
    if (root and root.get("signal") == "SIGKILL") or reading.bare_kill is not None or _launcher_said_sigkill(reading):
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


def _unknown_summary(exit_code: str, root: dict | None, reading: LogReading, slurm_state: str = "") -> str:
    summary = "slurmctl does not recognise this failure" + (f" (exit code {exit_code})" if exit_code else "")
    killed = (bool(root and root.get("signal") == "SIGKILL") or _launcher_said_sigkill(reading)
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
    if reading.exception and _WORKER_EXITED.search(reading.exception):
        # torch's data loader saw a worker die without an error of its own: memory (RAM or /dev/shm) in half
        # the threads scored, the other half never showed it in the log, so it is a lead, not a verdict
        summary += ("; a data-loader worker died without a Python error of its own: often memory (host RAM or a "
                    "small /dev/shm), but the log does not say so; rerun with num_workers=0 to see the worker's "
                    "own error, and compare the memory peak with the limit (`slurmctl status RUN`)")
    if any("memory limit at some point" in line for line in reading.slurm):
        summary += ("; Slurm warned that the step exceeded its memory limit at some point (memory was reclaimed or "
                    "swapped, nothing was killed for it): if the job failed, memory is the first suspect "
                    "(`sacct -j JOB -o State,MaxRSS,ReqMem`)")
    if reading.exception:
        on = f" on rank {reading.root_rank}" if reading.root_rank is not None else ""
        summary += f"; the root error{on} is `{reading.exception[:300]}`; {_where_to_look(reading)}"
    return summary + "."


def _success(summary: str, evidence: list[str], source: str, reading: LogReading, exited_0: bool = False) -> Diagnosis:
    """`exited_0`: Slurm recorded exit code 0, so nothing is left to fix, not even the exit status."""
    return Diagnosis("success", summary, evidence,
                     "Nothing to fix." if exited_0 else
                     "Nothing to fix in the training. If the exit status matters to a pipeline, make the script "
                     "exit 0 after the last step (e.g. call destroy_process_group() on every rank before exiting).",
                     source=source, extra={"reading": reading.to_dict()})


def in_run_words(found: Diagnosis, events: list[dict], job_id: int | None) -> Diagnosis:
    """A run's diagnosis with what its own records say of how job `job_id` ended: a passed `adopt --smoke`
    test (smoke_passed), or the user's `slurmctl cancel` and the step it stopped at."""
    mine = [e for e in events if e.get("job_id") == job_id]
    passed = [e for e in mine if e.get("event") == "smoke-passed"]
    if passed and found.category in ("cancelled", "unknown"):
        return smoke_passed(passed[-1].get("why") or "", found)
    told = [e for e in mine if e.get("event") == "cancel-result"]
    if found.category == "cancelled" and any(e.get("event") == "cancel-requested" for e in mine):
        at = f" at step {told[-1]['last_step']}" if told and told[-1].get("last_step") is not None else ""
        lost = told[-1].get("steps_lost") if told else None
        found.summary = (f"You cancelled it (`slurmctl cancel`){at}; nothing failed before that"
                         + (f" ({lost} steps since its checkpoint were lost)." if lost else "."))
    return found


def smoke_passed(why: str, found: Diagnosis) -> Diagnosis:
    """A job `adopt --smoke` stopped once its test passed (`why`: what it saw): no failure, whatever the
    log's end (the smoke test's own cancel) reads as."""
    return Diagnosis("success", f"The smoke test passed ({why}); slurmctl cancelled the job there on purpose.",
                     found.evidence, "Nothing to fix: submit it for real with `slurmctl adopt SCRIPT --yes`.",
                     source="run", extra=found.extra)


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
        sig = SIGNATURES[min(own)] if own else SIGNATURES[_CATEGORY_RANK[category]]
    elif hits:
        sig, source = SIGNATURES[min(hits)], "log"
        category = sig.category
    else:
        category, sig, source = "unknown", None, "none"
    cancel = next((i for i, line in enumerate(lines) if _CANCELLED_LINE.search(line)), None)
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
    if reading.finished is not None and category in _TEARDOWN_CATEGORIES and source != "slurm" and all(
            i > reading.finished for n, idx in hits.items() if SIGNATURES[n].category == category for i in idx):
        after = [lines[reading.exception_line].strip()] if reading.exception_line is not None else []
        return _success("The training finished (it said so) before anything failed: what came after its last step "
                        "is the launcher's or the process group's teardown, not a failure of the training.",
                        [lines[reading.finished].strip(), *after], source, reading)
    if sig is None and _raised_by_config_code(reading):
        return Diagnosis(
            "missing_config", f"A setting was rejected while the arguments/configuration were parsed and checked "
            f"(at {reading.raising_frame}).",
            [reading.exception, f"raised at {reading.raising_frame}",
             *([reading.raising_code] if reading.raising_code else [])],
            "Read the message: it names the setting and what it must be. Fix it in `args:` (run.yaml) or the config "
            "file, and compare with the script's --help / the framework version the script was written for.",
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and _raised_loading_a_checkpoint(reading):
        return Diagnosis(
            "checkpoint_mismatch", f"Loading a checkpoint into the model failed (at {reading.raising_frame}): its keys "
            "or shapes are not the model's.",
            [reading.exception, f"raised at {reading.raising_frame}"],
            SIGNATURES[_CATEGORY_RANK["checkpoint_mismatch"]].hint,
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and (bus := _bus_error_in_nccl(lines)):
        nccl_setup = SIGNATURES[_CATEGORY_RANK["nccl_setup"]]
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
            f"{reading.nccl_warn[-1][:200]}", reading.nccl_warn[-3:], _NCCL_HINT,
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and _raised_by_data_code(reading):
        return Diagnosis(
            "data_shape", f"An {reading.exception.split(':')[0]} was raised while reading or batching the data "
            f"(at {reading.raising_frame}): a sample, annotation or label is not what the code expects.",
            [reading.exception, f"raised at {reading.raising_frame}"],
            "Find the sample that fails (print the index in the dataset's __getitem__ / the annotation it reads): "
            "empty or malformed annotation lines, a missing column or label outside the classes are the usual "
            "causes; filter or fix them in the data set.",
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and reading.exception and _MISSING_PATH.search(reading.exception):
        return Diagnosis(
            "missing_config", "A path the run was given (in its arguments or configuration: a data set, a config or "
            "an output directory) does not exist where the job ran.",
            [reading.exception, *([f"raised at {reading.raising_frame}"] if reading.raising_frame else [])],
            "Check the path in the message against `args:`/the config file: relative paths resolve against the "
            "job's working directory, and the file must be on a filesystem the compute nodes mount.",
            rank=reading.root_rank, source="log", extra=extra)
    if sig is None and not (slurm_state or exit_code) and reading.bare_kill is not None \
            and _killed_from_outside(reading, root, lines):
        # No Slurm record to read (a pasted log) and the shell itself said "Killed": a program run by hand that
        # nothing else kills; in the scored threads it was the kernel's OOM killer every time (5 of 5).
        # A launcher's exit -9 alone (torchrun, DeepSpeed, exit 137) is not enough: 2 of 6 such threads never
        # found who killed it, so that stays unknown with the kill named. With Slurm's record
        # (`diagnose RUN`, status, notifications), its verdict decides: FAILED, not OUT_OF_MEMORY, stays unknown.
        return Diagnosis(
            "host_oom", "The process was killed without a message (SIGKILL from outside the program"
            + (", after normal training progress" if reading.last_progress is not None else "")
            + "): almost always the kernel's out-of-memory killer taking back host RAM. Confirm with the node's "
            "kernel log (`dmesg`: \"Out of memory: Killed process\") or Slurm's record "
            "(`sacct -j JOB -o State,MaxRSS,ReqMem`).",
            _unknown_evidence(lines, reading), _HOST_OOM_HINT, rank=reading.root_rank, source="log", extra=extra)
    if sig is None and any(_WEAK_NO_GPU.search(line) for line in lines) and (
            not reading.exception or _DEVICE_WORDS.search(reading.exception)):
        no_gpu = SIGNATURES[_CATEGORY_RANK["no_gpu"]]
        return Diagnosis(
            "no_gpu", "PyTorch found no usable GPU (torch.cuda.is_available() was False) and nothing more specific "
            "failed.", [line.strip() for line in lines if _WEAK_NO_GPU.search(line)][:1] + _unknown_evidence(
                lines, reading)[-3:], no_gpu.hint, rank=reading.root_rank, source="log", extra=extra)
    if sig is None:
        return Diagnosis(
            "unknown", _unknown_summary(exit_code, root, reading, slurm_state), _unknown_evidence(lines, reading),
            _unknown_hint(reading, root),
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


def diagnose_file(path: Path, slurm_state: str = "", exit_code: str = "", *, nofollow: bool = True) -> Diagnosis:
    """A run's job log (<run dir>/logs/<job>.out) also brings what the watchdog did to that job.
    `nofollow=False` for a path the user named (`diagnose --log`): a symlink is theirs to follow."""
    text = read_tail(path, nofollow=nofollow)
    run_dir = rundir.run_dir_of_log(path)
    if not (path.parent.name == rundir.LOGS_DIR and (run_dir / rundir.RUN_JSON).is_file()):
        return diagnose_text(text, slurm_state, exit_code)
    # A run's log holds every attempt of the job, appended. The newest attempt is read first; while it runs
    # (or shows no failure), the newest attempt that failed is what explains the run.
    numbers = {key: n + 1 for n, key in enumerate(rundir.attempt_ids(read_jsonl(run_dir / rundir.ATTEMPTS)))}
    attempts = attempts_newest_first(text, path.stem, numbers)
    if not attempts:
        result = diagnose_text(text, slurm_state, exit_code)
        add_watchdog(result, watchdog_report(run_dir, path.stem), text)
        _add_node_loss(result, run_dir, path.stem)
        _add_data_staging(result, run_dir, path.stem, ended_state=_ended(slurm_state))
        return result
    chosen = None
    for n, (attempt, part) in enumerate(attempts):
        # Slurm's state and exit code are the newest attempt's
        result = diagnose_text(part, slurm_state, exit_code) if n == 0 else diagnose_text(part)
        _add_node_loss(result, run_dir, path.stem, attempt)
        if chosen is None:
            chosen = (attempt, part, result)
        if result.category != "unknown" or result.error_line or result.failing_exit \
                or slurm_state.split(" ")[0].upper() in _ENDED_BADLY:
            chosen = (attempt, part, result)
            break
    attempt, part, result = chosen
    add_watchdog(result, watchdog_report(run_dir, path.stem), part)
    _add_data_staging(result, run_dir, path.stem, attempt, ended_state=_ended(slurm_state))
    result.attempt = attempt
    result.summary = f"{result.summary.rstrip()} ({attempt['label']}.)"
    return result


# Slurm states of a job whose newest attempt itself failed: it is what `diagnose` explains, even when its
# log says nothing (an older attempt's preemption must not stand in for it).
_ENDED_BADLY = {"FAILED", "OUT_OF_MEMORY", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "CANCELLED", "BOOT_FAIL", "DEADLINE"}
_STEP_RESTART = re.compile(r"^slurmctl: training exited with code -?\d+; the allocation is healthy: restarting it")


def attempts_newest_first(text: str, job_id: str, numbers: dict[tuple[int, int], int] | None = None
                          ) -> list[tuple[dict, str]]:
    """Each attempt of a job's log, newest first, with a description of which it is (runtime.attempt writes a
    header per attempt; a training restarted inside the allocation starts after its 'restarting it here' line,
    and only its newest run is the attempt's own). `numbers`: (job id, restart count) -> the run-wide
    attempt number (rundir.attempt_ids), as `slurmctl logs --attempt` takes it."""
    lines = text.splitlines()
    starts = [(i, rundir.header_restart_count(m))
              for i, line in enumerate(lines) if (m := rundir.ATTEMPT_HEADER.match(line))]
    found = []
    for k, (begin, number) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        restarts = [i for i in range(begin, end) if _STEP_RESTART.match(lines[i])]
        # the header carries Slurm's restart count; the user's number is the run's (1 = its first attempt)
        run_attempt = (numbers or {}).get((int(job_id), number)) if job_id.isdigit() else None
        label = (f"read from job {job_id}'s attempt {k + 1} of {len(starts)}"
                 + (", the newest" if k + 1 == len(starts) else ", the newest that failed")
                 + f"; restart count {number}"
                 + (f"; the run's attempt {run_attempt}: `slurmctl logs RUN --attempt {run_attempt}`"
                    if run_attempt else ""))
        if restarts:
            label += f"; after {len(restarts)} restart(s) of the training inside the allocation"
        found.append(({"number": number, "run_attempt": run_attempt, "index": k + 1, "of": len(starts),
                       "job_id": job_id,
                       "restarts_in_allocation": len(restarts), "label": label},
                      "\n".join(lines[(restarts[-1] + 1) if restarts else begin:end])))
    return found[::-1]


def _ended(slurm_state: str | None) -> str:
    """Slurm's state word when the job ended badly, else ''."""
    word = (slurm_state or "").split(" ")[0].upper()
    return word if word in _ENDED_BADLY else ""


def _add_data_staging(result: Diagnosis, run_dir: Path, job_id: str, attempt: dict | None = None,
                      ended_state: str = "") -> None:
    """The run's staging step recorded why it stopped this job before the training (runtime/datastage.py):
    that record names the dataset, the cause and the fix, more exactly than the log's line. A job that
    ended (`ended_state`: its time limit, a cancel) while its record still says it was staging never trained
    either."""
    records = rundir.Run(run_dir.name, run_dir).stage_records()
    failed = staging_failures(records, job_id, attempt["number"] if attempt else None)
    if not failed:
        staging = in_progress(records, job_id) if ended_state else []
        if staging:
            result.category, result.source = "data_staging", "log"
            result.summary, result.hint = staging_headlines(staging, ended=True, state=ended_state)
            result.evidence = [f"data-stage record of {staging[0]['node']}: {staging_progress(staging)}",
                               *result.evidence][:5]
            result.error_line = result.evidence[0]
        return
    first = failed[0]
    nodes = sorted({f["node"] for f in failed})
    result.category, result.source = "data_staging", "log"
    result.summary = failure_headline(first) + (f" (also on {', '.join(nodes[1:])})" if len(nodes) > 1 else "")
    said = f"data-stage record of {first['node']}: {first['message']}"
    # the log's lines say the same as the record (or a piece of it): shown once, whole
    result.evidence = [said, *(e for e in result.evidence if e.strip() not in said and first["message"] not in e)][:5]
    result.error_line = said
    result.hint = first["fix"] or SIGNATURES[_CATEGORY_RANK["data_staging"]].hint


def _add_node_loss(result: Diagnosis, run_dir: Path, job_id: str, attempt: dict | None = None) -> None:
    """A node of this job's allocation lost (runtime.attempt's probe after the step failed): that is the
    cause, whatever the survivors' logs say (their collectives fail once a peer is gone)."""
    lost = [e for e in read_jsonl(run_dir / rundir.ATTEMPTS)
            if e.get("event") == "node-lost" and str(e.get("job_id")) == job_id
            and (attempt is None or e.get("restart_count") in (None, attempt["number"]))]
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
