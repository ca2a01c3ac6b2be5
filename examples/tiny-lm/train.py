"""tiny-lm: a character-level language model that learns two-digit addition ("17+25=42").

Small enough to train on CPUs with gloo in about a minute, real enough to show learning: it
reports held-out loss and the exact-match accuracy of the sums it writes, before and after.
Follows the slurmctl conventions: resumes from the newest valid checkpoint, logs every step,
checkpoints every SLURMCTL_CHECKPOINT_INTERVAL steps, and drains (save + ACK + exit) on request.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from slurmctl.runtime import Runtime

VOCAB = "0123456789+=\n."
STOI = {c: i for i, c in enumerate(VOCAB)}
PAD = STOI["."]
CONTEXT = 8


def problems(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{a}+{b}={a + b}\n" for a, b in ((rng.randrange(50), rng.randrange(50)) for _ in range(count))]


def examples(lines: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(context window, next char) pairs for the characters after '=' (the part worth learning)."""
    xs, ys = [], []
    for line in lines:
        ids = [STOI[c] for c in line]
        for t in range(line.index("=") + 1, len(ids)):
            window = ids[max(0, t - CONTEXT):t]
            xs.append([PAD] * (CONTEXT - len(window)) + window)
            ys.append(ids[t])
    return torch.tensor(xs), torch.tensor(ys)


class TinyLM(torch.nn.Module):
    def __init__(self, dim: int = 48, hidden: int = 256):
        super().__init__()
        self.embed = torch.nn.Embedding(len(VOCAB), dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(CONTEXT * dim, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, len(VOCAB)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.embed(x).flatten(1))


@torch.no_grad()
def evaluate(model: TinyLM, lines: list[str]) -> dict:
    x, y = examples(lines)
    loss = F.cross_entropy(model(x), y).item()
    correct = 0
    for line in lines:
        prompt, answer = line[: line.index("=") + 1], line[line.index("=") + 1:]
        ids = [STOI[c] for c in prompt]
        out = ""
        while len(out) < 4 and not out.endswith("\n"):
            window = ids[-CONTEXT:]
            window = [PAD] * (CONTEXT - len(window)) + window
            nxt = int(model(torch.tensor([window])).argmax())
            ids.append(nxt)
            out += VOCAB[nxt]
        correct += out == answer
    return {"eval_loss": loss, "eval_accuracy": correct / len(lines)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=128, help="per rank")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step (to test long runs)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rt = Runtime.from_env()
    torch.manual_seed(0)
    model = TinyLM()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    train_x, train_y = examples(problems(seed=1, count=4000))
    held_out = problems(seed=2, count=200)

    start, before = 0, None
    ck = rt.checkpoints.latest()
    if ck is not None:
        state = torch.load(ck.path / "state.pt")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start, before = ck.step + 1, state["before"]
        if rt.is_main:
            print(f"resumed from checkpoint step {ck.step}", flush=True)
    if before is None:
        before = evaluate(model, held_out)
    if rt.is_main:
        print(f"world size {world} on {os.environ.get('SLURM_JOB_NODELIST', 'this host')}; "
              f"before training: {json.dumps(before)}", flush=True)

    def save(step: int):
        return rt.checkpoints.save(step, lambda d: torch.save(
            {"model": model.state_dict(), "opt": opt.state_dict(), "before": before}, d / "state.pt"))

    generator = torch.Generator().manual_seed(1000 + rank)
    started, step = time.time(), start - 1
    for step in range(start, args.steps):
        idx = torch.randint(0, len(train_x), (args.batch_size,), generator=generator)
        loss = F.cross_entropy(ddp(train_x[idx]), train_y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        rt.log(step, loss=loss.item())
        if rt.is_main and step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if rt.should_stop():
            ck = save(step) if rt.is_main else None
            rt.ack_drain(step, ck.path if ck else None)
            if rt.is_main:
                print(f"drain: saved checkpoint at step {step} and acknowledged", flush=True)
            break
        if rt.is_main and (step + 1) % rt.checkpoint_interval == 0:
            save(step)
    else:
        if rt.is_main:
            after = evaluate(model, held_out)
            save(step)
            result = {"world_size": world, "steps": args.steps, "seconds": round(time.time() - started, 2),
                      "before": before, "after": after}
            (rt.run_dir / "result.json").write_text(json.dumps(result, indent=2))
            print(f"after training: {json.dumps(after)}", flush=True)
    dist.barrier()  # no rank may leave while rank 0 still saves or evaluates (gloo aborts on a gone peer)
    # Drop DDP (it holds the process group and its gloo threads) before destroying the group, so the
    # group is really torn down here and not during interpreter exit, where gloo can std::terminate.
    del ddp
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
