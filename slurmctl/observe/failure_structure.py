"""What a failure log's structure says beyond its wordings: where the root error was raised (data, configuration,
checkpoint or group-forming code, an installed library while it was imported), what the log did after it (NaN
where numbers were, a kill from outside), and the lookalikes that say nothing. observe/diagnose.py decides with
these after the signatures (observe/diagnosis_rules.py) and the families (observe/diagnosis_families.py)."""

from __future__ import annotations

import itertools
import re

from slurmctl.observe.diagnosis_families import TENSORS_DISAGREE
from slurmctl.observe.diagnosis_rules import SIGNATURES
from slurmctl.observe.log_reading import LogReading

# Where a data set's samples are read and batched (a Dataset's __getitem__, a collate, the data loader's
# _next_data every worker's error passes through): an index, key or value error raised there is the data's.
_DATA_CODE = re.compile(r"__getitem__|getitem|pull_item|collate|annotation|get_random_data|load_data|read_data|"
                        r"get_batch|_next_data|prepare_(?:train|test)_img|get_ann_info|load_image|/datasets?/|"
                        r"dataset\w*\.py|data_?loader\w*\.py", re.IGNORECASE)
_DATA_ERRORS = ("IndexError", "KeyError", "ValueError", "AssertionError", "NotImplementedError", "TypeError")
# A call with another number of arguments than the callee takes ("get_metadata() takes exactly 1 argument (2 given)",
# "takes 2 positional arguments but 3 were given"): raised inside an installed library, one library calling another
# of a version it was not written for; never a fact about the data
_ARITY = re.compile(r"^TypeError: \S+\(\) (?:takes (?:exactly |at most |at least |from \d+ to )?\d+ (?:positional )?"
                    r"arguments? (?:\(\d+ given\)|but \d+ (?:were|was) given)|"
                    # PyYAML 6's load() without Loader= as musdb 0.3 calls it
                    r"missing \d+ required (?:positional|keyword-only) arguments?: )")
# The same between an installed library and what it unpacks from another's call (gym >= 0.26's reset() returns
# (obs, info) and step() five values; torch's LSTMCell chunking what an older caller passed)
_UNPACK = re.compile(r"^ValueError: (?:too many|not enough) values to unpack \(expected \d+(?:, got \d+)?\)")
# Where arguments and configuration are parsed and checked: a ValueError/KeyError raised there is a bad setting.
_CONFIG_CODE = re.compile(r"argparse\.py|hf_argparser\.py|training_args\.py|/omegaconf/|/hydra/|"
                          r"parse_args|__post_init__|validate_args|arguments\.py|config(?:uration)?(?:_\w+)?\.py",
                          re.IGNORECASE)
_CONFIG_ERRORS = ("ValueError", "KeyError", "TypeError", "AttributeError", "AssertionError")
# A registry building the class a configuration names (mmengine/mmcv's build_from_cfg, fvcore/detectron2's
# Registry.get): a KeyError there is a name nothing registered (its full wording: "X is not in the model registry").
_REGISTRY_CODE = re.compile(r"[\\/]registry[\\/]|registry\.py|\bbuild_from_cfg\b", re.IGNORECASE)
_NOT_REGISTERED = re.compile(r"\bis not in the \w+ registry\b")
# Where a checkpoint is loaded into the model: a key, shape or size complaint raised there is a checkpoint that
# does not fit (a corrupt file has its own signatures above).
_CHECKPOINT_CODE = re.compile(r"load_checkpoint|load_state_dict|_load_from_state_dict|load_model|resume|"
                              r"from_pretrained|checkpoint\w*\.py|/checkpoint(?:ing)?/", re.IGNORECASE)
_CHECKPOINT_ERRORS = ("KeyError", "RuntimeError", "ValueError", "AssertionError")
_CHECKPOINT_WORDS = re.compile(r"\bkeys?\b|shape|size|mismatch|missing|unexpected|world size", re.IGNORECASE)
# The source line a KeyError was raised on, indexing a loaded checkpoint (`checkpoint["optimizer"]`) or a
# configuration (`cfg["model"]`, `args.config["lr"]`): the key is missing from that checkpoint or config.
_CHECKPOINT_LOOKUP = re.compile(r"\b\w*(?:checkpoint|ckpt|state_dict|param_dict)\w*(?:\(\))?\s*\[|"
                                r"torch\.load\([^)]*\)\s*\[", re.IGNORECASE)
# an assertion whose expression reads the settings ("assert cfg.total_epochs == cfg.runner.max_epochs"): the
# program checked the configuration and found it inconsistent
_ASSERTS_A_SETTING = re.compile(r"^\s*assert\b.*\b(?:cfg|config|conf|hparams|opts?|args|FLAGS)\s*[.\[]")
_CONFIG_LOOKUP = re.compile(r"\b\w*(?:cfg|config|conf|hparams|hyper_?params|opts?|args|params)s?\s*\[", re.IGNORECASE)
# A path that does not exist; not a shared library or DLL (a broken install), nor a bare program name such as
# 'nvcc' or 'ninja' (a missing toolchain).
# not a shared library, a bare program name, nor a rename (os.rename/replace "'src' -> 'dst'": a file another
# process or a cleanup removed, as in a cache several ranks write)
MISSING_PATH = re.compile(r"^(?:(?:builtins\.)?FileNotFoundError\b|(?:IOError|OSError): \[Errno 2\] No such file "
                           r"or directory: )(?!.*\.(?:so|dll)\b)(?!.*: '[\w+-]+'\s*$)(?!.*' -> ')|"
                           # a loader's own check of the directory it was given (pix2pix/pix2pixHD's make_dataset)
                           r"^(?:AssertionError|ValueError|OSError|IOError): \S+ is not a (?:valid )?"
                           r"(?:file or directory|directory|dir|path)\b")
# Lines that say Slurm or a person ended the job: a SIGKILL that follows them is not the kernel's.
# slurmstepd's line for a job or step cancelled on request (scancel); a time limit or a preemption adds
# "DUE TO ..." after the time.
CANCELLED_LINE = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ \*\*\*\s*$")
_ENDED_BY_SLURM = re.compile(r"CANCELLED AT|Job step aborted|DUE TO|scancel", re.IGNORECASE)
# Weak evidence, used only when nothing more specific was found and the error (if any) is about a device:
# torch.utils.cpp_extension logs the first whenever CUDA_HOME is set but torch.cuda.is_available() is False,
# Lightning's Trainer prints the second at start, torch.utils.collect_env the third; a CPU-only build of torch
# named in a banner or an environment printout ("torch 1.11.0+cpu CPU", "PyTorch version: 2.0.0+cpu").
WEAK_NO_GPU = re.compile(r"No CUDA runtime is found, using CUDA_HOME=|^\s*GPU available: False\b|"
                          r"^\s*Is CUDA available: False\s*$|"
                          r"\b(?:torch|PyTorch version:?)[ =-]?v?\d+\.\d+(?:\.\d+)?\+cpu\b")
WORKER_EXITED = re.compile(r"DataLoader worker \(pid(?:\(s\))? [\d, ]+\) exited unexpectedly")
DEVICE_WORDS = re.compile(r"cuda|gpu|device|nccl|cudnn|nvidia", re.IGNORECASE)



def not_in_a_registry(reading: LogReading) -> bool:
    return bool(reading.exception and reading.exception.startswith("KeyError") and (
        _NOT_REGISTERED.search(reading.exception)
        or (reading.raising_frame and _REGISTRY_CODE.search(reading.raising_frame))))


def raised_loading_a_checkpoint(reading: LogReading) -> bool:
    if reading.exception and reading.exception.startswith("KeyError") and reading.raising_code \
            and _CHECKPOINT_LOOKUP.search(reading.raising_code):
        return True
    return bool(reading.exception and reading.exception.startswith(_CHECKPOINT_ERRORS)
                and (reading.exception.startswith("KeyError") or _CHECKPOINT_WORDS.search(reading.exception))
                and any(_CHECKPOINT_CODE.search(frame) for frame in reading.frames[-3:]))


def killed_from_outside(reading: LogReading, root: dict | None, lines: list[str]) -> bool:
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


def launcher_said_sigkill(reading: LogReading) -> bool:
    """A launcher's or shell's line says the process died of SIGKILL, and it is the only error there is."""
    return reading.sigkill is not None and (not reading.exception or reading.exception_line == reading.sigkill)


# torch's collate stacking a worker's samples into shared memory, when they differ in size; the same words come
# from loading a checkpoint whose storages do not fit (FSDP's sharded state dicts): only the frames tell them apart
_STORAGE_NOT_RESIZABLE = re.compile(r"Trying to resize storage that is not resizable")
_COLLATE_CODE = re.compile(r"collate", re.IGNORECASE)


def raised_by_data_code(reading: LogReading) -> bool:
    if reading.exception and _STORAGE_NOT_RESIZABLE.search(reading.exception):
        return any(_COLLATE_CODE.search(frame) for frame in reading.frames)
    return bool(reading.exception and not _ARITY.match(reading.exception) and (
        reading.exception.startswith(_DATA_ERRORS) or TENSORS_DISAGREE.search(reading.exception))
        and any(_DATA_CODE.search(frame) for frame in reading.frames))


# transformers' AutoConfig looking a checkpoint's model_type up in its mapping (models/auto/configuration_auto.py)
_AUTO_CONFIG_FRAME = re.compile(r"transformers[/\\]models[/\\]auto[/\\]configuration_auto\.py")


def version_conflict(reading: LogReading) -> str | None:
    """What an installed library did that shows it does not fit another installed library, or None: it called
    another with arguments that one does not take, or it failed while the program was still importing it."""
    if not reading.exception:
        return None
    if _ARITY.match(reading.exception) and reading.library_frame:
        return "An installed library called another with arguments it does not take"
    if _UNPACK.match(reading.exception) and reading.library_frame:
        return "An installed library got another number of values back from a call than it was written for"
    if reading.while_importing and reading.exception.startswith(("AttributeError", "ImportError", "TypeError")):
        return "An installed library failed while it was being imported"
    return None


def unknown_model_type(reading: LogReading) -> bool:
    return bool(reading.exception and reading.exception.startswith("KeyError: '") and reading.raising_frame
                and _AUTO_CONFIG_FRAME.search(reading.raising_frame))


# a value that is NaN in a line of numbers (a metrics line, a loss printout)
_NAN_VALUE = re.compile(r"(?<![\w.])[-+]?nan(?![\w.(])", re.IGNORECASE)


_METRIC_LINE = re.compile(r"^[\w/.\- ]{1,60}?\s*[:=]\s*[-+]?(?:\d[\d.e+-]*|nan|inf)\s*$", re.IGNORECASE)
# a loss printed with its value ("loss: nan", "train_batch_loss[ 10 ]:  nan", "Loss 7.35")
_PRINTED_LOSS = re.compile(r"(?<![a-z])loss\w*(?:\[[^\]]*\])?['\"]?\s*[:=]?\s*[-+]?(?:nan|inf|\d[\d.e+-]*)(?![\w.])",
                           re.IGNORECASE)
_NOT_FINITE_VALUE = re.compile(r"[:=]\s*[-+]?(?:nan|inf)\s*$", re.IGNORECASE)


def ends_in_nan(lines: list[str], reading: LogReading) -> list[str]:
    """A log without an error of its own whose last lines print NaN values where the lines before printed numbers:
    the training diverged and went on printing NaN until it was stopped (or until it said it had finished: a training
    that "completed" with NaN metrics learnt nothing). Those lines, or []."""
    last = len(lines)
    if reading.finished is not None and sum(bool(line.strip()) for line in lines[reading.finished + 1:]) <= 2:
        last = reading.finished  # the training's own "finished" and its last words are not metrics
    said = [line.strip() for line in lines[:last] if line.strip()]
    if reading.exception:
        return []
    # the losses the log prints were NaN in its last three printouts (one line's "loss_hm=nan, loss=nan" counts for
    # each), whatever followed them
    losses = [(line, m[0]) for line in said for m in _PRINTED_LOSS.finditer(line)]
    if len(losses) >= 3 and all(_NAN_VALUE.search(value) for _, value in losses[-3:]):
        return list(dict.fromkeys(line for line, _ in losses[-3:]))
    if len(said) < 3:
        return []
    # rows of metrics each holding two or more NaN values ("epoch, 0199, nan, nan, nan, nan")
    if all(len(_NAN_VALUE.findall(line)) >= 2 for line in said[-3:]):
        return said[-3:]
    # a closing table of metrics, one per line ("train/fake     : nan"): a third or more of them not finite
    table = list(itertools.takewhile(_METRIC_LINE.match, reversed(said)))
    gone = [line for line in table if _NOT_FINITE_VALUE.search(line)]
    if len(gone) >= 3 and 3 * len(gone) >= len(table):
        return gone[:3][::-1]
    if not all(_NAN_VALUE.search(line) for line in said[-2:]):
        return []
    before = [line for line in said[:-2] if not _NAN_VALUE.search(line)]
    return said[-2:] if before and re.search(r"\d+\.\d+|\bloss\b", before[-1], re.IGNORECASE) else []


# What a bare assertion checked, read from the source line the traceback quotes: that PyTorch sees a GPU, that a
# path the run was given exists, that an optional package imported (the flag its import sets)
_ASSERTED = (
    ("no_gpu", re.compile(r"^\s*assert\W*torch\.cuda\.(?:is_available\(\)|device_count\(\))")),
    ("missing_config", re.compile(r"^\s*assert\b.*(?:\.(?:is_dir|is_file|exists)\(\)|"
                                  r"os\.path\.(?:exists|isdir|isfile)\()")),
    ("import_error", re.compile(r"^\s*assert\W*(?:has_\w+|HAS_\w+|\w+_AVAILABLE|is_\w+_available\(\))\W*(?:,|$)")),
)
ASSERTED_WORDS = {
    "no_gpu": "The program asserted that PyTorch sees a GPU, and it saw none",
    "missing_config": "The program asserted that a path it was given exists, and it does not",
    "import_error": "The program asserted that an optional package imported, and it did not (not installed, or "
                    "installed for another version)",
}


def what_was_asserted(reading: LogReading) -> str | None:
    """The category of what a failing bare assertion checked (ASSERTED_WORDS says it), or None."""
    if not (reading.exception and reading.exception.startswith("AssertionError") and reading.raising_code):
        return None
    return next((category for category, rx in _ASSERTED if rx.search(reading.raising_code)), None)


def raised_by_config_code(reading: LogReading) -> bool:
    if reading.exception and reading.exception.startswith("KeyError") and reading.raising_code \
            and _CONFIG_LOOKUP.search(reading.raising_code):
        return True
    if reading.exception and reading.exception.startswith("AssertionError") and reading.raising_code \
            and _ASSERTS_A_SETTING.search(reading.raising_code):
        return True
    return bool(reading.exception and reading.raising_frame and reading.exception.startswith(_CONFIG_ERRORS)
                and _CONFIG_CODE.search(reading.raising_frame))


# torch.distributed forming the group: the env:// / tcp:// rendezvous handlers and the store they open
_GROUP_FORMING_CODE = re.compile(r"torch[\\/]distributed[\\/](?:rendezvous\.py|elastic[\\/]rendezvous[\\/])")
_GROUP_FORMING_ERRORS = ("ValueError", "RuntimeError", "TimeoutError", "ConnectionError", "OSError",
                         "torch.distributed", "DistNetworkError", "DistStoreError")


def raised_forming_the_group(reading: LogReading) -> bool:
    """The root error was raised by torch's rendezvous itself (MASTER_ADDR unset, its host not resolving, the
    store not answering) before any training step: the processes never formed their group."""
    return bool(reading.exception and reading.first_progress is None and reading.raising_frame
                and _GROUP_FORMING_CODE.search(reading.raising_frame)
                and reading.exception.startswith(_GROUP_FORMING_ERRORS))


_SIGBUS = re.compile(r"Caught signal 7 \(Bus error|signal 7 \(SIGBUS\)|\bSIGBUS\b")
_NCCL_FRAME = re.compile(r"\bnccl[A-Z]\w*\(\)|libnccl\.so")


def bus_error_in_nccl(lines: list[str]) -> list[str]:
    """A SIGBUS whose backtrace (the next lines UCX/libunwind print) runs through NCCL: NCCL touching a
    shared-memory segment it could not back, i.e. a /dev/shm too small (a container's 64 MB) or a locked
    memory limit too low. The evidence lines, or [] when the log has no such crash."""
    for i, line in enumerate(lines):
        if _SIGBUS.search(line):
            frame = next((f for f in lines[i + 1:i + 40] if _NCCL_FRAME.search(f)), None)
            if frame is not None:
                return [line.strip(), frame.strip()]
    return []



_NON_FINITE = re.compile(r"\b[-+]?(?:nan|inf)\b", re.IGNORECASE)
# a line that prints a loss value (a bare progress bar, "27/860 [02:08<1:05:33]", shows no value to be finite)
_LOSS_VALUE = re.compile(r"loss\w*['\"]?\s*[:=]?\s*[-+]?\d", re.IGNORECASE)


# multiprocessing's child reading what its parent sent it (spawn's preparation data, a queue's item): a pickle
# that breaks there is the channel between processes (the parent died, a pipe closed), not a file on disk
_PROCESS_CHANNEL = re.compile(r"multiprocessing[\\/](?:spawn|reduction|connection|queues)\.py")


def drop_process_channel_pickles(hits: dict[int, list[int]], lines: list[str]) -> None:
    """A corrupt-checkpoint wording raised where multiprocessing unpickles what another process sent is no
    evidence of a checkpoint."""
    for n in [n for n in hits if SIGNATURES[n].category == "checkpoint_corrupt"]:
        hits[n] = [i for i in hits[n] if not any(_PROCESS_CHANNEL.search(line) for line in lines[max(0, i - 3):i])]
        if not hits[n]:
            del hits[n]


# torch.load reading the file itself (serialization.py's _load, its pickle_module.load): an end of file or an
# unpickling error there is the checkpoint's bytes (empty, cut short), whatever few words the exception has
_TORCH_LOAD = re.compile(r"torch[\\/]serialization\.py")
_READ_ERRORS = ("EOFError", "UnpicklingError", "_pickle.UnpicklingError", "pickle.UnpicklingError")


def raised_reading_a_checkpoint(reading: LogReading) -> bool:
    return bool(reading.exception and reading.exception.startswith(_READ_ERRORS) and reading.raising_frame
                and _TORCH_LOAD.search(reading.raising_frame))


def raised_in_process_channel(reading: LogReading) -> bool:
    return bool(reading.raising_frame and _PROCESS_CHANNEL.search(reading.raising_frame))


def drop_recovered_nan(hits: dict[int, list[int]], lines: list[str], reading: LogReading) -> None:
    """A NaN/Inf that training went on past (a later step's progress line, all of its values finite: a skipped
    mixed-precision step, one bad batch) is noise, not a loss that blew up: its lines are no evidence."""
    nan = [n for n in hits if SIGNATURES[n].category == "nan_loss"]
    last_nan = max((i for n in nan for i in hits[n]), default=None)
    if last_nan is None or reading.last_progress is None or reading.last_progress <= last_nan \
            or _NON_FINITE.search(lines[reading.last_progress]) \
            or not any(_LOSS_VALUE.search(line) for line in lines[last_nan + 1:reading.last_progress + 1]):
        return
    for n in nan:
        del hits[n]
