"""The active check: a short gloo all-reduce across this node's ranks, its bus bandwidth and
latency held against the site's thresholds.

Two halves in one module:
  - `check_allreduce` (standard library, in the health program's process): launches the worker
    under real torchrun (`<torch python> -m torch.distributed.run --standalone`) with a deadline
    and judges what rank 0 printed. It runs in the verification job before a node returns, and in
    `python -m slurmctl.ops.health active` (a root job an operator schedules on idle nodes).
  - `main` (`python -m slurmctl.ops.health.allreduce`, one process per rank under torchrun): the
    measurement itself, the only code here that imports torch.

Bus bandwidth follows nccl-tests' convention for all-reduce: bytes * 2(n-1)/n / time, so one
number compares across rank counts. Latency is the median of a one-float all-reduce.

Settings (HookConfig, from the hook wrapper's environment; agent.py spells them out into the
verification job):
  SLURMCTL_HEALTH_TORCH_PYTHON        a python with torch; unset: the check is skipped (not applicable)
  SLURMCTL_HEALTH_ALLREDUCE_RANKS     ranks on this node (default 2, at least 2; a GPU node: its GPU count)
  SLURMCTL_HEALTH_GLOO_IFNAME         GLOO_SOCKET_IFNAME for the ranks (default: gloo's choice)
  SLURMCTL_HEALTH_MIN_BUSBW_MBPS      slower than this fails the check (default 100)
  SLURMCTL_HEALTH_MAX_LATENCY_US      a slower small all-reduce fails the check (default 20000)
  SLURMCTL_HEALTH_ALLREDUCE_TIMEOUT   seconds for the whole launch, torch import included (default 120)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass

MESSAGE_MB = 8  # the bandwidth message: large enough to be bandwidth-bound on loopback, short on a 2-core node
LATENCY_ITERS = 20
BANDWIDTH_ITERS = 5
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]*(?:Error|Exception)): (.+)$", re.MULTILINE)
# The torch python itself cannot run torchrun: the site's setting, not this node's fault.
_NO_TORCH = re.compile(r"No module named '?torch|Error while finding module specification for 'torch"
                       r"|ImportError[^\n]*torch|cannot import name [^\n]* from 'torch")
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


def launch_argv(python: str, ranks: int) -> list[str]:
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
            "-m", "slurmctl.ops.health.allreduce"]


def failure_line(stderr: str) -> str:
    """The first error a rank raised (gloo's own words), not torchrun's summary around it."""
    for m in _ERROR_LINE.finditer(stderr):
        if "ChildFailedError" not in m[0]:
            return _ENFORCE.sub("", m[1]).strip()
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


class TorchPythonBroken(Exception):
    """SLURMCTL_HEALTH_TORCH_PYTHON cannot start torchrun (missing, not executable, no torch): a
    configuration error of the site, never a verdict on the node."""


def measure(python: str, ranks: int, ifname: str, timeout: float) -> tuple[Measured | None, str]:
    """Run the worker under torchrun: (the measurement, "") or (None, why it failed). Raises
    TorchPythonBroken when the torch python itself is missing or has no working torch."""
    child = {"PATH": "/usr/bin:/bin", "PYTHONPATH": _PACKAGE_ROOT, "OMP_NUM_THREADS": "1", "LC_ALL": "C"}
    if ifname:
        child["GLOO_SOCKET_IFNAME"] = ifname
    try:
        proc = subprocess.run(launch_argv(python, ranks), capture_output=True, text=True, timeout=timeout,
                              env=child, cwd="/", stdin=subprocess.DEVNULL, start_new_session=True)
    except subprocess.TimeoutExpired:
        return None, f"gloo all-reduce over {ranks} ranks did not finish in {timeout:.0f} s"
    except OSError as exc:
        raise TorchPythonBroken(f"could not start {python}: {exc.strerror or exc}") from None
    if proc.returncode != 0 and _NO_TORCH.search(proc.stderr):
        raise TorchPythonBroken(f"{python} cannot run torch.distributed.run: {failure_line(proc.stderr)}")
    if proc.returncode != 0:
        return None, f"gloo all-reduce over {ranks} ranks failed: {failure_line(proc.stderr)}"
    for line in reversed(proc.stdout.splitlines()):
        try:
            data = json.loads(line)
            return Measured(int(data["ranks"]), float(data["busbw_mbps"]), float(data["latency_us"])), ""
        except (ValueError, KeyError, TypeError):
            continue
    return None, f"gloo all-reduce over {ranks} ranks printed no measurement"


def main() -> int:
    """One rank under torchrun: warm up, then time small and large all-reduces; rank 0 prints JSON."""
    import statistics
    import time

    import torch  # why: only the ranks import torch, never the health program around them
    import torch.distributed as dist

    dist.init_process_group("gloo")
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
    raise SystemExit(main())
