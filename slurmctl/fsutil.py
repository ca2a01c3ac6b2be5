"""Small file helpers safe on shared filesystems and against planted files.

Standard library only at import: jobs, the root-run node hooks and the CLI all use them.

The readers here never block and never read without bound, whatever sits at the path: a FIFO,
`/dev/zero`, a device or a directory is refused after a non-blocking open (`O_NONBLOCK`, then
`fstat` must say S_ISREG), and every read is capped. With ``nofollow=True`` (the default, for paths
a user controls) a symlink as the last path component is refused too (`O_NOFOLLOW`).

The writers create files 0640 at most; the process umask narrows that: the CLI sets 077 before it
writes a run (027 when the site shares runs with a group) and the job script sets the same umask.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from slurmctl.errors import UnsafeFile

DEFAULT_READ_CAP = 1024 * 1024  # small state files (run.json, heartbeat.json): far below this
DEFAULT_TAIL_BYTES = 256 * 1024


def open_regular(path: str | os.PathLike, *, nofollow: bool = True, dir_fd: int | None = None,
                 owner: int | None = None) -> int:
    """A read-only fd of a regular file, opened without blocking (a FIFO never stalls the caller).

    Raises FileNotFoundError when nothing is there, and ``UnsafeFile`` (an OSError, so hook code
    that catches OSError stays safe) for a symlink (with nofollow), FIFO, device or directory, and
    for a file whose owner is not `owner` (when given). `dir_fd`: `path` is relative to that open
    directory (slurmctl.rundir.pinned), not to a name that can be swapped under the reader.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if nofollow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFile(path, "a symbolic link") from None
        if exc.errno == errno.EISDIR:
            raise UnsafeFile(path, "a directory") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(path, _kind(st.st_mode))
        if owner is not None and st.st_uid != owner:
            raise UnsafeFile(path, f"owned by uid {st.st_uid}, not by its directory's owner (uid {owner})")
        # Back to blocking reads: a regular file never blocks, and O_NONBLOCK is only for the open.
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _read_fd(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_capped(path: str | os.PathLike, cap: int = DEFAULT_READ_CAP, *, nofollow: bool = True,
                dir_fd: int | None = None, owner: int | None = None) -> bytes:
    """The first `cap` bytes of a regular file (see ``open_regular`` for what is refused)."""
    fd = open_regular(path, nofollow=nofollow, dir_fd=dir_fd, owner=owner)
    try:
        return _read_fd(fd, cap)
    finally:
        os.close(fd)


def read_text_capped(path: str | os.PathLike, cap: int = DEFAULT_READ_CAP, *, nofollow: bool = True) -> str:
    return read_capped(path, cap, nofollow=nofollow).decode(errors="replace")


def read_json(path: str | os.PathLike, cap: int = DEFAULT_READ_CAP, *, nofollow: bool = True,
              dir_fd: int | None = None, owner: int | None = None):
    """Parsed JSON of a small state file, or None when it is missing, unsafe or not (yet) valid JSON."""
    try:
        return json.loads(read_capped(path, cap, nofollow=nofollow, dir_fd=dir_fd, owner=owner))
    except (OSError, ValueError):
        return None


def tail_bytes(path: str | os.PathLike, max_bytes: int = DEFAULT_TAIL_BYTES, *,
               nofollow: bool = True, dir_fd: int | None = None, owner: int | None = None) -> tuple[bytes, bool]:
    """(the last `max_bytes` of a regular file, whether it was cut at the front)."""
    fd = open_regular(path, nofollow=nofollow, dir_fd=dir_fd, owner=owner)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        os.lseek(fd, start, os.SEEK_SET)
        return _read_fd(fd, max_bytes), start > 0
    finally:
        os.close(fd)


def tail_text_lines(path: str | os.PathLike, lines: int = 0, max_bytes: int = DEFAULT_TAIL_BYTES, *,
                    nofollow: bool = True, dir_fd: int | None = None, owner: int | None = None) -> list[str]:
    """THE tail reader: the last `lines` lines (0 = all within the cap) of a log or JSONL file.

    Reads at most `max_bytes` from the end; the first line is dropped when the window cut it.
    A missing file is an empty list; a FIFO, device, directory or (nofollow) symlink raises
    ``UnsafeFile`` without blocking.
    """
    try:
        data, cut = tail_bytes(path, max_bytes, nofollow=nofollow, dir_fd=dir_fd, owner=owner)
    except FileNotFoundError:
        return []
    text = data.decode(errors="replace").splitlines()
    if cut and text:
        text = text[1:]
    return text[-lines:] if lines else text


def tail_jsonl(path: str | os.PathLike, records: int = 0, max_bytes: int = 64 * 1024, *,
               nofollow: bool = True, dir_fd: int | None = None, owner: int | None = None) -> list[dict]:
    """The newest records of a JSONL file that grows forever (metrics.jsonl), within `max_bytes`.

    Torn lines (a killed writer, the window's cut) are skipped; an unsafe file reads as empty.
    """
    try:
        lines = tail_text_lines(path, 0, max_bytes, nofollow=nofollow, dir_fd=dir_fd, owner=owner)
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out[-records:] if records else out


def append_jsonl(path: Path, record: dict, mode: int = 0o640) -> None:
    """One write() per line with O_APPEND, so concurrent writers never interleave a line."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_jsonl(path: str | os.PathLike, cap: int = 64 * 1024 * 1024, *, dir_fd: int | None = None,
               owner: int | None = None) -> list[dict]:
    """Every record of a JSONL file (attempts.jsonl: a few lines per attempt), up to `cap` bytes."""
    try:
        text = read_capped(path, cap, dir_fd=dir_fd, owner=owner).decode(errors="replace")
    except FileNotFoundError:
        return []
    except OSError:
        return []  # not a regular file: nothing a reader should trust
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line from a killed writer
        if isinstance(record, dict):
            out.append(record)
    return out


def write_atomic(path: Path, text: str, mode: int = 0o640) -> None:
    """Write to a temporary sibling, fsync, rename over: readers see old or new, never half.

    The temporary name is created with O_EXCL|O_NOFOLLOW, so a planted file or symlink there makes
    the write fail instead of following it.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def pid_alive(pid: int) -> bool:
    """Exists and is not a zombie (a killed child nobody reaped yet still answers kill -0)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def child_pids(parent: int) -> list[int]:
    """The processes whose parent is `parent` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            line = (entry / "stat").read_text()
        except OSError:
            continue  # it ended while we looked
        # '<pid> (<comm>) <state> <ppid> ...': comm may hold spaces and parentheses, so read after the last ')'
        fields = line.rpartition(")")[2].split()
        if len(fields) > 1 and fields[1] == str(parent):
            found.append(int(entry.name))
    return found


def human_bytes(n: float) -> str:
    """A byte count as people read it: 512 B, 3.0 MiB, 1.5 GiB, 2.0 TiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
