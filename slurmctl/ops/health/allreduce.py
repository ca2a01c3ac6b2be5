"""The active check: a short gloo all-reduce across this node's ranks, its bus bandwidth and
latency held against the site's thresholds.

Two halves in one module:
  - `check_allreduce` (standard library, in the health program's process): starts one process per
    rank (`<torch python> -I allreduce.py RANK WORLD STORE`) with a deadline and judges what rank 0
    printed. It runs in the verification job before a node returns, and in
    `python -m slurmctl.ops.health active` (a root job an operator schedules on idle nodes).
  - `main` (one rank): the measurement itself, the only code here that imports torch.

The ranks are root's processes, so they meet through a FileStore in a directory only root can
enter, never a TCPStore: torchrun's store has no authentication, and its dynamic rendezvous
unpickles what any local user writes there (code execution as root). gloo's own connections
carry tensors only, on loopback unless the site names another interface.

Bus bandwidth follows nccl-tests' convention for all-reduce: bytes * 2(n-1)/n / time, so one
number compares across rank counts. Latency is the median of a one-float all-reduce.

Settings (HookConfig, from the hook wrapper's environment; agent.py spells them out into the
verification job):
  SLURMCTL_HEALTH_TORCH_PYTHON        a python with torch; unset: the check is skipped (not applicable)
  SLURMCTL_HEALTH_ALLREDUCE_RANKS     ranks on this node (default 2, at least 2; a GPU node: its GPU count)
  SLURMCTL_HEALTH_GLOO_IFNAME         GLOO_SOCKET_IFNAME for the ranks (default: lo)
  SLURMCTL_HEALTH_MIN_BUSBW_MBPS      slower than this fails the check (default 100)
  SLURMCTL_HEALTH_MAX_LATENCY_US      a slower small all-reduce fails the check (default 20000)
  SLURMCTL_HEALTH_ALLREDUCE_TIMEOUT   seconds for the whole launch, torch import included (default 120)
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

MESSAGE_MB = 8  # the bandwidth message: large enough to be bandwidth-bound on loopback, short on a 2-core node
LATENCY_ITERS = 20
BANDWIDTH_ITERS = 5
_WORKER = os.path.abspath(__file__)  # run as a script under -I: it imports nothing of slurmctl
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]*(?:Error|Exception)): (.+)$", re.MULTILINE)
# The torch python itself cannot import torch: the site's setting, not this node's fault.
_NO_TORCH = re.compile(r"No module named '?torch|ImportError[^\n]*torch|cannot import name [^\n]* from 'torch")
_ENFORCE = re.compile(r"\[enforce fail at [^\]]*\]\s*(?:[^.]*\.\s+)?")  # gloo's file:line and failed condition


@dataclass(frozen=True)
class Thresholds:
    min_busbw_mbps: float
    max_latency_us: float


@dataclass(frozen=True)
class Measured:
    ranks: int
    busbw_mbps: float
    latency_us: float


def judge(measured: Measured, limits: Thresholds) -> tuple[bool, str]:
    """(passed, detail): the detail names the numbers and the limit they missed."""
    said = (f"gloo all-reduce over {measured.ranks} ranks: bus bandwidth {measured.busbw_mbps:.0f} MB/s, "
            f"latency {measured.latency_us:.0f} us")
    if measured.busbw_mbps < limits.min_busbw_mbps:
        return False, f"{said}: too slow, the site minimum is {limits.min_busbw_mbps:.0f} MB/s"
    if measured.latency_us > limits.max_latency_us:
        return False, f"{said}: too slow, the site maximum latency is {limits.max_latency_us:.0f} us"
    return True, said


def rank_argv(python: str, rank: int, ranks: int, store: Path) -> list[str]:
    return [python, "-I", _WORKER, str(rank), str(ranks), str(store)]


def failure_line(stderr: str) -> str:
    """The first error a rank raised (gloo's own words), not a launcher's summary around it."""
    for m in _ERROR_LINE.finditer(stderr):
        if "ChildFailedError" not in m[0]:
            return _ENFORCE.sub("", m[1]).strip()
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


class TorchPythonBroken(Exception):
    """SLURMCTL_HEALTH_TORCH_PYTHON cannot start the ranks (missing, not executable, no torch): a
    configuration error of the site, never a verdict on the node."""


def measure(python: str, ranks: int, ifname: str, timeout: float) -> tuple[Measured | None, str]:
    """Run the ranks: (the measurement, "") or (None, why it failed). Raises TorchPythonBroken when
    the torch python itself is missing or has no working torch.

    On loopback (the default) the ranks run in a network namespace of their own, holding only its
    own loopback: gloo's handshake is an unauthenticated 8-byte sequence number, and a user who
    connects to a rank's listener first takes the peer's place, failing the check (and draining a
    healthy node) at will. A namespace no other process shares has no such listener to reach. Where
    the kernel refuses a namespace (no CAP_SYS_ADMIN), and on a fabric interface the site names,
    the ranks use the node's network, as gloo does."""
    ifname = ifname or "lo"
    child = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "LC_ALL": "C", "GLOO_SOCKET_IFNAME": ifname}
    isolate = ifname == "lo" and _namespaces_allowed()
    with tempfile.TemporaryDirectory(prefix="slurmctl-allreduce-") as private:  # 0700, root's
        outputs, procs, missing = [], [], ""
        for rank in range(ranks):
            out = open(Path(private) / f"rank{rank}.out", "w+")  # noqa: SIM115 - closed below
            outputs.append(out)
            enter = None if not isolate else _private_loopback if rank == 0 else _join_network_of(procs[0].pid)
            try:
                procs.append(subprocess.Popen(rank_argv(python, rank, ranks, Path(private) / "store"),
                                              stdout=out, stderr=subprocess.STDOUT, text=True, env=child,
                                              cwd="/", stdin=subprocess.DEVNULL, start_new_session=True,
                                              preexec_fn=enter))
            except OSError as exc:
                if rank == 0:
                    _end(procs)
                    raise TorchPythonBroken(f"could not start {python}: {exc.strerror or exc}") from None
                missing = f"rank {rank} could not start: {exc.strerror or exc}"
            except subprocess.SubprocessError:  # its preexec: no namespace made, or rank 0 (and it) gone
                missing = ("rank 0 could not make its private network namespace" if rank == 0 else
                           f"rank {rank} could not join rank 0's network namespace")
            if missing:
                outputs.pop().close()
                break
        try:
            deadline = time.monotonic() + timeout
            while any(p.poll() is None for p in procs):
                if time.monotonic() > deadline:
                    return None, f"gloo all-reduce over {ranks} ranks did not finish in {timeout:.0f} s"
                time.sleep(0.1)
        finally:
            _end(procs)
            said = []
            for out in outputs:
                out.seek(0)
                said.append(out.read())
                out.close()
    failed = [text for p, text in zip(procs, said, strict=True) if p.returncode != 0]
    if failed and _NO_TORCH.search("\n".join(failed)):
        raise TorchPythonBroken(f"{python} cannot import torch: {failure_line(failed[0])}")
    # on loopback without a namespace any local user can fail the check (SECURITY.md): the drain says so
    exposed = " (no private network namespace here: on the node's loopback)" if ifname == "lo" and not isolate else ""
    if failed:
        return None, f"gloo all-reduce over {ranks} ranks failed{exposed}: {failure_line(chr(10).join(failed))}"
    if missing:
        return None, f"gloo all-reduce over {ranks} ranks failed: {missing}"
    for line in reversed(said[0].splitlines()):
        try:
            data = json.loads(line)
            return Measured(int(data["ranks"]), float(data["busbw_mbps"]), float(data["latency_us"])), ""
        except (ValueError, KeyError, TypeError):
            continue
    return None, f"gloo all-reduce over {ranks} ranks printed no measurement"


_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_IFREQ = struct.Struct("16sH22x")  # struct ifreq: the name, then ifr_flags in the union


def _libc():
    import ctypes  # why: only the active check enters namespaces

    return ctypes.CDLL(None, use_errno=True)


def _namespaces_allowed() -> bool:
    """A network namespace can be made here: tried in a throwaway child, never in this process."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only reports by its exit status
        os._exit(0 if _libc().unshare(_CLONE_NEWNET) == 0 else 1)
    return os.waitpid(pid, 0)[1] == 0


def _private_loopback() -> None:
    """Rank 0's preexec: a network namespace of its own whose loopback is up (it starts down)."""
    import ctypes  # why: as in _libc

    if _libc().unshare(_CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = _IFREQ.unpack(fcntl.ioctl(sock, _SIOCGIFFLAGS, _IFREQ.pack(b"lo", 0)))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, _IFREQ.pack(b"lo", flags | _IFF_UP))


def _join_network_of(pid: int):
    """The other ranks' preexec: rank 0's network namespace (set before its Popen returned)."""
    def enter() -> None:
        import ctypes  # why: as in _libc

        fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        try:
            if _libc().setns(fd, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns(CLONE_NEWNET)")
        finally:
            os.close(fd)
    return enter


def _end(procs: list[subprocess.Popen]) -> None:
    """Every rank still running is killed with its whole session, and reaped."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
        p.wait()


def main(argv: list[str]) -> int:
    """One rank (argv: RANK WORLD STORE): warm up, then time small and large all-reduces; rank 0 prints JSON."""
    import statistics

    import torch  # why: only the ranks import torch, never the health program around them
    import torch.distributed as dist

    rank, world, store = int(argv[0]), int(argv[1]), argv[2]
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        ranks = dist.get_world_size()
        small = torch.zeros(1)
        large = torch.ones(MESSAGE_MB * 1024 * 1024 // 4)
        for _ in range(2):
            dist.all_reduce(small)
            dist.all_reduce(large)

        def timed(tensor, iters: int) -> float:
            took = []
            for _ in range(iters):
                dist.barrier()
                started = time.perf_counter()
                dist.all_reduce(tensor)
                took.append(time.perf_counter() - started)
            return statistics.median(took)

        latency = timed(small, LATENCY_ITERS)
        seconds = timed(large, BANDWIDTH_ITERS)
        busbw = large.numel() * 4 * 2 * (ranks - 1) / ranks / seconds / 1e6
        if dist.get_rank() == 0:
            print(json.dumps({"ranks": ranks, "busbw_mbps": round(busbw, 1), "latency_us": round(latency * 1e6, 1)}),
                  flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
