"""The families of words a failure is read by when no known wording (observe/diagnosis_rules.SIGNATURES)
matched: the root exception's class and message, and a scheduler's own record, in any library's or scheduler's
words. observe/diagnose.py reads them after the signatures."""

from __future__ import annotations

import re


def _families(*pairs: tuple[str, str]) -> tuple[tuple[str, re.Pattern], ...]:
    return tuple((category, re.compile(rx, re.IGNORECASE)) for category, rx in pairs)


# --- exception families --------------------------------------------------------------------------------------
# When no signature matched, the root error is read by its family: the exception's class and the words of its
# message (two words near each other, not one library's sentence), so a wording nobody has met yet still lands in
# its category. Each family names its cause only when the message itself says it; anything else stays `unknown`.
# Order matters: a GPU's memory before the host's, a checkpoint's shape before a tensor's shape.
_GPU_WORDS = r"(?:CUDA|GPU|cuDNN|cuBLAS|HBM|VRAM|device memory|on device|METAL|MPS)"
EXCEPTION_FAMILIES = _families(
    ("cuda_oom", rf"{_GPU_WORDS}.{{0,80}}(?:out of memory|OUT_OF_MEMORY|\bOOM\b|not enough memory|insufficient memory|"
                 r"memory (?:is )?exhausted)|\b(?:RESOURCE_EXHAUSTED|failed to allocate)\b.{0,80}\bon (?:the )?"
                 r"(?:GPU|device)\b|"
                 # XLA's allocator on the accelerator ("Execution of replica 0 failed: Resource exhausted: Out of
                 # memory while trying to allocate ..."; TensorFlow's CPU allocator says "OOM when allocating")
                 r"\bResource exhausted: Out of memory\b|"
                 rf"\b(?:out of memory|OUT_OF_MEMORY|not enough memory)\b.{{0,80}}{_GPU_WORDS}"),
    # a job or trial that asks for more than the whole cluster has ("trial requested 22 CPUs, 0 GPUs but the cluster
    # has only 8 CPUs"): the request is the setting to change. Before no_gpu: such a message can say "0 GPUs"
    ("missing_config", r"\bInsufficient cluster resources\b|\b(?:requested|requests|asked for|asks for) \d+ "
                       r"(?:CPU|GPU|core|node)s?\b.{0,80}\bbut\b.{0,40}\bonly\b"),
    ("no_gpu", r"\b(?:no|zero|0|cannot find|can't find|could not find|couldn't find|unable to find|without)\s+"
               r"(?:\w+\s+){0,2}(?:GPU|CUDA device|CUDA-capable device|NVIDIA (?:GPU|device|driver))s?\b|"
               r"\b(?:GPU|CUDA device|NVIDIA (?:GPU|driver))s?\s+(?:\w+\s+){0,2}(?:not (?:found|available|detected|"
               r"visible)|unavailable)\b|"
               # a package installed without its GPU part ("No CUDA extension has been built, can't train on GPU");
               # transformers' Trainer asked for fp16 where it sees no GPU
               r"\b(?:can't|cannot|unable to) (?:train|run) on (?:the )?GPU\b|can only be used on CUDA devices\b|"
               # a GPU-only setting refused because the job found itself on the CPU ("Precision.AMP_BF16 is not
               # supported for CPU training")
               r"\bnot supported for CPU training\b"),
    ("host_oom", r"^(?:[\w.]+\.)?MemoryError\b|^(?:[\w.]+\.)?\w*(?:OutOfMemory|OOM)(?:Error|Exception)\b(?!.{0,200}"
                 rf"{_GPU_WORDS})|\b(?:cannot|can't|unable to|failed to) allocate\b.{{0,60}}"
                 r"\b(?:host|CPU|RAM|system) memory|"
                 r"\b(?:host|system|node|CPU|RAM)(?: memory)? (?:ran|runs|running) (?:out|low)|posix_memalign|"
                 # Ray's memory monitor ("More than 95% of the memory on node is used (27.43 / 28.38 GB)")
                 r"\bof the memory on (?:the )?node is used\b|\bnode running low on memory\b"),
    ("checkpoint_corrupt", r"\b(?:checkpoint|ckpt|state_dict|weights|archive|pickle|\w+\.(?:pth?|ckpt|bin|safetensors|"
                           r"h5|pkl))\b.{0,80}\b(?:corrupt\w*|truncated|unexpected end|unexpected EOF|checksum|"
                           r"bad magic|invalid magic)|\b(?:corrupt\w*|truncated)\b.{0,40}\b(?:checkpoint|ckpt|weights|"
                           r"state_dict)\b"),
    ("checkpoint_mismatch", r"\b(?:checkpoint|ckpt|state_dict|state dict|saved (?:model|weights)|pretrained weights)"
                            r"\b.{0,120}\b(?:missing|unexpected|mismatch\w*|shape|size|does(?: not|n't) match|"
                            r"incompatible|not found)\b|\b(?:missing|unexpected|mismatch\w*|shape|size|incompatible)"
                            r"\b.{0,120}\b(?:in|from|of) (?:the )?(?:checkpoint|ckpt|state_dict|saved weights)\b"),
    ("data_shape", r"\b(?:shape|size|dimension|length)s?\b.{0,80}\b(?:must match|do(?:es)? not match|doesn't match|"
                   r"mismatch|incompatible|not equal)\b|\bexpected (?:input|target|sequence|tensor|batch)\w* "
                   r"(?:\w+ ){0,3}(?:shape|size|length|of length|dimension)|"
                   # (Python's own "list index out of range" says nothing of the data)
                   r"\b(?:label|class|target|token|(?<!list )(?<!tuple )(?<!string )index)(?: id)?s?\b.{0,60}\b"
                   r"(?:out of (?:\w+ )?(?:range|bounds?)|outside (?:of )?the (?:\w+ )?range|"
                   r"exceeds?)\b|"
                   r"\bincompatible (?:input )?shapes?\b|\bCannot add tensor to the batch\b|"
                   r"\binvalid shape (?:for|of)\b|"
                   r"\b(?:must|should) (?:have|be of) the same (?:shape|size|length|number of dimensions|"
                   r"dimensions)\b"),
    # settings that must fit each other (a batch size and the processes or generations that share it, hidden size
    # and heads): a check of the configuration
    ("missing_config", r"\bmust\s+be\s+(?:evenly\s+|exactly\s+)?divisible\s+by\b|"
                       r"\bmust be an? (?:integer |whole )?multiple of\b"),
    # a dataset that holds nothing: in the scored threads, every time a data path in the configuration or the
    # arguments that points at the wrong folder
    ("missing_config", r"\bnum_samples=0\b|\b(?:dataset|data set) is empty\b|\bFound 0 (?:files|images|samples)\b|"
                       r"\b(?:training|train|validation|eval) (?:set|data|dataset) (?:was )?not found or empty\b|"
                       r"\bNo (?:training )?data found\b"),
    # a setting the code checks and finds wrong ("TPUConfig.num_shards is not set correctly")
    ("missing_config", r"\b(?:is|are) not set (?:correctly|properly)\b"),
    # a setting's value that the code has no branch for ("Invalid launcher type: none")
    ("missing_config", r"\binvalid (?:\w+ ){0,2}(?:type|mode|choice|backend|launcher|strategy)\s*:\s*['\"`]?\w"),
    # a setting is named (quoted, or a flag) after the words: "Invalid argument" alone is errno EINVAL
    # (not TensorFlow's InvalidArgumentError: an op given a tensor it cannot take, at run time)
    ("missing_config", r"^(?:[\w.]+\.)?(?!InvalidArgumentError)\w*(?:Argument|Option)(?:Type|Value|Key)?"
                       r"(?:Error|Exception)\b|"
                       r"\b(?:unknown|invalid|unrecognized|unrecognised|missing|required|unsupported) "
                       r"(?:config(?:uration)? )?(?:argument|option|config(?:uration)? (?:key|value|file)|setting|"
                       r"command[- ]line (?:argument|option)|flag)s?\s*:?\s*['\"`-]"),
    ("arch_mismatch", r"\bunsupported (?:gpu |cuda )?arch(?:itecture)?\b|\b(?:compute capability|CUDA capability|"
                      r"sm_\d+)\b.{0,60}\b(?:not (?:supported|compatible)|unsupported|too (?:old|low))\b|"
                      # a check of the GPU's architecture that failed (torch's TORCH_CHECK words: "Expected is_sm8x
                      # || is_sm75 to be true, but got false")
                      r"\bis_sm_?\d+\w*\b.{0,60}\bbut got false\b"),
    # a path the job was given (a container's bind or mount source, a path a configuration file names) that is
    # not there
    ("missing_config", r"\b(?:mount|bind)(?: source| path| point)?\b.{0,80}\b(?:does not exist|doesn't exist|"
                       r"No such file or directory)\b|"
                       r"\S\.(?:conf|ya?ml|json|toml|ini|cfg)\b.{0,60}\b(?:does not exist|doesn't exist|"
                       r"No such file or directory)\b|"
                       r"\b(?:cannot|can't|could not|couldn't|unable to) (?:find|locate|open) (?:the )?"
                       r"config(?:uration)? file\b|"
                       # TensorFlow's status text for a path it was given ("../train/records/x.tfrecord; Not a
                       # directory")
                       r"\S; (?:Not a directory|No such file or directory)\b"),
    # a tensor the message prints that holds NaN ("incorrect boxes, boxes1 tensor([[nan, nan, ...")
    ("nan_loss", r"\btensor\(\[+\s*[-+]?nan\b"),
    ("disk_full", r"\bNo space left\b|\bdisk (?:is )?full\b|\bquota exceeded\b|\bout of (?:disk )?space\b"),
    # the driver named as too old is the driver's, before any library version in the same message
    ("driver_mismatch", r"\bdriver\b.{0,60}\b(?:is too old|too old|insufficient|is older than|older than)\b"),
    # a library the program needs is absent, or is another version than the one it was built against
    ("import_error", r"\b(?:library|module|package|extension|plugin|shared object)\b.{0,40}\b(?:is not found|not found|"
                     r"not installed|cannot be (?:found|loaded)|could not be (?:found|loaded)|failed to load|"
                     r"(?:is )?not (?:installed|configured) (?:correctly|properly))\b|"
                     r"\b(?:cannot|can't|could not|couldn't|unable to|failed to) (?:find|locate)\b.{0,40}"
                     r"\b(?:library|shared object|installation)\b|"
                     r"\b(?:built|compiled) (?:against|with)\b.{0,60}\bversion\b|"
                     r"\bversion\b.{0,80}\b(?:but|while|does not match|doesn't match|differs from) .{0,40}"
                     r"\b(?:built|compiled) (?:against|with)\b|"

                     # a name a library of another version has not, or no longer has ("module 'numpy' has no
                     # attribute 'float'", transformers' "Tokenizer class X does not exist or is not currently
                     # imported"): the installed version is not the one the code was written for. Not 'torch.cuda'
                     # itself nor a private module ('torch._C'): what they hold depends on the build (a CPU-only
                     # one), not only on the version
                     r"\bmodule '?(?:torch|numpy|np|transformers|tensorflow|tf|keras|jax|jaxlib|flax|optax|"
                     r"accelerate|deepspeed|peft|trl|datasets|huggingface_hub|torchvision|torchaudio|scipy|pandas|"
                     r"PIL|cv2|triton|apex|timm|lightning|pytorch_lightning|mmcv|mmengine|mmdet|setuptools|"
                     r"pkg_resources|google\.protobuf|protobuf|keras_tuner|kerastuner|optuna|ray|wandb|mlflow|hydra|"
                     r"omegaconf|sklearn|skimage|albumentations|detectron2|fairseq|tokenizers|sentencepiece|"
                     r"bitsandbytes|xformers|flash_attn|diffusers|einops|torchtext|torchmetrics|gym|gymnasium|"
                     r"stable_baselines3|dgl|torch_geometric|spacy|librosa|tensorboard|tensorboardX|orbax|"
                     r"haiku|equinox|mlx)(?:\.(?!cuda'|_)[\w.]+)?'? has no attribute\b|"
                     r"\bTokenizer class \w+ does not exist or is not currently imported\b|"
                     # an API the installed version has dropped ("The `on_init_start` callback hook was deprecated in
                     # v1.6 and is no longer supported as of v1.8")
                     r"\b(?:deprecated|renamed)\b.{0,80}\b(?:no longer (?:supported|available)|"
                     r"(?:was|were|has been|have been) removed)\b|"
                     r"\b(?:was|were|has been|have been) removed in (?:v|version )?\d|"
                     # the dynamic loader's words for a library of another version ("cudaGetErrorString symbol not
                     # found")
                     r"\bsymbol not found\b|"
                     # a dependency's own check that names what to install ("ffmpeg or ffprobe could not be found!
                     # Please install them", "MMCV==1.3.9 is used but incompatible. Please install mmcv>=...")
                     r"\b(?:not (?:be )?found|not installed|incompatible)\b[!.]?\s{0,3}Please install\b|"
                     r"\bPlease (?:pip )?install \S+ to use\b"),
)
# Two tensors inside the model that disagree in size (an elementwise op, a concatenation, a view): in the scored
# threads the data, a setting that sizes the model, a checkpoint or the project's own code about as often each,
# so no category is named from these words; where it was raised may still say (data code: the data's).
TENSORS_DISAGREE = re.compile(r"The size of tensor a \(\d+\) must match the size of tensor b|"
                              r"Sizes of tensors must match except in dimension|"
                              r"shape '\[[^\]]*\]' is invalid for input of size|"
                              # torch < 1.0's wording of the same view
                              r"size '\[[^\]]*\]' is invalid for input with \d+ elements", re.IGNORECASE)
# The message names what the program was given, not a failure of that kind ("unexpected keyword argument" is
# code written for another version of a library), or a disagreement of the model's own tensors.
NOT_A_FAMILY = re.compile(r"keyword argument|positional argument|" + TENSORS_DISAGREE.pattern, re.IGNORECASE)


# A scheduler's or a node's own record, in any scheduler's words: a limit the job ran into or a node it lost.
SCHEDULER_FAMILIES = _families(
    ("node_lost", r"\bnode (?:failure|failed)\b|\bnode \S+ (?:is )?(?:down|not responding|unreachable)\b"),
    ("time_limit", r"\b(?:wall ?(?:clock|time)|run ?time|time ?limit)\b.{0,40}\b(?:exceeded|reached)|"
                   r"\b(?:exceeded|reached|reaching|exceeding)\b.{0,40}"
                   r"\b(?:wall ?(?:clock|time)|run ?time|time) limit\b"),
    ("preempted", r"\b(?:job|task|node|instance|allocation)s?(?: [\w.\[\]-]+)? (?:was |were |has been |got )?"
                  r"preempted\b"),
)
