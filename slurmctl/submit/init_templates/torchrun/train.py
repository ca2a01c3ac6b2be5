"""A minimal distributed training that follows the slurmctl conventions.

It resumes from the newest valid checkpoint, reports progress every step, saves every
SLURMCTL_CHECKPOINT_INTERVAL steps and, when asked to drain, saves, acknowledges and exits.
Replace the model and data with yours; keep the loop's shape.
"""

import argparse

import torch
import torch.distributed as dist

from slurmctl.runtime import Runtime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rt = Runtime.from_env()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    start = 0
    ck = rt.checkpoints.latest()
    if ck is not None:
        state = torch.load(ck.path / "state.pt")
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = ck.step + 1

    def save(step: int):
        return rt.checkpoints.save(step, lambda d: torch.save(
            {"model": model.module.state_dict(), "opt": opt.state_dict()}, d / "state.pt"))

    for step in range(start, args.steps):
        x = torch.randn(64, 1)
        loss = torch.nn.functional.mse_loss(model(x), 3 * x + 1)  # learn y = 3x + 1
        opt.zero_grad()
        loss.backward()
        opt.step()
        rt.log(step, loss=loss.item())
        if rt.should_stop():
            ck = save(step) if rt.is_main else None
            rt.ack_drain(step, ck.path if ck else None)
            break
        if rt.is_main and (step + 1) % rt.checkpoint_interval == 0:
            save(step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
