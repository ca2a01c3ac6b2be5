"""Which processes on this node belong to which Slurm job, read from /proc.

Attribution is by the SLURM_JOB_ID / SLURMD_NODENAME in a process's environment: it survives
double forks, setsid and nohup (which escape proctrack/linuxproc), and it is exact even when every
job runs as root (the local dev cluster). Only processes with this node's SLURMD_NODENAME are a
job's processes here (``on_node``). Other hooks (SLURM_SCRIPT_CONTEXT set) are never touched.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from slurmctl.fsutil import pid_alive


@dataclass(frozen=True)
class Proc:
    pid: int
    uid: int
    job_id: int | None
    node: str | None
    comm: str


def _environ(pid: int) -> dict[bytes, bytes] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    out = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in (b"SLURM_JOB_ID", b"SLURMD_NODENAME", b"SLURM_SCRIPT_CONTEXT"):
            out[key] = value
    return out


def _comm(pid: int) -> str:
    """The command line, shortened (the comm of `setsid sleep` etc. hides what really runs)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:60] or "?"
    except OSError:
        return "?"


def job_processes(uid: int | None = None, node: str | None = None, max_reads: int | None = None) -> list[Proc]:
    """Every live process (of `uid`, if given; started for a job on `node`, if given) carrying a
    SLURM_JOB_ID, hooks excluded. `max_reads` bounds the environments read (the costly part: the
    prolog's budget is well under a second however many processes other users run); past it the
    rest are not looked at, non-root processes first (a leftover is a user's far more often)."""
    me = os.getpid()
    owned = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        try:
            owner = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        if uid is not None and owner != uid:
            continue
        owned.append((owner == 0, pid, owner))
    if max_reads is not None:
        owned = sorted(owned)[:max_reads]
    found = []
    for _root, pid, owner in owned:
        env = _environ(pid)
        if not env or b"SLURM_JOB_ID" not in env or b"SLURM_SCRIPT_CONTEXT" in env:
            continue
        proc_node = env.get(b"SLURMD_NODENAME")
        proc_node_text = proc_node.decode(errors="replace") if proc_node else None
        if node is not None and proc_node_text != node:
            continue
        job = env[b"SLURM_JOB_ID"].decode(errors="replace")
        found.append(Proc(pid, owner, int(job) if job.isdigit() else None, proc_node_text, _comm(pid)))
    return found


def on_node(proc: Proc, node: str | None) -> bool:
    """Started by slurmd for a job on `node`: SLURMD_NODENAME is this node. A process with a
    SLURM_JOB_ID and no node name runs outside any slurmd (salloc's command, srun's client side, a
    shell that exported the variable): it is never a leftover of any node."""
    return node is not None and proc.node == node


def kill_all(pids: list[int], grace_seconds: float) -> list[int]:
    """SIGTERM, wait up to `grace_seconds`, SIGKILL the rest; returns pids still alive after that."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + (grace_seconds if sig == signal.SIGTERM else 1.0)
        while True:
            pids = [p for p in pids if pid_alive(p)]
            if not pids or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        if not pids:
            break
    return pids
