"""PyTorch Lightning: with its SLURM environment (auto-requeue), SIGUSR1 to the srun tasks makes the
Trainer save `hpc_ckpt_<n>.ckpt` in its default_root_dir and `scontrol requeue` the job; the next
attempt restores from the newest one by itself. ModelCheckpoint's `*.ckpt` files count too. A
checkpoint is complete when it is a whole torch archive; its step is the archive's global_step."""

from __future__ import annotations

import os
import re
from pathlib import Path

from slurmctl.runtime.adapters._pickle import torch_archive_dict

NAME = "lightning"
SIGNAL = "USR1"
SIGNAL_TO = "steps"
IMPORTS = re.compile(r"^\s*(?:import|from)\s+(?:lightning|pytorch_lightning)\b", re.MULTILINE)
# Lightning prints no step lines of its own without a progress bar; a program's own "step N" line,
# or the bar's "Epoch 3: 45%|...| 45/100".
STEP_PATTERN = r"(?:\bstep[ =:]+(?P<step>\d+))"
MAX_FILES = 2000  # checkpoint files looked at per scan (newest kept)


def checkpoints(directory: Path) -> list[tuple[Path, int | None, float]]:
    found = []
    for root, dirs, files in os.walk(directory):
        if Path(root).relative_to(directory).parts.__len__() >= 3:
            dirs[:] = []  # default_root_dir/checkpoints/ and lightning_logs/version_N/checkpoints/
        for name in files:
            if name.endswith(".ckpt"):
                path = Path(root) / name
                try:
                    if path.is_symlink() or not path.is_file():
                        continue
                    found.append((path.stat().st_mtime, path))
                except OSError:
                    continue
    found = sorted(found)[-MAX_FILES:]
    complete = []
    for mtime, path in found[-20:]:  # only the newest are opened
        state = torch_archive_dict(path)
        if state is not None and ("global_step" in state or "state_dict" in state):
            step = state.get("global_step")
            complete.append((path, step if isinstance(step, int) else None, mtime))
    return complete
