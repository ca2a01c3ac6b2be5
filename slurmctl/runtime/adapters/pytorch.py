"""Plain PyTorch, nanoGPT-style: one `ckpt.pt` (or `*.pt`) rewritten in out_dir, resumed with
`--init_from=resume`. Complete when it is a whole torch archive; its step is `iter_num` (nanoGPT),
`step` or `global_step` when the dict has one. It saves on a signal only if the program was written
to (say which with --signal)."""

from __future__ import annotations

import re
from pathlib import Path

from slurmctl.runtime.adapters._pickle import torch_archive_dict

NAME = "pytorch"
SIGNAL = None
SIGNAL_TO = "steps"
IMPORTS = re.compile(r"^\s*import\s+torch\b|init_from", re.MULTILINE)
STEP_PATTERN = r"\b(?:iter|step)[ =:]+(?P<step>\d+)"


def checkpoints(directory: Path) -> list[tuple[Path, int | None, float]]:
    try:
        files = [p for p in directory.iterdir() if p.suffix in {".pt", ".pth"} and p.is_file() and not p.is_symlink()]
    except OSError:
        return []
    found = []
    for path in sorted(files, key=lambda p: p.stat().st_mtime)[-10:]:
        state = torch_archive_dict(path)
        if state is None:
            continue
        step = next((state[k] for k in ("iter_num", "step", "global_step") if isinstance(state.get(k), int)), None)
        found.append((path, step, path.stat().st_mtime))
    return found
