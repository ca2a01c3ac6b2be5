"""On the real cluster, as alice: a training whose data loader cannot stack a batch at step 7 is
diagnosed from the rank's own error, not from torchrun's ChildFailedError report under it."""

import pytest

from .conftest import slurmctl, slurmctl_json, wait_for_state, write_run

TRAIN = """\
import torch
from torch.utils.data import DataLoader, Dataset


class Sequences(Dataset):
    # sample 15 is one token longer: batch 7 (samples 14 and 15) cannot be stacked
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.zeros(5 if i == 15 else 4)


for step, batch in enumerate(DataLoader(Sequences(), batch_size=2)):
    print(f"step {step} batch {tuple(batch.shape)}", flush=True)
"""


def test_unequal_samples_at_step_7_are_named_with_the_ranks_line(workdir):
    spec = write_run(workdir, {"name": "diagnose-collate", "entrypoint": "train.py", "partition": "l4-dev",
                                "gpus_per_node": 1, "time_limit": "5m"}, {"train.py": TRAIN})
    run_id = slurmctl_json("submit", spec)["run_id"]
    try:
        status = wait_for_state(run_id, {"FAILED", "COMPLETED", "CANCELLED", "TIMEOUT"}, timeout=180)
        assert status["state"] == "FAILED", status
        log = "\n".join(slurmctl_json("logs", run_id, "--rank", "all", "-n", "0")["lines"])
        assert "step 6 batch (2, 4)" in log and "step 7" not in log, log[-2000:]
        diagnosed = slurmctl_json("diagnose", run_id)
        assert diagnosed["category"] == "data_shape", diagnosed
        assert diagnosed["evidence"][0].startswith("RuntimeError: stack expects each tensor to be equal size, "
                                                   "but got [4] at entry 0 and [5] at entry 1"), diagnosed
        assert not any("ChildFailedError" in line for line in diagnosed["evidence"])
        assert diagnosed["rank"] == 0 and "collate_fn" in diagnosed["hint"]
        human = slurmctl("diagnose", run_id).stdout
        assert "stack expects each tensor to be equal size" in human
    finally:
        slurmctl("cancel", run_id, check=False)


CASES = {
    # a checkpoint cut short by an interrupted save, loaded on resume
    "checkpoint_corrupt": ("import torch, io\n"
                           "buf = io.BytesIO(); torch.save({'step': 3, 'w': torch.zeros(1000)}, buf)\n"
                           "open('ckpt.pt', 'wb').write(buf.getvalue()[:2000])\n"
                           "state = torch.load('ckpt.pt')\n",
                           "PytorchStreamReader"),
    # the config the entrypoint reads is not where it looks on the compute node
    "missing_config": ("import yaml\nconfig = yaml.safe_load(open('configs/experiment.yaml'))\n",
                       "No such file or directory: 'configs/experiment.yaml'"),
    # the loss goes non-finite and the training loop stops, as trainers' NaN guards do
    "nan_loss": ("import math, torch\n"
                 "w = torch.tensor(1.0)\n"
                 "for step in range(10):\n"
                 "    loss = torch.log(w - step * 0.5)\n"
                 "    print(f'step {step} loss {loss.item():.4f}', flush=True)\n"
                 "    if not math.isfinite(loss.item()):\n"
                 "        raise FloatingPointError(f'Loss became infinite or NaN at iteration={step}!')\n",
                 "FloatingPointError: Loss became infinite or NaN at iteration=2!"),
}


@pytest.mark.parametrize("category", sorted(CASES))
def test_failures_provoked_on_cpu_are_named(workdir, category):
    train, evidence = CASES[category]
    spec = write_run(workdir, {"name": f"diagnose-{category.replace('_', '-')}", "entrypoint": "train.py",
                                "partition": "l4-dev", "gpus_per_node": 1, "time_limit": "5m"}, {"train.py": train})
    run_id = slurmctl_json("submit", spec)["run_id"]
    try:
        status = wait_for_state(run_id, {"FAILED", "COMPLETED", "CANCELLED", "TIMEOUT"}, timeout=180)
        assert status["state"] == "FAILED", status
        diagnosed = slurmctl_json("diagnose", run_id)
        assert diagnosed["category"] == category, diagnosed
        assert any(evidence in line for line in diagnosed["evidence"]), diagnosed
    finally:
        slurmctl("cancel", run_id, check=False)
