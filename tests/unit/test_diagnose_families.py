"""The root error read by its family (its class and the words of its message) when no known wording matches,
and a scheduler's record of a limit or a lost node in any scheduler's words.

The lines are real messages as programs and schedulers print them (the source is named next to each); the
point is that a wording nobody has written a signature for still lands in its category, and that a message
which only mentions a word of a family names nothing."""

import pytest

from slurmctl.observe.diagnose import diagnose_text, error_line_family, exception_family, scheduler_family


def _traceback(error: str, where: str = "/home/u/proj/train.py", code: str = "main()") -> str:
    return "\n".join(["Traceback (most recent call last):", f'  File "{where}", line 12, in main', f"    {code}",
                      error])


@pytest.mark.parametrize("error, category", [
    # unsloth/models/_utils.py (raised from its data collator import path, so where it was raised says "data")
    ("NotImplementedError: Unsloth: No NVIDIA GPU found? Unsloth currently only supports GPUs!", "no_gpu"),
    # deepspeed/runtime/zero/stage_1_and_2.py
    ("deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a DP world size of 32 but "
     "the current world size is 128. Automatic adjustment of ZeRO's optimizer state partitioning with a new world "
     "size is not currently supported.", "checkpoint_mismatch"),
    # torchtitan's checkpoint loader
    ("RuntimeError: Missing key in checkpoint state_dict: model.layers.0.attention.wq.weight.", "checkpoint_mismatch"),
    # ray/exceptions.py OutOfMemoryError; the interpreter's own MemoryError
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "host_oom"),
    ("MemoryError", "host_oom"),
    # jcuda through jpype: the GPU's allocator, not the host's
    ("jpype._jexception.CudaExceptionPyRaisable: jcuda.CudaException: CUDA_ERROR_OUT_OF_MEMORY", "cuda_oom"),
    # torch.utils.data.RandomSampler on an empty data set: a data path that points elsewhere (every empty data set
    # of the scored threads was one); ultralytics' label check
    ("ValueError: num_samples should be a positive integer value, but got num_samples=0", "missing_config"),
    ("AssertionError: Label class 15 exceeds nc=2 in data/ship.yaml. Possible class labels are 0-1", "data_shape"),
    # wordings no signature has: the family still says what it is
    ("RuntimeError: shape of the key projection does not match the query for layer 3", "data_shape"),
    ("ValueError: pretrained weights are incompatible: unexpected size for head.weight in the checkpoint",
     "checkpoint_mismatch"),
    ("OSError: checkpoint file model_00012.pth is truncated (unexpected end of data)", "checkpoint_corrupt"),
    ("argparse.ArgumentTypeError: Boolean value expected.", "missing_config"),
    ("ValueError: unknown configuration key 'optim.betas2'", "missing_config"),
    # torch/cuda/__init__.py: the driver is named too old, though the message also names versions
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU "
     "driver, or install a PyTorch version that was compiled with your version of CUDA.", "driver_mismatch"),
    # jaxlib without its cuDNN; a library of another version than the one the program was built against
    ("RuntimeError: Unimplemented: DNN library is not found.", "import_error"),
    ("RuntimeError: Found libcudnn version 8.6.0 but this build of xformers was compiled with version 8.9.2",
     "import_error"),
    # deepspeed/ops/op_builder/builder.py assert_no_cuda_mismatch; dgl/graphbolt/__init__.py load_graphbolt
    ("deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op Builder: Installed CUDA version 12.2 "
     "does not match the version torch was compiled with 11.7, unable to compile cuda/cpp extensions without a "
     "matching cuda version.", "import_error"),
    ("FileNotFoundError: Cannot find DGL C++ graphbolt library at /opt/dgl/graphbolt/libgraphbolt_pytorch_2.3.0.so",
     "import_error"),
    # flash-attn 1.x csrc/flash_attn/fmha_api.cpp (TORCH_CHECK of the GPU's architecture)
    ("RuntimeError: Expected is_sm8x || is_sm75 to be true, but got false.  (Could this error message be improved?)",
     "arch_mismatch"),
])
def test_the_root_errors_family_names_its_category(error, category):
    assert exception_family(error) == category
    assert diagnose_text(_traceback(error, "/home/u/proj/data/collate.py", "batch = collate(samples)")).category \
        == category


@pytest.mark.parametrize("error", [
    # a call written for another version of a library: not a configuration error
    "TypeError: forward() got an unexpected keyword argument 'output_attentions'",
    "TypeError: __init__() missing 1 required positional argument: 'config'",
    # words of a family with nothing wrong said about them
    "AttributeError: 'Trainer' object has no attribute 'meta_val_interval'",
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
    "KeyError: 'input_ids'",
])
def test_a_message_that_only_mentions_a_familys_words_names_nothing(error):
    assert exception_family(error) is None


@pytest.mark.parametrize("line, category", [
    # PBS/Torque's mail; LSF's exit reason as bjobs -l words it; Slurm's srun; PBS's "job preempted (node failure)"
    ("Job exceeded its walltime limit. Job was aborted", "time_limit"),
    ("=>> PBS: job killed: walltime 7205 exceeded limit 7200", "time_limit"),
    ("Exited with exit code 140. The job was killed after reaching its run time limit.", "time_limit"),
    ("srun: error: Node failure on gpu-node-7", "node_lost"),
    ("PBS Job Id: 4411.master  job preempted (node failure)", "node_lost"),
    ("sge: job 48.1 was preempted by a higher priority job", "preempted"),
])
def test_a_schedulers_record_names_its_category(line, category):
    log = f"epoch 3 step 1200 loss 1.92\n{line}\n"
    assert scheduler_family(log.splitlines(), set()) == (category, line)
    assert diagnose_text(log).category == category


@pytest.mark.parametrize("line", [
    "time_limit: 24:00:00   # the run's time limit",
    "WARNING: node gpu-node-7 is down for maintenance tonight, jobs are not preempted",
    "preemption: enabled (checkpoint every 30 min)",
])
def test_settings_and_warnings_about_limits_name_nothing(line):
    assert scheduler_family([line], set()) is None
    assert diagnose_text(f"{line}\nTraceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
                         "ZeroDivisionError: division by zero\n").category == "unknown"


def test_errno_einval_is_not_a_setting():
    assert exception_family("OSError: [Errno 22] Invalid argument") is None
    assert exception_family("error: unrecognized arguments: --lr_sched cosine") == "missing_config"


@pytest.mark.parametrize("log, category", [
    # jax/_src/xla_bridge.py logging why its CUDA backend did not start (no Python exception follows)
    ("An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed.\n"
     "E0101 12:00:00.1 xla_bridge.py:885] CUDA backend failed to initialize: Found cuDNN version 8600, but JAX was "
     "built against version 8906, which is newer.", "import_error"),
    # a C++ program's own error line
    ("step 10\n[error] CUDA error: GPU out of memory while allocating 2.0 GiB", "cuda_oom"),
    # XLA's allocator through glog (severity E, no error word); nvcc; apptainer's bind of a missing path
    ("2024-01-01 10:00:00.1: E external/xla/service/gpu/gpu_allocator.cc:88] RESOURCE_EXHAUSTED: could not reserve "
     "2.1GiB on device 0", "cuda_oom"),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_100'", "arch_mismatch"),
    ("FATAL:   container creation failed: bind source /scratch/u/data doesn't exist", "missing_config"),
    # slurmd (systemd's journal): a path its gres.conf names is not on the node
    ("Feb 02 09:51:48 w1 slurmd[12912]: slurmd: error: Waiting for gres.conf file /dev/nvidia0\n"
     "Feb 02 09:52:07 w1 slurmd[12912]: slurmd: fatal: can't stat gres.conf file /dev/nvidia0: No such file or "
     "directory\nFeb 02 09:52:07 w1 systemd[1]: slurmd.service: Failed with result 'exit-code'.", "missing_config"),
])
def test_a_log_without_a_python_exception_is_read_by_its_error_lines(log, category):
    assert error_line_family(log.splitlines(), set())[0] == category
    assert diagnose_text(log).category == category


@pytest.mark.parametrize("log", [
    # a warning is not the failure; errors of two families say nothing for sure
    "WARNING: the shape of the weights does not match, reinitialising the head\nstep 100 done",
    "error: shared object libfoo.so not found\nerror: GPU out of memory",
])
def test_error_lines_of_no_single_family_name_nothing(log):
    assert error_line_family(log.splitlines(), set()) is None


def test_settings_that_must_divide_each_other_are_a_configuration_error():
    found = diagnose_text("ValueError: The global train batch size (7 x 1) must be evenly divisible by the number of "
                          "generations per prompt (8).\n")
    assert found.category == "missing_config", found


def test_a_kernel_that_needs_a_newer_gpu_is_an_architecture_mismatch():
    found = diagnose_text("RuntimeError: FlashAttention backward for head dim > 64 requires A100 or H100 GPUs as the "
                          "implementation needs a large amount of shared memory.\n")
    assert found.category == "arch_mismatch", found
