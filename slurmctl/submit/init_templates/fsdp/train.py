"""FSDP2 training that follows the slurmctl conventions (torch.distributed.fsdp.fully_shard).

Every rank holds a shard of the weights, gradients and optimizer state. Checkpoints are sharded
too: every rank writes its part with torch.distributed.checkpoint (DCP) into one checkpoint
directory, rank 0 marks it `.complete` (slurmctl.runtime's protocol). A DCP checkpoint is
resharded on load, so a run may resume on a different number of GPUs (e.g. 4 -> 2).

The example is a small causal language model on a synthetic language (arithmetic progressions of
tokens); replace the model and data with yours and keep the loop's shape: resume, step, log,
drain, save. run.yaml's `model:` block describes it for the memory check: keep the two in step.
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

from slurmctl.runtime import Runtime
from slurmctl.runtime.checkpoint import dcp_writer


class TinyLM(torch.nn.Module):
    """A small causal transformer language model; FSDP shards each layer on its own."""

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
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per step (tests: a slower step)")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    rt = Runtime.from_env()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rt.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)  # same initial weights on every rank before sharding
    model = TinyLM(args.vocab, args.width, args.layers, args.heads, args.seq_len).to(device)
    if rt.is_main:
        print(f"{sum(p.numel() for p in model.parameters()):,} parameters on {world} ranks", flush=True)
    for layer in model.layers:  # one all-gather per layer: only one layer's full weights live at a time
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    checkpoints = rt.sharded_checkpoints  # every rank writes its shard; rank 0 finalizes

    start = 0
    ck = checkpoints.latest()
    if ck is not None:
        model_state, optim_state = get_state_dict(model, opt)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=str(ck.path))  # resharded onto this world size
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = ck.step + 1
        if rt.is_main:
            print(f"resumed from step {ck.step} ({ck.path.name}) on {world} ranks", flush=True)

    def save(step: int):
        model_state, optim_state = get_state_dict(model, opt)
        return checkpoints.save(step, dcp_writer({"model": model_state, "optim": optim_state}))

    loss = None
    for step in range(start, args.steps):
        tokens = batch(step, rank, args.micro_batch, args.seq_len, args.vocab).to(device)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits, tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported)  # SUM: gloo has no AVG
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
