"""Hugging Face Trainer: `checkpoint-<step>/` directories under output_dir, each complete when its
trainer_state.json (written after the weights and optimizer) parses and names that step. It resumes
with `trainer.train(resume_from_checkpoint=True)` or `--resume_from_checkpoint DIR`; it saves on no
signal by itself (the hf-lora template's callback, or a TrainerCallback, adds that)."""

from __future__ import annotations

import json
import re
from pathlib import Path

NAME = "hf-trainer"
SIGNAL = None
SIGNAL_TO = "steps"
# where it saves: TrainingArguments.output_dir (--output_dir on the command line, or in the program)
OUTPUT_NAMES = ("output_dir",)
# a program importing one of these names from one of these modules uses the Trainer
MODULES = frozenset({"transformers", "trl"})
NAMES = frozenset({"Trainer", "Seq2SeqTrainer", "SFTTrainer"})
# The Trainer's log lines carry no step; its training loop's tqdm bar does: " 45%|####  | 270/600 [00:10<...]".
# That bar (ProgressCallback: tqdm(total=max_steps)) has no description, so its line starts with the
# percentage (after srun's or torchrun's rank label, if any), and it is the outermost bar: a bar nested
# under it (the evaluation's) moves the cursor back up after itself ("\x1b[A"). Other bars in the same
# output ("Writing model shards: 100%| 1/1", "Loading checkpoint shards", datasets' "Map") count
# something else and are not read.
STEP_PATTERN = (r"(?:\bstep[ =:]+(?P<step>\d+)"
                r"|^\s*(?:(?:\[[a-z]*\d+\]|\d+):\s*)?\d{1,3}%\|[^|]*\|\s*(?P<step2>\d+)/\d+ \[[^\x1b]*$)")
_DIR_RE = re.compile(r"checkpoint-(\d+)")


def checkpoints(directory: Path) -> list[tuple[Path, int | None, float]]:
    found = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    for path in entries:
        m = _DIR_RE.fullmatch(path.name)
        if not m or path.is_symlink() or not path.is_dir():
            continue
        state_file = path / "trainer_state.json"
        try:
            if state_file.stat().st_size > 64 * 1024 * 1024:
                continue
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue  # not complete (yet)
        if isinstance(state, dict) and state.get("global_step") == int(m.group(1)):
            found.append((path, int(m.group(1)), state_file.stat().st_mtime))
    return sorted(found, key=lambda c: c[1])
