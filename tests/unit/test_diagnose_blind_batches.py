"""Wordings met in the blind batches of real failure logs (benchmarks/diagnose_corpus.py
scores each batch at first sight, before any rule below was written from it): each a library's own message or a
family of them, with the lookalikes that must name nothing."""

import pytest

from slurmctl.observe.diagnose import diagnose_text


def test_an_error_raised_by_torchs_rendezvous_before_training_is_a_rendezvous_failure():
    unset = """Traceback (most recent call last):
  File "/home/alice/proj/train.py", line 85, in main
    torch.distributed.init_process_group(backend="nccl")
  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 754, in init_process_group
    store, rank, world_size = next(rendezvous_iterator)
  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/rendezvous.py", line 221, in _get_env_or_raise
    raise _env_error(env_var)
ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR expected, \
but not set
"""
    found = diagnose_text(unset)
    assert found.category == "rendezvous_failure", found
    assert "MASTER_ADDR" in found.hint and "rendezvous.py:221" in found.summary
    # the same error raised by the user's own code is not torch forming the group; nor is one after training steps
    assert diagnose_text(unset.replace("torch/distributed/rendezvous.py", "proj/dist.py")).category == "unknown"
    assert diagnose_text("step 10 loss 2.0\n" + unset).category == "unknown"


def test_sampling_from_nan_probabilities_is_a_nan_loss():
    assert diagnose_text("RuntimeError: invalid multinomial distribution (sum of probabilities <= 0)\n").category \
        == "nan_loss"
    assert diagnose_text("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n").category \
        == "nan_loss"
    # a distribution's parameter or sample checked against Real(): only NaN/Inf fail it
    gone = ("ValueError: Expected parameter loc (Tensor of shape (128, 10)) of distribution Normal(loc: "
            "torch.Size([128, 10]), scale: torch.Size([128, 10])) to satisfy the constraint Real(), but found invalid "
            "values:\ntensor([[nan, nan, nan,  ..., nan, nan, nan]], device='cuda:0')\n")
    assert diagnose_text(gone).category == "nan_loss"
    # a std the code made negative is the code's bug, not a NaN: no verdict from that check alone
    assert diagnose_text("RuntimeError: normal expects all elements of std >= 0.0\n").category == "unknown"


def test_a_log_that_ends_printing_nan_where_it_printed_numbers_is_a_nan_loss():
    steps = "".join(f"train.py:183] 1_train_{i}, 2237{i}.3, [15194.27, 36603.82]\n" for i in range(80, 85))
    found = diagnose_text(steps + "train.py:183] 1_train_89, nan, [nan, 36458.277]\n"
                          "train.py:183] 1_train_90, nan, [nan, nan]\n")
    assert found.category == "nan_loss" and found.evidence[-1].endswith("[nan, nan]"), found
    # one NaN that training went past, or a log of nothing but NaN-free numbers, is not
    assert diagnose_text(steps + "train.py:183] 1_train_89, nan, [nan, 1.0]\n" + steps).category == "unknown"


def test_storage_that_is_not_resizable_is_named_only_where_it_was_raised():
    collate = """Traceback (most recent call last):
  File "/opt/venv/lib/python3.10/site-packages/torch/utils/data/_utils/collate.py", line 141, in default_collate
    out = elem.new(storage).resize_(len(batch), *list(elem.size()))
RuntimeError: Trying to resize storage that is not resizable
"""
    assert diagnose_text(collate).category == "data_shape"
    # the same words from loading a sharded checkpoint (FSDP): without frames, no verdict
    assert diagnose_text("RuntimeError: Trying to resize storage that is not resizable\n").category == "unknown"


def test_a_compiled_extension_that_is_not_found_is_an_import_error():
    assert diagnose_text(">>> import torchrec\nFile fbgemm_gpu_py.so not found\n").category == "import_error"
    # NCCL reporting an optional plugin it carries on without is no failure
    assert diagnose_text("n1:12:12 [0] NCCL INFO NET/Plugin: libnccl-net.so not found\n").category == "unknown"


@pytest.mark.parametrize("log, category", [
    # NCCL's shm segment on a 64 MB container /dev/shm: one early batch's collector called it transport set-up,
    # those of batches 33 and 36 (two threads) and the vocabulary call it /dev/shm full, as the words say
    ("h:1:2 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n"
     "h:1:2 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-6c6b-0-1-0 "
     "(size 9637888)", "disk_full"),
    ("[h:1    :0:381] Caught signal 7 (Bus error: nonexistent physical address)\n==== backtrace (tid:    381) ====\n"
     " 0 0x00000000000143c0 __funlockfile()  ???:0\n 2 0x0000000000068d6c ncclGroupEnd()  ???:0\n"
     "=================================", "nccl_setup"),
    ("sbatch: error: Batch job submission failed: Requested GRES option unsupported by configured SelectType "
     "plugin", "missing_config"),
    ("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
     "missing_config"),
    ("FATAL:   container creation failed: mount /30days->/30days error: while mounting /30days: mount source "
     "/30days doesn't exist", "missing_config"),
    ("Skip IMG_0233.png due to an error:\n[enforce fail at CPUAllocator.cpp:56] posix_memalign(&data, gAlignment, "
     "nbytes) == 0. 12 vs 0", "host_oom"),
    ("E   ImportError: /lib64/libc.so.6: version `GLIBC_2.14' not found (required by /v/lib/python3.6/site-packages"
     "/torch/_C.cpython-36m-x86_64-linux-gnu.so)", "import_error"),
])
def test_rules_of_the_blind_batches(log, category):
    result = diagnose_text(log + "\n")
    assert result.category == category, result
    assert result.evidence and result.hint


def test_nccls_info_line_for_a_missing_infiniband_device_is_no_failure():
    info = "host:21288:21288 [0] NCCL INFO NET/IB : No device found.\n"
    assert diagnose_text(info).category == "unknown"
    assert diagnose_text("host:1:1 [0] NCCL WARN NET/IB : Unable to open device mlx5_0\n").category == "nccl_setup"


def test_older_wordings_of_checkpoint_keys_prolog_failures_and_ssh_launchers():
    assert diagnose_text('unexpected key "module.cnn.conv0.weight" in state_dict\n').category == "checkpoint_mismatch"
    assert diagnose_text("salloc: Prolog failure on node k003-006\nsalloc: Job allocation 235454 has been revoked.\n"
                         ).category == "node_lost"
    assert diagnose_text("RuntimeError: Using hostfile at /etc/hostfile but host=w-0.svc was not reachable via ssh. If "
                         "you are running with a single node please remove /etc/hostfile\n").category == \
        "rendezvous_failure"


def test_a_class_index_check_inductor_without_triton_and_a_loss_table_of_nan():
    assert diagnose_text("RuntimeError: Assertion `cur_target >= 0 && cur_target < n_classes' failed.  at "
                         "/x/aten/src/THNN/generic/ClassNLLCriterion.c:93\n").category == "data_shape"
    assert diagnose_text("torch._inductor.exc.TritonMissing: Cannot find a working triton installation.\n").category \
        == "import_error"
    table = "epoch train loss valid loss accuracy\n0 nan nan 0.997788\n\n71.39% [6930/9707 3:56:27<1:34:45 nan]\n"
    assert diagnose_text(table).category == "nan_loss"


def test_a_missing_key_while_copying_a_state_dict_is_a_checkpoint_that_does_not_fit():
    log = """Traceback (most recent call last):
  File "/data/DMT/model/backbones/resnet_ibn_a.py", line 164, in load_param
    self.state_dict()[i.replace('module.','')].copy_(param_dict[i])
KeyError: 'base.conv1.weight'
"""
    assert diagnose_text(log).category == "checkpoint_mismatch"


@pytest.mark.parametrize("log, category", [
    # Flax restoring parameters whose shapes are not the module's
    ('flax.errors.ScopeParamShapeError: Initializer expected to generate shape (8, 4096) but got shape (32, 4096) '
     'instead for parameter "embedding" in "/transformer/dte".', "checkpoint_mismatch"),
    # PaddleDetection's metrics, quoted
    ("iter: 1860, lr: 0.019983, 'loss_cls': 'nan', 'loss_bbox': 'nan', 'loss': 'nan', eta: 13:18:26", "nan_loss"),
    ("ValueError: Target 2 is out of upper bound.", "data_shape"),
    ("ValueError: Image features and image tokens do not match: tokens: 720, features 360", "data_shape"),
    # Kubernetes evicting the pod; zsh's job control after the kernel's OOM killer
    ("Epoch 1/100\nThe node was low on resource: memory.\nKilling container with id docker://nb:Need to kill Pod",
     "host_oom"),
    ("Training model...\n[1]    2843557 killed     python train.py", "host_oom"),
    ("x:176:194 [0] init.cc:573 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1cb00000",
     "missing_config"),
])
def test_wordings_met_in_blind_batches(log, category):
    assert diagnose_text(log + "\n").category == category


# Libraries' own wordings met in batches 26 to 55, each with the batch that met it
@pytest.mark.parametrize(("log", "category"), [
    # batch 29: a Keras progress bar with no newline before the shell's "Killed"
    ("165376/296960 [===============>..............] - ETA: 365s - loss: 2.1371Killed", "host_oom"),
    # Windows' ERROR_DISK_FULL through TensorFlow's dataset cache
    ("(0) Unknown: Failed to WriteFile: cache/training_0.data-00000-of-00001.tempstate1288 : There is not enough "
     "space on the disk.", "disk_full"),
    # torch_xla with no device configured; TensorFlow on a TPU writing to a local path
    ("  what():  tensorflow/compiler/xla/xla_client/computation_client.cc:273 : Missing XLA configuration",
     "missing_config"),
    ("File system scheme '[local]' not implemented (file: 'bert_model_output/model.ckpt-0_temp_f8ab')",
     "missing_config"),
    # PaddlePaddle's load_params: pretrained weights for 80 classes into a model built for fewer
    ("RuntimeError: Shape not matching: the Program requires a parameter with a shape of ((27, 256, 1, 1)), while the "
     "loaded parameter (namely [ conv094.conv.weights ]) has a shape of  ((255, 256, 1, 1)).", "checkpoint_mismatch"),
    # Keras 2's check of the labels against the model's output
    ("ValueError: Error when checking target: expected dense_2 to have shape (None, 4) but got array with shape (1, 1)",
     "data_shape"),
    # TensorFlow restoring from its `checkpoint` index file: the wrong path, not a corrupt checkpoint
    ("DataLossError (see above for traceback): Unable to open table file /home/u/out/checkpoint: Data loss: not an "
     "sstable (bad magic number): perhaps your file is in a different file format", "missing_config"),
    # a rename in a cache several DDP processes write (torchinductor's codecache): not a path the run was given
    ("FileNotFoundError: [Errno 2] No such file or directory: '/tmp/torchinductor_u/hb/c.py.1571306751' -> "
     "'/tmp/torchinductor_u/hb/c.py'", "unknown"),
    # batch 27: the NVIDIA container toolkit refusing a CUDA 12.1 image on an older driver
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.1, please update your driver to a "
     "newer version, or use an earlier cuda container: unknown.", "driver_mismatch"),
    # Ray's monitor (older Ray says "monitor", newer "detector")
    ("The node with client ID 1eadc9db2f07 has been marked dead because the monitor has missed too many heartbeats "
     "from it.", "node_lost"),
    # submitit with no Slurm around: its LocalExecutor runs one node only
    ("ValueError: LocalExecutor can use only one node. Use nodes=1", "missing_config"),
    # batch 26: transformers' TrainingArguments with bf16 on a T4
    ("ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
     "arch_mismatch"),
    # peft's LoraConfig for an architecture it has no default target modules for
    ("ValueError: Please specify `target_modules` in `peft_config`", "missing_config"),
    # the TPU runtime's allocator (torch_xla on a v2-32 pod)
    ("2020-10-22 02:48:58 10.128.0.33 [3]   (1) Resource exhausted: Attempting to allocate 180.59M. That was not "
     "possible. There are 142.58M free.; (0x3x0_HBM1)", "cuda_oom"),
    # batch 28: accelerate's bf16 check on a T4 (kohya's LoRA trainer on Colab)
    ("bf16 mixed precision requires PyTorch >= 1.10 and a supported device.", "arch_mismatch"),
    # torch < 1.6 has no torch.cuda.amp.autocast: a submodule of a package missing a name of a newer version
    ("AttributeError: module 'torch.cuda.amp' has no attribute 'autocast'", "import_error"),
    # YOLOv5's banner naming a CPU-only build of torch, and nothing else going wrong
    ("YOLOv5  2022-4-22 torch 1.11.0+cpu CPU", "no_gpu"),
    # the same build named beside an error that is not about a device says nothing of it
    ("PyTorch version: 2.0.0+cpu\nKeyError: 'instruction'", "unknown"),
    # batch 32: DGL's RPC server binding an address of another machine (errno 99)
    ("/opt/dgl/src/rpc/network/tcp_socket.cc: 69: Failed bind on 10.0.0.7:30050, errno=99", "rendezvous_failure"),
    # stable-baselines' PPO2: the batch must split into the minibatches asked for
    ("    assert self.n_batch % self.nminibatches == 0\nAssertionError", "missing_config"),
    # dargs (DeePMD-kit's input checker): a value the schema does not allow
    ("dargs.dargs.ArgumentValueError: [at location `model/descriptor/list/1`] get invalid choice `se_uni` for flag "
     "key `type`.", "missing_config"),
    # numpy refusing an array larger than the address space (a replay memory sized for more RAM)
    ("    self.screens = np.empty((self.size, 84, 84), dtype = np.uint8)\nValueError: array is too big.", "host_oom"),
    # batch 31: Lightning 2 dropped Trainer(gpus=); Hydra < 1.2 has no version_base= (and batch 26's older
    # DeepSpeed zero.Init): a library called as another version of it takes
    ("TypeError: Trainer.__init__() got an unexpected keyword argument 'gpus'", "import_error"),
    ("TypeError: main() got an unexpected keyword argument 'version_base'", "import_error"),
    # torch < 1.0's CUDA backend running out of GPU memory is not the host's
    ("THCudaCheck FAIL file=/py/conda-bld/pytorch_1493680494901/work/torch/lib/THC/generic/THCStorage.cu line=66 "
     "error=2 : out of memory", "cuda_oom"),
    # jsonnet (AllenNLP's configuration language) refusing the file as written
    ("RuntimeError: STATIC ERROR: /content/drive/My data/declutr.jsonnet:81:44: Could not lex the character code 194",
     "missing_config"),
    # batch 30: vLLM's dtype check on a V100
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla "
     "V100-SXM2-32GB GPU has compute capability 7.0.", "arch_mismatch"),
    # LLaVA's preprocessing when the conversation template (--version) does not fit the tokenizer
    ("WARNING: tokenization mismatch: 57 vs. 56. (ignored)\nWARNING: tokenization mismatch: 58 vs. 57. (ignored)",
     "missing_config"),
    # bash on macOS, after a progress bar without a newline
    ("| 15/20 [1:58:20<48:37, 583.49s/it]./run_rl_swarm.sh: line 142: 33551 Killed: 9               python -m "
     "hivemind_exp.gsm8k.train_single_gpu", "host_oom"),
    # transformers' lazy module words it without quotes
    ("AttributeError: module trl has no attribute GRPOConfig. Did you mean: 'ORPOConfig'?", "import_error"),
    # batch 33: ROCm's page fault report; TransformerEngine's FP8 check on an RTX 3090; MPS has no float64
    ("Memory access fault by GPU node-1 on address 0x1e4000. Reason: Page not present or supervisor privilege.",
     "cuda_illegal_access"),
    ("AssertionError: Device compute capability 8.9 or higher required for FP8 execution.", "arch_mismatch"),
    ("TypeError: Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. Please "
     "use float32 instead.", "arch_mismatch"),
    # NCCL's transport connection refused (a link-local address the nodes cannot reach); a graph file for another
    # machine size; the bootstrap out of file descriptors (AWS Neuron's CCOM)
    ("ncclInternalError: Internal check failed.\nLast error:\nNet : Connect to 169.254.3.1<33323> failed : "
     "Connection refused", "nccl_setup"),
    ("::16674:17023 [0] graph/search.cc:703 NCCL WARN XML Import Channel : dev 1 not found.", "nccl_setup"),
    ("2023-Aug-01 16:12:43.0204 332066:332417 [18] bootstrap.cc:106 CCOM WARN Call to accept failed : Too many open "
     "files", "nccl_setup"),
    # Habana Gaudi's device memory
    ("RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::268435456 (256)MB",
     "cuda_oom"),
    # batch 35: TensorFlow's embedding lookup given an id past the vocabulary; its InvalidArgumentError is an op's
    # run-time refusal, not an argument of the configuration
    ("tensorflow.python.framework.errors_impl.InvalidArgumentError: indices[61,19] = 33741 is not in [0, 33708)",
     "data_shape"),
    ("tensorflow.python.framework.errors_impl.InvalidArgumentError: assertion failed: [Condition x == y did not "
     "hold element-wise:] [x (strided_slice:0) = ] [3]", "unknown"),
    # batch 36: docker without the NVIDIA container runtime, or too old for --gpus
    ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].', "no_gpu"),
    ("unknown flag: --gpus\nSee 'docker run --help'.", "no_gpu"),
    # the docker command that avoids a memlock limit is no NCCL failure
    ("docker run --gpus all -it --rm --shm-size=8g --ulimit \nmemlock=-1 --ulimit stack=67108864 "
     "nvcr.io/nvidia/pytorch:21.05-py3", "unknown"),
    # xformers built for another GPU architecture
    ("FATAL: this function is for sm80, but was built for sm750", "arch_mismatch"),
    # cuDNN's EXECUTION_FAILED is an illegal access or a kernel of another architecture alike
    ("RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "unknown"),
    # Python's own list index, reported by a sweep agent, says nothing of the data
    ("wandb: ERROR Run 0jbbwa4t errored: IndexError('list index out of range')", "unknown"),
    # batch 39: Windows' commit limit while torch maps its DLLs in every data-loader worker (two languages)
    ('OSError: [WinError 1455] The paging file is too small for this operation to complete. Error loading '
     '"D:\\\\env\\\\lib\\\\site-packages\\\\torch\\\\lib\\\\shm.dll" or one of its dependencies.', "host_oom"),
    ('OSError: [WinError 1455] 页面文件太小，无法完成操作。 Error loading "D:\\\\venv\\\\cublas64_11.dll" or '
     'one of its dependencies.', "host_oom"),
    # torch for Windows has no NCCL (the gloo backend is the setting), nor, from 2.4, libuv (USE_LIBUV=0)
    ("RuntimeError: Distributed package doesn't have NCCL built in", "missing_config"),
    ('    raise RuntimeError("Distributed package doesn\'t have NCCL " "built in")', "missing_config"),
    ("RuntimeError: use_libuv was requested but PyTorch was build without libuv support", "missing_config"),
    # a file another process holds open (Windows' sharing violation) is not a refusal of access
    ("PermissionError: [WinError 32] The process cannot access the file because it is being used by another process: "
     "'C:\\\\exp\\\\' -> 'C:\\\\exp_archived'", "unknown"),
    # torch's warning on a GPU older than its oldest build target
    ("    Found GPU0 GeForce GTX 960M which is of cuda capability 5.0.\n    PyTorch no longer supports this GPU "
     "because it is too old.", "arch_mismatch"),
    # batch 38: thrust (XGBoost's GPU code) out of device memory; RAPIDS on a GPU older than its builds; a package
    # installed without its GPU part
    ("terminate called after throwing an instance of 'thrust::system::system_error' what(): parallel_for failed: "
     "out of memory Aborted", "cuda_oom"),
    ("RuntimeError: This cuDF installation is missing the necessary PTX files that are <=50.", "arch_mismatch"),
    ("ValueError: No CUDA extension has been built, can't train on GPU.", "no_gpu"),
    # batch 40: transformers' Trainer with --fp16 on a Colab runtime without a GPU
    ("ValueError: Mixed precision training with AMP or APEX (`--fp16`) and FP16 evaluation can only be used on CUDA "
     "devices.", "no_gpu"),
    # batch 43: SyncBN in a program started without a process group (torch < 1.8's wording); OpenMMLab's configs;
    # Paddle's run-time loader of libnccl; DETR's box check printing NaN boxes
    ("AssertionError: Default process group is not initialized", "missing_config"),
    ("KeyError: \"Duplicate key is not allowed among bases. Duplicate keys: {'default_hooks'}\"", "missing_config"),
    ("The third-party dynamic library (libnccl.so) that Paddle depends on is not configured correctly.",
     "import_error"),
    ("AssertionError: incorrect boxes, boxes1 tensor([[nan, nan, nan, nan],", "nan_loss"),
    # batch 42: a launcher setting the code has no branch for
    ("ValueError: Invalid launcher type: none", "missing_config"),
    # batch 44: DGL and MXNet installed without their GPU part
    ("dgl._ffi.base.DGLError: [14:00:04] /opt/dgl/src/runtime/c_runtime_api.cc:82: Check failed: allow_missing: "
     "Device API cuda is not enabled. Please install the cuda version of dgl.", "no_gpu"),
    ("mxnet.base.MXNetError: [16:53:11] src/storage/storage.cc:43: Please compile with CUDA enabled", "no_gpu"),
    # batch 45: CUDA's "not compiled for this architecture" in torch 0.x's words
    ("RuntimeError: cuda runtime error (8) : invalid device function at /work/THC/THCTensorMathPointwise.cu:246",
     "arch_mismatch"),
    # batch 46: sacred's configuration check; torch.distributions given NaN logits; a simulator rendering on a
    # node without a display; a checkpoint without the buffers the policy expects
    ("sacred.utils.ConfigAddedError: Added new config entry that is not used anywhere", "missing_config"),
    ("ValueError: Expected parameter logits (Tensor of shape (280, 13)) of distribution Categorical(logits: "
     "torch.Size([280, 13])) to satisfy the constraint IndependentConstraint(Real(), 1), but found invalid values:",
     "nan_loss"),
    ("mujoco.FatalError: gladLoadGL error", "missing_config"),
    ("Missing key(s) when loading model: ['normalize_inputs.buffer_observation_state.mean']", "checkpoint_mismatch"),
    # an IDE's run window saying the program it ran was SIGKILLed, with no Slurm record: the kernel's OOM killer
    ("Epoch 3: 100%|####| 98/98 [00:41<00:00]\nProcess finished with exit code 137 (interrupted by signal 9: "
     "SIGKILL)", "host_oom"),
    # batch 52: a framework's own version check; torch's state_dict error worded without "Error(s)"
    ("PaddlePaddle version 2.0.0 or higher is required, or a suitable develop version is satisfied as well.",
     "import_error"),
    ("RuntimeError:in loading state_dict for MainNet:Missing key in state_dict:...", "checkpoint_mismatch"),
    # batch 53: Caffe's weights copied into a net of other shapes, and its snapshot directory missing; TensorFlow
    # 1.x's sparse cross-entropy given a label beyond the classes; MXNet's shape check; CNTK's plugin DLL; HDF5
    # weights that are not HDF5; a TF1 distributed master waiting for its tasks
    ("F0311 16:30:12.422097 24027 net.cpp:861] Cannot copy param 0 weights from layer 'score-fr'; shape mismatch.  "
     "Source param shape is 21 4096 1 1 (86016); target param shape is 4 4096 1 1 (16384).", "checkpoint_mismatch"),
    ("F0513 15:45:57.349095 15471 solver.cpp:440] Cannot write to snapshot prefix './logs_end/vgg16_end'.  Make sure "
     "that the directory exists and is writeable.", "missing_config"),
    ("InvalidArgumentError (see above for traceback): Received a label value of 48 which is outside the valid range "
     "of [0, 40).", "data_shape"),
    ("mxnet.base.MXNetError: [09:41:17] src/operator/nn/concat.cc:66: Check failed: shape_assign(&(*in_shape)[i], "
     "dshape) Incompatible input shape: expected [0,5], got [1,6]", "data_shape"),
    ("RuntimeError: Plugin not found: 'Cntk.Deserializers.Image-2.5.dll'", "import_error"),
    ("OSError: Unable to open file (file signature not found)", "checkpoint_corrupt"),
    ("I tensorflow/core/distributed_runtime/master.cc:209] CreateSession still waiting for response from worker: "
     "/job:ps/replica:0/task:0", "rendezvous_failure"),
    # a TFRecord data file that is corrupt is not a checkpoint
    ("tensorflow.python.framework.errors_impl.DataLossError: corrupted record at 2585605691", "unknown"),
    # batch 54: TRL's GRPO check, its words spread by padding as the issue pasted them
    ("ValueError: The global train batch size (1 x 1) must be evenly divisible          by the number of generations "
     "per prompt (16).", "missing_config"),
    # batch 55: torchvision's ImageFolder on a directory without class folders; pix2pixHD's check of a directory
    # its options imply; a compiled op calling aten with another torch version's schema; two NaN printouts
    ("RuntimeError: Found 0 files in subfolders of: data/train", "missing_config"),
    ("AssertionError: ./datasets/liberty/train_inst is not a valid directory", "missing_config"),
    ("RuntimeError: aten::grid_sampler_2d_backward() is missing value for argument 'output_mask'.", "import_error"),
    ("[0] epoch 0, 0/186, g_loss nan d_fake_loss 0.00000 d_real_loss 0.00000\n"
     "[10] epoch 0, 10/186, g_loss nan d_fake_loss nan d_real_loss nan", "nan_loss"),
    # batch 56: a GPU-only precision refused because the job found itself on the CPU
    ("ValueError: Precision.AMP_BF16 is not supported for CPU training.", "no_gpu"),
    # batch 57: Ray Tune trials that ask more than the cluster has; Lightning dropped a hook Optuna's callback used;
    # keras_tuner of another version
    ("ray.tune.error.TuneError: Insufficient cluster resources to launch trial: trial requested 22 CPUs, 0 GPUs but "
     "the cluster has only 8 CPUs, 2 GPUs.", "missing_config"),
    ("RuntimeError: The `on_init_start` callback hook was deprecated in v1.6 and is no longer supported as of v1.8.",
     "import_error"),
    ("AttributeError: module 'keras_tuner.oracles' has no attribute 'BayesianOptimization'", "import_error"),
    # batch 58: Apple's Metal out of GPU memory; XLA's TPU memory report; a bucket's IAM refusal; an empty training
    # set (a data path pointing elsewhere); a setting the code checks
    ("libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command buffer execution "
     "failed: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)", "cuda_oom"),
    ("Total hbm usage >= 9.50G:\n    reserved        530.00M\nProgram hbm requirement 8.98G:", "cuda_oom"),
    ("PermissionDeniedError: Error executing an HTTP request: HTTP response code 403 with body '{",
     "permission_denied"),
    ("ValueError: Training set not found or empty. Must provide training set for fine-tuning.", "missing_config"),
    ("    ValueError: TPUConfig.num_shards is not set correctly ....", "missing_config"),
    # batch 59: tf.data batching samples of unequal length; DeepSpeed's CPU Adam never built; the loader's words
    ("tensorflow.python.framework.errors_impl.InvalidArgumentError: Cannot add tensor to the batch: number of "
     "elements does not match. Shapes are: [tensor]: [2516], [batch]: [2337]", "data_shape"),
    ("AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'", "import_error"),
    ("INTERNAL: CustomCall failed: jaxlib/gpu/prng_kernels.cc:33: operation gpuGetLastError() failed: "
     "cudaGetErrorString symbol not found.", "import_error"),
    # batch 63: a dependency's own check naming what to install; Hydra's launcher group without its plugin;
    # TensorFlow's status text for a path; audio with two channels where the code wants one
    ("RuntimeError: ffmpeg or ffprobe could not be found! Please install them before using stempeg", "import_error"),
    ("In 'hydra/config': Could not find 'hydra/launcher/submitit_local'", "import_error"),
    ("INFO:tensorflow:Error reported to Coordinator: <class 'tensorflow.python.framework.errors_impl."
     "FailedPreconditionError'>, ../../train/records/nsynth-train.tfrecord; Not a directory", "missing_config"),
    ("librosa.util.exceptions.ParameterError: Invalid shape for monophonic audio: ndim=2, shape=(28666, 2)",
     "data_shape"),
    # batch 64: TensorFlow's CPU allocator (the host's memory); MXNet's CUDA status check failing with
    # cudaErrorMemoryAllocation; Marian continuing from a model of other dimensions; a YAML file yaml-cpp cannot
    # parse; the shell told to run a script that is not there
    ("ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[1024,98,98] and type "
     "float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu", "host_oom"),
    ("Name: Check failed: err == cudaSuccess (2 vs. 0) : mxnet_generic_kernel ErrStr:out of memory", "cuda_oom"),
    ("[2023-11-14 00:01:33] Error: Requested shape shape=1000x512 size=512000 for existing parameter 'Wemb' does not "
     "match original shape shape=32000x1024 size=32768000", "checkpoint_mismatch"),
    ("Error: Unhandled exception of type 'N4YAML15ParserExceptionE': yaml-cpp: error at line 8, column 1: end of map "
     "not found", "missing_config"),
    ("bash: ./subword-nmt/subword-nmt/apply_bpe.py: No such file or directory", "missing_config"),
    # batch 66: a dependency named by the code that needs it; images of different sizes compared
    ("AssertionError: Please install av to use video compression.", "import_error"),
    ("ValueError: Input images must have the same dimensions.", "data_shape"),
    # batch 69: Ray's memory monitor; a configuration looked up by name in a table of them
    ("ray._private.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node is used (27.43 / 28.38 "
     "GB).", "host_oom"),
    ('  File "dreamerv2/train.py", line 37, in main\n    config = config.update(configs[name])\nKeyError: \'dmc\'',
     "missing_config"),
    # batch 67: a name an installed package no longer has; a CPU without the instructions a wheel was built for; two
    # settings that must divide
    ("cannot import name 'get_num_classes' from 'torchmetrics.utilities.data' (/home/u/.local/lib/python3.8/"
     "site-packages/torchmetrics/utilities/data.py)", "import_error"),
    ('Thread 1 "python3" received signal SIGILL, Illegal instruction.', "arch_mismatch"),
    ("Epoch 1/10\nIllegal instruction (core dumped)", "arch_mismatch"),
    ("AssertionError: The number of LFW images must be an integer multiple of the LFW batch size", "missing_config"),
])
def test_a_wording_met_in_a_batch_names_its_category(log, category):
    assert diagnose_text(log + "\n").category == category


def test_a_message_wrapped_onto_the_next_line_is_read_whole():
    """A terminal or an issue tracker breaks a long message mid-phrase; the family is read across the break, but a
    line that starts a record of its own (a timestamp, another exception) is not part of it."""
    xla = ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 12.50MiB "
           "(13107200\nB) on device ordinal 0: while running replica 0 and partition 0 of a replicated computation\n")
    assert diagnose_text(xla).category == "cuda_oom"
    glog = ("2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/local_client.cc:672] "
            "Execution of replica 0 failed: Resource exhausted: Out\nof memory while trying to allocate 5520758552 "
            "bytes.\n")
    assert diagnose_text(glog).category == "cuda_oom"
    # the next record is not the message's continuation: another record, or Slurm's and the launchers' lines
    from slurmctl.observe.diagnose import continued
    lines = ["ValueError: the request of", "slurmstepd: error: Detected 1 oom_kill event in StepId=7.0.",
             "srun: error: n1: task 0: Out Of Memory"]
    assert continued(lines, 0) == "ValueError: the request of"
    assert continued(["RESOURCE_EXHAUSTED: Failed to allocate (13107200", "B) on device ordinal 0", "", "more"], 0) \
        == "RESOURCE_EXHAUSTED: Failed to allocate (13107200 B) on device ordinal 0"
    assert diagnose_text("ValueError: the request of\n2026-12-01 10:00:00 WARNING GPU out of memory soon\n").category \
        == "unknown"
