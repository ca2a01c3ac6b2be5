"""The diagnosis's vocabulary and the known wordings of each cause: ``SIGNATURES``, in a fixed priority
(root causes before the errors they trigger on other ranks). observe/diagnose.py reads a log's
structure and decides with them; they are scored at first sight on blind batches of real logs
(benchmarks/diagnose_corpus.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

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


NCCL_HINT = ("Resubmit; if it repeats on the same nodes, tell the platform team. Rerun with NCCL_DEBUG=INFO "
              "(env: in run.yaml) for details.")
HOST_OOM_HINT = ("Use fewer data-loader workers or smaller prefetch, avoid loading the whole dataset into RAM, "
                  "or ask for more memory per node.")

# Highest priority first: a root cause outranks the errors it triggers on other ranks.
SIGNATURES: tuple[Signature, ...] = (
    _sig("gpu_hardware",
         r"uncorrectable ECC error|ECC_UNCORRECTABLE|\bXid\b.{0,40}\b(?:48|63|64|74|79|92|94|95)\b|fallen off the bus|"
         r"GPU is lost|cudaErrorDevicesUnavailable|NVLink error|Unable to determine the device handle for GPU|"
         r"CUDA error: (?:an )?ECC error|row remapping failure|"
         # the kernel driver (NVRM) could not initialise a GPU at all: the board, its power or its PCIe link
         r"NVRM: RmInitAdapter failed|rm_init_adapter failed for device",
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
         # the node's prolog (its health checks) failed: Slurm drains the node and revokes the allocation
         r"Prolog failure on node|"
         r"has been marked dead because the (?:detector|monitor) has missed too many heartbeats|\bNodeDiedError\b|"
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
         # the NVIDIA container toolkit refusing an image whose CUDA needs a newer driver than the node's
         r"nvidia-container-cli: requirement error: unsatisfied condition: cuda\s*>=|"
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
         # ROCm's words for it (the HSA runtime's page fault report on AMD GPUs)
         r"Memory access fault by GPU node-\d+|"
         r"device-side assert(?:ion)? triggered|misaligned address|an illegal instruction was encountered|"
         # (not cuDNN's EXECUTION_FAILED: a kernel of another architecture fails the same way, as on an RTX 3090
         # under CUDA 10)
         r"CUBLAS_STATUS_EXECUTION_FAILED|CUDNN_STATUS_MAPPING_ERROR|"
         r"\.cu:\d+: \S+: block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion",
         "A CUDA kernel touched memory it should not (illegal access or a device-side assert).",
         "Rerun on a small config with CUDA_LAUNCH_BLOCKING=1 to find the op; check indices/labels are in range "
         "and custom kernels/extensions match this torch version."),
    _sig("cuda_oom",
         r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|"
         r"Cuda failure '?out of memory|CUDA error: out of memory|HIP out of memory|"
         r"OOM when allocating tensor(?!.{0,200}device:CPU:\d)|"
         # the gpuErrchk macro of CUDA's samples, copied into many extensions ("GPUassert: out of memory file.cu 103")
         r"GPUassert: out of memory|"
         r"ResourceExhaustedError(?!.{0,300}device:CPU:\d)|RESOURCE_EXHAUSTED: Out of memory|CUDNN_STATUS_ALLOC_FAILED|"
         # a CUDA call's status check failing with 2, cudaErrorMemoryAllocation (Caffe's and MXNet's CHECK)
         r"cudaSuccess \(2 vs\. 0\)|"
         r"MPS backend out of memory|Failed to get convolution algorithm\. This is probably because cuDNN failed|"
         r"cudaMalloc.{0,40}out of memory|THCudaCheck FAIL .{0,200}\bout of memory|"
         # thrust (CUDA's C++ template library: XGBoost's, cuDF's GPU code) failing to allocate device memory
         r"thrust::system::(?:system_error|detail::bad_alloc).{0,80}\bout of memory|"
         # XLA's device allocator (stream_executor: "Failed to allocate request for %s (%uB) on device ordinal %d")
         # and its BFC allocator ("Out of memory while trying to allocate %d bytes"), as JAX raises them
         r"Failed to allocate request for \S+ \(\d+B\) on device ordinal|"
         r"Out of memory while trying to allocate \d+ bytes|"
         # the driver API's name (TensorFlow's and JAX's allocators log it); XLA's status text
         r"CUDA_ERROR_OUT_OF_MEMORY|Resource exhausted: Out of memory|"
         # the TPU runtime's allocator (torch_xla, TensorFlow on TPU): "Attempting to allocate 180.59M. That was
         # not possible. There are 142.58M free."
         r"Attempting to allocate \S+\. That was not possible\. There are \S+ free|"
         # XLA's report of what a program that did not fit needed of the TPU's memory
         r"Total hbm usage >=|Program hbm requirement|"
         # Habana Gaudi's device memory (the HPU's PT_DEVMEM module)
         r"MODULE:PT_DEVMEM Allocation failed",
         "A GPU ran out of memory.",
         "Lower the per-GPU batch size (keep the global batch with gradient accumulation), enable activation "
         "checkpointing, or shard the model (FSDP/ZeRO). PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps "
         "with fragmentation."),
    # Windows' commit limit (RAM + page file) reached while the process maps its libraries or workers
    # (ERROR_COMMITMENT_LIMIT, in the system's language): host memory, whatever DLL it was loading
    _sig("host_oom", r"\[WinError 1455\]|paging file is too small for this operation|页面文件太小",
         "Windows ran out of commit memory (RAM plus page file) while the program loaded its libraries or "
         "started its data-loader workers.", "Use fewer data-loader workers (each maps torch's DLLs again), or "
         "enlarge the page file / add RAM; on a cluster node, ask for more memory per node."),
    _sig("permission_denied", r"Permission denied|PermissionError(?!: \[WinError 32\])|\[Errno 13\]|\bEACCES\b|"
         # TensorFlow's and gRPC's status name; a cloud bucket's IAM refusal ("does not have storage.objects.create
         # access to")
         r"\bPermissionDenied(?:Error)?\b|\bdoes not have [\w.]+ access to\b|"
         # writing where the mount is read-only (a container image, a shared dataset); EPERM from the OS
         r"Read-only file system|\[Errno 30\]|\[Errno 1\] Operation not permitted",
         "The job was refused access to a file, directory, socket or shared memory (/dev/shm): permission denied.",
         "Check who owns the path in the message and its mode (`ls -ld PATH`): write outputs and caches under "
         "your own directories (HF_HOME, TORCH_HOME, TMPDIR), make scripts executable, and ask the platform team "
         "if /dev/shm or a shared path is not writable by you on the nodes.",
         # Windows' sharing violation (a file another process holds open) is not a refusal of access
         unless=r"\[WinError 32\]"),
    # include/shm.h: NCCL sizes its shared-memory segments with posix_fallocate, which fails with ENOSPC on a small
    # /dev/shm (a container's 64 MB): the collectors of two batches, and the vocabulary, call that /dev/shm full
    _sig("disk_full", r"NCCL WARN Call to posix_fallocate failed\s*:\s*No space left on device",
         "The shared-memory filesystem (/dev/shm) is full: NCCL could not create its shared-memory segments "
         "(No space left on device).",
         "Give the job a larger /dev/shm (containers: `--shm-size` or `--ipc=host`; the platform team sets it for "
         "the nodes), free what other jobs left in /dev/shm, or set NCCL_SHM_DISABLE=1 to go through the network."),
    _sig("nccl_setup",
         r"\bibv_\w+\b.{0,80}(?:fail|error|Cannot allocate memory)|(?:fail|error).{0,80}\bibv_\w+|"
         # (not "--ulimit memlock=-1" on a docker command line: that is the setting that avoids it)
         r"\bmemlock\b(?!=)|NET/IB\s*:.{0,80}(?:fail|No device found|Unable)|Bootstrap : no socket interface found|"
         r"no usable (?:listening )?(?:network )?interface|No socket interface found|NCCL_SOCKET_IFNAME|"
         r"Could not find interface|failed to extend /dev/shm|Failed to open libibverbs|"
         r"no userspace device-specific driver found|"
         r"(?:Error while creating|Unable to allocate|failed to create) shared memory segment (?:/dev/shm|nccl-shm)|"
         # the transport's or the bootstrap's connection refused or out of descriptors (NCCL's "Last error: Net :
         # Connect to 169.254.3.1<33323> failed : Connection refused"; AWS Neuron's CCOM words it as NCCL does);
         # a topology/graph file (NCCL_TOPO_FILE, NCCL_GRAPH_FILE) that names devices this machine does not have
         r"\bNet(?:/Socket)?\s*: Connect to \S+ failed : Connection refused|"
         r"WARN Call to (?:accept|connect|socket) failed : Too many open files|"
         r"NCCL WARN XML Import Channel : dev \d+ not found|"
         r"Unable to create .{0,40}shared memory .{0,40}/dev/shm|ncclSystemError: System call \(e\.g\. socket, "
         r"malloc\) or external library call failed or device error.{0,200}(?:ibv|IB|socket interface)",
         "NCCL could not set up its transport between GPUs/nodes (InfiniBand verbs, locked-memory limit, or no "
         "usable network interface), before any collective ran.",
         "For `ibv_*`/memlock errors the nodes' locked-memory limit is too low (`ulimit -l` must be unlimited: "
         "the platform team sets it for slurmd); for interface errors set NCCL_SOCKET_IFNAME to an interface the "
         "nodes have (`ip -br link`), or NCCL_IB_DISABLE=1 to fall back to TCP. Rerun with NCCL_DEBUG=INFO.",
         # NCCL's INFO lines report a transport it looked for and did not find (no InfiniBand device: it uses
         # sockets) and carry on: that is how NCCL starts on every node without InfiniBand
         unless=r"\bNCCL INFO\b.{0,40}NET/IB\s*:\s*No device found"),
    _sig("host_oom",
         r"oom[-_]kill event|have been OOM Killed|cgroup out-of-memory handler|task[s]? [\d,-]+: Out Of Memory|"
         r"exceeded memory limit \(\d+ > \d+\), being killed|Exceeded (?:job|step) memory limit(?! at some point)|"
         # Kubernetes' container status when the container's memory cgroup killed it
         r"\bOOMKilled\b|Reason:\s*OOMKilled|The node was low on resource: memory|"
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
         # Slurm's "task 0: Out Of Memory" and the kernel's "Out of memory: Killed process"; a bare "out of memory"
         # names no memory (a GPU library's allocator says it the same way)
         r"(?-i:Out Of Memory)|Out of memory: Kill(?:ed)? process|Killed process \d+ .*out of memory|\bMemoryError\b|"
         # TensorFlow's allocator on the host ("OOM when allocating tensor ... on .../device:CPU:0 by allocator cpu")
         r"OOM when allocating tensor.{0,200}device:CPU:\d|"
         r"DataLoader worker \(pid[^)]*\) is killed by signal: Killed|Cannot allocate memory|std::bad_alloc|"
         r"Unable to allocate [\d.]+ [KMGT]i?B for an array|node running low on memory|Memory cgroup out of memory|"
         # c10/core/CPUAllocator.cpp (Windows words it "not enough memory")
         r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|"
         # numpy asked for an array larger than the address space allows (numpy/core/src/multiarray/ctors.c)
         r"ValueError: array is too big|"
         # c10/core/impl/alloc_cpu.cpp of older torch: posix_memalign's ENOMEM as an enforce failure
         r"\[enforce fail at (?:CPUAllocator|alloc_cpu)\.cpp:\d+\] posix_memalign",
         "The node ran out of host (CPU) memory and the kernel killed a process.", HOST_OOM_HINT,
         # "out of memory" in a line that names the GPU, or a CUDA call's status (Caffe's "Check failed: error ==
         # cudaSuccess (2 vs. 0)  out of memory"), is the GPU's memory, in a wording cuda_oom does not know
         unless=r"\bCUDA|\bGPU|cuDNN|\bHIP\b|\bVRAM\b|\bHBM\b|device memory|on device|"
                # torch < 1.0's THC (its CUDA backend): "THCudaCheck FAIL file=.../THCStorage.cu ... out of memory"
                r"THCudaCheck|\.cu\b|thrust::"),
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
         r"DataLoader worker \(pid[^)]*\) is killed by signal: Bus\b|out of shared memory|"
         r"insufficient shared memory \(shm\)|"
         # aten/src/ATen/MapAllocator.cpp: a tensor handed between processes through a full /dev/shm
         r"unable to (?:write to file|allocate shared memory\(shm\) for file) </torch_\w+>",
         "A data-loader worker ran out of shared memory (/dev/shm) and was killed.",
         "Use fewer data-loader workers or smaller prefetch, return smaller samples from the dataset, or ask the "
         "platform team for a larger /dev/shm on the nodes."),
    _sig("disk_full", r"No space left on device|Errno 28\b|Disk quota exceeded|Errno 122\b|StorageFull|"
         r"not enough (?:free )?disk space|insufficient disk space|"
         # Windows' ERROR_DISK_FULL, as TensorFlow and Python on Windows print it
         r"There is not enough space on the disk|"
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
         # (TensorFlow's DataLossError reading a TFRecord, "corrupted record at N", is the data's, not a checkpoint's)
         r"DataLossError(?!.{0,40}corrupted record)|Checksum does not match: stored|"
         # HDF5 (Keras' .h5 weights) opening a file that is not HDF5 at all: a download cut short, an LFS pointer
         r"Unable to open file \(file signature not found\)",
         "A checkpoint file could not be read: it is truncated or corrupt (usually an interrupted save).",
         "Delete that checkpoint directory so training resumes from the previous valid one; save with "
         "`rt.checkpoints.save()` so a partial save is never marked valid.",
         # pickle reading a JSON text file (a config passed where the checkpoint belongs), TensorFlow reading its
         # text index of the checkpoints (the missing_config wording above): the wrong path, not a corrupt file
         unless=r"invalid load key, '\{'|Unable to open table file \S*[/\\]checkpoint\b:? .{0,40}not an sstable"),
    _sig("checkpoint_mismatch",
         r"size mismatch for \S+: copying a param|Error\(s\) in loading state_dict|"
         r"Missing key\(s\) (?:in state_dict|when loading)|"
         r"Unexpected key\(s\) in state_dict|(?:unexpected|missing) key \"[^\"]+\" in state_dict|"
         r"While copying the parameter named|ignore_mismatched_sizes|"
         r"copying a param (?:with|of) shape|from checkpoint, the shape in current model is|"
         r"expects \d+ weight\(s\), but the saved weights have|due to incompatible shapes|"
         # Marian continuing from a model built with other dimensions or another vocabulary
         r"for existing parameter '[^']+' does not match original shape|"
         r"in the checkpoint but \S+ in the model|Missing key in (?:checkpoint )?state_dict|"
         # Caffe copying a .caffemodel's weights into the net a prototxt builds (net.cpp CopyTrainedLayersFrom)
         r"Cannot copy param \d+ weights from layer '[^']*'; shape mismatch|"
         r"checkpoint being loaded used a DP world size of \d+ but the current world size|"
         r"Assign requires shapes of both tensors to match|Key \S+ not found in checkpoint|"
         # accelerate.utils.modeling.set_module_tensor_to_device: a checkpoint tensor that does not fit its parameter
         r"Trying to set a tensor of shape .{0,200}this looks incorrect|"
         # PaddlePaddle's fluid.io.load_vars / load_params
         r"the Program requires a parameter with a shape of .{0,120}while the loaded parameter|"
         # torch.distributed.checkpoint's planner; Keras 2 load_weights; Keras 3 load_own_variables; TF restore
         r"Size mismatch between saved .{0,80} and current:|You are loading a weight file containing \d+ layers into a "
         r"model with \d+ layers|expected \d+ variables, but received \d+ variables during loading|"
         r"Cannot assign value to variable .{0,120}Shape mismatch|Received incompatible tensor with shape|"
         # Flax: parameters (a restored checkpoint) whose shapes are not what the module initialises
         r"ScopeParamShapeError|Inconsistent shapes between value and initializer for parameter|"
         r"Initializer expected to generate shape .{0,80} but got shape",
         "The checkpoint does not fit the model: its parameter names or shapes differ from the model built now "
         "(a different config, vocabulary or architecture).",
         "Build the model with the same config the checkpoint was saved with (hidden size, vocab, layers), point "
         "at the right checkpoint, or load on purpose with `strict=False` / `ignore_mismatched_sizes=True` when "
         "you mean to re-initialise the mismatched layers (e.g. a new classification head)."),
    _sig("arch_mismatch",
         r"no kernel image is available for execution|is not compatible with the current PyTorch installation|"
         # the CPU met an instruction it has not (a wheel built for AVX on an older CPU): the shell's or gdb's words
         r"^\s*Illegal instruction(?: \(core dumped\))?\s*$|received signal SIGILL\b|"
         # torch's warning on a GPU older than its oldest build target
         r"PyTorch no longer supports this GPU because it is too old|"
         # RAPIDS (cuDF, cuML) on a GPU older than its builds (compute capability 6.0)
         r"installation is missing the necessary PTX files|"
         # transformers' TrainingArguments: bf16 asked for on a GPU older than Ampere (T4, V100)
         # vLLM's check of the dtype against the GPU ("Bfloat16 is only supported on GPUs with compute capability
         # of at least 8.0")
         r"only supported on GPUs with compute capability of at least|"
         # TransformerEngine's FP8 check; Apple's MPS backend, which has no float64
         r"compute capability [\d.]+ or (?:higher|newer|above) (?:is )?required|"
         # xformers' and flash-attention's kernels built for another architecture than the GPU's
         r"this function is for sm_?\d+, but was built for sm_?\d+|"
         r"MPS framework doesn't support float64|"
         r"Your setup doesn't support bf16/gpu|bf16 mixed precision requires PyTorch >= [\d.]+ and a supported device|"
         r"cudaErrorNoKernelImageForDevice|Exec format error|"
         r"Unsupported gpu architecture '?compute_\d+|"
         # cudaErrorInvalidDeviceFunction: "the requested device function does not exist or is not compiled for the
         # proper device architecture" (torch 0.x: "cuda runtime error (8) : invalid device function")
         r"\binvalid device function\b|"
         # flash-attn's csrc check for sm_80+
         r"FlashAttention only supports Ampere GPUs or newer|"
         # a kernel that needs a newer GPU than this one ("FlashAttention backward for head dim > 64 requires A100 or
         # H100 GPUs")
         r"\brequires? (?:an? )?(?:A100|H100|H200|Ampere|Hopper|Ada Lovelace|Turing|Volta)(?: or (?:newer|later|A100|"
         r"H100|Hopper|Ampere))?(?: GPUs?)?\b",
         "The software was built for a different GPU/CPU architecture than this node has.",
         "Use a torch/CUDA build that supports this GPU (e.g. sm_90 for H100), or rebuild the image/extension "
         "for it (TORCH_CUDA_ARCH_LIST)."),
    _sig("missing_config", r"invalid device ordinal",
         "The program asked for a GPU index this node does not have: more processes per node than GPUs the job was "
         "given, or a GPU id fixed in the configuration (gpu_idx=5, cuda:3) on a node with fewer GPUs.",
         "Start one process per GPU the job has (torchrun --nproc_per_node, Lightning devices=, `gpus:` in run.yaml) "
         "and let each use its LOCAL_RANK (cuda:LOCAL_RANK); remove fixed GPU ids from the config and arguments, "
         "and do not set CUDA_VISIBLE_DEVICES yourself: Slurm sets it to the GPUs the job was given."),
    _sig("no_gpu",
         r"No CUDA GPUs are available|Found no NVIDIA driver on your system|no CUDA-capable device is detected|"
         # docker with no NVIDIA container runtime to hand a GPU over, or too old to know --gpus
         r"could not select device driver \"\" with capabilities: \[\[gpu\]\]|^unknown flag: --gpus\b|"
         r"cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|torch\.cuda\.is_available\(\)(?: is|:)\s*False|"
         r"Torch not compiled with CUDA enabled|NVIDIA-SMI has failed because it couldn't communicate with the "
         r"NVIDIA driver|CUDA driver initialization failed|"
         # a package built without its GPU part: MXNet ("Please compile with CUDA enabled"), a CPU-only DGL wheel
         r"\bcompile with CUDA enabled|Device API (?:cuda|gpu) is not enabled|"
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
    # JAX says so and runs on the CPU: on a GPU cluster the job's GPUs sit idle (a jaxlib without CUDA, or a
    # container without the driver), which is a failure of the run even when the script ends well (of the threads
    # with this line and nothing else, every one was a CPU-only jaxlib where a GPU or TPU was meant to be used)
    _sig("no_gpu",
         # ("An NVIDIA GPU may be present ..., but a CUDA-enabled jaxlib is not installed" is left out: a torch
         # program that imports jax through a library prints it too, and trains on its GPUs)
         r"No GPU/TPU found, falling back to CPU|"
         r"TPU may be present on this machine, but either a TPU-enabled jaxlib or libtpu is not installed",
         "JAX found no GPU and ran on the CPU: its jaxlib has no CUDA support (or the container has no driver).",
         "Install the CUDA build of JAX in the job's environment (`pip install -U \"jax[cuda12]\"`, the CUDA major "
         "the nodes' driver supports) and check `python -c 'import jax; print(jax.devices())'` lists GPUs; in a "
         "container pass the GPUs through."),
    _sig("import_error",
         r"ModuleNotFoundError|ImportError|cannot open shared object file|undefined symbol:|cannot import name '[^']+' "
         r"from '|"
         # DeepSpeed's compiled CPU Adam that was never built or could not be loaded
         r"object has no attribute 'ds_opt_adam'|"
         r"Error locating target '|GLIBC(?:XX)?_\S+' not found|DLL load failed|"
         r"CUDA Setup failed despite GPU being available|"
         r"Loaded runtime CuDNN library.{0,60}but source was compiled with|DNN library is not found|"
         # jax/_src/lib/__init__.py checking the CUDA libraries against those jaxlib was built with
         r"Found \w+ version \d+, but JAX was built against version \d+|"
         r"No module named '|Could not load library lib\w+\.so|compiled with different CUDA (?:major )?versions|"
         # a package's loader naming its compiled extension it could not find ("File fbgemm_gpu_py.so not found")
         # (the name bounded: an unbounded run of any characters at a pattern's start is tried from every position)
         r"[\w.+-]{1,200}\.so(?:\.\d+)*'? (?:is |was )?not found\s*$|"
         r"requires the \S+ library but it was not found in your environment|Error building extension|"
         r"ninja: build stopped: subcommand failed|"
         # numpy 2 under modules compiled for numpy 1 (numpy/core/_multiarray_umath.py), or the other way round
         r"compiled using NumPy 1\.x cannot be run in|numpy\.core\.multiarray failed to import|_ARRAY_API not found|"
         r"numpy\.dtype size changed, may indicate binary incompatibility|"
         # transformers' lazy module wrapping the real import error; Windows' loader (torch/__init__.py)
         r"Failed to import \S+ because of the following error|\[WinError 126\]|Error loading \S+\.dll|"
         # a library's callable given an argument its installed version does not take (Lightning 2 dropped
         # Trainer(gpus=), Hydra < 1.2 has no version_base=, an older DeepSpeed's zero.Init): code written for
         # another version than the one installed. Python raises it at the call, naming the callable
         r"^(?:TypeError: )?[\w.]*\w\(\) got an unexpected keyword argument '\w+'|"
         r"Could not find module '[^']+\.dll'|"
         # Hydra's launcher and sweeper config groups come with their plugins (hydra-submitit-launcher, ...): one it
         # cannot find is a plugin not installed, before the configuration rule's "Could not find '...'"
         r"Could not find 'hydra/(?:launcher|sweeper)/[^']+'|"
         # torch.backends.cudnn's version check; torch.utils.cpp_extension building an extension
         r"cuDNN version incompatibility|mismatches the version that was used to compile|"
         r"CUDA_HOME environment variable is not set|CUDA_HOME does not exist, unable to compile|"
         r"xFormers can't load C\+\+/CUDA extensions|Could not find the bitsandbytes CUDA binary|"
         # torch.compile's inductor without Triton (not built for Windows, or too old)
         r"Cannot find a working triton installation|"
         # torchvision built for another torch (torchvision/extension.py, its C++ ops not registered);
         # a script named like the package it imports
         r"Couldn't load custom C\+\+ ops|operator torchvision::\w+ does not exist|"
         r"most likely due to a circular import|"
         # a compiled or scripted op calling an aten op with the schema of another torch version
         r"aten::\w+\(\) is missing value for argument|"
         # a framework's own check of its version ("PaddlePaddle version 2.0.0 or higher is required")
         r"\bversion v?\d+(?:\.\d+)+ or (?:higher|later|newer|above) is required\b|"
         # Paddle's loader of the CUDA libraries it links at run time (libnccl.so, libcudnn.so)
         r"The third-party dynamic library \([^)]+\) that Paddle depends on is not configured correctly",
         "Python could not import a module (missing package or mismatched library) in the job's environment.",
         "Install the package in the environment the job uses (`python:` in run.yaml / the image), "
         "then resubmit; try `slurmctl submit --dry-run` first.",
         # TensorFlow probing for optional GPU libraries: a warning it survives by running on the CPU
         # NCCL's INFO lines report optional plugins it did not find (libnccl-net.so) and carries on
         unless=r"Could not load dynamic library|dso_loader|UserWarning|\bwarn\(|\bNCCL INFO\b|"
         # JAX probing for backends it may not have (xla_bridge: "Unable to initialize backend 'tpu': ...
         # libtpu.so: cannot open shared object file") and carrying on with the others
         r"Unable to initialize backend"),
    _sig("missing_config", r"Duplicate GPU detected\s*: rank \d+ and rank \d+ both on CUDA device",
         "Two ranks of the job were placed on the same GPU (NCCL refuses that): more processes per node than GPUs, "
         "or each rank not selecting its own device.",
         "Start one process per GPU (`--nproc_per_node` / `--ntasks-per-node` equal to the GPUs per node), keep "
         "CUDA_VISIBLE_DEVICES as Slurm sets it, and select the device from LOCAL_RANK "
         "(`torch.cuda.set_device(int(os.environ['LOCAL_RANK']))`) before creating the process group."),
    # TensorFlow's `checkpoint` file is the text index of a directory's checkpoints: restoring from it means
    # the path given is the index's, not a checkpoint prefix (model.ckpt-1000)
    _sig("missing_config", r"Unable to open table file \S*[/\\]checkpoint\b:? .{0,40}not an sstable",
         "The restore path names TensorFlow's `checkpoint` index file (a text file listing the checkpoints), "
         "not a checkpoint.",
         "Give the checkpoint's prefix (e.g. `.../model.ckpt-1000`, without .index/.data) or the directory "
         "where the framework looks the latest one up (`tf.train.latest_checkpoint`)."),
    _sig("missing_config",
         r"(?:FileNotFoundError|No such file or directory).{0,200}\.(?:ya?ml|json|toml|cfg|ini|conf)\b|"
         # the shell told to run a script at a path that is not there; a YAML file yaml-cpp cannot parse (Marian's
         # configuration and vocabularies)
         r"^(?:ba|z)?sh: (?:line \d+: )?\.{0,2}/\S+: No such file or directory|yaml-cpp: error at line \d+|"
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
         # torch_xla started with no device configured (PJRT_DEVICE / XRT_TPU_CONFIG unset); TensorFlow on a
         # TPU given a local path where the TPU workers need a bucket (gs://)
         r"Missing XLA configuration|File system scheme '\[local\]' not implemented|"
         # torch for Windows and macOS has no NCCL (use the gloo backend); its Windows builds from 2.4 have no libuv
         # for the TCPStore (USE_LIBUV=0)
         r"Distributed package doesn't have NCCL (?:\"\s*\")?built in|"
         r"use_libuv was requested but PyTorch was buil[dt] without libuv support|"
         # jsonnet (AllenNLP's configuration language) refusing the configuration file as written
         r"(?:STATIC|RUNTIME) ERROR: \S.{0,200}\.(?:jsonnet|libsonnet):\d+|"
         # LLaVA's preprocessing (and its forks') when the conversation template (--version) does not fit the
         # tokenizer: every sample's labels are masked out, so nothing is learned
         r"WARNING: tokenization mismatch: \d+ vs\. \d+\. \(ignored\)|"
         # submitit with no Slurm to submit to falls back to its LocalExecutor, which runs one node only
         r"LocalExecutor can use only one node|"
         # peft's LoraConfig for a model architecture it has no default target modules for
         r"Please specify `target_modules` in `peft_config`|"
         # a check that one setting divides another, as an assert states it ("assert self.n_batch %
         # self.nminibatches == 0"): the settings chosen do not fit each other
         r"\bassert\b[^\n]{0,80}\S\s*%\s*[\w.()\[\]]+\s*==\s*0\b|"
         # a distributed-only part (SyncBatchNorm, DDP, a collective) in a program started without a process group
         # (run with python instead of its launcher, or a config that asks for SyncBN on one process)
         r"Default process group (?:has not been|is not) initialized|"
         # DDP set up for every parameter to take part in the loss (find_unused_parameters=False, its default)
         r"Expected to have finished reduction in the prior iteration|"
         r"yaml\.(?:scanner|parser|constructor|composer)\.\w+Error|"
         r"Config file .{0,120}(?:not found|does not exist)|Requested node configuration is not available|"
         r"\b\w*Config\w*(?:Error|Exception)\b|"
         # OpenMMLab's config files inheriting a key from two bases (mmengine/mmcv Config)
         r"Duplicate keys? (?:is )?not allowed among bases|"
         r"not used by the HfArgumentParser|Check batch related parameters|"
         # torchvision's ImageFolder given a directory without one sub-folder of images per class
         r"Found 0 (?:files|images) in subfolders of|Couldn't find any class folder in|"
         # Caffe's solver writing snapshots under a prefix whose directory does not exist (checked at start, or
         # failing at the first snapshot: io.cpp's WriteProtoToBinaryFile)
         r"Cannot write to snapshot prefix|Check failed: proto\.SerializeToOstream\(&output\)|"
         r"Invalid generic resource \(gres\) specification|Invalid partition name specified|"
         # Slurm refusing the request as written (sbatch/salloc/srun); the interpreter given a script path that
         # does not exist
         r"Invalid account or account/partition combination|Invalid qos specification|"
         r"Requested time limit is invalid|"
         # any request Slurm refuses at submission (the controller being unreachable is not the request's fault)
         r"Batch job submission failed: (?!.{0,40}(?:Socket timed out|Unable to contact|temporarily unable|"
         r"Zero Bytes were transmitted))|"
         # sbatch only submits: its errors are the request refused as written, a site's job_submit plugin's words
         # included ("sbatch: error: CPU job setup is not valid"); the controller being unreachable is not that
         r"^\s*sbatch: error: (?!.{0,60}(?:Socket timed out|Unable to contact|temporarily unable|"
         r"Zero Bytes were transmitted|Batch job submission failed))|"
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
    _sig("missing_config",
         # MuJoCo, gym or pyglet opening a window or an on-screen GL context on a node that has no display
         r"gladLoadGL error|Failed to initialize (?:GLFW|OpenGL)|NoSuchDisplayException|cannot connect to X server|"
         r"GLFWError: \(\d+\) X11: |Could not initialize (?:GLFW|EGL|OSMesa)",
         "The program tried to render with an on-screen OpenGL context (a simulator or gym environment), and the "
         "compute node has no display.",
         "Render off-screen: set `MUJOCO_GL=egl` and `PYOPENGL_PLATFORM=egl` in `env:` (run.yaml) on GPU nodes, or "
         "`osmesa` where there is no GPU; pass `render_mode=\"rgb_array\"` instead of \"human\" to the environment."),
    _sig("data_shape",
         r"stack expects each tensor to be equal size|expected sequence of length \d+ at dim \d+ \(got \d+\)|"

         r"Unable to create tensor, you should probably activate truncation and/or padding|"
         r"default_collate: batch must contain|too many dimensions 'str'|"
         r"each element in list of batch should be of equal size|"
         # numpy >= 1.24 building an array from samples of unequal length
         r"inhomogeneous shape after \d+ dimensions?|could not broadcast input array from shape",
         "The samples of one batch have different shapes, so the data loader could not stack them into a batch.",
         "Make every sample the same shape (resize/crop images, pad or truncate sequences) or pad per batch in a "
         "`collate_fn` (for text, a padding data collator); the two sizes in the message are two samples of the "
         "same batch."),
    _sig("data_shape",
         r"shapes cannot be multiplied|size mismatch|"
         # Keras 2's check of the arrays given to fit/evaluate against the model's inputs and outputs
         r"Error when checking (?:model )?(?:input|target): expected \S+ to have|"
         r"Expected input batch_size|"
         r"Expected .* to have \d+ channels|Target size .* must be the same as input size|"
         r"The expanded size of the tensor \(\d+\) must match|"
         r"index out of range in self|Target -?\d+ is out of bounds|too many indices for (?:array|tensor)|"
         # TensorFlow's gather (an embedding lookup) given an id past the table: "indices[61,19] = 33741 is not in
         # [0, 33708)"
         r"indices\[[\d,]+\] = -?\d+ is not in \[0, \d+\)|"
         # THNN's class-index check on the CPU (on the GPU the same check is a device-side assert)
         r"cur_target >= 0 && cur_target < n_classes|"
         # ultralytics YOLOv3/v5/v7 train.py: a label's class id beyond the data set's class count (nc)
         r"Label class \S+ exceeds nc=\d+|"
         r"Expected \d+-dimensional input for \d+-dimensional weight|Given groups=\d+, weight of size|"
         r"Dimension out of range|index \d+ is out of bounds for (?:axis|dimension)|"
         r"Expected target size|"
         r"shape mismatch: value tensor of shape|operands could not be broadcast together with shapes|"
         r"Input to reshape is a tensor with \d+ values|Incompatible shapes: \[|Dimensions must be equal|"
         r"is incompatible with the layer: expected|"
         # transformers' vision-language models: a sample cut (max length) through its image placeholder tokens
         r"Image features and image tokens do not match|"
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
         r"(?<![a-z])(?:[a-z]+_)*loss(?:_[a-z]+)*['\"]?\s*[:=]\s*['\"]?(?:tensor)?\(?[-+]?nan\b|^\s*\d+[\s,|]+[-+]?nan\s*$|"
         r"NaN or Inf found|non-finite loss|Detected (?:nan|inf)|FloatingPointError|Minimum loss scale reached|"
         r"Loss became infinite or NaN|returned nan values in its \d+\w* output|\bloss\b[^\n]{0,30}?[:=]\s*\(?inf\b|"
         r"grad_norm['\"]?\s*[:=]\s*nan\b|\b(?:loss|grad(?:ient)?[ _]?norm) (?:is|was|became|becomes|went|goes) "
         r"(?:to )?(?:nan|inf)\b|\bNaN detected|"
         # torch.nn.utils.clip_grad_norm_(error_if_nonfinite=True); Lightning's EarlyStopping(check_finite=True);
         # Megatron-LM's loss and grad-norm checks and its per-interval count; Keras' TerminateOnNaN;
         # TensorFlow's tf.debugging.check_numerics
         r"is non-finite, so it cannot be clipped|"
         r"Monitored metric \S+ = [^\n]{0,40}?\b(?:nan|inf)\b[^\n]{0,30}is not finite|"
         r"found NaN in local (?:grad norm|forward loss)|number of nan iterations:\s*[1-9]|"
         r"Invalid loss, terminating training|Tensor had (?:NaN|Inf) values|"
         # torch.multinomial on probabilities that NaN/Inf logits made (sampling during RL, generation, negatives)
         r"invalid multinomial distribution|probability tensor contains either `?inf`?, `?nan`? or element < 0|"
         # torch.distributions validating a parameter or a sample against Real(): only NaN or Inf fail it (a policy's
         # or an encoder's output gone NaN)
         r"(?:constraint|support) [\w(]{0,40}Real\(\).{0,200}but found invalid values",
         "The loss became NaN/Inf, so training stopped making sense.",
         "Lower the learning rate or add warm-up, enable gradient clipping, use bf16 instead of fp16, and check "
         "the data for bad samples; resume from a checkpoint before the blow-up.",
         # TensorBoard's writer warning that one logged value was not finite: which value, the line does not say
         unless=r"NaN or Inf found in input tensor"),
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
         r"DistStoreError|clients joined|Gloo connectFullMesh failed|TCPStore.{0,80}(?:Connection refused|timed out)|"
         # launchers that start the ranks over ssh (DeepSpeed's runner, pdsh, mpirun) and cannot reach a host
         r"was not reachable via ssh|ssh: Could not resolve hostname|"
         # DGL's RPC (distributed KVStore / DistGraph servers) binding the address its ip config names
         r"tcp_socket\.cc: \d+: Failed bind on \S+, errno=\d+|"
         # TensorFlow 1.x's distributed runtime: the master waiting for a ps or worker task that never answered
         r"CreateSession still waiting for response from worker",
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
         # a C++ program's check of an NCCL call's result (glog's CHECK_EQ: "Check failed: result == ncclSuccess")
         r"Check failed: .{0,80}\bncclSuccess\b|"
         r"NCCL WARN .*(?:failed|error)",
         "NCCL (the GPU-to-GPU communication library) failed.", NCCL_HINT),
    _sig("nccl_timeout",
         r"Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out|"
         r"ran for \d+ milliseconds before timing out|collective operation timeout|Timeout at NCCL work|"
         # the C++ frame of ProcessGroupNCCL's watchdog when the message itself was cut from the paste
         r"WorkNCCL::checkTimeout",
         "A collective operation (all-reduce etc.) timed out: one rank stopped taking part.",
         "Look for the rank that stalled (data loading, a rank-0-only branch, a dead node); make every rank run "
         "the same collectives. Resubmit from the last checkpoint."),
    # The exception type alone wraps both NCCL errors and watchdog timeouts: only a fallback.
    _sig("nccl_error", r"DistBackendError", "NCCL (the GPU-to-GPU communication library) failed.", NCCL_HINT),
)

CATEGORY_RANK = {}  # category -> index of its first (highest-priority) signature
for _i, _s in enumerate(SIGNATURES):
    CATEGORY_RANK.setdefault(_s.category, _i)
