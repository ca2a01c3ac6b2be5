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
# the Trainer's log lines carry no step; tqdm's bar does: " 45/600 [00:10<...]"
STEP_PATTERN = r"(?:\bstep[ =:]+(?P<step>\d+)|\|\s*(?P<step2>\d+)/\d+ \[)"
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
