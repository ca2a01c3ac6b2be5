"""`slurmctl dev`: an interactive allocation on the dev partition that ends itself.

Two lifetimes bound every session, so a forgotten terminal never holds a GPU:
- the TTL is the Slurm time limit (`--time`): Slurm kills the allocation when it runs out;
- the idle timeout: the shell exits after `idle` seconds without input (bash's TMOUT), and
  JupyterLab shuts itself down after `idle` seconds without activity; either ends the job.

The shell runs through `srun --pty` (locally, or `ssh -t` to the login node when a host is
set), so the terminal is a real TTY on the node. JupyterLab runs as a batch job (`sbatch
--wrap`, slurmctl/runtime/jupyter.py) on a free port bound to the node's 127.0.0.1; slurmctl reads
the port and URL from the server file that Jupyter itself wrote for that job and prints the exact
`ssh -L` tunnel (through the login node to the node) and the localhost URL.
"""

from __future__ import annotations

import getpass
import os
import secrets
import shlex
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurmctl.config.models import SiteConfig
from slurmctl.durations import parse_duration, slurm_time
from slurmctl.errors import SlurmctlError, SpecError
from slurmctl.runtime.jupyter import read_server_file, runtime_dir

DEV_JOB_NAME = "slurmctl-dev"
DEFAULT_PARTITION = "l4-dev"


@dataclass
class DevRequest:
    time: str = "2h"
    idle: str = "30m"
    jupyter: bool = False
    partition: str | None = None
    gpus: int = 1
    local_port: int | None = None  # the tunnel's port on the laptop; default: the port Jupyter got on the node
    shell: str = "bash"

    def time_seconds(self) -> int:
        return _duration("--time", self.time)

    def idle_seconds(self) -> int:
        return _duration("--idle", self.idle)


def _duration(option: str, value: str) -> int:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise SpecError(f"{option} {value!r}: {exc}.",
                        f"Use e.g. `{option} 2h`, `{option} 90m` or `{option} 01:30:00`.",
                        code="invalid-duration") from None
    if seconds <= 0:
        raise SpecError(f"{option} must be positive, got {value!r}.", f"Use e.g. `{option} 30m`.",
                        code="invalid-duration")
    return seconds


@dataclass
class DevPlan:
    partition: str
    gpu_type: str
    time_limit: str
    idle_seconds: int
    slurm_args: list[str]
    command: list[str]
    environment: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _partition(site: SiteConfig, request: DevRequest) -> tuple[str, str]:
    name = request.partition or (DEFAULT_PARTITION if DEFAULT_PARTITION in site.partitions else site.smoke_partition)
    if not name or name not in site.partitions:
        known = ", ".join(sorted(site.partitions))
        raise SpecError(f"dev partition '{name or DEFAULT_PARTITION}' is not in the site config of {site.cluster}.",
                        f"Pass `--partition` with one of: {known}.", code="unknown-partition")
    part = site.partitions[name]
    if request.gpus > part.gpus_per_node:
        raise SpecError(f"--gpus {request.gpus} but nodes in '{name}' have {part.gpus_per_node} GPU(s).",
                        f"Ask for at most {part.gpus_per_node}.", code="too-many-gpus")
    return name, part.gpu_type


def slurm_args(site: SiteConfig, request: DevRequest, partition: str, gpu_type: str) -> list[str]:
    args = [f"--partition={partition}", f"--time={slurm_time(request.time_seconds())}",
            f"--job-name={DEV_JOB_NAME}", f"--comment=slurmctl-dev:{getpass.getuser()}", "--nodes=1", "--ntasks=1",
            f"--cpus-per-task={site.cpus_per_gpu * max(request.gpus, 1)}"]
    if request.gpus:
        args.append(f"--gres=gpu:{gpu_type}:{request.gpus}")
    if site.account:
        args.append(f"--account={site.account}")
    return args


def shell_plan(site: SiteConfig, request: DevRequest) -> DevPlan:
    """srun --pty SHELL with TMOUT set: bash logs out after `idle` seconds at the prompt."""
    partition, gpu_type = _partition(site, request)
    args = slurm_args(site, request, partition, gpu_type)
    idle = request.idle_seconds()
    # srun exports the caller's environment; TMOUT reaches the interactive shell on the node.
    command = ["env", f"TMOUT={idle}", "srun", *args, "--pty", request.shell, "-i"]
    return DevPlan(partition, gpu_type, slurm_time(request.time_seconds()), idle, args, command, {"TMOUT": str(idle)})


def jupyter_command(python: str, idle: int) -> str:
    """The job's command: slurmctl's launcher, which starts JupyterLab on a free loopback port."""
    return shlex.join([python, "-m", "slurmctl.runtime.jupyter", "--idle", str(int(idle))])


def jupyter_plan(site: SiteConfig, request: DevRequest, token: str) -> DevPlan:
    partition, gpu_type = _partition(site, request)
    args = slurm_args(site, request, partition, gpu_type)
    idle = request.idle_seconds()
    # The token travels in the job's environment (`env TOKEN=.. sbatch`), not in its script, so it
    # never shows in `scontrol show job`.
    command = ["sbatch", "--parsable", *args, "--export=ALL,JUPYTER_TOKEN",
               f"--wrap={jupyter_command(site.python, idle)}"]
    return DevPlan(partition, gpu_type, slurm_time(request.time_seconds()), idle, args, command,
                   {"JUPYTER_TOKEN": token})


def tunnel_command(login: str | None, node: str, node_port: int, local_port: int | None = None) -> str:
    """What the user runs on the laptop: local port -> the node's 127.0.0.1:port, through the login
    node as a jump host (Jupyter listens on the node's loopback only). Quoted, and `--` before the
    destination, as in every ssh argv slurmctl builds."""
    local = int(local_port or node_port)
    return shlex.join(["ssh", "-N", "-L", f"{local}:127.0.0.1:{int(node_port)}", "-J", login or socket.getfqdn(),
                       "--", node])


def run_shell(plan: DevPlan, client) -> tuple[int, float]:
    """Attach the terminal to the allocation (locally, or through the login node); returns
    (exit code, seconds)."""
    started = time.monotonic()
    code = client.interactive(plan.command)
    return code, time.monotonic() - started


@dataclass
class JupyterSession:
    job_id: int
    node: str
    port: int  # the port Jupyter listens on, on the node's 127.0.0.1 (from its own server file)
    token: str
    tunnel: str
    url: str
    time_limit: str
    idle_seconds: int

    def to_dict(self) -> dict:
        return asdict(self)


def start_jupyter(site: SiteConfig, request: DevRequest, client, login: str | None,
                  wait_seconds: float = 300, home: Path | None = None) -> JupyterSession:
    """Submit the JupyterLab job, wait until Jupyter wrote its server file, and say how to reach it."""
    token = secrets.token_urlsafe(24)
    plan = jupyter_plan(site, request, token)
    job_id = client.submit_wrapped(plan.command[2:], environment=plan.environment)
    directory = runtime_dir(home or Path.home(), job_id)
    deadline = time.monotonic() + wait_seconds
    while True:
        job = client.jobs([job_id]).get(job_id)
        server = read_server_file(directory, os.getuid()) if job and job.state == "RUNNING" else None
        if server is not None and job.nodelist:
            node = job.nodelist
            break
        if job and not job.active:
            raise SlurmctlError(f"The JupyterLab job {job_id} ended before Jupyter started ({job.state}).",
                                f"See `sacct -j {job_id}` and the job's slurm-{job_id}.out.", code="dev-failed")
        if time.monotonic() > deadline:
            client.cancel(job_id)
            raise SlurmctlError(f"JupyterLab of job {job_id} did not start within {wait_seconds:.0f} s; cancelled it.",
                                f"The dev partition may be busy; else see the job's slurm-{job_id}.out.",
                                code="dev-timeout")
        time.sleep(1)
    port = server["port"]
    local = request.local_port or port
    path = server["url"].split(f":{port}", 1)[1] or "/"
    url = f"http://localhost:{local}{path.rstrip('/')}/lab?token={server.get('token') or token}"
    return JupyterSession(job_id, node, port, token, tunnel_command(login, node, port, local), url,
                          plan.time_limit, plan.idle_seconds)
