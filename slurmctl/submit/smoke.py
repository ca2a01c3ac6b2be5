"""`submit --smoke`: the same run on the site's smoke partition, 1 GPU, one step.

SLURMCTL_SMOKE=1 makes the runtime request a drain after the first logged step, so a training
that follows the slurmctl conventions saves a checkpoint, acknowledges and exits. The smoke test
passes when the job completed, logged a step, and left a valid checkpoint named by drain.ack
(written inside the job, read back: the checkpoint round-trip). The job checks this itself at its
end (runtime/attempt.py) and exits non-zero when it fails, so Slurm accounting's COMPLETED 0:0 is
the verdict.

The gate (`require_smoke: true` in site.yaml) trusts nothing a user can write: not the run dir,
not a job name. It needs a verdict root's epilog wrote for one of the caller's jobs with the same
code+config hash (smoke_verdicts.py: the job's stored batch script was a rendered smoke script and
it exited 0:0) and sacct saying that job ran on the smoke partition and ended COMPLETED 0:0.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmctl.config.models import RunSpec, SiteConfig
from slurmctl.fsutil import read_capped, tail_text_lines
from slurmctl.rundir import Run, current_user
from slurmctl.runtime.attempt import check_round_trip
from slurmctl.slurm.client import SlurmClient
from slurmctl.submit.smoke_verdicts import read_verdicts

SMOKE_ENV = "SLURMCTL_SMOKE"
_SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", "checkpoints", "wandb", "mlruns"}
_MAX_CODE_FILES = 2000
_MAX_HASHED_BYTES = 16 * 1024 * 1024  # per file


def smoke_partition(site: SiteConfig) -> str:
    return site.smoke_partition or min(site.partitions, key=lambda p: site.partitions[p].price_per_gpu_hour)


def smoke_name(name: str, code_hash: str) -> str:
    """The smoke run's name carries the code+config hash, so its Slurm job name (the run id) does."""
    return f"{name[:24]}-smoke-{code_hash}" if code_hash else f"{name[:42]}-smoke"


def smoke_spec(spec: RunSpec, site: SiteConfig, code_hash: str = "") -> RunSpec:
    """One node, one GPU of the smoke partition, one process, a short limit, the tiniest batch."""
    partition = smoke_partition(site)
    gpus = 1 if site.partitions[partition].gpus_per_node else 0
    model = spec.model.model_copy(update={"micro_batch": 1}) if spec.model else None
    return spec.model_copy(update={
        "name": smoke_name(spec.name, code_hash), "partition": partition, "nodes": 1, "gpus_per_node": gpus,
        "gpu_type": None, "procs_per_node": 1, "time_limit": site.smoke_time_limit,
        "env": {**spec.env, SMOKE_ENV: "1"}, "model": model,
    })


def code_config_hash(spec: RunSpec, workdir: Path) -> str:
    """sha256 over the Python code in workdir, the config files and what the job runs (not where)."""
    digest = hashlib.sha256()
    what = {"entrypoint": spec.entrypoint, "args": spec.args, "env": spec.env, "image": spec.image,
            "python": spec.python, "config_files": spec.config_files}
    digest.update(json.dumps(what, sort_keys=True).encode())
    files = sorted(p for p in _code_files(workdir))[:_MAX_CODE_FILES]
    files += [(workdir / c) for c in spec.config_files]
    for path in files:
        try:  # non-blocking and capped: a FIFO or /dev/zero among the files must not hang submit
            data = read_capped(path, _MAX_HASHED_BYTES, nofollow=False)
        except OSError:
            continue  # missing, unreadable or not a regular file: preflight reports it
        digest.update(str(path.relative_to(workdir) if path.is_relative_to(workdir) else path).encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def _code_files(workdir: Path):
    for root, dirs, names in os.walk(workdir):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".")]
        yield from (Path(root) / n for n in names if n.endswith(".py"))


def smoke_passed(site: SiteConfig, code_hash: str, client: SlurmClient) -> dict | None:
    """A passed smoke test of this code+config by the caller (see the module doc): a verdict root's
    epilog wrote for one of the caller's jobs, on the smoke partition, that sacct says ended
    COMPLETED 0:0 as the caller's. The user's run dirs and job names decide nothing."""
    if not code_hash:
        return None
    me, partition = current_user(), smoke_partition(site)
    verdicts = {v["job_id"]: v for v in read_verdicts(site.smoke_verdicts_dir, me, code_hash)
                if v.get("partition") == partition}
    if not verdicts:
        return None
    for job in sorted(client.history(verdicts), key=lambda j: j.job_id, reverse=True):
        if (job.job_id in verdicts and job.user == me and job.partition == partition
                and job.state == "COMPLETED" and job.exit_code == "0:0"):
            return {"passed": True, "run_id": job.name, "job_id": job.job_id, "code_hash": code_hash}
    return None


@dataclass
class SmokeVerdict:
    passed: bool
    state: str
    diagnosis: str
    run_id: str
    job_id: int
    code_hash: str
    seconds: float
    log_tail: list[str]
    # on a site that requires a smoke test: whether its gate sees this pass (None elsewhere, or when it failed)
    gate_open: bool | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def wait_and_judge(run: Run, client: SlurmClient, job_id: int, site: SiteConfig, code_hash: str,
                   timeout: float, poll: float = 2.0) -> SmokeVerdict:
    started = time.monotonic()
    state = "UNKNOWN"
    while time.monotonic() - started < timeout:
        job = client.jobs([job_id]).get(job_id)
        state = job.state if job else "UNKNOWN"
        if job and not job.active:
            break
        time.sleep(poll)
    else:
        client.cancel(job_id)
        state = "TIMEOUT (smoke)"
    passed, diagnosis = judge(run, state)
    gate_open = wait_for_gate(site, code_hash, client) if passed and site.require_smoke else None
    return SmokeVerdict(passed, state, diagnosis, run.run_id, job_id, code_hash,
                        round(time.monotonic() - started, 1), _log_tail(run.log_path(job_id)), gate_open)


# Root's epilog writes its verdict as the job ends, and slurmdbd records the end a moment after the controller: on a
# loaded cluster either can trail the job's leaving the queue, and a full submit made at once would be refused.
GATE_WAIT_SECONDS = 60.0


def wait_for_gate(site: SiteConfig, code_hash: str, client: SlurmClient, timeout: float = GATE_WAIT_SECONDS,
                  poll: float = 1.0) -> bool:
    """Whether the require_smoke gate sees a passed smoke test of this code+config within `timeout`."""
    deadline = time.monotonic() + timeout
    while smoke_passed(site, code_hash, client) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def _log_tail(path: Path) -> list[str]:
    try:
        return tail_text_lines(path, 15)
    except OSError:
        return []


def judge(run: Run, state: str) -> tuple[bool, str]:
    """Pass/fail and the first thing that went wrong, in plain words."""
    if state != "COMPLETED":
        return False, f"the job ended {state.lower()}; its log tail below says why."
    return check_round_trip(run)
