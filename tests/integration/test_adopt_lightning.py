"""PyTorch Lightning's Trainer (installed from PyPI, unchanged) with its SLURM environment, driving a
small module written here, adopted unchanged on 2 nodes, as alice: preempted by a higher-priority
job (Lightning saves on SIGUSR1 and requeues itself), resumed from its own checkpoint; cancelled
with drain (the program's own signal and save); resumed by `slurmctl resume` under the same run id
from its own newest checkpoint; status, diagnose and cost right throughout."""

import json
import os
import re
import time
from pathlib import Path

from .conftest import as_user, slurmctl, slurmctl_json, start_requeued_now

TRAIN = '''import os, time, torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        if self.global_step % 5 == 0:
            print(f"step {self.global_step} loss {loss.item():.4f}", flush=True)
        time.sleep(0.1)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8192, 8), torch.randn(8192, 1))
    trainer = L.Trainer(max_steps=3000, accelerator="cpu", devices=1, num_nodes=int(os.environ["SLURM_NNODES"]),
                        strategy="ddp", default_root_dir="lightning_out", enable_progress_bar=False,
                        enable_model_summary=False, logger=False)
    trainer.fit(Tiny(), DataLoader(data, batch_size=8))
'''

# As Lightning's documentation writes it: SIGUSR1 90 s before the limit to the srun tasks, requeue.
SCRIPT = """#!/bin/bash
#SBATCH --job-name=lit-tiny
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --time=00:10:00
#SBATCH --partition=h100-spot
#SBATCH --signal=SIGUSR1@90
#SBATCH --requeue
export OMP_NUM_THREADS=1
srun python train.py
"""


def _wait(what: str, check, timeout: float = 120, poll: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


def _status(run_id: str) -> dict:
    for _ in range(5):  # another session's job name with a non-UTF-8 byte can break one squeue decode
        result = slurmctl("status", run_id, "--json", check=False)
        if result.returncode == 0:
            return json.loads(result.stdout)
        assert "UnicodeDecodeError" in result.stderr, result.stderr
        time.sleep(1)
    raise AssertionError(result.stderr)


def test_lightning_adopted_preempted_cancelled_and_resumed(workdir, alice):
    for name, text in (("train.py", TRAIN), ("lightning.sbatch", SCRIPT)):
        (workdir / name).write_text(text)
        os.chown(workdir / name, alice.uid, alice.gid)
    # one GPU per node (an option after --), so an on-demand job for all 8 GPUs of its node preempts it
    plan = slurmctl_json("adopt", "--yes", "lightning.sbatch", "--", "--gres=gpu:h100:1", cwd=workdir)
    run_id, job_id = plan["run_id"], plan["job_id"]
    assert plan["resilience"]["framework"] == "lightning" and plan["resilience"]["signal"] == "USR1"
    assert plan["wrapper_differences"] == [] and plan["differences"] == []
    bob, preemptor = as_user("bob"), None
    try:
        _wait("training progress", lambda: (_status(run_id).get("last_step") or 0) >= 20, timeout=150)
        status = _status(run_id)
        assert status["phase"] == "training" and status["num_nodes"] == 2

        # 1. preemption: Lightning gets SIGUSR1 (preempt_send_user_signal), saves hpc_ckpt_1, requeues
        node = alice.run(["scontrol", "show", "hostnames", status["nodes"]]).stdout.split()[-1]
        preemptor = bob.sbatch("-p", "h100-ondemand", "-w", node, "--gres=gpu:h100:8", "-t", "1",
                               "-J", "adopt-preemptor", "-o", "/dev/null", "--wrap", "sleep 2")
        first = _wait("Lightning's own checkpoint after preemption",
                      lambda: (s := _status(run_id))["latest_checkpoint_step"] is not None and s, timeout=90)
        saved = first["latest_checkpoint_step"]
        assert saved >= 20
        waiting = _wait("the requeue", lambda: (s := _status(run_id))["state"] == "PENDING" and s, timeout=90)
        # Lightning requeued itself on the preemption's SIGUSR1: status says so, and waits to start again
        assert waiting["phase"].startswith("requeued") and waiting["requeues"] >= 1, waiting
        told = " ".join([waiting["why"], *waiting["history"]])
        assert "preempt" in told and not waiting["history"][-1].endswith("running"), waiting
        bob.scancel(preemptor)
        start_requeued_now(job_id)
        restored = _wait("the resumed attempt", lambda: re.search(
            r"Restored all states from the checkpoint at (\S+)", slurmctl("logs", run_id, "-n", "0").stdout),
            timeout=120)
        assert restored.group(1).endswith("hpc_ckpt_1.ckpt")
        resumed = _wait("progress past the checkpoint", lambda: (s := _status(run_id))["last_step"] is not None
                        and s["last_step"] >= saved + 10 and s, timeout=90)
        assert resumed["requeues"] >= 1 or resumed["attempts"] >= 2

        # 2. cancel with drain: the program's own signal, its own new checkpoint as the acknowledgement
        began = time.monotonic()
        cancelled = slurmctl_json("cancel", run_id)
        took = time.monotonic() - began
        print(f"cancel with drain of an adopted Lightning run: {took:.1f} s "
              f"(acknowledged after {cancelled['drain_seconds']:.1f} s)")
        assert cancelled["drain"] == "acknowledged" and cancelled["final_state"] == "CANCELLED"
        assert cancelled["ack_step"] >= resumed["last_step"] and cancelled["ack_checkpoint"].endswith(".ckpt")
        assert took < 60
        # the steps the cancel cost: its last logged step past the checkpoint its next start restores
        assert cancelled["last_step"] is not None and cancelled["kept_step"] == cancelled["ack_step"], cancelled
        assert cancelled["steps_lost"] == max(0, cancelled["last_step"] - cancelled["ack_step"]), cancelled

        # 3. resume under the same run id, from its own newest checkpoint
        again = slurmctl_json("resume", run_id)
        assert again["run_id"] == run_id and again["from_step"] == cancelled["ack_step"]
        new_job = again["job_id"]
        log = _wait("the resumed job's restore", lambda: re.search(
            r"Restored all states from the checkpoint at (\S+)", slurmctl("logs", run_id, "--job", str(new_job),
                                                                          "-n", "0").stdout), timeout=120)
        assert Path(log.group(1)).name == Path(cancelled["ack_checkpoint"]).name
        _wait("steps after the resume", lambda: (s := _status(run_id))["job_id"] == new_job
              and (s["last_step"] or 0) >= cancelled["ack_step"], timeout=90)
        stopped = slurmctl_json("cancel", run_id, "--now")
        assert stopped["final_state"] == "CANCELLED" and stopped["drain"] == "skipped"
        assert stopped["steps_lost"] is not None, stopped
        # numbered once across the run: its three attempts, and `logs --attempt` reads each
        history = _status(run_id)["history"]
        assert [line.split(" (")[0] for line in history] == ["attempt 1", "attempt 2", "attempt 3"], history
        assert re.search(r"\b\d+ steps? lost\b", history[-1]), history
        assert "Restored all states" in slurmctl("logs", run_id, "--attempt", "2", "-n", "0").stdout

        cost = slurmctl_json("cost", run_id)
        jobs = [a["job_id"] for a in cost["attempts"]]
        assert jobs.count(job_id) >= 2 and new_job in jobs  # preempted attempt, requeued attempt, resume
        assert cost["run_id"] == run_id
        # the epilog's record names Lightning's own checkpoint, so the preempted attempt's loss is counted from it
        preempted = min((a for a in cost["attempts"] if a["job_id"] == job_id), key=lambda a: a["start"])
        assert preempted["epilog_record"] and preempted["last_ckpt_step"] == saved, preempted
        assert slurmctl_json("diagnose", run_id)["category"]
    finally:
        if preemptor:
            bob.scancel(preemptor)
        slurmctl("cancel", run_id, "--now", check=False)
