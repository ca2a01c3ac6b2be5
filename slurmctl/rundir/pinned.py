"""Reading another user's run directory without a name that can change under the reader.

Root (the exporter) reads the run directories of every user. A check by path and a read by path are
two lookups: between them the owner can swap the directory for a symlink (rename, or an atomic
``renameat2(RENAME_EXCHANGE)``), and the read then lands in a directory the owner cannot read
but root can, another user's. So the directory is opened ONCE, ``O_DIRECTORY|O_NOFOLLOW``, and
its owner is checked on that fd (``fstat``); every file and subdirectory after that is opened
relative to the fd, one name at a time, with ``O_NOFOLLOW`` (and ``O_NONBLOCK`` for files), and
must be a regular file (or directory) of the same owner. A path with ``/`` in it is walked the same
way, component by component; ``..``, absolute paths and empty components are refused.

Standard library only at import (as the rest of slurmctl.rundir).
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from slurmctl.errors import UnsafeFile
from slurmctl.fsutil import DEFAULT_READ_CAP, read_capped, read_json, read_jsonl, tail_jsonl, tail_text_lines

MAX_ENTRIES = 10_000  # of one directory listing (health/, watchdog/, checkpoints/)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_dir(name: str | os.PathLike, owner: int, dir_fd: int | None = None) -> int:
    """An fd of the directory `name` (relative to `dir_fd` when given), never through a symlink,
    owned by `owner`; UnsafeFile for anything else."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # O_DIRECTORY|O_NOFOLLOW on a symlink: ENOTDIR
            raise UnsafeFile(name, "not a directory (or a symbolic link)") from None
        raise
    st = os.fstat(fd)
    if st.st_uid != owner:
        os.close(fd)
        raise UnsafeFile(name, f"owned by uid {st.st_uid}, not by uid {owner}")
    return fd


def _components(relative: str) -> list[str]:
    parts = relative.split("/")
    if not relative or any(p in ("", ".", "..") for p in parts):
        raise UnsafeFile(relative, "not a plain relative path inside the run directory")
    return parts


class PinnedDir:
    """One open directory of `owner`; every read below it is relative to its fd (see the module)."""

    def __init__(self, fd: int, owner: int, label: str):
        self.fd, self.owner, self.label = fd, owner, label

    @classmethod
    @contextmanager
    def open(cls, path: str | os.PathLike, owner: int) -> Iterator[PinnedDir]:
        fd = _open_dir(path, owner)
        try:
            yield cls(fd, owner, os.fspath(path))
        finally:
            os.close(fd)

    @contextmanager
    def _parent_of(self, relative: str) -> Iterator[tuple[int, str]]:
        """(fd of the directory holding the last component, that component's name)."""
        *dirs, name = _components(relative)
        opened: list[int] = []
        try:
            fd = self.fd
            for part in dirs:
                fd = _open_dir(part, self.owner, dir_fd=fd)
                opened.append(fd)
            yield fd, name
        finally:
            for fd in opened:
                os.close(fd)

    # --- files: regular files of the owner only, capped, non-blocking --------------------------------
    def read_bytes(self, relative: str, cap: int = DEFAULT_READ_CAP) -> bytes:
        with self._parent_of(relative) as (fd, name):
            return read_capped(name, cap, dir_fd=fd, owner=self.owner)

    def read_text(self, relative: str, cap: int = DEFAULT_READ_CAP) -> str:
        return self.read_bytes(relative, cap).decode(errors="replace")

    def read_json(self, relative: str, cap: int = DEFAULT_READ_CAP):
        """Parsed JSON, or None when missing, unsafe or not valid JSON."""
        try:
            with self._parent_of(relative) as (fd, name):
                return read_json(name, cap, dir_fd=fd, owner=self.owner)
        except OSError:
            return None

    def read_jsonl(self, relative: str, cap: int = 64 * 1024 * 1024) -> list[dict]:
        try:
            with self._parent_of(relative) as (fd, name):
                return read_jsonl(name, cap, dir_fd=fd, owner=self.owner)
        except OSError:
            return []

    def tail_jsonl(self, relative: str, records: int = 0, max_bytes: int = 64 * 1024) -> list[dict]:
        try:
            with self._parent_of(relative) as (fd, name):
                return tail_jsonl(name, records, max_bytes, dir_fd=fd, owner=self.owner)
        except OSError:
            return []

    def tail_lines(self, relative: str, max_bytes: int) -> list[str]:
        """The whole lines within the newest `max_bytes`; missing: none; unsafe: UnsafeFile."""
        try:
            with self._parent_of(relative) as (fd, name):
                return tail_text_lines(name, 0, max_bytes, dir_fd=fd, owner=self.owner)
        except FileNotFoundError:
            return []

    # --- entries -------------------------------------------------------------------------------
    def lstat(self, relative: str) -> os.stat_result | None:
        """The entry itself (a symlink is not followed), or None when it or a directory on the way is
        missing or unsafe."""
        try:
            with self._parent_of(relative) as (fd, name):
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None

    def exists(self, relative: str) -> bool:
        return self.lstat(relative) is not None

    def entries(self, relative: str = "", limit: int = MAX_ENTRIES) -> list[tuple[str, os.stat_result]]:
        """(name, lstat) of the first `limit` entries of a subdirectory (of the pinned one itself for
        ""), in directory order: a directory with a million planted entries costs a bounded read."""
        try:
            if not relative:
                return self._entries_of(self.fd, limit)
            with self._parent_of(relative) as (parent, name):
                fd = _open_dir(name, self.owner, dir_fd=parent)
                try:
                    return self._entries_of(fd, limit)
                finally:
                    os.close(fd)
        except OSError:
            return []

    @staticmethod
    def _entries_of(fd: int, limit: int) -> list[tuple[str, os.stat_result]]:
        out = []
        with os.scandir(fd) as listing:
            for entry in itertools.islice(listing, limit):
                try:
                    out.append((entry.name, entry.stat(follow_symlinks=False)))
                except OSError:
                    continue
        return out

    def subdirs(self, relative: str = "", limit: int = MAX_ENTRIES) -> list[str]:
        """Names of the real (not symlinked) subdirectories of a subdirectory."""
        return sorted(name for name, st in self.entries(relative, limit) if stat.S_ISDIR(st.st_mode))
