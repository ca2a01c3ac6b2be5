"""Filesystem steps root takes on a node, written so that nothing a user planted can steer them.

The hooks create and remove entries only inside directories that root owns and nobody else can
write (scratch root, cost spool, GPU map dir). Each step goes through a directory file descriptor
opened with O_NOFOLLOW: a path component swapped for a symlink between two steps is never
followed, entries are inspected with lstat before they are removed, new files are created with
O_CREAT|O_EXCL|O_NOFOLLOW, and ownership and mode are set on the open descriptor (fchown, fchmod),
never on a path. Standard library only (the hooks run under the system python3).
"""

from __future__ import annotations

import errno
import os
import stat

from slurmctl.errors import UnsafeDirectory

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_trusted_dir(path: str | os.PathLike, *, create_mode: int | None = None, private: bool = False) -> int:
    """A directory fd of `path`, which must be a real directory owned by us (root) that no other
    user can write. `create_mode`: create it when missing (its parents, the admin's configuration,
    with 0755). `private`: also nobody else may read it; a looser mode on a directory we own is
    tightened to 0700 (an older version created spools 0755). Raises UnsafeDirectory otherwise."""
    path = os.fspath(path)
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        if create_mode is None:
            raise
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        try:
            os.mkdir(path, 0o700)  # tightest first; the mode is set on the fd below
            created = True
        except FileExistsError:
            created = False
        fd = _open_dir(path)
        if created:
            os.fchmod(fd, create_mode)
    except OSError as exc:
        raise _unsafe_from(path, exc) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UnsafeDirectory(path, f"is owned by uid {st.st_uid}, not by uid {os.geteuid()}")
        if st.st_mode & 0o022:
            raise UnsafeDirectory(path, f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})")
        if private and st.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_dir(path: str) -> int:
    try:
        return os.open(path, _DIR_FLAGS)
    except OSError as exc:
        raise _unsafe_from(path, exc) from None


def _unsafe_from(path: str, exc: OSError) -> OSError:
    if exc.errno == errno.ELOOP:
        return UnsafeDirectory(path, "is a symbolic link")
    if exc.errno == errno.ENOTDIR:  # O_DIRECTORY|O_NOFOLLOW on a symlink says ENOTDIR on Linux
        try:
            link = stat.S_ISLNK(os.lstat(path).st_mode)
        except OSError:
            link = False
        return UnsafeDirectory(path, "is a symbolic link" if link else "is not a directory")
    return exc


def remove_entry(dir_fd: int, name: str) -> bool:
    """Remove `name` in `dir_fd`, whatever it is, without following a symlink: a directory tree goes
    with shutil.rmtree(dir_fd=...) (fd-based on Linux: symlinks inside are unlinked, never followed,
    and a directory swapped mid-walk is detected). False when nothing was there."""
    _check_name(name)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        import shutil  # only here: the prolog's common path never needs it, and each ms counts

        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)
    return True


def make_fresh_dir(dir_fd: int, name: str, uid: int, gid: int, mode: int = 0o700) -> None:
    """`name` in `dir_fd` as a NEW directory owned by uid:gid: whatever was there (a planted symlink,
    a file, an old tree) is removed first, and the owner is set through the new directory's fd."""
    remove_entry(dir_fd, name)
    os.mkdir(name, 0o700, dir_fd=dir_fd)
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def publish_file(dir_fd: int, name: str, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """Atomically make `name` in `dir_fd` hold `data`: a fresh temporary sibling (O_EXCL|O_NOFOLLOW,
    random name), rename over. Readers see a whole file or none. `durable`: fsync the file and the
    directory too (a cost record must survive a node crash; a GPU map in /run need not)."""
    _check_name(name)
    tmp = f".{name}.{os.getpid()}.{os.urandom(6).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    if durable:
        os.fsync(dir_fd)  # the rename itself survives a crash of the node


def read_small(dir_fd: int, name: str, cap: int = 1024 * 1024) -> bytes:
    """The first `cap` bytes of the regular file `name` in `dir_fd`; a symlink, FIFO or device is
    refused without blocking (O_NOFOLLOW|O_NONBLOCK, then fstat must say regular file)."""
    _check_name(name)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{name} is not a regular file")
        chunks, left = [], cap
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _check_name(name: str) -> None:
    """One plain entry name: never a path that could leave the directory."""
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise ValueError(f"not a plain file name: {name!r}")
