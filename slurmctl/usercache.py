"""The per-user cache: small JSON files private to the user (~/.cache/slurmctl, 0700 / 0600).

Facts that change rarely (the user's associations, a validated site.yaml or run.yaml) are kept here
so a command does not ask Slurm or build the pydantic models again. Nothing here is shared: the
directory must belong to the user and be closed to group and others, every file is read only when
it is a regular file of the user's with no group or other access, and anything else is ignored (the
caller asks again, as without a cache). Callers decide how old an entry may be and refresh an entry
when a check fails on it.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

from slurmctl.fsutil import open_regular, write_atomic

MAX_ENTRY_BYTES = 1024 * 1024
_SAFE_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def cache_dir(create: bool = False) -> Path | None:
    """$XDG_CACHE_HOME/slurmctl or ~/.cache/slurmctl when it is (or, with `create`, becomes) a real
    directory of this user's, mode 0700; None otherwise (no cache then)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return None
    path = Path(base) / "slurmctl"
    try:
        if create:
            os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        return None
    return path


def is_safe_name(name: str) -> bool:
    """A plain file name for an entry: no path separator, not hidden, nothing a shell or a path would read."""
    return bool(name) and not name.startswith(".") and set(name) <= _SAFE_NAME


def _entry(name: str, create: bool = False) -> Path | None:
    if not is_safe_name(name):
        raise ValueError(f"cache entry name {name!r} must be a plain file name")
    directory = cache_dir(create)
    return directory / name if directory is not None else None


def read_entry(name: str, max_age_seconds: float | None = None) -> dict | None:
    """The JSON object stored under `name`, or None when it is missing, older than
    `max_age_seconds` (by the time it was written), damaged, or not the user's private file."""
    path = _entry(name)
    if path is None:
        return None
    try:
        fd = open_regular(path)  # no symlink, FIFO or device
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or info.st_mode & 0o077 or info.st_size > MAX_ENTRY_BYTES:
            return None
        data = json.loads(os.read(fd, MAX_ENTRY_BYTES + 1))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or not isinstance(data.get("written"), (int, float)):
        return None
    if max_age_seconds is not None and not 0 <= time.time() - data["written"] < max_age_seconds:
        return None
    return data.get("value") if isinstance(data.get("value"), dict) else None


def write_entry(name: str, value: dict) -> bool:
    """Store `value` under `name` (atomically, 0600); False when there is no private cache directory
    or the write failed: a cache that cannot be written only costs the next command a query."""
    path = _entry(name, create=True)
    if path is None:
        return False
    text = json.dumps({"written": time.time(), "value": value}, separators=(",", ":"))
    if len(text) > MAX_ENTRY_BYTES:
        return False
    try:
        write_atomic(path, text, mode=0o600)
    except OSError:
        return False
    return True


def forget(name: str) -> None:
    path = _entry(name)
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass


def prune(prefix: str, keep: int) -> None:
    """Remove the oldest entries named `prefix*` beyond the newest `keep` (content-keyed entries
    would otherwise grow with every distinct file)."""
    directory = cache_dir()
    if directory is None:
        return
    try:
        entries = [e for e in os.scandir(directory) if e.name.startswith(prefix) and e.is_file(follow_symlinks=False)]
        if len(entries) <= keep:
            return
        entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime)
        for entry in entries[:len(entries) - keep]:
            os.unlink(entry.path)
    except OSError:
        pass
