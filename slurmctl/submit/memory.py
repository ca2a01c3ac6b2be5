"""GPU memory estimate for data-parallel training: does the model fit, and how big a micro-batch?

The formula (per GPU, bytes; P = parameters, N = data-parallel GPUs = nodes x gpus_per_node):

  model states (ZeRO paper, Rajbhandari et al. 2020):
    weights    W = P x w      w = 4 (fp32) or 2 (bf16/fp16/fp8: fp8 training keeps 16-bit weights)
    gradients  G = P x w
    optimizer  O = P x (k + m) k = 8 adam/adamw (two fp32 moments), 4 sgd-momentum/lion,
                                   0.5 adafactor (factored moments), 0 sgd;
                               m = 4 with mixed precision (the fp32 master weights), else 0
    sharding divides:  ddp: W+G+O   zero1: W+G+O/N   zero2: W+(G+O)/N   zero3/fsdp: (W+G+O)/N
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

import math
import re
from dataclasses import asdict, dataclass

from slurmctl.submit.spec import ModelSpec

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
    weights, grads = params * w, params * w
    optimizer = params * (_OPTIMIZER_BYTES[model.optimizer] + (4 if mixed else 0))
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
