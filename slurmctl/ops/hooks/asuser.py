"""Read a user's files as that user: a forked child drops to the user's uid/gid, and a deadline.

Root must not open files in a user-owned run directory itself: the user decides what sits there
(a symlink to /etc/shadow, a FIFO that blocks open() forever, /dev/zero that never ends). The
child below holds only the user's own rights (no supplementary groups), so whatever it opens the
user could have opened anyway; and the parent kills it at the deadline, so a hang costs the
hook `timeout` seconds, never the node. The result comes back as JSON through a pipe, capped.
Standard library only (the hooks run under the system python3).
"""

from __future__ import annotations

import json
import os
import pwd
import select
import signal
import time
from collections.abc import Callable

from slurmctl.errors import AsUserError

MAX_RESULT_BYTES = 1024 * 1024


def user_gid(uid: int, env_gid: str | None = None) -> int | None:
    """The job's primary gid: SLURM_JOB_GID when Slurm gives it, else the passwd entry; None if unknown."""
    if env_gid and env_gid.isdigit():
        return int(env_gid)
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return None


def run_as(uid: int, gid: int, func: Callable, *args, timeout: float = 2.0):
    """func(*args) in a forked child running as uid:gid; returns its (JSON-able) result.

    When we already are `uid` (a root job, or the user running `slurmctl cleanup` on their own
    runs) nothing is dropped, but the child and the deadline still bound what a planted file costs.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        status = 1
        try:
            os.close(read_fd)
            if os.geteuid() != uid:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)  # real, effective and saved: no way back to root in this child
            payload = json.dumps({"ok": func(*args)}, default=str).encode()
            status = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
            payload = json.dumps({"error": f"{type(exc).__name__}: {exc}"[:2000]}).encode()
        try:
            view = memoryview(payload[:MAX_RESULT_BYTES])
            while view:
                view = view[os.write(write_fd, view):]
        finally:
            os._exit(status)  # no atexit handlers, no flushing the parent's buffers twice
    os.close(write_fd)
    try:
        data = _read_until(read_fd, time.monotonic() + timeout)
    except AsUserError:
        _kill(pid)
        raise
    finally:
        os.close(read_fd)
        _reap(pid)
    try:
        answer = json.loads(data)
    except ValueError:
        raise AsUserError(f"the child as uid {uid} died without an answer") from None
    if "error" in answer:
        raise AsUserError(answer["error"])
    return answer.get("ok")


def _read_until(fd: int, deadline: float) -> bytes:
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AsUserError("timed out reading the user's files (a FIFO or a hung filesystem?)")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_RESULT_BYTES:
            raise AsUserError("the child's answer is too large")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _reap(pid: int) -> None:
    """Collect the child. It exits right after its answer; one that lingers is killed, and one stuck
    in the kernel (a dead NFS server) is left to init after a second rather than holding the hook."""
    started = time.monotonic()
    killed = False
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        waited = time.monotonic() - started
        if waited > 1.0:
            return
        if waited > 0.2 and not killed:
            _kill(pid)
            killed = True
        time.sleep(0.002)
