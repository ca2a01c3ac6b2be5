"""Hook settings from the environment slurmd gives the hook (plus what the wrapper exports).

Production wrappers set nothing and get the defaults below. The local dev cluster's wrappers export
SLURMCTL_LOCAL_DIR: every directory then lives under that state dir, one per simulated node
(several slurmds share one host there), and the test-only failure trigger is enabled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurmctl.slurm.client import SlurmClient

# dcgm-exporter --hpc-job-mapping-dir / jobstats convention: one file per GPU index holding job ids.
DEFAULT_GPU_MAP_DIR = "/run/slurmctl/gpu-job-map"
DEFAULT_SCRATCH_ROOT = "/scratch/slurm"
DEFAULT_COST_SPOOL = "/var/spool/slurmctl/cost-records"
DEFAULT_SMOKE_VERDICTS = "/var/spool/slurmctl/smoke-verdicts"  # = SiteConfig.smoke_verdicts_dir's default
SITE_CONFIG = "/etc/slurmctl/site.yaml"
DEFAULT_HEALTH_FAULTS_DIR = "/etc/slurmctl/health-faults"  # the fault stub (slurmctl/ops/health/checks.py)
DEFAULT_HEALTH_FAILURES = "/var/spool/slurmctl/health-failures"  # this node's classified failures (health/blame.py)
NVIDIA_SMI_PATHS = ("/usr/bin/nvidia-smi", "/usr/local/bin/nvidia-smi", "/opt/nvidia/bin/nvidia-smi")
SLURM_BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin")  # where scontrol/squeue live


def _first_executable(candidates) -> str | None:
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    return None


def _slurm_bin_dir() -> str | None:
    return next((d for d in SLURM_BIN_DIRS if os.access(os.path.join(d, "scontrol"), os.X_OK)), None)


class HookSlurm:
    """The hooks' SlurmClient, built on first use: most prolog runs never ask Slurm (no leftover
    processes, no failed check), and importing the client is most of a hook's own start-up."""

    def __init__(self, bin_dir: str, env: dict[str, str]):
        self._bin_dir, self._env, self._client = bin_dir, env, None

    def __getattr__(self, name: str):
        if self._client is None:
            from slurmctl.slurm.client import SlurmClient  # why: on first use only, see the class
            from slurmctl.slurm.runner import LocalRunner  # why: as above

            self._client = SlurmClient(LocalRunner(bin_dir=self._bin_dir, env=self._env))
        return getattr(self._client, name)


def hook_slurm_client(bin_dir: str | None, slurm_conf: str | None = None) -> SlurmClient | HookSlurm | None:
    """SlurmClient for a hook: absolute command paths (no PATH) and a fixed C locale; None
    without Slurm client tools (the hooks then skip what needs the controller). SLURM_CONF, when
    the hook has it (configless slurmd, a second cluster on one host), names the hook's own cluster."""
    if not bin_dir:
        return None
    return HookSlurm(bin_dir, {"LC_ALL": "C", **({"SLURM_CONF": slurm_conf} if slurm_conf else {})})


@dataclass
class HookConfig:
    node: str
    gpu_map_dir: Path
    scratch_root: Path
    cost_spool: Path
    shm_dir: Path = Path("/dev/shm")
    min_free_shm_mb: int = 256
    min_free_scratch_mb: int = 1024
    kill_grace_seconds: float = 1.0
    # reading a run's flags and checkpoints as the job's user takes ~10 ms; a FIFO/NFS hang is cut here
    user_read_timeout: float = 2.0
    nvidia_smi: str | None = None
    slurm: SlurmClient | HookSlurm | None = None  # every Slurm command of the hooks goes through it
    test_trigger_dir: Path | None = None  # local dev cluster only: <state>/test-triggers
    runs_root: Path | None = None  # <runs_root>/<user>/<run id>; None: unknown, the epilog skips run facts
    data_cache_dirs: tuple[Path, ...] = ()  # site.yaml data.node_cache_dir, data.shared_cache_dir
    smoke_verdicts_dir: Path = Path(DEFAULT_SMOKE_VERDICTS)  # see slurmctl/submit/smoke_verdicts.py
    health_faults_dir: Path = Path(DEFAULT_HEALTH_FAULTS_DIR)
    health_faults_env: tuple[str, ...] = ()  # SLURMCTL_HEALTH_FAULTS=<check>,<check>
    health_failures_dir: Path = Path(DEFAULT_HEALTH_FAILURES)
    verify_retry_seconds: float = 600.0  # a node that failed its verification is tried again after this
    # a verification job still pending this long after its submission has failed to start
    verify_start_seconds: float = 1800.0
    # start the run's requeue expediter from the epilog (epilog.start_requeue_expediter): where slurmd
    # uses proctrack/cgroup, which kills the one the batch script detached with the job's cgroup
    epilog_expediter: bool = False
    # the active check (health/allreduce.py): skipped without a python that has torch
    torch_python: str = ""
    allreduce_ranks: int = 2
    gloo_ifname: str = ""
    min_busbw_mbps: float = 100.0
    max_allreduce_latency_us: float = 20000.0
    allreduce_timeout: float = 120.0

    @classmethod
    def from_env(cls, env) -> HookConfig:
        node = env.get("SLURMD_NODENAME") or os.uname().nodename
        local = env.get("SLURMCTL_LOCAL_DIR")
        if local:
            state = Path(local)
            gpu_map = state / "gpu-job-map" / node
            scratch = state / "scratch" / node
            spool = state / "cost-records"
            verdicts = state / "smoke-verdicts"
            faults = state / "health-faults"
            failures = state / "health-failures" / node
        else:
            gpu_map, scratch, spool = Path(DEFAULT_GPU_MAP_DIR), Path(DEFAULT_SCRATCH_ROOT), Path(DEFAULT_COST_SPOOL)
            verdicts = Path(DEFAULT_SMOKE_VERDICTS)
            faults = Path(DEFAULT_HEALTH_FAULTS_DIR)
            failures = Path(DEFAULT_HEALTH_FAILURES)
        return cls(
            node=node,
            gpu_map_dir=Path(env.get("SLURMCTL_GPU_MAP_DIR") or gpu_map),
            scratch_root=Path(env.get("SLURMCTL_SCRATCH_ROOT") or scratch),
            cost_spool=Path(env.get("SLURMCTL_COST_SPOOL") or spool),
            shm_dir=Path(env.get("SLURMCTL_SHM_DIR") or "/dev/shm"),
            min_free_shm_mb=int(env.get("SLURMCTL_MIN_FREE_SHM_MB") or 256),
            min_free_scratch_mb=int(env.get("SLURMCTL_MIN_FREE_SCRATCH_MB") or 1024),
            nvidia_smi=env.get("SLURMCTL_NVIDIA_SMI") or _first_executable(NVIDIA_SMI_PATHS),
            slurm=hook_slurm_client(env.get("SLURMCTL_SLURM_BIN_DIR") or _slurm_bin_dir(), env.get("SLURM_CONF")),
            test_trigger_dir=Path(local) / "test-triggers" if local else None,
            runs_root=_runs_root(env),
            data_cache_dirs=_data_cache_dirs(env),
            smoke_verdicts_dir=Path(env.get("SLURMCTL_SMOKE_VERDICTS_DIR") or verdicts),
            health_faults_dir=Path(env.get("SLURMCTL_HEALTH_FAULTS_DIR") or faults),
            health_failures_dir=Path(env.get("SLURMCTL_HEALTH_FAILURES_DIR") or failures),
            verify_retry_seconds=float(env.get("SLURMCTL_HEALTH_VERIFY_RETRY_SECONDS") or 600),
            verify_start_seconds=float(env.get("SLURMCTL_HEALTH_VERIFY_START_SECONDS") or 1800),
            epilog_expediter=env.get("SLURMCTL_EPILOG_EXPEDITER") == "1",
            torch_python=env.get("SLURMCTL_HEALTH_TORCH_PYTHON") or "",
            allreduce_ranks=max(2, int(env.get("SLURMCTL_HEALTH_ALLREDUCE_RANKS") or 2)),
            gloo_ifname=env.get("SLURMCTL_HEALTH_GLOO_IFNAME") or "",
            min_busbw_mbps=float(env.get("SLURMCTL_HEALTH_MIN_BUSBW_MBPS") or 100),
            max_allreduce_latency_us=float(env.get("SLURMCTL_HEALTH_MAX_LATENCY_US") or 20000),
            allreduce_timeout=float(env.get("SLURMCTL_HEALTH_ALLREDUCE_TIMEOUT") or 120),
            health_faults_env=tuple(c.strip() for c in (env.get("SLURMCTL_HEALTH_FAULTS") or "").split(",")
                                    if c.strip()),
        )


def _site_text(env) -> str:
    """The site config's text (root's file). The hooks run under the system python3 without a YAML
    parser: they read the few plain scalars they need line by line."""
    try:
        with open(env.get("SLURMCTL_SITE_CONFIG") or SITE_CONFIG, "rb") as fh:
            return fh.read(256 * 1024).decode(errors="replace")
    except OSError:
        return ""


def _scalar(line: str) -> str:
    return line.split(":", 1)[1].split(" #", 1)[0].strip().strip("'\"")


def _runs_root(env) -> Path | None:
    """SLURMCTL_RUNS_ROOT, else the `runs_root:` line of the site config."""
    explicit = env.get("SLURMCTL_RUNS_ROOT")
    if explicit:
        return Path(explicit)
    for line in _site_text(env).splitlines():
        if line.startswith("runs_root:"):
            value = _scalar(line)
            return Path(value) if value.startswith("/") else None
    return None


def _data_cache_dirs(env) -> tuple[Path, ...]:
    """SLURMCTL_DATA_CACHE_DIRS (colon-separated), else the absolute `node_cache_dir:` and
    `shared_cache_dir:` of the site config's `data:` block."""
    explicit = env.get("SLURMCTL_DATA_CACHE_DIRS")
    if explicit is not None:
        return tuple(Path(p) for p in explicit.split(":") if p.startswith("/"))
    found, in_data = [], False
    for line in _site_text(env).splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            in_data = line.startswith("data:")
            continue
        key = line.strip().split(":", 1)[0]
        if in_data and key in ("node_cache_dir", "shared_cache_dir"):
            value = _scalar(line)
            if value.startswith("/"):
                found.append(Path(value))
    return tuple(found)
