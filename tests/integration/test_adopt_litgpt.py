"""litgpt's own command-line entry point (`litgpt pretrain`, installed unchanged from PyPI into the
trainers venv scripts/setup builds from constraints-trainers.txt), a lab-style sbatch script on 2 CPU
nodes, adopted unchanged as alice: preempted by a higher-priority job (Slurm requeues it; litgpt's
`--resume auto` restores its own newest `step-*/lit_model.pth`); cancelled with drain (litgpt saves
on no signal: `cancel --at-next-checkpoint` takes its next own save as the acknowledgement); resumed by
`slurmctl resume` under the same run id from that checkpoint; status, diagnose and cost right.

litgpt picks FSDP whenever it runs more than one process, and Lightning Fabric allows FSDP on GPUs only,
so the script sets Fabric's own `LT_STRATEGY=ddp`; `TORCHDYNAMO_DISABLE=1` skips the torch.compile of
the model, which on CPU costs more than these few dozen steps."""

import json
import os
import re
import time
from pathlib import Path

import pytest

from .conftest import REPO, as_user, give, slurmctl, slurmctl_json, start_requeued_now
from .test_adopt_lightning import _status, _wait

TRAINERS = REPO / ".venvs" / "trainers"

CONFIG = """model_name: pythia-14m
model_config:
  name: tiny
  block_size: 128
  vocab_size: 256
  padded_vocab_size: 256
  n_layer: 4
  n_head: 4
  n_embd: 128
  rotary_percentage: 1.0
  parallel_residual: false
  bias: false
  norm_class_name: RMSNorm
  mlp_class_name: LLaMAMLP
  intermediate_size: 256
tokenizer_dir: tok
data:
  class_path: litgpt.data.TextFiles
  init_args:
    train_data_path: data/train
    val_data_path: data/val
    num_workers: 0
train:
  save_interval: 8
  log_interval: 1
  global_batch_size: 8  # micro x 2 nodes: one optimizer step per iteration
  micro_batch_size: 4
  max_seq_length: 128
  max_steps: 100000
eval:
  interval: 100000
  initial_validation: false
  final_validation: false
devices: 1
precision: 32-true
logger_name: csv
"""

# As a lab writes it for litgpt: its venv, one task per node, litgpt's own resume.
SCRIPT = f"""#!/bin/bash
#SBATCH --job-name=litgpt-tiny
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --time=00:10:00
#SBATCH --partition=h100-spot
#SBATCH --requeue
source {TRAINERS}/bin/activate
export OMP_NUM_THREADS=1 LT_STRATEGY=ddp TORCHDYNAMO_DISABLE=1
srun litgpt pretrain --config pretrain.yaml --num_nodes "$SLURM_NNODES" --out_dir out --resume auto
"""

# On the login node, once, as a lab prepares data for litgpt's TextFiles: a byte-level BPE tokenizer
# trained on the text (as litgpt reads one: tokenizer.json + its config), the text tokenized by litgpt's
# own `tokenize` into litdata chunks where TextFiles looks for them (block = max_seq_length + 1, as
# TextFiles asks). Forked workers: the spawned ones TextFiles would start get their POSIX semaphores by
# name, and the cluster's epilog (before its fix) removed those when another job of alice's ended.
PREPARE = """import sys
from functools import partial
from pathlib import Path
from litdata import optimize
from litdata.streaming import TokensLoader
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from litgpt.data.text_files import tokenize
from litgpt.tokenizer import Tokenizer as LitTokenizer
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train(sys.argv[1:], trainers.BpeTrainer(vocab_size=256, special_tokens=["<unk>", "<bos>", "<eos>"]))
tok.save("tok/tokenizer.json")
for split in ("train", "val"):
    optimize(fn=partial(tokenize, tokenizer=LitTokenizer("tok")), output_dir=f"data/{split}/{split}",
             inputs=sorted(str(p) for p in Path("data", split).glob("*.txt")), num_workers=1, chunk_bytes="50MB",
             item_loader=TokensLoader(block_size=129), start_method="fork")
"""
TOKENIZER_CONFIG = {"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": False,
                    "tokenizer_class": "PreTrainedTokenizerFast"}
WORDS = "the a cat dog bird sat ran sang over in on to with while and park tree ball light morning".split()
RESUMING = re.compile(r"Resuming training from (\S+)")


@pytest.fixture(scope="module")
def trainers_venv() -> Path:
    if not (TRAINERS / "bin" / "litgpt").exists():
        why = f"no litgpt in {TRAINERS}: scripts/setup builds the trainers venv from constraints-trainers.txt"
        if os.environ.get("CI"):
            pytest.fail(f"{why}, and CI must have run it")
        pytest.skip(f"{why}; run it to include this test")
    return TRAINERS


def _write_inputs(workdir: Path, alice) -> None:
    import random

    rng = random.Random(0)
    for split, files in (("train", 2), ("val", 1)):
        (workdir / "data" / split).mkdir(parents=True)
        for i in range(files):
            text = "\n".join(" ".join(rng.choice(WORDS) for _ in range(20)) + " ." for _ in range(200))
            (workdir / "data" / split / f"{i}.txt").write_text(text + "\n")
    (workdir / "tok").mkdir()
    (workdir / "tok" / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG))
    (workdir / "prepare.py").write_text(PREPARE)
    (workdir / "pretrain.yaml").write_text(CONFIG)
    (workdir / "litgpt.sbatch").write_text(SCRIPT)
    give(workdir, (alice.uid, alice.gid))
    texts = sorted(str(p) for p in (workdir / "data" / "train").glob("*.txt"))
    alice.run([TRAINERS / "bin" / "python", "prepare.py", *texts], cwd=workdir, check=True, timeout=300)
    for split in ("train", "val"):
        assert json.loads((workdir / "data" / split / split / "index.json").read_text())["chunks"], split


def _cpus_not_on_demand(user, node: str) -> int:
    """The CPUs of `node` that no on-demand job holds (other sessions' jobs share the cluster): an
    on-demand job asking for all of them preempts every spot job there, and waits for no one else."""
    total = int(re.search(r"CPUTot=(\d+)", user.run(["scontrol", "show", "node", node]).stdout).group(1))
    rows = user.squeue("-h", "-w", node, "-t", "R", "-p", "h100-ondemand", "-o", "%C %D").split("\n")
    return total - sum(int(cpus) // int(nodes) for cpus, nodes in (row.split() for row in rows if row.strip()))


def _resumed_from(run_id: str, job: int) -> Path | None:
    log = slurmctl("logs", run_id, "--job", str(job), "-n", "0", check=False).stdout
    found = RESUMING.findall(log)
    return Path(found[-1]) if found else None


def test_litgpt_adopted_preempted_cancelled_and_resumed(workdir, alice, trainers_venv):
    began = time.monotonic()
    _write_inputs(workdir, alice)
    plan = slurmctl_json("adopt", "--yes", "litgpt.sbatch", "--framework", "pytorch", "--checkpoint-dir", "out",
                         cwd=workdir)
    run_id, job_id = plan["run_id"], plan["job_id"]
    assert plan["resilience"]["framework"] == "pytorch" and plan["resilience"]["signal"] is None
    assert plan["differences"] == [] and plan["wrapper_differences"] == []
    assert plan["cost"]["gpus"] == 0 and plan["cost"]["cpus"] == 2  # a CPU-only run, priced by its CPUs
    bob, preemptor = as_user("bob"), None
    try:
        saved = _wait("litgpt's first own checkpoint", lambda: (s := _status(run_id))["latest_checkpoint_step"]
                      and s["state"] == "RUNNING" and s, timeout=300)
        assert saved["num_nodes"] == 2 and saved["phase"] == "training", saved
        assert (saved["last_step"] or 0) >= saved["latest_checkpoint_step"] >= 8, saved

        # 1. preemption: an on-demand job on one of its nodes that needs its CPU; Slurm requeues it (--requeue)
        node = alice.run(["scontrol", "show", "hostnames", saved["nodes"]]).stdout.split()[-1]
        preemptor = bob.sbatch("-p", "h100-ondemand", "-w", node, "-c", str(_cpus_not_on_demand(bob, node)), "-t", "1",
                               "-J", "adopt-preemptor", "-o", "/dev/null", "--wrap", "sleep 2")
        # the run's own requeue expediter may start the job again seconds after Slurm requeued it, before a
        # status call on a loaded machine sees it wait: the requeue is its restart count, or the job waiting
        waiting = _wait("the requeue", lambda: ((s := _status(run_id))["state"] == "PENDING" or s["requeues"] >= 1)
                        and s, timeout=120)
        assert waiting["requeues"] >= 1, waiting
        if waiting["state"] == "PENDING":
            assert waiting["phase"].startswith("requeued"), waiting
            assert "preempt" in " ".join([waiting["why"], *waiting["history"]]), waiting
        kept = waiting["latest_checkpoint_step"]
        assert kept >= saved["latest_checkpoint_step"], waiting
        bob.scancel(preemptor)
        start_requeued_now(job_id)
        restored = _wait("litgpt resuming itself", lambda: _resumed_from(run_id, job_id), timeout=150)
        # its own newest checkpoint when it restarted: the one status showed, or one it saved in between
        assert restored.parent.name.startswith("step-"), restored
        assert saved["latest_checkpoint_step"] <= int(restored.parent.name[5:]) <= kept, (restored, kept)
        assert "preempt" in " ".join(_status(run_id)["history"]), _status(run_id)
        resumed = _wait("steps past that checkpoint", lambda: (s := _status(run_id))["state"] == "RUNNING"
                        and (s["last_step"] or 0) > kept and s, timeout=120)
        assert resumed["attempts"] >= 2 or resumed["requeues"] >= 1, resumed

        # 2. cancel with drain: no signal (litgpt saves on none); its next own save acknowledges it
        before = _status(run_id)["latest_checkpoint_step"]
        refused = slurmctl("cancel", run_id, check=False)
        assert refused.returncode != 0 and "--at-next-checkpoint" in refused.stderr, refused.stderr
        started = time.monotonic()
        cancelled = slurmctl_json("cancel", run_id, "--at-next-checkpoint", "--timeout", "120")
        took = time.monotonic() - started
        print(f"cancel --at-next-checkpoint of an adopted litgpt run: {took:.1f} s "
              f"(acknowledged after {cancelled['drain_seconds']:.1f} s)")
        assert cancelled["drain"] == "acknowledged" and cancelled["final_state"] == "CANCELLED", cancelled
        assert cancelled["ack_step"] > before and cancelled["ack_checkpoint"].endswith("lit_model.pth"), cancelled
        assert cancelled["kept_step"] == cancelled["ack_step"] and cancelled["last_step"] is not None, cancelled
        assert cancelled["steps_lost"] == max(0, cancelled["last_step"] - cancelled["ack_step"]), cancelled
        stopped = _status(run_id)
        assert stopped["phase"] == "cancelled" and stopped["latest_checkpoint_step"] == cancelled["ack_step"], stopped

        # 3. resume under the same run id (--yes as for submit and adopt), from litgpt's own checkpoint
        again = slurmctl_json("resume", run_id, "--yes")
        assert again["run_id"] == run_id and again["from_step"] == cancelled["ack_step"], again
        new_job = again["job_id"]
        restored = _wait("the resumed job's restore", lambda: _resumed_from(run_id, new_job), timeout=150)
        assert restored == Path("out") / f"step-{cancelled['ack_step']:08d}" / "lit_model.pth", restored
        _wait("steps after the resume", lambda: (s := _status(run_id))["job_id"] == new_job
              and (s["last_step"] or 0) > cancelled["ack_step"], timeout=120)
        ended = slurmctl_json("cancel", run_id, "--now")
        assert ended["final_state"] == "CANCELLED" and ended["drain"] == "skipped", ended

        # numbered once across the run (another session's on-demand job may have preempted it once more)
        history = _status(run_id)["history"]
        numbers = [line.split(" (")[0] for line in history]
        assert numbers == [f"attempt {n}" for n in range(1, len(history) + 1)] and len(history) >= 3, history
        assert "preempt" in " ".join(history[:-2]) and "cancelled" in history[-2], history
        cost = slurmctl_json("cost", run_id)
        jobs = [a["job_id"] for a in cost["attempts"]]
        assert jobs.count(job_id) >= 2 and new_job in jobs and cost["run_id"] == run_id, cost
        assert all(a["gpus"] == 0 and a["cost_usd"] > 0 for a in cost["attempts"]), cost  # priced by CPUs
        # the epilog's record names litgpt's own checkpoint: the preempted attempt's loss counts from it,
        # the cancelled one's from the checkpoint that acknowledged the drain
        records = {a["last_ckpt_step"] for a in cost["attempts"] if a["job_id"] == job_id and a["epilog_record"]}
        assert {kept, cancelled["ack_step"]} <= records, cost["attempts"]
        assert slurmctl_json("diagnose", run_id)["category"] == "cancelled"
        print(f"litgpt adopt test: {time.monotonic() - began:.0f} s")
    finally:
        if preemptor:
            bob.scancel(preemptor)
        slurmctl("cancel", run_id, "--now", check=False)
