"""The checkpoint protocol, importable inside training code (standard library only).

A checkpoint is valid if and only if its directory holds `.complete`. Saving:
  1. write everything into `checkpoint-<step>.tmp/` (via the caller's write_fn),
  2. fsync every file and the directory, rename to `checkpoint-<step>/`, fsync the parent,
  3. write `.complete` last and fsync it and the directory,
  4. atomically repoint `latest` (a pointer file: works where symlinks do not, e.g. gcsfuse).
Loading walks back from the highest step to the newest valid checkpoint; `latest` is only a
convenience for humans and tools, never trusted for validity.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

COMPLETE_MARKER = ".complete"
LATEST_POINTER = "latest"
_NAME_RE = re.compile(r"^checkpoint-(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path

    @property
    def valid(self) -> bool:
        return (self.path / COMPLETE_MARKER).is_file()


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            _fsync_path(Path(dirpath) / name)
        _fsync_path(Path(dirpath))


class CheckpointManager:
    def __init__(self, root: str | os.PathLike, keep_last: int = 3):
        if keep_last < 1:
            raise ValueError("keep_last must be at least 1")
        self.root = Path(root)
        self.keep_last = keep_last

    def path_for(self, step: int) -> Path:
        return self.root / f"checkpoint-{step}"

    def all(self) -> list[Checkpoint]:
        """Every finished-rename checkpoint directory (valid or not), by step."""
        if not self.root.is_dir():
            return []
        found = []
        for entry in self.root.iterdir():
            m = _NAME_RE.match(entry.name)
            if m and entry.is_dir():
                found.append(Checkpoint(int(m.group(1)), entry))
        return sorted(found, key=lambda c: c.step)

    def valid(self) -> list[Checkpoint]:
        return [c for c in self.all() if c.valid]

    def latest(self) -> Checkpoint | None:
        """The newest VALID checkpoint, or None."""
        for ck in reversed(self.all()):
            if ck.valid:
                return ck
        return None

    def save(self, step: int, write_fn: Callable[[Path], None]) -> Checkpoint:
        if step < 0:
            raise ValueError("step must be >= 0")
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"checkpoint-{step}.tmp"
        final = self.path_for(step)
        if tmp.exists():
            shutil.rmtree(tmp)  # a previous attempt died mid-write
        tmp.mkdir()
        write_fn(tmp)
        _fsync_tree(tmp)
        if final.exists():
            shutil.rmtree(final)  # same step saved again after a restart; the new one wins
        os.rename(tmp, final)
        _fsync_path(self.root)
        marker = final / COMPLETE_MARKER
        with open(marker, "w") as fh:
            json.dump({"step": step, "time": time.time()}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_path(final)
        self._point_latest(final.name)
        self._prune()
        return Checkpoint(step, final)

    def _point_latest(self, name: str) -> None:
        pointer_tmp = self.root / f".{LATEST_POINTER}.tmp"
        with open(pointer_tmp, "w") as fh:
            fh.write(name + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(pointer_tmp, self.root / LATEST_POINTER)
        _fsync_path(self.root)

    def _prune(self) -> None:
        valid = self.valid()
        for ck in valid[: -self.keep_last]:
            shutil.rmtree(ck.path, ignore_errors=True)
        # Invalid directories older than the newest valid one can never be resumed from.
        newest = valid[-1].step if valid else -1
        for ck in self.all():
            if not ck.valid and ck.step < newest:
                shutil.rmtree(ck.path, ignore_errors=True)
