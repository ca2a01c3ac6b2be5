"""PyTorch Lightning: with its SLURM environment (auto-requeue), SIGUSR1 to the srun tasks makes the
Trainer save `hpc_ckpt_<n>.ckpt` in its default_root_dir and `scontrol requeue` the job. ModelCheckpoint's
`*.ckpt` files count too. A checkpoint is complete when it is a whole torch archive; its step is the
archive's global_step.

Which one the next attempt restores is Lightning's choice (2.x, CheckpointConnector._parse_ckpt_path):
`fit(ckpt_path=None)` under srun restores the highest-numbered hpc_ckpt_<n> in default_root_dir (and
nothing when there is none); `ckpt_path="last"` the newest `last*.ckpt` of ModelCheckpoint (never an
hpc_ckpt); any other path is the program's own. ``restore_mode`` reads that from the program's text."""

from __future__ import annotations

import os
import re
from pathlib import Path

from slurmctl.runtime.adapters._pickle import torch_archive_dict

NAME = "lightning"
SIGNAL = "USR1"
SIGNAL_TO = "steps"
# where it saves: Trainer(default_root_dir=...) holds its hpc_ckpt_<n>; ModelCheckpoint(dirpath=...) its own files
OUTPUT_NAMES = ("default_root_dir", "dirpath")
MODULES = frozenset({"lightning", "pytorch_lightning"})  # a program importing any of these uses it
# Lightning prints no step lines of its own without a progress bar; a program's own "step N" line,
# or the bar's "Epoch 3: 45%|...| 45/100".
# 'step 120', 'global step 120' (its checkpoint messages) and a script's own 'global_step=120'
STEP_PATTERN = r"(?:(?:\b|_)step[ =:]+(?P<step>\d+))"
MAX_FILES = 2000  # checkpoint files looked at per scan (newest kept)
_CKPT_PATH = re.compile(r"\bckpt_path\s*=\s*(?:(['\"])(\w+)\1|(\S+))")
_HPC = re.compile(r"hpc_ckpt_(\d+)\.ckpt")
_LAST = re.compile(r"last(?:-v?\d+)?\.ckpt")


def restore_mode(program_text: str, under_srun: bool) -> str:
    """hpc | last | best | program (a path of its own, e.g. from its arguments) | none."""
    m = _CKPT_PATH.search(program_text)
    if m and m.group(2) in {"last", "hpc", "best"}:
        return m.group(2)
    if m and not (m.group(3) or "").startswith("None"):
        return "program"
    return "hpc" if under_srun else "none"


def restored(found: list[tuple[Path, int | None, float]], mode: str | None):
    """Of `found` (complete, oldest first), the checkpoint Lightning restores in `mode`; None when it
    restores none of them. `program` and an unknown mode: the newest (the program names its own)."""
    if mode == "hpc":
        hpc = [c for c in found if _HPC.fullmatch(c[0].name)]
        return max(hpc, key=lambda c: (int(_HPC.fullmatch(c[0].name).group(1)), c[2]), default=None)
    if mode == "last":
        last = [c for c in found if _LAST.fullmatch(c[0].name)]
        return max(last, key=lambda c: c[2], default=None)
    if mode == "none":
        return None
    return found[-1] if found else None


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
