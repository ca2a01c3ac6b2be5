"""Live health, measured inside the job: which network transport each rank's collectives use, how
much of a step waits for the data loader, and whether the allocation sits idle.

Written to ``<run dir>/health/`` (names in slurmctl.rundir); `slurmctl status` and the exporter read
them through slurmctl.observe.health.

* ``rank-<N>.json`` (each rank, at most every SLURMCTL_HEALTH_INTERVAL, default 30 s): the
  transport this rank chose and its data-wait share. gloo's transport is TCP (the PyTorch builds
  use gloo's TCP transport), reported as such. For NCCL the job script sets NCCL_DEBUG=INFO with
  NCCL_DEBUG_SUBSYS=NET, the cheapest setting that names the transport (measured with NCCL 2.28.9 on
  an H200: 14 INFO lines per rank, vs 98 with INIT,NET, whose channel lines grow with the peers;
  WARN lines print whatever the subsystems), and the rank reads its OWN lines (NCCL prefixes each
  with host:pid:tid) from NCCL_DEBUG_FILE or the job log: "Assigned NET plugin X to comm" (NET) or
  "Using network X" (INIT) decides, else the channels' "via NET/X", else the last device line.
* ``idle.json`` (the watchdog sidecar, every check): the site's idle policy (site.yaml
  ``idle_action``/``idle_grace``) applied to this job. The sidecar enforces it because it already
  watches the step counter, runs next to the ranks (where nvidia-smi sees the job's GPUs), and owns
  the drain-then-end-the-step path; a login-node cron would need Slurm queries and root to act.

Standard library only at import (torch is looked at only when the training already imported it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from slurmctl import rundir
from slurmctl.durations import parse_duration, parse_seconds
from slurmctl.fsutil import write_atomic

DEFAULT_INTERVAL = 30.0
LOG_READ_CAP = 16 * 1024 * 1024  # of the job log, from this attempt's start on
LOG_LOOKBACK = 256 * 1024  # NCCL lines printed just before the Runtime was created
TRANSPORT_TRIES = 20  # flushes that look for an NCCL transport line before giving up
IDLE_UTIL_PERCENT = 5.0  # a GPU below this is idle (nvidia-smi utilization.gpu)

# --- network transport -------------------------------------------------------------------------
_NCCL_PREFIX = re.compile(r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[\d+\] NCCL INFO ")
_USING_NETWORK = re.compile(r"NCCL INFO (?:Using network (?P<name>[A-Za-z][\w .-]*?)|Assigned NET plugin "
                            r"(?P<assigned>[A-Za-z][\w .-]*?) to comm)\s*$")
_CHANNEL_VIA = re.compile(r"NCCL INFO Channel .* via NET/(?P<name>[A-Za-z]\w*)")
_NET_DEVICES = re.compile(r"NCCL INFO NET/(?P<name>[A-Za-z]\w*)\s*: Using \[\d")  # "Using [RO]": no device


def transport_class(name: str) -> str:
    """NCCL's network name -> a bounded class: socket, ib (InfiniBand or RoCE verbs, incl. the IBext
    plugin), efa (libfabric / aws-ofi-nccl), tcpx (GPUDirect-TCPX/TCPXO, FasTrak) or other."""
    low = name.lower()
    if "socket" in low:
        return "socket"
    if low.startswith("ib"):
        return "ib"
    if "libfabric" in low or "ofi" in low or "efa" in low:
        return "efa"
    if "tcpx" in low or "fastrak" in low:
        return "tcpx"
    return "other"


def nccl_transport(lines: Iterable[str], pid: int | None = None, host: str | None = None) -> dict | None:
    """The transport NCCL chose, from its INFO lines (only the lines of process `pid` on `host` when
    given); None when the lines do not say. The strongest statement wins: "Using network X" (INIT)
    or "Assigned NET plugin X to comm" (NET, NCCL 2.2x), then a channel "via NET/X", then the last
    "NET/X : Using [0]..." device line (older NCCL with NCCL_DEBUG_SUBSYS=NET)."""
    found: dict[int, tuple[str, str]] = {}
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        prefix = _NCCL_PREFIX.search(line)
        if pid is not None and (prefix is None or int(prefix["pid"]) != pid):
            continue
        if host and prefix is not None and prefix["host"].split(".")[0] != host.split(".")[0]:
            continue
        for strength, pattern in ((3, _USING_NETWORK), (2, _CHANNEL_VIA), (1, _NET_DEVICES)):
            m = pattern.search(line)
            if m and (strength == 1 or strength not in found):
                found[strength] = (m["name"] or m.groupdict().get("assigned"), line.strip()[:300])
                break
    if not found:
        return None
    name, evidence = found[max(found)]
    return {"backend": "nccl", "network": name, "transport": transport_class(name), "evidence": evidence}


def _distributed_backend() -> str | None:
    """torch.distributed's backend if the training initialised it (torch is never imported here)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return str(dist.get_backend())
    except Exception:  # noqa: BLE001 - a half-torn-down process group must not break a training step
        return None
    return None


def _read_from(path: Path, offset: int) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, offset))
            return fh.read(LOG_READ_CAP).decode(errors="replace").splitlines()
    except OSError:
        return []


def nccl_log_source(run_dir: Path, job_id: str | None) -> Path | None:
    """Where this process's NCCL lines go: NCCL_DEBUG_FILE (NCCL's %h and %p filled in), else the job log."""
    configured = os.environ.get("NCCL_DEBUG_FILE")
    if configured:
        return Path(configured.replace("%h", socket.gethostname().split(".")[0]).replace("%p", str(os.getpid())))
    return rundir.Run(run_dir.name, run_dir).log_path(job_id) if job_id and job_id.isdigit() else None


# --- data wait ---------------------------------------------------------------------------------
@dataclass
class DataMeter:
    """Seconds spent waiting for the next batch vs the rest of the step, since the start and since
    the last flush (the window status shows). The first batch of each pass is counted apart: it
    includes starting the loader's workers."""

    batches: int = 0
    wait: float = 0.0
    busy: float = 0.0
    first_wait: float = 0.0
    window: list[float] = field(default_factory=lambda: [0, 0.0, 0.0])  # batches, wait, busy

    def wrap(self, iterable: Iterable, tick=None, done=None) -> Iterator:
        """`done()` is called once the pass ends (exhausted, broken off or failed)."""
        clock = time.perf_counter
        it = iter(iterable)
        ready = None
        window = self.window
        try:
            while True:
                asked = clock()
                try:
                    batch = next(it)
                except StopIteration:
                    return
                got = clock()
                if ready is None:
                    self.first_wait += got - asked
                else:
                    waited, busy = got - asked, asked - ready
                    self.batches += 1
                    self.wait += waited
                    self.busy += busy
                    window[0] += 1
                    window[1] += waited
                    window[2] += busy
                ready = got
                if tick is not None:
                    tick(got)
                yield batch
        finally:
            if done is not None:
                done()

    def take_window(self) -> dict:
        batches, wait, busy = self.window
        self.window[:] = [0, 0.0, 0.0]  # in place: a running wrap() holds this list
        return _share(batches, wait, busy)

    def totals(self) -> dict:
        return {**_share(self.batches, self.wait, self.busy), "first_batch_wait_seconds": round(self.first_wait, 4)}


def _share(batches: int, wait: float, busy: float) -> dict:
    total = wait + busy
    return {"batches": int(batches), "wait_seconds": round(wait, 4), "step_seconds": round(total, 4),
            "wait_share": round(wait / total, 4) if total > 0 else None}


# --- the per-rank record -----------------------------------------------------------------------
class RankHealth:
    """One rank's health file, rewritten at most every `interval` seconds (from rt.log and rt.data)."""

    def __init__(self, run_dir: Path, rank: int, world_size: int, job_id: str | None = None,
                 interval: float | None = None, clock=time.time):
        self.run_dir, self.rank, self.world_size = Path(run_dir), rank, world_size
        self.job_id = job_id if job_id is not None else os.environ.get("SLURM_JOB_ID")
        if interval is None:
            try:
                interval = parse_seconds(os.environ.get("SLURMCTL_HEALTH_INTERVAL") or "30s")
            except ValueError:
                interval = DEFAULT_INTERVAL
        self.interval = max(0.0, interval)
        self.clock = clock
        self.meter = DataMeter()
        self.transport: dict | None = None
        self._tries = 0
        self._next = 0.0
        self.host = socket.gethostname().split(".")[0]
        self.pid = os.getpid()
        self.log_source = nccl_log_source(self.run_dir, self.job_id)
        try:
            start = os.stat(self.log_source).st_size if self.log_source and "NCCL_DEBUG_FILE" not in os.environ else 0
        except OSError:
            start = 0
        self.log_offset = max(0, start - LOG_LOOKBACK)
        self.disabled = False

    @property
    def path(self) -> Path:
        return self.run_dir / rundir.HEALTH_DIR / rundir.HEALTH_RANK.format(rank=int(self.rank))

    def tick(self, now: float | None = None) -> None:
        """Cheap unless a flush is due: one clock read and a comparison."""
        if self.disabled:
            return
        now = self.clock() if now is None else now
        if now >= self._next:
            self._next = now + self.interval
            self.flush(now)

    def detect_transport(self) -> dict | None:
        backend = _distributed_backend()
        if backend is None:
            return None
        if "nccl" in backend:
            if self.log_source is None:
                return {"backend": backend, "network": None, "transport": "unknown",
                        "evidence": "no job log or NCCL_DEBUG_FILE to read NCCL's lines from"}
            found = nccl_transport(_read_from(self.log_source, self.log_offset), pid=self.pid, host=self.host)
            if found:
                return {**found, "backend": backend}
            self._tries += 1
            if self._tries < TRANSPORT_TRIES:
                return None
            level = os.environ.get("NCCL_DEBUG", "unset")
            return {"backend": backend, "network": None, "transport": "unknown",
                    "evidence": f"no NCCL INFO transport line from this rank (NCCL_DEBUG={level}; INFO with "
                                "NCCL_DEBUG_SUBSYS=NET shows it)"}
        if "gloo" in backend:
            return {"backend": backend, "network": "TCP", "transport": "gloo-tcp",
                    "evidence": f"torch.distributed backend {backend}: gloo's transport is TCP"}
        return {"backend": backend, "network": None, "transport": "other", "evidence": f"backend {backend}"}

    def flush(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        if self.transport is None or (self.transport.get("transport") == "unknown" and self._tries < TRANSPORT_TRIES):
            self.transport = self.detect_transport()
        record = {"rank": self.rank, "world_size": self.world_size, "job_id": self.job_id, "host": self.host,
                  "pid": self.pid, "time": now, "transport": self.transport,
                  "data": {**self.meter.totals(), "window": self.meter.take_window()}}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(record))
        except OSError:
            self.disabled = True  # a read-only or full disk: the training goes on without health files


# --- idle allocation (the watchdog sidecar) ----------------------------------------------------
def job_gpu_indexes() -> list[str]:
    """The GPUs Slurm gave this job on this node (SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES)."""
    for name in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = os.environ.get(name, "").strip()
        if value and value not in {"NoDevFiles", "-1"}:
            return [v.strip() for v in value.split(",") if v.strip()]
    return []


def gpu_utilisation(indexes: list[str], command: str | None = None, timeout: float = 10.0) -> dict[str, float] | None:
    """utilization.gpu (%) of the job's GPUs from nvidia-smi; None where there is no nvidia-smi or it
    fails. SLURMCTL_NVIDIA_SMI names another binary (tests/fixtures/bin/nvidia-smi is the stub the
    tests use on this machine's fake GPUs)."""
    binary = command or os.environ.get("SLURMCTL_NVIDIA_SMI") or shutil.which("nvidia-smi")
    if not binary or not indexes:
        return None
    try:
        proc = subprocess.run([binary, "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    found = {}
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] in indexes:
            try:
                found[parts[0]] = float(parts[1])
            except ValueError:
                continue
    return found or None


@dataclass
class IdlePolicy:
    action: str = "warn"  # warn | drain
    grace_seconds: float = 1800.0

    @classmethod
    def from_site(cls) -> tuple[IdlePolicy, str | None]:
        """The site config's policy (the one the CLI reads: $SLURMCTL_SITE_CONFIG or /etc/slurmctl/site.yaml),
        read when the sidecar starts; (default warn policy, the problem) when it cannot be read."""
        try:
            from slurmctl.config.models import load_site_config  # why: pydantic only in the idle-policy sidecar

            site = load_site_config()
            return cls(site.idle_action, float(parse_duration(site.idle_grace))), None
        except Exception as exc:  # noqa: BLE001 - no site config on this node: warn only, and say why
            return cls(), f"site idle policy not read ({getattr(exc, 'message', exc)}); warning only"


class IdleMonitor:
    """No training step, or every GPU of the job under 5% busy, for the grace period -> idle.
    Under `drain` the caller (the watchdog) writes the drain request once; under `warn` idle.json
    and the exporter carry the warning."""

    def __init__(self, policy: IdlePolicy, run_dir: Path, job_id: str | None, gpus: list[str] | None = None,
                 utilisation=gpu_utilisation):
        self.policy, self.run_dir, self.job_id = policy, Path(run_dir), job_id
        self.gpus = job_gpu_indexes() if gpus is None else gpus
        self.utilisation = utilisation
        self.gpus_idle_since: float | None = None
        self.samples: dict[str, list[float]] = {}  # per GPU: [sum, count, max] over this attempt
        self.drained = False
        self.reason: str | None = None  # why it is idle now (None: it is not)

    def check(self, now: float, last_progress: float, progressed: bool = True, startup: float = 0.0) -> str | None:
        """'drain' once, when the policy says so; else None. Jobs without GPUs are never idle. Before
        the attempt's first step both rules wait at least `startup` (the watchdog's start-up window):
        loading data and compiling may take long, and are not idleness."""
        if not self.gpus:
            return None
        util = self.utilisation(self.gpus)
        if util:
            for gpu, value in util.items():
                acc = self.samples.setdefault(gpu, [0.0, 0, 0.0])
                acc[0] += value
                acc[1] += 1
                acc[2] = max(acc[2], value)
            idle_now = max(util.values()) < IDLE_UTIL_PERCENT
            self.gpus_idle_since = (self.gpus_idle_since or now) if idle_now else None
        no_step = max(0.0, now - last_progress)
        gpus_idle = now - self.gpus_idle_since if self.gpus_idle_since is not None else 0.0
        grace = self.policy.grace_seconds if progressed else max(self.policy.grace_seconds, startup)
        reason = None
        if no_step >= grace:
            reason = f"no training step for {no_step:.0f} s"
        elif util and gpus_idle >= grace:
            reason = f"every GPU of the job under {IDLE_UTIL_PERCENT:g}% busy for {gpus_idle:.0f} s"
        self.reason = reason
        verdict = None
        if reason and self.policy.action == "drain" and not self.drained:
            self.drained = True
            verdict = "drain"
        state = "drain-requested" if self.drained else ("idle" if reason else "ok")
        self._write(now, state, reason, no_step, gpus_idle, util)
        return verdict

    def _write(self, now, state, reason, no_step, gpus_idle, util) -> None:
        record = {"state": state, "time": now, "job_id": self.job_id, "action": self.policy.action,
                  "grace_seconds": self.policy.grace_seconds, "reason": reason,
                  "no_step_seconds": round(no_step, 1), "gpus_idle_seconds": round(gpus_idle, 1),
                  "gpus": self.gpus, "gpu_utilisation": util,
                  "gpu_utilisation_mean": {g: round(s / n, 1) for g, (s, n, _) in self.samples.items() if n},
                  "gpu_utilisation_max": {g: m for g, (_, n, m) in self.samples.items() if n}}
        try:
            (self.run_dir / rundir.HEALTH_DIR).mkdir(parents=True, exist_ok=True)
            write_atomic(self.run_dir / rundir.HEALTH_DIR / rundir.HEALTH_IDLE, json.dumps(record))
        except OSError:
            pass
