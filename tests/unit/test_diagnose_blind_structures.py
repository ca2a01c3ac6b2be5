"""Structures met in the blind batches of real failure logs (benchmarks/diagnose_corpus.py scores each batch at
first sight, before any rule below was written from it): where the root error was raised, what the log did after
it, and the symptoms that stay a lead rather than a category. The wordings are in test_diagnose_blind_batches.py."""

import pytest

from slurmctl.observe.diagnose import diagnose_text


def test_a_model_type_autoconfig_does_not_know_is_an_old_transformers():
    # batch 26: Qwen2 loaded with transformers 4.32 (AutoConfig's mapping has no 'qwen2')
    log = """Traceback (most recent call last):
  File "/home/u/Qwen1.5/examples/sft/finetune.py", line 344, in train
    config = transformers.AutoConfig.from_pretrained(
  File "/opt/env/lib/python3.11/site-packages/transformers/models/auto/configuration_auto.py", line 1022, in fn
    config_class = CONFIG_MAPPING[config_dict["model_type"]]
  File "/opt/env/lib/python3.11/site-packages/transformers/models/auto/configuration_auto.py", line 723, in __getitem__
    raise KeyError(key)
KeyError: 'qwen2'
"""
    found = diagnose_text(log)
    assert found.category == "import_error" and "'qwen2'" in found.summary
    # a KeyError in the user's own configuration code is still a setting rejected
    assert diagnose_text(log.replace("transformers/models/auto/configuration_auto.py",
                                     "proj/configuration_utils.py")).category == "missing_config"


def test_a_library_that_fails_while_it_is_imported_is_a_version_conflict():
    # batch 30: trl's GRPOConfig reads a TrainingArguments field the installed transformers lacks
    log = """Traceback (most recent call last):
  File "/work/Visual-RFT/src/open_r1/grpo_ocr.py", line 26, in <module>
    from open_r1.trainer import Qwen2VLGRPOTrainer
  File "/work/Visual-RFT/src/open_r1/trainer/grpo_trainer.py", line 46, in <module>
    from trl.trainer.grpo_config import GRPOConfig
  File "/root/miniconda3/lib/python3.11/site-packages/trl/trainer/grpo_config.py", line 22, in <module>
    class GRPOConfig(TrainingArguments):
  File "/root/miniconda3/lib/python3.11/site-packages/trl/trainer/grpo_config.py", line 225, in GRPOConfig
    _VALID_DICT_FIELDS = TrainingArguments._VALID_DICT_FIELDS + ["model_init_kwargs"]
AttributeError: type object 'TrainingArguments' has no attribute '_VALID_DICT_FIELDS'
"""
    assert diagnose_text(log).category == "import_error"
    # the same error once the program's own code runs (not an import) is not read as a version conflict
    ran = log.replace("    from trl.trainer.grpo_config import GRPOConfig", "    config = make_config(args)")
    assert diagnose_text(ran).category != "import_error"


def test_a_nan_loss_a_bare_progress_bar_follows_is_still_a_nan_loss():
    # batch 30: the Trainer's dict of metrics says nan; the bar after it shows no value to be finite
    bar = "  3%|####      | 27/860 [02:08<1:05:33,  4.72s/it]"
    log = "\n".join(["  1%|#    | 9/860 [00:43<1:05:18,  4.60s/it]{'loss': nan, 'reward': 0.2684}",
                     "  2%|##   | 19/860 [01:30<1:07:22,  4.81s/it]{'loss': nan, 'reward': -0.3129}", bar, ""])
    assert diagnose_text(log).category == "nan_loss"
    # a later line that prints a finite loss: training went on past a skipped step
    assert diagnose_text(log.replace(bar, bar + "{'loss': 1.25, 'reward': 0.3}")).category == "unknown"


def test_a_distributed_part_without_a_process_group_is_a_configuration_error():
    # batch 34: SyncBN in the decode head of a segmentation model trained on one process
    log = ("RuntimeError: Default process group has not been initialized, please make sure to call "
           "init_process_group.\n")
    assert diagnose_text(log).category == "missing_config"


def test_a_closing_table_of_metrics_gone_nan_is_a_nan_loss():
    # batch 37: StarGANv2-VC prints one metric a line at each epoch's end; most are nan/inf
    table = ["--- epoch 43 ---", "train/real     : nan", "train/fake     : nan", "train/reg      : inf",
             "train/ds       : 0.0005", "train/asr      : 0.3035", "eval/real      : nan", "eval/adv_cls   : 0.0000"]
    assert diagnose_text("\n".join(table) + "\n").category == "nan_loss"
    # one metric not finite among many finite ones (a metric undefined for this epoch) is no evidence
    finite = ["--- epoch 3 ---", "train/real : 0.51", "train/fake : 0.49", "train/reg : 0.01", "eval/f0 : nan",
              "eval/asr : 0.31", "eval/ds : 0.02"]
    assert diagnose_text("\n".join(finite) + "\n").category == "unknown"


def test_a_library_calling_another_with_the_wrong_arguments_is_a_version_conflict():
    # batch 38: petastorm calling pyarrow 0.15's get_metadata as older pyarrow took it
    log = """Traceback (most recent call last):
  File "/work/train.py", line 12, in <module>
    with make_batch_reader(url, schema_fields=fields) as reader:
  File "/opt/venv/lib/python3.7/site-packages/petastorm/reader.py", line 360, in __init__
    stored_schema = infer_or_load_unischema(self.dataset)
  File "/opt/venv/lib/python3.7/site-packages/petastorm/unischema.py", line 251, in from_arrow_schema
    meta = parquet_dataset.pieces[0].get_metadata(parquet_dataset.fs.open)
TypeError: get_metadata() takes exactly 1 argument (2 given)
"""
    assert diagnose_text(log).category == "import_error"
    # the same error in the program's own code is its own bug: nothing is named
    own = log.replace("/opt/venv/lib/python3.7/site-packages/petastorm/", "/work/data/")
    assert diagnose_text(own).category == "unknown"


def test_the_loss_printed_nan_for_its_last_printouts_is_a_nan_loss():
    # batch 43: NaN from the first printout on, and a line of the data loader's after it
    log = "epoch: 1\n" + "".join(f"train_batch_loss[ {n} ]:  nan\n" for n in (10, 20, 30)) + "Corrupted image 19\n"
    assert diagnose_text(log).category == "nan_loss"
    # one NaN printout the training went past is not it
    assert diagnose_text(log.replace("[ 30 ]:  nan", "[ 30 ]:  0.71")).category == "unknown"


def test_an_installed_library_unpacking_another_number_of_values_is_a_version_conflict():
    # batch 46: gym >= 0.26's wrappers unpacking what an env written for the older API returns
    log = """Traceback (most recent call last):
  File "/home/a/dreamerv2/training/trainer.py", line 41, in collect_seed_episodes
    s, done  = env.reset(), False
  File "/home/a/anaconda3/lib/python3.9/site-packages/gym/core.py", line 379, in reset
    obs, info = self.env.reset(**kwargs)
ValueError: too many values to unpack (expected 2)
"""
    assert diagnose_text(log).category == "import_error"
    # the same error in the program's own code is its own bug
    assert diagnose_text(log.replace("anaconda3/lib/python3.9/site-packages/gym", "dreamerv2/envs")).category \
        == "unknown"


def test_an_ipython_traceback_is_read_like_pythons():
    # batch 46: a Colab traceback pasted with Markdown links and inline code around the exception
    log = """> [/usr/local/lib/python3.7/dist-packages/finrl/models.py](https://x) in get_model(a)
     62             raise NotImplementedError("NotImplementedError")
---> 63         model = Arguments(agent=agent, env=env)

`TypeError: __init__() got an unexpected keyword argument 'agent'`.
"""
    found = diagnose_text(log)
    assert found.category == "import_error"
    assert found.error_line == "TypeError: __init__() got an unexpected keyword argument 'agent'"
    header = """RuntimeError                              Traceback (most recent call last)
<ipython-input-8-a1c97129e4bb> in <module>()
----> 1 trainer.train()

/usr/local/lib/python3.6/dist-packages/torch/cuda/__init__.py in _lazy_init()
    161     _check_driver()
--> 162     torch._C._cuda_init()

RuntimeError: cuda runtime error (35) : out of bounds at /pytorch/aten/src/THC/THCGeneral.cpp:51
"""
    found = diagnose_text(header)
    # the root error is the exception line, not IPython's header above the frames
    assert found.error_line.startswith("RuntimeError: cuda runtime error (35)")
    reading = found.extra["reading"]
    assert reading["raising_frame"] == "/usr/local/lib/python3.6/dist-packages/torch/cuda/__init__.py in _lazy_init"
    assert reading["user_frame"] == "<ipython-input-8-a1c97129e4bb> in <module>"
    assert reading["raising_code"] == "torch._C._cuda_init()"


def test_a_class_not_in_a_registry_is_a_lead_with_both_causes_not_a_category():
    # batches 43, 47, 50 and older ones: OpenMMLab's "X is not in the models registry" was a package not installed
    # or imported in three threads, a config or train script meant for another model in two
    for log in ("KeyError: 'TSN2D is not in the detector registry'\n",
                """Traceback (most recent call last):
  File "/home/u/proj/train.py", line 9, in main
    runner = Runner.from_cfg(cfg)
  File "C:\\envs\\yolo\\lib\\site-packages\\mmengine\\registry\\build_functions.py", line 100, in build_from_cfg
    raise KeyError(
KeyError: 'YOLODetector is not'
"""):
        found = diagnose_text(log)
        assert found.category == "unknown", found
        assert "not installed or not imported" in found.summary and "another kind of model" in found.summary


def test_a_pickle_broken_between_processes_is_no_checkpoint():
    # batch 48: spawn's child reading what its parent sent, after the parent died of a network error
    log = """Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/usr/lib/python3.6/multiprocessing/spawn.py", line 115, in _main
    self = reduction.pickle.load(from_parent)
_pickle.UnpicklingError: pickle data was truncated
"""
    assert diagnose_text(log).category == "unknown"
    assert diagnose_text(log.replace("/usr/lib/python3.6/multiprocessing/spawn.py", "/w/train.py")).category \
        == "checkpoint_corrupt"


def test_memory_words_say_which_memory():
    assert diagnose_text("GPUassert: out of memory pcdet/ops/iou3d_nms/src/iou3d_nms.cpp 103\n").category \
        == "cuda_oom"
    # TensorFlow's allocator on the host is the host's memory
    assert diagnose_text("Resource exhausted: OOM when allocating tensor with shape[1024,50257] and type float on "
                         "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu\n").category == "host_oom"
    # a bare "out of memory" names no memory; Slurm's own wording and the kernel's do
    assert diagnose_text("Runtime error: out of memory /opt/HugeCTR/include/general_buffer.hpp:64\n").category \
        == "unknown"
    assert diagnose_text("srun: error: n1: task 0: Out Of Memory\n").category == "host_oom"
    assert diagnose_text("[12.3] Out of memory: Killed process 4242 (python)\n").category == "host_oom"


def test_a_gpu_index_the_node_has_not_is_a_configuration_error():
    found = diagnose_text("RuntimeError: CUDA error: invalid device ordinal\n")
    assert found.category == "missing_config" and "nproc_per_node" in found.hint


def test_a_training_that_completed_with_nan_metrics_is_a_nan_loss():
    # batch 47: every epoch's metrics NaN, then the script's own "Training completed!"
    log = "".join(f"INFO: 2022-03-11 14:18:54,833, epoch, {n:04d}, nan, nan, nan, nan\n" for n in (198, 199, 200))
    assert diagnose_text(log + "DEBUG: 2022-03-11 14:23:56,727, Training completed!\n").category == "nan_loss"
    # TensorBoard's warning that a logged value was not finite says nothing of the loss
    assert diagnose_text(" WARNING NaN or Inf found in input tensor\n").category == "unknown"


def test_two_tensors_of_the_model_disagreeing_in_size_is_a_lead_not_a_category():
    # batches 26-54 at first sight: "The size of tensor a must match the size of tensor b", a view's "shape is
    # invalid for input of size" and a concatenation's "Sizes of tensors must match" were the data's in 4 threads
    # of 11, a setting's, a checkpoint's or the project's own code in the others
    for message in ("RuntimeError: The size of tensor a (91) must match the size of tensor b (2) at non-singleton "
                    "dimension 0",
                    "RuntimeError: shape '[1, 5]' is invalid for input of size 25",
                    "RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 13 but got size "
                    "10 for tensor number 1 in the list."):
        found = diagnose_text(message + "\n")
        assert found.category == "unknown", found
        assert "two tensors inside the model disagree in size" in found.summary
    # raised where the data set's samples are read, it is the data's
    in_data = """Traceback (most recent call last):
  File "/w/train.py", line 80, in <module>
    for batch in loader:
  File "/w/datasets/kitti.py", line 41, in __getitem__
    points = points.view(-1, 4)
RuntimeError: shape '[-1, 4]' is invalid for input of size 1023
"""
    assert diagnose_text(in_data).category == "data_shape"


def test_an_end_of_file_where_torch_load_reads_the_checkpoint_is_a_corrupt_checkpoint():
    # batch 55: an empty checkpoint file; Python 2's bare EOFError says nothing else
    log = """Traceback (most recent call last):
  File "/disk/code/trainer.py", line 132, in load_network
    state_dict = torch.load(cfg.TRAIN.NET_G)
  File "/usr/local/lib/python2.7/dist-packages/torch/serialization.py", line 531, in _load
    magic_number = pickle_module.load(f)
EOFError
"""
    assert diagnose_text(log).category == "checkpoint_corrupt"
    # the same error where the program reads its own files is not a checkpoint
    assert diagnose_text(log.replace("/usr/local/lib/python2.7/dist-packages/torch/serialization.py", "/disk/io.py")
                         ).category == "unknown"


def test_a_path_that_is_not_there_is_the_configurations_even_where_the_data_is_read():
    # batch 60: a data set's directory that a previous step was to create, checked in the data set's own code
    log = """ValueError: Caught ValueError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/envs/fs/lib/python3.10/site-packages/torch/utils/data/_utils/worker.py", line 308, in _worker_loop
    data = fetcher.fetch(index)
  File "/work/fish-speech/fish_speech/datasets/text.py", line 234, in init_mock_data_server
    raise ValueError(f"{i} is not a file or directory")
ValueError: data/protos is not a file or directory
"""
    assert diagnose_text(log).category == "missing_config"
    # any other error raised there is the data's, and says which error in words
    found = diagnose_text(log.replace("data/protos is not a file or directory", "expected 3 fields, got 2"))
    assert found.category == "data_shape" and found.summary.startswith("A ValueError was raised"), found.summary
    found = diagnose_text(log.replace("ValueError: data/protos is not a file or directory", "IndexError: list index "
                                      "out of range"))
    assert found.category == "data_shape" and found.summary.startswith("An IndexError was raised"), found.summary


def test_a_division_by_a_count_that_was_zero_leads_to_an_empty_data_set_without_naming_a_cause():
    # batch 60: the data sets were too small for their splits (two threads), or at a wrong path (one)
    log = """Traceback (most recent call last):
  File "train.py", line 133, in <module>
    train_loss = sum_loss / len(X_train)
ZeroDivisionError: division by zero
"""
    found = diagnose_text(log)
    assert found.category == "unknown" and "data set or a split of it that is empty" in found.summary
    # a division by anything else is only the root error
    found = diagnose_text(log.replace("sum_loss / len(X_train)", "a / b"))
    assert found.category == "unknown" and "empty" not in found.summary


def test_an_assertion_on_the_settings_is_a_configuration_mistake():
    # batch 65: mmdetection's train_detector checking two settings against each other
    log = """Traceback (most recent call last):
  File "/data/mmdetection/tools/train.py", line 185, in main
    meta=meta)
  File "/home/u/.conda/envs/mm/lib/python3.7/site-packages/mmdet/apis/train.py", line 100, in train_detector
    assert cfg.total_epochs == cfg.runner.max_epochs
AssertionError
"""
    assert diagnose_text(log).category == "missing_config"
    # an assertion on anything else says nothing of the settings
    assert diagnose_text(log.replace("cfg.total_epochs == cfg.runner.max_epochs", "x.shape[0] == y.shape[0]")
                         ).category == "unknown"


def test_a_library_calling_another_without_an_argument_it_now_requires_is_a_version_conflict():
    # batch 63: musdb 0.3 calling PyYAML 6's load() without Loader=, pasted without the traceback's header
    log = r"""  File "C:\p\Wave-U-Net\Datasets.py", line 222, in getMUSDB
    mus = musdb.DB(root_dir=database_path, is_wav=False)
  File "C:\p\venv\lib\site-packages\musdb\__init__.py", line 86, in __init__
    self.setup = yaml.load(f)
TypeError: load() missing 1 required positional argument: 'Loader'
"""
    assert diagnose_text(log).category == "import_error"
    # the same words raised from the program's own code are its own call
    assert diagnose_text(log.replace(r"venv\lib\site-packages\musdb", r"Wave-U-Net\musdb")).category != "import_error"


def test_an_assertion_that_pytorch_sees_a_gpu_is_no_gpu():
    # batch 62: EnlightenGAN's define_G on a CPU-only torch
    log = r"""Traceback (most recent call last):
  File "train.py", line 19, in <module>
    model = create_model(opt)
  File "D:\EnlightenGAN-master\models\networks.py", line 86, in define_G
    assert(torch.cuda.is_available())
AssertionError
"""
    found = diagnose_text(log)
    assert found.category == "no_gpu" and found.evidence[0] == "assert(torch.cuda.is_available())", found
    assert diagnose_text(log.replace("torch.cuda.is_available()", "len(gpu_ids) > 0")).category == "unknown"


def test_a_traceback_without_its_header_still_quotes_the_raising_code():
    # batch 66: a data set of no images (a wrong data path), pasted from its last frame on
    log = """File "/root/Restormer-master/utils.py", line 103, in __getitem__
    image_name = os.path.basename(self.rain_images[idx % self.num])
ZeroDivisionError: integer division or modulo by zero
"""
    found = diagnose_text(log)
    assert found.category == "unknown" and "data set or a split of it that is empty" in found.summary, found.summary
    # batch 62: the settings looked up by key in the program's own code
    assert diagnose_text("""  File "train.py", line 246, in _main_
    data_load_method = config['model']['data_load_method']
KeyError: 'data_load_method'
""").category == "missing_config"


@pytest.mark.parametrize(("asserted", "category"), [
    ("assert normal_dir.is_dir(), \"A folder location must be provided in normal_dir.\"", "missing_config"),
    ("assert os.path.exists(transcript_path)", "missing_config"),
    ("assert has_apex", "import_error"),
    ("assert(torch.cuda.is_available())", "no_gpu"),
    ("assert len(batch) > 0", "unknown"),  # anything else an assertion checks says nothing by itself
])
def test_what_a_bare_assertion_checked_names_its_category(asserted, category):
    # batch 67: anomalib's folder check, a training script that needs Apex; batch 62: a CPU-only torch
    log = f"""Traceback (most recent call last):
  File "/w/train.py", line 37, in <module>
    {asserted}
AssertionError
"""
    assert diagnose_text(log).category == category
