"""Diagnosis of failures as the libraries that raise them word them (not as one thread's log did).

Each line below is the message a library prints, from its source (the file is named next to it; the torch,
Lightning, accelerate, transformers, numpy and DeepSpeed ones were read in the pinned versions of the venv,
the others in their public repositories)."""

import pytest

from slurmctl.observe.diagnose import diagnose_text


def _traceback(frames: list[tuple[str, str]], error: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for n, (where, code) in enumerate(frames):
        lines += [f'  File "{where}", line {10 + n}, in fn{n}', f"    {code}"]
    return "\n".join([*lines, error])


@pytest.mark.parametrize("log, category", [
    # --- a checkpoint that does not fit the model
    # accelerate/utils/modeling.py set_module_tensor_to_device
    ('ValueError: Trying to set a tensor of shape torch.Size([32000, 4096]) in "weight" (which has shape '
     'torch.Size([32001, 4096])), this looks incorrect.', "checkpoint_mismatch"),
    # torch/distributed/checkpoint/default_planner.py
    ("ValueError: Size mismatch between saved torch.Size([50304, 768]) and current: torch.Size([50257, 768]) for "
     "tok_embeddings.weight", "checkpoint_mismatch"),
    # keras 2 saving/hdf5_format.py load_weights_from_hdf5_group
    ("ValueError: You are loading a weight file containing 4 layers into a model with 5 layers.",
     "checkpoint_mismatch"),
    # keras 3 src/layers/layer.py load_own_variables
    ("ValueError: Layer 'dense' expected 2 variables, but received 0 variables during loading. Expected: "
     "['kernel', 'bias']", "checkpoint_mismatch"),
    # tensorflow/python/ops/resource_variable_ops.py assign
    ("ValueError: Cannot assign value to variable ' dense/kernel:0': Shape mismatch.The variable shape (10, 5), "
     "and the assigned value shape (10, 6) are incompatible.", "checkpoint_mismatch"),
    # a resumed training reading a key the saved checkpoint does not have
    (_traceback([("/home/u/proj/train.py", 'optimizer.load_state_dict(checkpoint["optimizer"])')],
                "KeyError: 'optimizer'"), "checkpoint_mismatch"),

    # --- shapes of the data against the model
    # aten/src/ATen/native/Convolution.cpp
    ("RuntimeError: Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [64, 784]",
     "data_shape"),
    # aten/src/ATen/native/RNN.cpp (check_input)
    ("RuntimeError: input.size(-1) must be equal to input_size. Expected 128, got 64", "data_shape"),
    # aten/src/ATen/native/Convolution.cpp (input smaller than the kernel)
    ("RuntimeError: Calculated padded input size per channel: (2 x 2). Kernel size: (3 x 3). Kernel size can't be "
     "greater than actual input size", "data_shape"),
    # aten/src/ATen/native/LossNLL2d.cpp; LossNLL.cpp
    ("RuntimeError: only batches of spatial targets supported (3D tensors) but got targets of dimension: 4",
     "data_shape"),
    ("RuntimeError: 1D target tensor expected, multi-target not supported", "data_shape"),
    # aten/src/ATen/native/layer_norm.h
    ("RuntimeError: Given normalized_shape=[768], expected input with shape [*, 768], but got input of size"
     "[2, 10, 512]", "data_shape"),
    # numpy >= 1.24 building an array from ragged samples
    ("ValueError: setting an array element with a sequence. The requested array has an inhomogeneous shape after "
     "1 dimensions. The detected shape was (4,) + inhomogeneous part.", "data_shape"),

    # --- NaN/inf
    # torch/nn/utils/clip_grad.py (error_if_nonfinite=True)
    ("RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be "
     "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
     "`error_if_nonfinite=False`", "nan_loss"),
    # lightning/pytorch/callbacks/early_stopping.py (check_finite=True)
    ("Monitored metric val_loss = nan is not finite. Previous best value was 0.512. Signaling Trainer to stop.",
     "nan_loss"),
    # Megatron-LM megatron/core/distributed/param_and_grad_buffer.py; training.py's interval log
    ("AssertionError: Rank 3: found NaN in local grad norm in backward pass before data-parallel communication "
     "collective. Device: 3, node: n1", "nan_loss"),
    (" iteration     1200/  500000 | consumed samples: 614400 | lm loss: 7.180392E+00 | loss scale: 1.0 | "
     "number of skipped iterations:   0 | number of nan iterations:  12 |", "nan_loss"),
    # keras callbacks.py TerminateOnNaN
    ("Batch 52: Invalid loss, terminating training", "nan_loss"),
    # tensorflow check_numerics kernel
    ("tensorflow.python.framework.errors_impl.InvalidArgumentError: loss : Tensor had NaN values", "nan_loss"),
    # deepspeed/runtime/fp16/loss_scaler.py
    ("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.", "nan_loss"),

    # --- a module or compiled library that does not load
    # numpy/core/_multiarray_umath.py (numpy 2 under a module built for numpy 1)
    ("A module that was compiled using NumPy 1.x cannot be run in\nNumPy 2.0.1 as it may crash. To support both 1.x "
     "and 2.x", "import_error"),
    ("ValueError: numpy.dtype size changed, may indicate binary incompatibility. Expected 96 from C header, got 88 "
     "from PyObject", "import_error"),
    # torch/backends/cudnn/__init__.py _init
    ("RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 9, 2) but found runtime "
     "version (8, 5, 0). PyTorch already comes bundled with cuDNN.", "import_error"),
    # torch/utils/cpp_extension.py CUDA_MISMATCH_MESSAGE; _join_cuda_home
    ("RuntimeError: The detected CUDA version (12.1) mismatches the version that was used to compilePyTorch (11.8). "
     "Please make sure to use the same CUDA versions.", "import_error"),
    ("OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.", "import_error"),
    # deepspeed/ops/op_builder/builder.py
    ("deepspeed.ops.op_builder.builder.MissingCUDAException: CUDA_HOME does not exist, unable to compile CUDA op(s)",
     "import_error"),
    # transformers 4.x utils/import_utils.py _LazyModule._get_module
    ("RuntimeError: Failed to import transformers.models.llama.modeling_llama because of the following error (look "
     "up to see its traceback):", "import_error"),
    # torch/__init__.py on Windows
    ('OSError: [WinError 126] The specified module could not be found. Error loading "C:\\envs\\t\\lib\\site-'
     'packages\\torch\\lib\\fbgemm.dll" or one of its dependencies.', "import_error"),

    # ctypes on Windows (Lib/ctypes/__init__.py) loading an extension's DLL
    ("FileNotFoundError: Could not find module 'C:\\envs\\t\\Lib\\site-packages\\bitsandbytes\\libbnb_cuda116.dll' "
     "(or one of its dependencies). Try using the full path with constructor syntax.", "import_error"),

    # --- configuration
    # omegaconf's error format (OmegaConfBaseException): the message, then full_key and object_type
    ("Value 'abc' could not be converted to Integer\n    full_key: trainer.max_epochs\n    object_type=TrainerConf",
     "missing_config"),
    # argparse ArgumentParser.error: "prog: error: message" after the usage line
    ("usage: train.py [-h] [--batch-size BATCH_SIZE]\ntrain.py: error: --batch-size must be divisible by the world "
     "size", "missing_config"),
    # argparse: a per-argument error; a mutually exclusive group
    ("usage: train.py [-h] (--lora | --full)\ntrain.py: error: argument --lora: not allowed with argument --full",
     "missing_config"),
    ("finetune: error: one of the arguments --lora --full is required", "missing_config"),
    # transformers/training_args.py TrainingArguments.__post_init__
    ('ValueError: --load_best_model_at_end requires the save and eval strategy to match, except when '
     '--save_strategy="best", but found\n- Evaluation strategy: IntervalStrategy.STEPS', "missing_config"),
    # Slurm refusing the request (src/common/slurm_errno.c); CPython given a script that is not there
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     "missing_config"),
    ("/usr/bin/python3: can't open file '/home/u/proj/trian.py': [Errno 2] No such file or directory",
     "missing_config"),
    # yacs/config.py _merge_a_into_b (detectron2, fvcore)
    ("KeyError: 'Non-existent config key: MODEL.BACKBONE.NAMEX'", "missing_config"),
    # lightning/pytorch/callbacks/model_checkpoint.py
    ("lightning_fabric.utilities.exceptions.MisconfigurationException: `ModelCheckpoint(monitor='val_acc')` could not "
     "find the monitored key in the returned metrics: ['train_loss', 'epoch', 'step'].", "missing_config"),
    # transformers configuration_utils.py (5.x wording and 4.x wording); utils/hub.py
    ("OSError: Can't load the configuration of './out/final'. If you were trying to load it from "
     "'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
     "missing_config"),
    ("OSError: Can't load config for 'bert-base-uncasd'.", "missing_config"),
    ("OSError: ./out does not appear to have a file named config.json. Checkout "
     "'https://huggingface.co/./out/tree/None' for available files.", "missing_config"),
    # pydantic v2 (a training script's settings model)
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for TrainingArgs\nlr\n  Input should be a "
     "valid number", "missing_config"),
    # a config dict indexed by a key it does not have; a data path that does not exist
    (_traceback([("/home/u/proj/train.py", 'lr = cfg["optim"]["lr"]')], "KeyError: 'optim'"), "missing_config"),
    (_traceback([("/home/u/proj/data.py", "img = Image.open(path)")],
                "FileNotFoundError: [Errno 2] No such file or directory: '/data/imagenet/train/n0142/1.JPEG'"),
     "missing_config"),

    # --- no GPU where one was expected
    # jax/_src/xla_bridge.py
    ("RuntimeError: Unknown backend: 'gpu' requested, but no platforms that are instances of gpu are present. "
     "Platforms present are: cpu", "no_gpu"),
    # tensorflow placer
    ("InvalidArgumentError: Cannot assign a device for operation MatMul: Could not satisfy explicit device "
     "specification '/device:GPU:0' because no devices matching that specification are registered in this process; "
     "available devices: /job:localhost/replica:0/task:0/device:CPU:0", "no_gpu"),
    # nvidia-smi; Docker without the NVIDIA container toolkit; torch's ROCm build
    ("No devices were found", "no_gpu"),
    ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].', "no_gpu"),
    ("RuntimeError: No HIP GPUs are available", "no_gpu"),
    # ultralytics/utils/torch_utils.py select_device (YOLOv8 wording, then YOLOv5's)
    ("ValueError: Invalid CUDA 'device=0' requested. Use 'device=cpu' or pass valid CUDA device(s) if available.\n"
     "\ntorch.cuda.is_available(): False\ntorch.cuda.device_count(): 0", "no_gpu"),
    ("AssertionError: CUDA unavailable, invalid device 0 requested", "no_gpu"),
    # pynvml
    ("pynvml.nvml.NVMLError_DriverNotLoaded: Driver Not Loaded", "no_gpu"),
    # torch/utils/cpp_extension.py logs this when CUDA_HOME is set and torch.cuda.is_available() is False
    ("No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'", "no_gpu"),

    # --- others
    # tensorflow reports ENOSPC as RESOURCE_EXHAUSTED naming the file (core/platform/posix error mapping)
    ("InternalError (see above for traceback): Error writing (tmp) checkpoint file: /home/u/ckpt/model.ckpt-6."
     "tempstate97: Resource exhausted: /home/u/ckpt/model.ckpt-6.tempstate97", "disk_full"),
    # a watchdog timeout's C++ stack (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp) without its message
    ("frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
     "std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in /env/lib/python3.11/site-packages/torch/lib/"
     "libtorch_cuda.so)", "nccl_timeout"),
    # kubectl describe pod
    ("    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137", "host_oom"),
    # c10/core/impl/alloc_cpu.cpp (Windows wording)
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried to "
     "allocate 1073741824 bytes.", "host_oom"),
    # aten/src/ATen/MapAllocator.cpp: a data-loader batch sent through a full /dev/shm is ENOSPC, even after the
    # worker's bus error (dataloader.py's "is killed by signal: Bus error")
    ("RuntimeError: unable to write to file </torch_18692_1954506624_0>: No space left on device (28)", "disk_full"),
    ("RuntimeError: DataLoader worker (pid 729) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory.\nRuntimeError: unable to write to file </torch_739_1_4>: No space left on "
     "device (28)", "disk_full"),
    # other schedulers' time limits: PBS/Torque's mom (src/resmom/mom_main.c "job killed: walltime %ld exceeded
    # limit %ld") and its mail, LSF's exit reason, Grid Engine's execd (MSG_EXECD_EXCEEDHWALLCLOCK_UU)
    ("=>> PBS: job killed: walltime 259217 exceeded limit 259200", "time_limit"),
    ("Aborted by PBS Server\nJob exceeded its walltime limit. Job was aborted\nExit_status=-11", "time_limit"),
    ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.\nExited with exit code 140.", "time_limit"),
    ("05/04/2011 03:36:38|  main|node001|W|job 48.1 exceeded hard wallclock time - initiate terminate method",
     "time_limit"),
    # their memory limits: PBS/Torque's mom, LSF's TERM_MEMLIMIT
    ("=>> PBS: job killed: mem 9437184kb exceeded limit 8388608kb", "host_oom"),
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", "host_oom"),
    # a PBS mail: the job ended because its node failed
    ("PBS Job Id: 2600365.server\nExec host:  gpu-2-17/5\njob deleted\njob preempted (node failure)", "node_lost"),
    # Ray's memory monitor (src/ray/raylet/node_manager.cc) and the exception a killed task raises
    ("(raylet) node_manager.cc:3040: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers "
     "crashed due to other reasons at node (ID: 2c82, IP: 172.31.183.172)", "host_oom"),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "host_oom"),
    # XLA's device allocator (xla/stream_executor/integrations/device_mem_allocator.h: "Failed to allocate request
    # for %s (%uB) on device ordinal %d") and BFC allocator, as JAX raises them
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 176.00MiB "
     "(184549376B) on device ordinal 0", "cuda_oom"),
    ("XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4294967296 bytes.", "cuda_oom"),
    # jax/_src/lib/__init__.py: a CUDA library older than the one jaxlib was built against
    ("CUDA backend failed to initialize: Found cuDNN version 8600, but JAX was built against version 8906, which "
     "is newer. The copy of cuDNN that is installed must be at least as new as the version against which JAX was "
     "built.", "import_error"),
    # detectron2's loss dict printed with torch's tensor repr (engine/train_loop.py), and its own check
    ("loss_dict = {'loss_cls': tensor(nan, device='cuda:0', grad_fn=<DivBackward0>)}", "nan_loss"),
    ("FloatingPointError: Loss became infinite or NaN at iteration=88!", "nan_loss"),
    # torch/utils/data/dataloader.py when a worker died without an error of its own: memory in half the threads
    # scored, never shown in the log in the other half, so a lead named in the summary rather than a verdict
    ("RuntimeError: DataLoader worker (pid(s) 76) exited unexpectedly", "unknown"),
    # ultralytics YOLOv5/v7 train.py's label check
    ("AssertionError: Label class 15 exceeds nc=2 in data/ship.yaml. Possible class labels are 0-1", "data_shape"),
    # NCCL's INFO about an optional network plugin it did not find is not the failure (init/net.cc)
    ("n1:23:24 [3] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object "
     "file: No such file or directory\n[rank1]:[E1119 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
     "collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST) ran for 1800000 milliseconds before "
     "timing out.", "nccl_timeout"),
    # TensorFlow's/JAX's allocator logging the driver API's error; XLA's status
    ("E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 3.77G (4046333952 bytes) from "
     "device: CUDA_ERROR_OUT_OF_MEMORY: out of memory", "cuda_oom"),
    # writing into a read-only mount; EPERM
    ("OSError: [Errno 30] Read-only file system: '/data/shared/checkpoints'", "permission_denied"),
    ("PermissionError: [Errno 1] Operation not permitted: '/scratch/proj/out'", "permission_denied"),
    # flash-attn csrc/flash_attn/flash_api.cpp
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "arch_mismatch"),
    # torchvision/extension.py and its C++ ops missing when built for another torch
    ("RuntimeError: operator torchvision::nms does not exist", "import_error"),
    ("AttributeError: partially initialized module 'torch' has no attribute 'nn' (most likely due to a circular "
     "import)", "import_error"),
    # numpy reshape; transformers DataCollatorWithPadding / Trainer.compute_loss; datasets (pyarrow) map
    ("ValueError: cannot reshape array of size 150528 into shape (224,224,1)", "data_shape"),
    ("ValueError: You should supply an encoding or a list of encodings to this method that includes input_ids, but "
     "you provided ['label']", "data_shape"),
    ("ValueError: The model did not return a loss from the inputs, only the following keys: logits. For reference, "
     "the inputs it received are input_ids,attention_mask.", "data_shape"),
    ("pyarrow.lib.ArrowInvalid: Column 2 named input_ids expected length 1000 but got length 999", "data_shape"),
    # PIL/ImageFile.py on a half-written image
    ("OSError: image file is truncated (41 bytes not processed)", "data_shape"),
    # Lightning's Trainer banner (trainer/setup.py) with a CUDA-only call failing after it
    ("GPU available: False, used: False\nTPU available: False, using: 0 TPU cores\n"
     "AssertionError: Torch not compiled with CUDA enabled", "no_gpu"),
    # torch.cuda.set_device on a CPU-only torch build (torch/cuda/__init__.py calls torch._C._cuda_setDevice)
    ("GPU available: False, used: False\nAttributeError: module 'torch._C' has no attribute '_cuda_setDevice'",
     "no_gpu"),
    # NVIDIA's kernel driver (dmesg) failing to initialise a GPU of the node
    ("[   38.773115] NVRM: RmInitAdapter failed! (0x26:0xffff:1127)\n"
     "[   38.773764] NVRM: rm_init_adapter failed for device bearing minor number 0", "gpu_hardware"),
    # NVCaffe's NCCL_CHECK (glog CHECK_EQ of an NCCL call's result); Caffe's CUDA_CHECK of cudaMalloc (error 2 is
    # cudaErrorMemoryAllocation, "out of memory"): the GPU's memory, not the host's
    ("I0404 10:13:38.892247 12760 caffe.cpp:459] CUDA driver version: 9000\n"
     "Check failed: result == ncclSuccess (1 vs. 0)  unhandled cuda error", "nccl_error"),
    ("F1007 19:40:40.235829 26752 syncedmem.cpp:66] Check failed: error == cudaSuccess (2 vs. 0)  out of memory\n"
     "*** Check failure stack trace: ***\nAborted (core dumped)", "cuda_oom"),
    # torch/utils/data/_utils/signal_handling.py's message, wrapped where it was pasted
    ("RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus\nerror. It is possible that dataloader's "
     "workers are out of shared\nmemory. Please try to raise your shared memory limit.", "host_oom"),
    # a site's job_submit plugin refusing the request, as sbatch prints the plugin's words
    ("sbatch: error: *** Error partition 'h200_courant' is not valid for this job\n"
     "sbatch: error: *** Error: CPU job setup is not valid", "missing_config"),
    # NCCL's last word before the job stopped (graph/topo.h)
    ("All distributed processes registered. Starting with 32 processes\n"
     "n1:52:52 [0] graph/topo.h:230 NCCL WARN Could not find NET with id 0", "nccl_error"),
    # numpy 1.24 removed its aliases of the builtins; torch < 2.0 has no compile: code for another version
    ("AttributeError: module 'numpy' has no attribute 'float'", "import_error"),
    ("AttributeError: module 'torch' has no attribute 'compile'", "import_error"),
    # transformers/models/auto/tokenization_auto.py: the class is not in the installed version
    ("ValueError: Tokenizer class LlamaTokenizer does not exist or is not currently imported.", "import_error"),
    # torch/csrc/distributed/c10d/reducer.cpp with find_unused_parameters=False (DDP's default)
    ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This "
     "error indicates that your module has parameters that were not used in producing loss. You can enable unused "
     "parameter detection by passing the keyword argument `find_unused_parameters=True` to "
     "`torch.nn.parallel.DistributedDataParallel`", "missing_config"),
    # keras/src/backend/tensorflow/nn.py (binary/categorical cross-entropy)
    ("ValueError: Arguments `target` and `output` must have the same shape. Received: target.shape=(None, 1), "
     "output.shape=(None, 10)", "data_shape"),
    # a program's own check that its configuration file is there (the wording of several public training codes)
    ("ValueError: Cannot find the config file in /home/u/.cache/gpt2", "missing_config"),
])
def test_library_message_is_named(log, category):
    result = diagnose_text(log + "\n")
    assert result.category == category, result
    assert result.evidence and result.hint


@pytest.mark.parametrize("log", [
    # accelerate/utils/modeling.py and transformers: a warning about unused weights, training goes on
    "Some weights of the model checkpoint at bert-base-uncased were not used when initializing "
    "BertForSequenceClassification: ['cls.predictions.bias']",
    # deepspeed/runtime/fp16/loss_scaler.py: one overflowing step is skipped, the scale recovers
    "[deepspeed] OVERFLOW! Skipping step. Attempted loss scale: 65536, reducing to 32768",
    # torch/utils/cpp_extension.py CUDA_MISMATCH_WARN: a minor version difference is only a warning
    "UserWarning: The detected CUDA version (12.1) has a minor version mismatch with the version that was used to "
    "compile PyTorch (12.4). Most likely this shouldn't be a problem.",
    # Slurm's own "error:" lines are not argparse's
    "srun: error: n1: task 0: Exited with exit code 2",
    # the first "best" value a training prints before any validation ran
    "Epoch 0: best val loss inf, saving model",
    # a missing program or DLL is not a path in the configuration
    "FileNotFoundError: [Errno 2] No such file or directory: 'nvcc'",
    # a JSON file unpickled (the config given where the checkpoint belongs) is not a corrupt checkpoint
    "_pickle.UnpicklingError: invalid load key, '{'.",
    # sbatch that cannot reach the controller: not the request's fault
    "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
    "sbatch: error: slurm_receive_msg: Socket timed out on send/recv operation",
    # jax/_src/xla_bridge.py probing for backends it may not have (an INFO line), and carrying on
    "I0625 11:35:55.929513 22421615735936 xla_bridge.py:895] Unable to initialize backend 'tpu': INTERNAL: Failed "
    "to open libtpu.so: libtpu.so: cannot open shared object file: No such file or directory",
    # jax imported by a torch program through a library: the training ran on its GPU through torch
    "An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed. Falling back to cpu.",
    # a submodule's missing name (torch.cuda's on a CPU-only build) or a user's own module: no package version
    "AttributeError: module 'torch.cuda' has no attribute 'mem_get_info'",
    "AttributeError: module 'utils' has no attribute 'load_data'",
])
def test_warnings_and_lookalikes_name_nothing(log):
    assert diagnose_text(log + "\n").category == "unknown"


def test_weak_no_gpu_evidence_loses_to_a_specific_error():
    log = ("No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'\n"
           "ModuleNotFoundError: No module named 'mmcv._ext'\n")
    assert diagnose_text(log).category == "import_error"
    # a training run on the CPU on purpose that fails for its own reason is not a missing GPU
    log = "GPU available: False, used: False\nKeyError: 'labels'\n"
    assert diagnose_text(log).category == "unknown"


def test_jax_running_on_the_cpu_is_no_gpu():
    found = diagnose_text("2022-11-30 12:50:08,211 - jax._src.lib.xla_bridge - WARNING - No GPU/TPU found, falling "
                          "back to CPU. (Set TF_CPP_MIN_LOG_LEVEL=0 and rerun for more info.)\n")
    assert found.category == "no_gpu" and "jax[cuda12]" in found.hint, found
