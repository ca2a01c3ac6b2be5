"""The node health checks, and which run at which moment.

  prolog    before every job, well under a second: injected faults, the job's GPUs, /dev/shm and
            local disk space, leftover processes of ended jobs
  epilog    after every job: injected faults, /dev/shm and local disk space
  periodic  Slurm's HealthCheckProgram, on nodes in any state: all of the prolog's, plus the clock
            and the controller's view of this node's slurmd; GPUs are counted against the node's Gres
  verify    the verification job before a drained node returns: all of periodic's plus `probe`, a
            short active test (write, fsync, read back and compare a file on the local disk), and
            `allreduce` (allreduce.py: a gloo all-reduce across the node's ranks against the site's
            bus bandwidth and latency thresholds)
  active    `allreduce` alone: the root job an operator schedules on idle nodes

Each check returns a Finding (failed or passed) or None when it does not apply here (no nvidia-smi).
A failed Finding blamed on SITE_CONFIG (the torch python of the site's setting cannot import torch)
is no failure of the node: nothing is drained for it, the outcome says `config_error`.

The fault stub, for tests and drills: a regular file `<faults dir>/<check>` (every node of this
host) or `<faults dir>/<node>/<check>` (one node) makes that check fail with the file's first line
as the detail. The faults dir is /etc/slurmctl/health-faults (SLURMCTL_HEALTH_FAULTS_DIR overrides)
and counts only while it is root's and nobody else can write it: a user must not drain nodes.
SLURMCTL_HEALTH_FAULTS=<check>,<check> in the hook's environment (an operator's wrapper) does the
same for every node that wrapper runs on.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurmctl.errors import UnsafeDirectory
from slurmctl.ops.health.reasons import NODE_PROBLEM, USER_PROBLEM, DrainReason, one_line
from slurmctl.ops.hooks import jobinfo, procs
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.ops.hooks.rootfs import open_trusted_dir, read_small

CHECK_NAMES = ("gpu", "shm", "disk", "leftovers", "clock", "slurmd", "probe", "allreduce")
NVIDIA_SMI_TIMEOUT = 20.0
CLOCK_SLACK_SECONDS = 5.0
# The prolog reads at most this many processes' environments (~0.1 ms each, 0.2 s in all on the
# loaded 2-core dev machine): leftovers past it are the periodic program's (no bound there), not
# the starting job's wait. A node's own processes are a few hundred; a crowd of one user's is not.
PROLOG_MAX_ENVIRON_READS = 1024
# A finding's blame when the site's own setting is broken (a torch python without torch): never a
# drain, logged loudly instead.
SITE_CONFIG = "site_config"
# A node state in the controller's view that says slurmd cannot serve jobs (sinfo's flags).
_BAD_NODE_STATES = ("NOT_RESPONDING", "FAIL", "INVALID_REG", "INVAL")


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str = ""
    blame: str = NODE_PROBLEM

    def reason(self) -> DrainReason:
        return DrainReason(self.blame, self.check, self.detail)

    def to_dict(self) -> dict:
        return {"check": self.check, "ok": self.ok, "detail": self.detail, "blame": self.blame}


@dataclass
class Subject:
    """What one run of the checks looks at: the node, and at prolog time the job about to start."""

    cfg: HookConfig
    job_id: int = 0
    job_gpus: tuple[str, ...] = ()
    moment: str = "periodic"
    _node_line: str | None = None

    def node_line(self) -> str:
        """`scontrol show node -o <node>` once per run ("" when the controller did not answer)."""
        if self._node_line is None:
            self._node_line = jobinfo.node_line(self.cfg.slurm, self.cfg.node) or ""
        return self._node_line


# --- the fault stub ---------------------------------------------------------------------------------
def injected_fault(cfg: HookConfig, check: str) -> str | None:
    """The detail of an injected fault for `check` on this node, or None."""
    if check in cfg.health_faults_env:
        return "injected fault (SLURMCTL_HEALTH_FAULTS)"
    try:
        top = open_trusted_dir(cfg.health_faults_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (UnsafeDirectory, OSError):
        return None  # a faults dir others can write is ignored: a user must not drain nodes
    try:
        for where in (cfg.node, None):
            fd, close = top, False
            if where is not None:
                try:
                    fd, close = open_trusted_dir_at(top, where), True
                except OSError:
                    continue
            try:
                if _regular_at(fd, check):
                    try:
                        first = read_small(fd, check, 512).decode(errors="replace").splitlines()
                    except OSError:
                        first = []
                    return f"injected fault: {one_line(first[0])}" if first and first[0].strip() else "injected fault"
            finally:
                if close:
                    os.close(fd)
    finally:
        os.close(top)
    return None


def open_trusted_dir_at(parent_fd: int, name: str) -> int:
    if "/" in name or name in (".", ".."):
        raise OSError(f"{name!r} is no directory name")
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise OSError(f"{name} is not root's own directory")
    return fd


def _regular_at(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


# --- the checks -------------------------------------------------------------------------------------
def _free_mb(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize // (1024 * 1024)


def _top_owner(directory: Path) -> tuple[int, float] | None:
    """(uid, share) of the uid holding the most bytes among `directory`'s entries (lstat, no descent)."""
    sizes: dict[int, int] = {}
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                sizes[st.st_uid] = sizes.get(st.st_uid, 0) + st.st_blocks * 512
    except OSError:
        return None
    total = sum(sizes.values())
    if not total:
        return None
    uid = max(sizes, key=sizes.get)
    return uid, sizes[uid] / total


def check_shm(subject: Subject) -> Finding:
    cfg = subject.cfg
    free = _free_mb(cfg.shm_dir)
    if free >= cfg.min_free_shm_mb:
        return Finding("shm", True, f"{free} MB free")
    detail = f"{cfg.shm_dir} has {free} MB free, needs {cfg.min_free_shm_mb} MB"
    owner = _top_owner(cfg.shm_dir)
    if owner and owner[0] != 0 and owner[1] > 0.5:  # one user's leftovers filled it: their doing, not the node's
        return Finding("shm", False, f"{detail} (uid {owner[0]} holds {owner[1]:.0%})", USER_PROBLEM)
    return Finding("shm", False, detail)


def _existing(path: Path) -> Path:
    """`path`, or its nearest existing parent (the scratch root appears with the first job)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(subject: Subject) -> Finding:
    """Free space where the jobs' scratch lives (the local disk)."""
    cfg = subject.cfg
    path = _existing(cfg.scratch_root)
    free = _free_mb(path)
    if free >= cfg.min_free_scratch_mb:
        return Finding("disk", True, f"{free} MB free")
    return Finding("disk", False, f"{path} has {free} MB free, needs {cfg.min_free_scratch_mb} MB")


def check_leftovers(subject: Subject) -> Finding | None:
    """Processes of jobs that no longer run on this node: killed; a failure only if they survive
    SIGKILL (a process stuck in the kernel: the node's problem). Only processes slurmd started on
    THIS node count (procs.on_node). The prolog looks at PROLOG_MAX_ENVIRON_READS processes at most."""
    cfg = subject.cfg
    bound = PROLOG_MAX_ENVIRON_READS if subject.moment == "prolog" else None
    others = [p for p in procs.job_processes(node=cfg.node, max_reads=bound)
              if p.job_id != subject.job_id and procs.on_node(p, cfg.node)]
    if not others:
        return Finding("leftovers", True, "none")
    active = jobinfo.active_job_ids(cfg.slurm, cfg.node)
    if active is None:
        return None  # the controller did not answer: no verdict
    stale = [p for p in others if p.job_id not in active]
    if not stale:
        return Finding("leftovers", True, "none")
    survivors = procs.kill_all([p.pid for p in stale], cfg.kill_grace_seconds)
    jobs = ",".join(sorted({str(p.job_id) for p in stale}))
    if survivors:
        return Finding("leftovers", False, f"processes of ended job(s) {jobs} survive SIGKILL: "
                                           f"pids {','.join(map(str, survivors[:5]))}")
    return Finding("leftovers", True, f"killed {len(stale)} leftover process(es) of ended job(s) {jobs}")


def _visible_gpus(cfg: HookConfig) -> set[str]:
    import subprocess  # why: only a node with nvidia-smi runs a command here; the prolog starts faster without

    try:
        proc = subprocess.run([cfg.nvidia_smi, "--query-gpu=index", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise GpuFault(f"nvidia-smi hung for {NVIDIA_SMI_TIMEOUT:.0f} s (driver or GPU fault)") from None
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        raise GpuFault(f"nvidia-smi failed: {said[-1] if said else f'exit {proc.returncode}'}")
    return {line.strip() for line in proc.stdout.splitlines() if line.strip()}


class GpuFault(Exception):
    pass


_GRES_GPUS = re.compile(r"(?:^| )Gres=(?:\S*,)?gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


def check_gpu(subject: Subject) -> Finding | None:
    """Prolog: the job's GPUs are visible. Periodic: as many GPUs visible as the node's Gres says.
    Skipped where nvidia-smi is not installed (CPU nodes, the local dev cluster's fake GPUs)."""
    cfg = subject.cfg
    if not cfg.nvidia_smi:
        return None
    try:
        visible = _visible_gpus(cfg)
    except GpuFault as exc:
        return Finding("gpu", False, str(exc))
    if subject.moment == "prolog":
        missing = [g for g in subject.job_gpus if g not in visible]
        if missing:
            return Finding("gpu", False, f"GPU(s) {','.join(missing)} allocated but not visible to nvidia-smi "
                                         f"({len(visible)} visible)")
        return Finding("gpu", True, f"{len(visible)} visible")
    m = _GRES_GPUS.search(subject.node_line())
    want = int(m[1]) if m else 0
    if len(visible) < want:
        return Finding("gpu", False, f"{len(visible)} of {want} GPUs visible to nvidia-smi")
    return Finding("gpu", True, f"{len(visible)} visible")


def _node_field(line: str, key: str) -> str | None:
    m = re.search(rf"(?:^| ){key}=(\S+)", line)  # the first: Reason= and Comment= come after these
    return m[1] if m else None


def check_clock(subject: Subject) -> Finding | None:
    """The wall clock is not behind the moment slurmd (started on this clock) registered: a clock
    that jumped back breaks credentials, timeouts and every timestamp we record."""
    started = _node_field(subject.node_line(), "SlurmdStartTime")
    if not started or started in ("None", "Unknown"):
        return None
    try:
        when = time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    behind = when - time.time()
    if behind > CLOCK_SLACK_SECONDS:
        return Finding("clock", False, f"the clock is {behind:.0f} s behind slurmd's start ({started})")
    return Finding("clock", True, "ok")


def check_slurmd(subject: Subject) -> Finding | None:
    """The controller's view of this node's slurmd: it must know the node and hear from it."""
    if subject.cfg.slurm is None:
        return None
    line = subject.node_line()
    if not line:
        return None  # the controller did not answer: no verdict about this node
    state = _node_field(line, "State") or ""
    flags = state.split("+")
    bad = [f for f in flags if f.endswith("*") or f in _BAD_NODE_STATES]  # IDLE*: not responding
    if bad:
        return Finding("slurmd", False, f"the controller sees this node as {state}")
    return Finding("slurmd", True, state)


def check_probe(subject: Subject) -> Finding:
    """An active test for the verification job: write, fsync, read back and compare 16 MiB on the
    local disk the jobs use."""
    cfg = subject.cfg
    path = _existing(cfg.scratch_root) / f".slurmctl-probe-{os.getpid()}"
    data = os.urandom(1024 * 1024) * 16
    started = time.monotonic()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        with open(path, "rb") as fh:
            same = fh.read() == data
    except OSError as exc:
        return Finding("probe", False, f"write/read of {path} failed: {exc.strerror or exc}")
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    if not same:
        return Finding("probe", False, f"{path} read back differs from what was written")
    return Finding("probe", True, f"16 MiB write+fsync+read in {time.monotonic() - started:.2f} s")


def check_allreduce(subject: Subject) -> Finding | None:
    """The active check (allreduce.py): a gloo all-reduce across this node's ranks (its own processes),
    its bus bandwidth and latency against the site's thresholds. Skipped without a torch python."""
    cfg = subject.cfg
    if not cfg.torch_python:
        return None
    from slurmctl.ops.health import allreduce  # why: verification jobs only; it brings subprocess

    try:
        measured, why = allreduce.measure(cfg.torch_python, cfg.allreduce_ranks, cfg.gloo_ifname,
                                          cfg.allreduce_timeout)
    except allreduce.TorchPythonBroken as exc:
        return Finding("allreduce", False, f"configuration error (SLURMCTL_HEALTH_TORCH_PYTHON): {exc}", SITE_CONFIG)
    if measured is None:
        return Finding("allreduce", False, why)
    ok, detail = allreduce.judge(measured, allreduce.Thresholds(cfg.min_busbw_mbps, cfg.max_allreduce_latency_us))
    return Finding("allreduce", ok, detail)


CHECKS: dict[str, Callable[[Subject], Finding | None]] = {
    "gpu": check_gpu, "shm": check_shm, "disk": check_disk, "leftovers": check_leftovers,
    "clock": check_clock, "slurmd": check_slurmd, "probe": check_probe, "allreduce": check_allreduce,
}
MOMENTS = {
    "prolog": ("gpu", "shm", "disk", "leftovers"),
    "epilog": ("shm", "disk"),
    "periodic": ("gpu", "shm", "disk", "leftovers", "clock", "slurmd"),
    "verify": ("gpu", "shm", "disk", "leftovers", "clock", "slurmd", "probe", "allreduce"),
    "active": ("allreduce",),
}


def run_checks(subject: Subject, stop_at_first_failure: bool = False) -> list[Finding]:
    """The moment's checks in order; an injected fault replaces its check's own verdict. A check
    that breaks (an OSError of a broken filesystem) is a failed check, named after it."""
    found: list[Finding] = []
    for name in MOMENTS[subject.moment]:
        fault = injected_fault(subject.cfg, name)
        if fault is not None:
            finding: Finding | None = Finding(name, False, fault)
        else:
            try:
                finding = CHECKS[name](subject)
            except OSError as exc:
                finding = Finding(name, False, f"{exc.strerror or exc} ({exc.filename or 'filesystem'})")
        if finding is None:
            continue
        found.append(finding)
        if stop_at_first_failure and not finding.ok:
            break
    return found


def first_failure(findings: list[Finding]) -> Finding | None:
    """The first failure that is the node's (or a user's): a site configuration error is neither."""
    return next((f for f in findings if not f.ok and f.blame != SITE_CONFIG), None)


def config_error(findings: list[Finding]) -> Finding | None:
    return next((f for f in findings if not f.ok and f.blame == SITE_CONFIG), None)
