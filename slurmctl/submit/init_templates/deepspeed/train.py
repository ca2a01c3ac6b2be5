"""DeepSpeed ZeRO training that follows the slurmctl conventions, launched by torchrun.

The ZeRO stage, micro-batch and optimizer are in ds_config.json (slurmctl's memory check reads
the same file). With ZeRO every rank holds a shard of the optimizer state (stage 1), also of the
gradients (stage 2) and of the weights (stage 3), so every rank writes its part of each
checkpoint (engine.save_checkpoint) into one directory, and rank 0 marks it `.complete`
(slurmctl.runtime's protocol). The example is a small causal language model on a synthetic
language (arithmetic progressions of tokens); replace the model and data with yours and keep the
loop's shape. run.yaml's `model:` block describes it for the memory check: keep the two in step.
"""

import argparse
import json
import time

import deepspeed
import torch
import torch.distributed as dist

from slurmctl.runtime import Runtime

TAG = "zero"  # DeepSpeed's own folder inside each of our checkpoint directories


class TinyLM(torch.nn.Module):
    """A small causal transformer language model."""

    def __init__(self, vocab: int, width: int, layers: int, heads: int, seq_len: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.pos = torch.nn.Parameter(torch.zeros(seq_len, width))
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        x = self.norm(x)
        return self.head(x.reshape(-1, x.shape[-1]))  # (batch x seq, vocab): a fresh tensor, not a view


def batch(step: int, rank: int, size: int, seq_len: int, vocab: int):
    """Sequences a, a+d, a+2d, ... (mod vocab), deterministic per (step, rank): a resumed run sees the
    data it would have seen."""
    g = torch.Generator().manual_seed(step * 1009 + rank)
    start = torch.randint(0, vocab, (size, 1), generator=g)
    stride = torch.randint(1, 8, (size, 1), generator=g)
    return (start + stride * torch.arange(seq_len)) % vocab


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=128)
    parser.add_argument("--deepspeed-config", default="ds_config.json")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per step (tests: a slower step)")
    args = parser.parse_args()

    rt = Runtime.from_env()
    with open(args.deepspeed_config) as fh:
        config = json.load(fh)
    torch.manual_seed(0)  # same initial weights on every rank
    model = TinyLM(args.vocab, args.width, args.layers, args.heads, args.seq_len)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    rank, world = dist.get_rank(), dist.get_world_size()
    if rt.is_main:
        print(f"{sum(p.numel() for p in model.parameters()):,} parameters on {world} ranks, "
              f"ZeRO stage {engine.zero_optimization_stage()}", flush=True)
    checkpoints = rt.sharded_checkpoints  # every rank writes its ZeRO shard; rank 0 finalizes

    start = 0
    ck = checkpoints.latest()
    if ck is not None:
        engine.load_checkpoint(str(ck.path), tag=TAG)
        start = ck.step + 1
        if rt.is_main:
            print(f"resumed from step {ck.step} ({ck.path.name}) on {world} ranks", flush=True)

    def save(step: int):
        return checkpoints.save(step, lambda d: engine.save_checkpoint(str(d), tag=TAG, save_latest=False))

    micro = engine.train_micro_batch_size_per_gpu()
    loss = None
    for step in range(start, args.steps):
        tokens = batch(step, rank, micro, args.seq_len, args.vocab).to(engine.device)
        loss = torch.nn.functional.cross_entropy(engine(tokens[:, :-1]), tokens[:, 1:].reshape(-1))
        engine.backward(loss)
        engine.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported)
        rt.log(step, loss=reported.item() / world, world_size=world)
        if args.sleep:
            time.sleep(args.sleep)
        if rt.should_stop():
            ck = save(step)
            rt.ack_drain(step, ck.path)
            break
        if (step + 1) % rt.checkpoint_interval == 0 or step == args.steps - 1:
            save(step)
    if rt.is_main and loss is not None:
        print(f"final loss {loss.item():.5f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
