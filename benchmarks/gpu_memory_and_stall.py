"""On a real GPU: the preflight memory estimate against measured memory, and the step-loop stall
of an async checkpoint. Needs CUDA; prints one JSON line per measurement and a summary table.

1. Memory. A GPT-style decoder (pre-LayerNorm, fused QKV, SDPA causal attention, 4h GELU MLP) is
   trained with bf16 autocast and fp32 AdamW (the estimate's "bf16 + adamw + ddp" case: 16 bytes
   per parameter). The number that decides "fits" is the peak allocated during a training step,
   so that is compared with the estimate's total (states + micro-batch x activations): the ratio
   estimated/measured must stay >= 1 (never promise a fit that OOMs) and close to 1. Resting
   memory after a step (weights + AdamW moments; gradients are freed by zero_grad) is printed too.
   The logits (seq x vocab, fp32 for the loss) are measured separately: the formula leaves them out.
2. Async checkpoint stall. The same training loop with a checkpoint every K steps: the time the
   step loop is blocked by CheckpointManager.save_state_async (snapshot to host + hand-off) and by
   save() (snapshot + write + fsync), as a share of the step time, alternating the order.

    python3 benchmarks/gpu_memory_and_stall.py [--sizes 125m,350m,1.3b] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn as nn
import torch.nn.functional as F

from slurmctl.config.models import ModelSpec
from slurmctl.runtime.checkpoint import CheckpointManager, torch_writer
from slurmctl.submit.memory import estimate_memory

SIZES = {  # name: (hidden, layers, heads)
    "125m": (768, 12, 12),
    "350m": (1024, 24, 16),
    "1.3b": (2048, 24, 16),
    "2.7b": (2560, 32, 32),
}
VOCAB = 32000
GiB = 2**30


class Block(nn.Module):
    def __init__(self, h: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.up, self.down = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(a)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, h: int, layers: int, heads: int, checkpointing: bool):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(h)
        self.head = nn.Linear(h, VOCAB, bias=False)
        self.checkpointing = checkpointing

    def hidden(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            if self.checkpointing:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.ln(x)


def step(model, opt, tokens, with_logits: bool):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        hidden = model.hidden(tokens[:, :-1])
        if with_logits:
            loss = F.cross_entropy(model.head(hidden).float().flatten(0, 1), tokens[:, 1:].flatten())
        else:  # the formula's scope: no seq x vocab logits
            loss = hidden.float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def measure_memory(name: str, seq: int, batches: list[int], checkpointing: bool) -> list[dict]:
    h, layers, heads = SIZES[name]
    torch.manual_seed(0)
    model = GPT(h, layers, heads, checkpointing).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    params = sum(p.numel() for p in model.parameters())
    tokens = torch.randint(0, VOCAB, (1, seq + 1), device="cuda")
    step(model, opt, tokens, with_logits=False)  # creates the optimizer moments
    torch.cuda.synchronize()
    states = torch.cuda.memory_allocated()
    spec = ModelSpec(params=float(params), precision="bf16", optimizer="adamw", sharding="ddp", seq_len=seq,
                     hidden_size=h, num_layers=layers, activation_checkpointing=checkpointing)
    est = estimate_memory(spec, "h200", 1)
    rows = []
    for b in batches:
        tokens = torch.randint(0, VOCAB, (b, seq + 1), device="cuda")
        peak = {}
        for with_logits in (False, True):
            torch.cuda.reset_peak_memory_stats()
            step(model, opt, tokens, with_logits)
            torch.cuda.synchronize()
            peak[with_logits] = torch.cuda.max_memory_allocated()
        estimated = est.states_gb + b * est.activation_gb_per_sample
        row = {
            "check": "memory", "model": name, "params": params, "seq_len": seq, "micro_batch": b,
            "activation_checkpointing": checkpointing,
            "resting_gb_measured": round(states / 1e9, 3), "states_gb_estimated": round(est.states_gb, 3),
            "peak_gb_measured": round(peak[False] / 1e9, 3), "peak_gb_estimated": round(estimated, 3),
            "estimated_over_measured": round(estimated / (peak[False] / 1e9), 3),
            "logits_gb_per_seq_measured": round((peak[True] - peak[False]) / b / 1e9, 3),
            "estimated_max_micro_batch_h200": est.max_micro_batch,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    del model, opt
    torch.cuda.empty_cache()
    return rows


def measure_stall(name: str, seq: int, batch: int, rounds: int, directory: Path) -> dict:
    h, layers, heads = SIZES[name]
    torch.manual_seed(0)
    model = GPT(h, layers, heads, False).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, VOCAB, (batch, seq + 1), device="cuda")
    for _ in range(3):
        step(model, opt, tokens, with_logits=True)
    torch.cuda.synchronize()

    def timed_step() -> float:
        t = time.perf_counter()
        step(model, opt, tokens, with_logits=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    steps = [timed_step() for _ in range(5)]
    mgr = CheckpointManager(directory / name, keep_last=1)
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    blocked = {"async": [], "sync": []}
    for i in range(rounds):
        order = ("async", "sync") if i % 2 == 0 else ("sync", "async")
        for kind in order:
            torch.cuda.synchronize()
            t = time.perf_counter()
            if kind == "async":
                mgr.save_state_async(i * 2 + (kind == "sync"), state)
            else:
                mgr.save(i * 2 + 1, torch_writer(state))
            blocked[kind].append(time.perf_counter() - t)
            steps.append(timed_step())  # the next step runs while the async write is in flight
            mgr.wait()
    step_s = statistics.median(steps)
    row = {"check": "async-checkpoint-stall", "model": name, "step_s_median": round(step_s, 4),
           "state_gb": round(sum(t.numel() * t.element_size() for t in _tensors(state)) / 1e9, 2)}
    for kind, values in blocked.items():
        row[f"{kind}_blocked_s_median"] = round(statistics.median(values), 3)
        row[f"{kind}_blocked_s_min_max"] = [round(min(values), 3), round(max(values), 3)]
        row[f"{kind}_blocked_in_steps"] = round(statistics.median(values) / step_s, 2)
    print(json.dumps(row), flush=True)
    return row


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="125m,350m,1.3b,2.7b")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--stall-model", default="350m")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark measures GPU memory", file=sys.stderr)
        return 2
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    rows = []
    batches = [int(b) for b in args.batches.split(",")]
    for name in args.sizes.split(","):
        rows += measure_memory(name, args.seq, batches, checkpointing=False)
    rows += measure_memory(args.sizes.split(",")[-1], args.seq, batches, checkpointing=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(measure_stall(args.stall_model, args.seq, 4, args.rounds, Path(tmp)))
    print("\nmodel  ckpt  batch  peak GB est/measured  ratio  logits GB/seq (not in the formula)")
    for r in rows:
        if r["check"] == "memory":
            print(f"{r['model']:>5}  {'yes' if r['activation_checkpointing'] else 'no':>4}  {r['micro_batch']:>5}"
                  f"  {r['peak_gb_estimated']:8.2f}/{r['peak_gb_measured']:<8.2f}  {r['estimated_over_measured']:5.2f}"
                  f"  {r['logits_gb_per_seq_measured']:.3f}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_memory_and_stall.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
