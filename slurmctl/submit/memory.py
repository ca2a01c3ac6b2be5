"""GPU memory estimate for data-parallel training: does the model fit, and how big a micro-batch?

The formula (per GPU, bytes; P = parameters, N = data-parallel GPUs = nodes x gpus_per_node):

  model states (ZeRO paper, Rajbhandari et al. 2020):
    weights    W = P x w      w = 4 (fp32) or 2 (bf16/fp16/fp8: fp8 training keeps 16-bit weights)
    gradients  G = P x w
    optimizer  O = P x (k + m) k = 8 adam/adamw (two fp32 moments), 4 sgd-momentum/lion,
                                   0.5 adafactor (factored moments), 0 sgd;
                               m = 4 with mixed precision (the fp32 master weights), else 0
    sharding divides:  ddp: W+G+O   zero1: W+G+O/N   zero2: W+(G+O)/N   zero3/fsdp: (W+G+O)/N
    the sharding is the run's template's unless model.sharding says otherwise: torchrun and
    hf-lora ddp, fsdp fsdp, deepspeed the ZeRO stage of its DeepSpeed config (which also gives
    the micro-batch, train_micro_batch_size_per_gpu, when model.micro_batch is not set).
    LoRA (model.trainable_params = T): frozen weights get no gradient and no optimizer state,
    so G = T x w and O = T x (k + m); the adapters' own weights are part of P.
    (mixed-precision AdamW under DDP: 2+2+12 = 16 bytes per parameter)

  activations per sequence (Korthikanti et al. 2022, 16-bit, flash/SDPA attention so the
  s x s score matrix is not stored):   A = 34 x seq_len x hidden_size x num_layers
    x 2 in fp32; with activation checkpointing only each layer's input is kept plus one layer's
    working set: A = 2 x s x h x L + 34 x s x h.
  logits per sequence, when vocab_size is given: 12 x s x vocab (fp32 logits and their gradient
    plus the 16-bit output of the head; measured 11.7 bytes per element on an H200).

  Checked on an H200 (benchmarks/gpu_memory_and_stall.py, GPT-style 125M-2.7B, seq 2048, bf16
  autocast + fused AdamW): the estimated total is 0.95-1.15x the measured peak of a step.

  usable GPU memory = 0.90 x GPU memory - 1 GB (CUDA context, NCCL buffers, allocator fragmentation)

  fits when  states + micro_batch x A <= usable;  max safe micro-batch = floor((usable - states) / A).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmctl.config.models import ModelSpec, RunSpec
from slurmctl.errors import SpecError
from slurmctl.fsutil import read_capped

GB = 1e9
# Memory per GPU in GB by model (the 40 GB A100 and other variants: site.yaml gpu_memory_gb).
GPU_MEMORY_GB = {"h100": 80, "h200": 141, "b200": 180, "a100": 80, "a10g": 24, "l4": 24, "l40s": 48,
                 "v100": 32, "t4": 16, "mi300x": 192}
USABLE_FRACTION, RESERVED_GB = 0.90, 1.0
_OPTIMIZER_BYTES = {"adamw": 8, "adam": 8, "sgd-momentum": 4, "lion": 4, "adafactor": 0.5, "sgd": 0}
_PARAMS_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmbt]?)\s*", re.IGNORECASE)
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def parse_params(value: str | float) -> float:
    """7e9, '7b', '350M', '1.3B' -> parameter count."""
    if isinstance(value, (int, float)):
        return float(value)
    m = _PARAMS_RE.fullmatch(value)
    if not m:
        raise ValueError(f"'{value}' is not a parameter count; write 7e9, '7b' or '350m'")
    return float(m.group(1)) * _SCALE[m.group(2).lower()]


@dataclass(frozen=True)
class MemoryEstimate:
    gpu_type: str
    gpu_memory_gb: float
    usable_gb: float
    data_parallel: int
    weights_gb: float
    gradients_gb: float
    optimizer_gb: float
    activation_gb_per_sample: float | None
    micro_batch: int | None
    max_micro_batch: int | None  # None: activations unknown (no seq_len/hidden_size/num_layers)

    @property
    def states_gb(self) -> float:
        return self.weights_gb + self.gradients_gb + self.optimizer_gb

    @property
    def total_gb(self) -> float:
        return self.states_gb + (self.micro_batch or 0) * (self.activation_gb_per_sample or 0)

    @property
    def verdict(self) -> str:
        """fits | does-not-fit | states-fit (activations unknown)."""
        if self.states_gb > self.usable_gb or (self.max_micro_batch is not None and self.max_micro_batch < 1):
            return "does-not-fit"
        if self.micro_batch and self.activation_gb_per_sample is not None:
            return "fits" if self.total_gb <= self.usable_gb else "does-not-fit"
        return "fits" if self.activation_gb_per_sample is not None else "states-fit"

    def to_dict(self) -> dict:
        return {**asdict(self), "states_gb": round(self.states_gb, 2), "total_gb": round(self.total_gb, 2),
                "verdict": self.verdict}


# The sharding each template's example training uses; deepspeed's comes from its config file.
TEMPLATE_SHARDING = {"torchrun": "ddp", "fsdp": "fsdp", "hf-lora": "ddp"}
DEEPSPEED_CONFIG_ARGS = ("--deepspeed-config", "--deepspeed_config", "--deepspeed")
DEFAULT_DEEPSPEED_CONFIG = "ds_config.json"


def deepspeed_config_path(spec: RunSpec, workdir: Path) -> Path:
    """The config the training is given (`--deepspeed-config FILE` in args), else ds_config.json."""
    args = list(spec.args)
    for i, arg in enumerate(args):
        for flag in DEEPSPEED_CONFIG_ARGS:
            if arg == flag and i + 1 < len(args):
                return workdir / args[i + 1]
            if arg.startswith(flag + "="):
                return workdir / arg.split("=", 1)[1]
    return workdir / DEFAULT_DEEPSPEED_CONFIG


def deepspeed_settings(path: Path) -> tuple[str, int | None]:
    """(sharding, micro-batch) from a DeepSpeed JSON config: zero_optimization.stage 0-3 and
    train_micro_batch_size_per_gpu ("auto" or absent: None)."""
    try:
        config = json.loads(read_capped(path, 1024 * 1024, nofollow=False))
    except OSError as exc:
        raise SpecError(f"the DeepSpeed config {path} cannot be read ({exc.strerror or exc}).",
                        "Create it (slurmctl init --template deepspeed writes ds_config.json), or pass "
                        "`--deepspeed-config FILE` in run.yaml args.") from None
    except ValueError as exc:
        raise SpecError(f"the DeepSpeed config {path} is not valid JSON ({exc}).",
                        "Fix the file; DeepSpeed would refuse it at the start of the job.") from None
    zero = config.get("zero_optimization", {}) if isinstance(config, dict) else {}
    stage = zero.get("stage", 0) if isinstance(zero, dict) else 0
    if stage not in (0, 1, 2, 3):
        raise SpecError(f"the DeepSpeed config {path} has zero_optimization.stage {stage!r}.",
                        "Use 0, 1, 2 or 3.")
    micro = config.get("train_micro_batch_size_per_gpu")
    return ("ddp" if stage == 0 else f"zero{stage}"), (micro if isinstance(micro, int) and micro > 0 else None)


def resolve_model(spec: RunSpec, workdir: Path) -> ModelSpec | None:
    """run.yaml's model: with the sharding (and for deepspeed the micro-batch) the template really uses.
    An explicit model.sharding wins, except under deepspeed, where the config file decides what runs."""
    model = spec.model
    if model is None:
        return None
    if spec.template == "deepspeed":
        sharding, micro = deepspeed_settings(deepspeed_config_path(spec, workdir))
        return model.model_copy(update={"sharding": sharding, "micro_batch": model.micro_batch or micro})
    if model.sharding is None:
        return model.model_copy(update={"sharding": TEMPLATE_SHARDING.get(spec.template, "ddp")})
    return model


def estimate_memory(model: ModelSpec, gpu_type: str, data_parallel: int,
                    gpu_memory_gb: dict[str, float] | None = None) -> MemoryEstimate | None:
    """None when the GPU model's memory is unknown (say so in site.yaml gpu_memory_gb)."""
    table = {**GPU_MEMORY_GB, **(gpu_memory_gb or {})}
    if gpu_type not in table:
        return None
    params = parse_params(model.params)
    n = max(data_parallel, 1)
    mixed = model.precision != "fp32"
    w = 2 if mixed else 4
    trainable = parse_params(model.trainable_params) if model.trainable_params is not None else params
    weights, grads = params * w, trainable * w
    optimizer = trainable * (_OPTIMIZER_BYTES[model.optimizer] + (4 if mixed else 0))
    if model.sharding in ("zero3", "fsdp"):
        weights, grads, optimizer = weights / n, grads / n, optimizer / n
    elif model.sharding == "zero2":
        grads, optimizer = grads / n, optimizer / n
    elif model.sharding == "zero1":
        optimizer = optimizer / n
    memory = table[gpu_type]
    usable = memory * USABLE_FRACTION - RESERVED_GB
    activation = _activation_bytes(model)
    states = (weights + grads + optimizer) / GB
    max_batch = None
    if activation is not None:
        max_batch = max(math.floor((usable - states) / (activation / GB)), 0)
    return MemoryEstimate(gpu_type, memory, usable, n, weights / GB, grads / GB, optimizer / GB,
                          activation / GB if activation is not None else None, model.micro_batch, max_batch)


def _activation_bytes(model: ModelSpec) -> float | None:
    if not (model.seq_len and model.hidden_size and model.num_layers):
        return None
    logits = 12 * model.seq_len * model.vocab_size if model.vocab_size else 0
    per_layer = 34 * model.seq_len * model.hidden_size * (2 if model.precision == "fp32" else 1)
    if model.activation_checkpointing:
        return 2 * model.seq_len * model.hidden_size * model.num_layers + per_layer + logits
    return per_layer * model.num_layers + logits
