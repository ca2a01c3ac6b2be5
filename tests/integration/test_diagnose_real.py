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
    "missing_config-file": ("import yaml\nconfig = yaml.safe_load(open('configs/experiment.yaml'))\n",
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
    # the CUDA driver is older than the runtime: a stub stands in for the driver's answer to torch's own
    # initialisation (torch.cuda._lazy_init), which raises it exactly as on such a node
    "driver_mismatch": ("import torch\n"
                        "def old_driver():\n"
                        "    raise RuntimeError('The NVIDIA driver on your system is too old (found version 11040). '\n"
                        "                       'Please update your GPU driver by downloading and installing a new '\n"
                        "                       'version from the URL: http://www.nvidia.com/Download/index.aspx')\n"
                        "torch._C._cuda_getDeviceCount = lambda: 1\n"
                        "torch._C._cuda_init = old_driver\n"
                        "torch.cuda._cudart = object()\n"
                        "torch.cuda.init()\n",
                        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040)"),
    # a CPU-only torch asked for a GPU: torch's own refusal
    "no_gpu": ("import torch\nx = torch.zeros(4).cuda()\n", "Torch not compiled with CUDA enabled"),
    # checkpoints written where the user may not create a directory
    "permission_denied": ("import os, torch\n"
                          "os.makedirs('/opt/shared-checkpoints/run1', exist_ok=True)\n"
                          "torch.save({'step': 1}, '/opt/shared-checkpoints/run1/ckpt.pt')\n",
                          "PermissionError: [Errno 13] Permission denied: '/opt/shared-checkpoints'"),
    # a checkpoint of a smaller model loaded into a wider one
    "checkpoint_mismatch": ("import torch\n"
                            "torch.save(torch.nn.Linear(16, 4).state_dict(), 'ckpt.pt')\n"
                            "model = torch.nn.Linear(16, 8)\n"
                            "model.load_state_dict(torch.load('ckpt.pt'))\n",
                            "size mismatch for weight: copying a param with shape torch.Size([4, 16]) from "
                            "checkpoint, the shape in current model is torch.Size([8, 16])"),
    # the command line carries an option the script does not define (argparse's own error, exit code 2)
    "missing_config-argparse": ("import argparse\n"
                       "parser = argparse.ArgumentParser()\n"
                       "parser.add_argument('--lr', type=float, default=1e-3)\n"
                       "args = parser.parse_args(['--lr', '0.1', '--epochs', '3'])\n",
                       "error: unrecognized arguments: --epochs 3"),
}


@pytest.mark.parametrize("category", sorted(CASES))
def test_failures_provoked_on_cpu_are_named(workdir, category):
    train, evidence = CASES[category]
    name = category.replace('_', '-')
    category = category.split("-")[0]
    spec = write_run(workdir, {"name": f"diagnose-{name}", "entrypoint": "train.py",
                                "partition": "l4-dev", "gpus_per_node": 1, "time_limit": "5m"}, {"train.py": train})
    run_id = slurmctl_json("submit", spec)["run_id"]
    try:
        status = wait_for_state(run_id, {"FAILED", "COMPLETED", "CANCELLED", "TIMEOUT"}, timeout=180)
        assert status["state"] == "FAILED", status
        diagnosed = slurmctl_json("diagnose", run_id)
        assert diagnosed["category"] == category, diagnosed
        assert any(evidence in line for line in diagnosed["evidence"]), diagnosed
        assert diagnosed["source"] == "log", diagnosed
        human = slurmctl("diagnose", run_id).stdout
        assert f"Cause: {category}" in human, human
    finally:
        slurmctl("cancel", run_id, check=False)


KILLED = """\
import os, signal, time
for step in range(6):
    print(f"step {step} loss {2.0 - step * 0.1:.3f}", flush=True)
    time.sleep(0.2)
os.kill(os.getpid(), signal.SIGKILL)  # no message, no traceback: as the kernel's OOM killer or a kill -9 does
"""


def test_a_kill_without_a_message_is_read_against_slurms_record(workdir):
    spec = write_run(workdir, {"name": "diagnose-killed", "entrypoint": "train.py", "partition": "l4-dev",
                                "gpus_per_node": 1, "time_limit": "5m"}, {"train.py": KILLED})
    run_id = slurmctl_json("submit", spec)["run_id"]
    try:
        status = wait_for_state(run_id, {"FAILED", "COMPLETED", "CANCELLED", "TIMEOUT"}, timeout=180)
        assert status["state"] == "FAILED", status
        diagnosed = slurmctl_json("diagnose", run_id)
        # Slurm recorded FAILED, not OUT_OF_MEMORY: not host memory, and said so, not guessed
        assert diagnosed["category"] == "unknown", diagnosed
        assert "killed without a message" in diagnosed["summary"], diagnosed
        assert "not OUT_OF_MEMORY" in diagnosed["summary"] and "SIGKILL" in diagnosed["summary"], diagnosed
        assert "after normal training progress" in diagnosed["summary"], diagnosed
        assert diagnosed["attempt"]["number"] == 0 and "attempt 1 of 1, the newest" in diagnosed["summary"], diagnosed
    finally:
        slurmctl("cancel", run_id, check=False)


SCARY_BUT_FINE = """\
import sys
for step in range(3):
    print(f"step {step} loss {1.0 / (step + 1):.3f}", flush=True)
print("n1:77:77 [0] NCCL WARN Call to connect returned Connection refused, retrying", file=sys.stderr)
print("Training completed.", flush=True)
"""


def test_a_completed_job_is_never_diagnosed_as_a_failure(workdir):
    spec = write_run(workdir, {"name": "diagnose-completed", "entrypoint": "train.py", "partition": "l4-dev",
                                "gpus_per_node": 1, "time_limit": "5m"}, {"train.py": SCARY_BUT_FINE})
    run_id = slurmctl_json("submit", spec)["run_id"]
    try:
        status = wait_for_state(run_id, {"FAILED", "COMPLETED", "CANCELLED", "TIMEOUT"}, timeout=180)
        assert status["state"] == "COMPLETED", status
        diagnosed = slurmctl_json("diagnose", run_id)
        assert diagnosed["category"] == "success" and diagnosed["source"] == "slurm", diagnosed
    finally:
        slurmctl("cancel", run_id, check=False)

