"""Hugging Face Trainer + peft LoRA fine-tuning that follows the slurmctl conventions.

- The base model comes from `--base-model DIR` (a folder of the site's model store, loaded with
  from_pretrained; compute nodes never download) or, by default, a tiny Llama built from a config
  and saved once into the run's artifacts/base-model, so `slurmctl merge` finds it.
- Checkpoints: the Trainer writes its own (adapter, optimizer, scheduler, RNG, trainer state) into
  a staging folder; a callback publishes each one with slurmctl's protocol (`.complete` last), and
  a restart resumes the Trainer from the newest valid one.
- Drain: the callback polls slurmctl's drain flag every step; on a request the Trainer saves,
  stops, and the callback acknowledges (drain.ack) once the checkpoint is valid.
- Tracking: report_to follows run.yaml `tracking.backend` (the run id is the tracked run's id).
- The adapter weights are saved as their own artifact: <run dir>/artifacts/adapter.

Replace the model and the data set with yours; keep the callback.
"""

import argparse
import os
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist
from peft import LoraConfig, get_peft_model
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PrinterCallback,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from slurmctl import rundir
from slurmctl.runtime import Runtime


class Progressions(torch.utils.data.Dataset):
    """Token sequences a, a+d, a+2d, ... (mod vocab): a tiny language a small model learns in minutes."""

    def __init__(self, size: int, seq_len: int, vocab: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, vocab, (size, 1), generator=g)
        stride = torch.randint(1, 8, (size, 1), generator=g)
        self.tokens = (start + stride * torch.arange(seq_len)) % vocab

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


class SlurmctlCallback(TrainerCallback):
    """Progress, drain and checkpoints of a Trainer through slurmctl's runtime."""

    def __init__(self, rt: Runtime, staging: Path, print_every: int = 20, sleep: float = 0.0):
        self.rt, self.staging, self.print_every, self.sleep = rt, staging, print_every, sleep
        self.draining, self.loss = False, None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.loss = float(logs["loss"])
            self.rt.log(state.global_step, loss=self.loss)
            if self.rt.is_main and state.global_step % self.print_every == 0:
                print(f"step {state.global_step} loss {self.loss:.4f}", flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        if self.sleep:
            time.sleep(self.sleep)
        if self.rt.should_stop():  # every rank (one tiny all-reduce), so every rank saves and stops
            self.draining = True
            control.should_save = control.should_training_stop = True
        elif state.global_step >= state.max_steps:
            control.should_save = True  # the last step is always a checkpoint
        return control

    def on_save(self, args, state, control, **kwargs):
        """The Trainer wrote <staging>/checkpoint-<step> (every rank its part): publish it with `.complete`."""
        step = state.global_step
        staged = self.staging / f"checkpoint-{step}"
        barrier()  # every rank's files (e.g. its RNG state) are in the staged folder
        if self.rt.is_main:
            def move(tmp: Path) -> None:
                for item in staged.iterdir():
                    shutil.move(str(item), str(tmp / item.name))
            ck = self.rt.checkpoints.save(step, move)
            shutil.rmtree(staged, ignore_errors=True)
            if self.draining:
                self.rt.ack_drain(step, ck.path)
        barrier()


def base_model(rt: Runtime, args) -> tuple[torch.nn.Module, Path]:
    if args.base_model:
        return AutoModelForCausalLM.from_pretrained(args.base_model), Path(args.base_model)
    torch.manual_seed(0)  # the same base weights on every rank and in every attempt
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=args.seq_len)
    model = LlamaForCausalLM(config)
    saved = rt.run_dir / rundir.ARTIFACTS_DIR / "base-model"
    if rt.is_main and not (saved / "config.json").exists():
        model.save_pretrained(saved)
    return model, saved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--base-model", default=None, help="a from_pretrained folder (site model store)")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per step (tests: a slower step)")
    args = parser.parse_args()

    rt = Runtime.from_env()
    cuda = torch.cuda.is_available()
    tracking = os.environ.get("SLURMCTL_TRACKING", "none")
    staging = rt.run_dir / "hf-staging"
    training = TrainingArguments(
        output_dir=str(staging), max_steps=args.steps, per_device_train_batch_size=args.micro_batch,
        learning_rate=args.lr, lr_scheduler_type="constant", logging_steps=1, save_strategy="steps",
        save_steps=rt.checkpoint_interval, report_to=[] if tracking == "none" else [tracking],
        run_name=os.environ.get("SLURMCTL_RUN_ID"), use_cpu=not cuda, ddp_backend=None if cuda else "gloo",
        bf16=cuda and torch.cuda.is_bf16_supported(), dataloader_num_workers=0, disable_tqdm=True, seed=0,
        ddp_find_unused_parameters=False)
    base, base_path = base_model(rt, args)
    lora = LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      base_model_name_or_path=str(base_path))  # where `slurmctl merge` loads the base from
    model = get_peft_model(base, lora)
    if rt.is_main:
        model.print_trainable_parameters()
    callback = SlurmctlCallback(rt, staging, sleep=args.sleep)
    trainer = Trainer(model=model, args=training, train_dataset=Progressions(4096, args.seq_len, args.vocab),
                      callbacks=[callback])
    trainer.remove_callback(PrinterCallback)  # one dict per step in the job log; the callback prints a line
    ck = rt.checkpoints.latest()
    if rt.is_main and ck is not None:
        print(f"resuming the Trainer from step {ck.step} ({ck.path.name})", flush=True)
    trainer.train(resume_from_checkpoint=str(ck.path) if ck else None)
    if rt.is_main and not callback.draining:  # finished: the adapter is the result
        model.save_pretrained(rt.run_dir / rundir.ARTIFACTS_DIR / "adapter")
        print(f"final loss {callback.loss:.5f}; adapter in {rt.run_dir / rundir.ARTIFACTS_DIR / 'adapter'}",
              flush=True)
    barrier()


if __name__ == "__main__":
    main()
