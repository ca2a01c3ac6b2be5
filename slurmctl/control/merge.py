"""`slurmctl merge RUN`: fold a LoRA run's adapter into its base model, as plain weights.

The hf-lora template leaves the adapter as its own artifact (<run dir>/artifacts/adapter, peft's
save_pretrained) and records the base model's folder in the adapter's config
(`base_model_name_or_path`: the site's model store, or artifacts/base-model when the run built its
base itself). Merging loads both, folds the low-rank update into the base weights
(merge_and_unload) and writes a from_pretrained folder (default <run dir>/artifacts/merged) that
serves without peft. The merged model's logits on a fixed probe are compared with the adapter
model's, so a merge that changed the model's function is refused instead of saved.

Runs on the machine that calls it (CPU is enough for adapter-sized models; a 70B base needs its
memory: submit the merge as a job there). Needs transformers and peft (`pip install 'slurmctl[hf]'`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmctl.errors import MergeError
from slurmctl.fsutil import read_json
from slurmctl.rundir import Run

ADAPTER, BASE_MODEL, MERGED = "adapter", "base-model", "merged"
ADAPTER_CONFIG = "adapter_config.json"
TOLERANCE = 1e-3  # max |logit difference| between adapter model and merged model (fp32 rounding is ~1e-6)


@dataclass
class MergeResult:
    run_id: str
    adapter: str
    base_model: str
    merged: str
    max_abs_diff: float
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def _base_path(run: Run, adapter: Path, override: Path | None) -> Path:
    if override is not None:
        base = override
    else:
        recorded = (read_json(adapter / ADAPTER_CONFIG, nofollow=False) or {}).get("base_model_name_or_path")
        base = Path(recorded) if isinstance(recorded, str) and recorded else run.artifacts_dir / BASE_MODEL
    if not (base / "config.json").is_file():
        raise MergeError(f"the base model of run {run.run_id} is not a model folder: {base} has no config.json.",
                         "Pass --base-model DIR (the from_pretrained folder the run was trained on).")
    return base


def merge_adapter(run: Run, output: Path | None = None, base_model: Path | None = None,
                  force: bool = False) -> MergeResult:
    started = time.monotonic()
    adapter = run.artifacts_dir / ADAPTER
    if not (adapter / ADAPTER_CONFIG).is_file():
        raise MergeError(f"run {run.run_id} has no LoRA adapter ({adapter}/{ADAPTER_CONFIG} is missing).",
                         "Only finished hf-lora runs leave one (the training saves it at its last step); "
                         "`slurmctl status` shows whether the run finished.")
    base = _base_path(run, adapter, base_model)
    target = output or run.artifacts_dir / MERGED
    if target.exists() and not force:
        raise MergeError(f"{target} already exists.", "Pass --force to replace it, or --output DIR.")
    # The libraries print progress bars and notices on stdout: send them to stderr, so `--json` stays JSON.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    run.use_umask()  # the merged model gets the run dir's privacy (owner only, or the team group)
    with contextlib.redirect_stdout(sys.stderr):
        return _merge(run, adapter, base, target, started)


def _merge(run: Run, adapter: Path, base: Path, target: Path, started: float) -> MergeResult:
    try:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        raise MergeError(f"merging needs transformers and peft ({exc.name} is not installed).",
                         "pip install 'slurmctl[hf]' (the versions in constraints.txt).") from None

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(adapter)).eval()
    vocab = model.get_base_model().config.vocab_size
    probe = torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(probe).logits
        merged = model.merge_and_unload()
        diff = float((merged(probe).logits - before).abs().max())
    if not diff <= TOLERANCE:
        raise MergeError(f"the merged model of run {run.run_id} differs from the adapter model by {diff:g} "
                         f"(more than {TOLERANCE:g}); nothing was written.",
                         "Check that the base model is the one the run was trained on (--base-model).")
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    merged.save_pretrained(str(staging))
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)  # a half-written merge never sits under the final name
    return MergeResult(run.run_id, str(adapter), str(base), str(target), diff, time.monotonic() - started)
