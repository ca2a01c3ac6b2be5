"""Plain PyTorch, nanoGPT-style: one `ckpt.pt` (or `*.pt`/`*.pth`) rewritten in out_dir, resumed with
`--init_from=resume`; or one directory per save (`step-000040/lit_model.pth`, as litgpt writes them,
resumed with `--resume auto`). Complete when it is a whole torch archive; its step is `iter_num`
(nanoGPT, litgpt), `step` or `global_step`: a file without one holds weights only and is no
checkpoint to resume from. It saves on a signal only if the
program was written to (say which with --signal)."""

from __future__ import annotations

from pathlib import Path

from slurmctl.runtime.adapters._pickle import torch_archive_dict

NAME = "pytorch"
SIGNAL = None
SIGNAL_TO = "steps"
# where it saves: nanoGPT's and litgpt's out_dir (--out_dir=..., a config file, or the program's default)
OUTPUT_NAMES = ("out_dir",)
MODULES = frozenset({"torch"})
STEP_PATTERN = r"\b(?:iter|step)[ =:]+(?P<step>\d+)"


def checkpoints(directory: Path) -> list[tuple[Path, int | None, float]]:
    files = []
    for folder in [directory, *_subdirs(directory)]:
        try:
            files += [(p.stat().st_mtime, p) for p in folder.iterdir()
                      if p.suffix in {".pt", ".pth"} and not p.is_symlink() and p.is_file()]
        except OSError:
            continue
    found = []
    for _, path in sorted(files)[-10:]:  # only the newest are opened
        state = torch_archive_dict(path)
        if state is None:
            continue
        step = next((state[k] for k in ("iter_num", "step", "global_step") if isinstance(state.get(k), int)), None)
        if step is not None:  # weights alone (litgpt's final/) are an export, not a checkpoint to resume from
            found.append((path, step, path.stat().st_mtime))
    return found


def _subdirs(directory: Path, limit: int = 1000) -> list[Path]:
    try:
        return [p for p in list(directory.iterdir())[:limit] if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []
