"""The root side of the node data caches (site.yaml data.node_cache_dir, data.shared_cache_dir).

A user's job can neither make its own directory safely in a directory every user may write (another
user makes it first, under the victim's name, and the victim's cache is refused forever) nor tell the
others how much it holds (a user who publishes a huge total makes every other user evict and fail).
So the cache root is root's, 0755 (deploy/local/up; the GKE init container; the prolog tightens a 1777
one that older versions made), and at every job start the prolog, as root:
  <root>/<user>/        makes it for the job's user when missing: owned by them, 0700. Anything else
                        under that name (another user's directory, a symlink, a file) is renamed aside
                        to .squatted-<user>-<time> first (a rename: O(1), however big the planted tree)
  <root>/usage/<user>   measures every user's entries on disk (st_blocks of the regular files the user
                        owns in <root>/<user>/objects, each inode once, a bounded scan, skipped while that directory's
                        mtime is unchanged) and publishes them, root's, 0644: what each user's
                        eviction adds to its own live total (runtime/datacache.py)
Every step goes through directory fds opened O_NOFOLLOW (rootfs.py). Standard library only.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
import time

from slurmctl.errors import UnsafeDirectory
from slurmctl.ops.hooks.rootfs import publish_file, read_small

USAGE_DIR = "usage"  # = slurmctl.runtime.datacache.USAGE_DIR (the hooks import no runtime module)
OBJECTS_DIR = "objects"
MAX_USERS = 1000  # user directories measured per cache root
MAX_OBJECTS = 20_000  # files stat'ed per user: a user's flood of files slows only the count of its own usage
# The prolog runs within a ~150 ms budget: once this much of it went to measuring, the remaining users keep
# their last measure until a later job start (an unchanged directory costs a stat, a changed one a scan).
MEASURE_SECONDS = 0.05
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def claim_dir(root_fd: int, name: str, uid: int, gid: int, mode: int) -> str | None:
    """`name` in `root_fd` as a directory owned by uid; whatever else is there is renamed aside.
    Returns the name it was renamed to, if any."""
    try:
        st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
        return None
    aside = None
    if st is not None:
        aside = f".squatted-{name}-{time.time_ns()}"
        os.rename(name, aside, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    os.mkdir(name, 0o700, dir_fd=root_fd)
    fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
    try:
        if os.fstat(fd).st_uid != os.geteuid():  # not the directory we just made
            raise UnsafeDirectory(name, "changed while being made")
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return aside


def measure_user(root_fd: int, name: str, uid: int, previous: tuple[int, int] | None) -> tuple[int, int]:
    """(bytes on disk of the regular files `uid` owns in <name>/objects, each inode once however many names
    link it, that directory's mtime in ns);
    (0, 0) when the directory is not uid's own (never through a symlink). `previous` (bytes, mtime) is
    reused when the directory has not changed since: no entry was added, replaced or removed."""
    try:
        user_fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
    except OSError:
        return 0, 0
    try:
        if os.fstat(user_fd).st_uid != uid:
            return 0, 0
        try:
            objects_fd = os.open(OBJECTS_DIR, _DIR_FLAGS, dir_fd=user_fd)
        except OSError:
            return 0, 0
        try:
            st = os.fstat(objects_fd)
            if st.st_uid != uid:
                return 0, 0
            if previous is not None and previous[1] == st.st_mtime_ns:
                return previous
            total = 0
            seen: set[tuple[int, int]] = set()  # a file hard-linked under many names is on disk once
            with os.scandir(objects_fd) as entries:
                for _, entry in zip(range(MAX_OBJECTS), entries):
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(info.st_mode) and info.st_uid == uid and (info.st_dev, info.st_ino) not in seen:
                        seen.add((info.st_dev, info.st_ino))
                        total += info.st_blocks * 512
            return total, st.st_mtime_ns
        finally:
            os.close(objects_fd)
    finally:
        os.close(user_fd)


def _published(usage_fd: int, name: str) -> tuple[int, int] | None:
    """(bytes, mtime) of root's earlier measure of `name`, or None."""
    try:
        fields = read_small(usage_fd, name, 64).split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def publish_usage(root_fd: int) -> dict[str, int]:
    """Measure every user directory of the root and publish each total under usage/, root's:
    "<bytes> <objects dir mtime ns>" (readers take the first number)."""
    claim_dir(root_fd, USAGE_DIR, 0, 0, 0o755)
    usage_fd = os.open(USAGE_DIR, _DIR_FLAGS, dir_fd=root_fd)
    try:
        totals: dict[str, int] = {}
        with os.scandir(root_fd) as entries:
            names = [e.name for _, e in zip(range(MAX_USERS * 2), entries)
                     if not e.name.startswith(".") and e.name != USAGE_DIR]
        deadline = time.monotonic() + MEASURE_SECONDS
        for name in names[:MAX_USERS]:
            try:
                uid = pwd.getpwnam(name).pw_uid
            except KeyError:
                continue
            previous = _published(usage_fd, name)
            if previous is not None and time.monotonic() > deadline:
                totals[name] = previous[0]
                continue
            measured = measure_user(root_fd, name, uid, previous)
            totals[name] = measured[0]
            if measured != previous:
                publish_file(usage_fd, name, f"{measured[0]} {measured[1]}\n".encode(), mode=0o644, durable=False)
        return totals
    finally:
        os.close(usage_fd)


def open_cache_root(root) -> tuple[int, str | None]:
    """(fd of the cache root, a note). The root must be a real directory of root's; one every user may
    write (mode 1777, what older versions made) is tightened to 0755 through its fd: from then on no
    user can make a name in it, and what one made before is renamed aside by claim_dir."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeDirectory(root, "is a symbolic link or not a directory") from None
        raise
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UnsafeDirectory(root, f"is owned by uid {st.st_uid}, not by uid {os.geteuid()}")
        if st.st_mode & 0o022:
            os.fchmod(fd, 0o755)
            return fd, f"data cache {root}: mode {stat.S_IMODE(st.st_mode):04o} tightened to 0755"
    except BaseException:
        os.close(fd)
        raise
    return fd, None


def prepare_caches(roots, uid: int, gid: int, user: str) -> list[str]:
    """The prolog's step for each cache root: the job user's directory, then everyone's usage.
    Returns notes for the hooks log; a root that is missing or not root's own is skipped, noted."""
    notes = []
    for root in roots:
        try:
            root_fd, note = open_cache_root(root)
        except FileNotFoundError:
            notes.append(f"data cache {root} skipped: missing")
            continue
        except UnsafeDirectory as exc:
            notes.append(f"data cache skipped: {exc} (the operator makes it root's, mode 0755)")
            continue
        try:
            if note:
                notes.append(note)
            aside = claim_dir(root_fd, user, uid, gid, 0o700)
            if aside:
                notes.append(f"data cache {root}/{user} was not {user}'s own: renamed to {aside}")
            totals = publish_usage(root_fd)
            notes.append(f"data cache {root}: {len(totals)} users, {sum(totals.values())} bytes")
        finally:
            os.close(root_fd)
    return notes
