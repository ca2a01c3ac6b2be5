"""`submit --smoke`: the same run on the site's smoke partition, 1 GPU, one step.

SLURMCTL_SMOKE=1 makes the runtime request a drain after the first logged step, so a training
that follows the slurmctl conventions saves a checkpoint, acknowledges and exits. The smoke test
passes when the job completed, logged a step, and left a valid checkpoint named by drain.ack
(written inside the job, read back here: the checkpoint round-trip). A pass is recorded under
the code+config hash; with `require_smoke: true` in site.yaml a full submit needs one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmctl.runtime.checkpoint import CheckpointManager
from slurmctl.fsutil import read_jsonl, write_atomic
from slurmctl.observe.logs import tail_lines
from slurmctl.rundir import Run
from slurmctl.slurm.client import SlurmClient
from slurmctl.submit.spec import RunSpec, SiteConfig

SMOKE_ENV = "SLURMCTL_SMOKE"
_SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", "checkpoints", "wandb", "mlruns"}
_MAX_CODE_FILES = 2000


def smoke_spec(spec: RunSpec, site: SiteConfig) -> RunSpec:
    """One node, one GPU of the smoke partition, one process, a short limit, the tiniest batch."""
    partition = site.smoke_partition or min(site.partitions, key=lambda p: site.partitions[p].price_per_gpu_hour)
    gpus = 1 if site.partitions[partition].gpus_per_node else 0
    model = spec.model.model_copy(update={"micro_batch": 1}) if spec.model else None
    return spec.model_copy(update={
        "name": f"{spec.name[:42]}-smoke", "partition": partition, "nodes": 1, "gpus_per_node": gpus,
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
    files += [(workdir / c) for c in spec.config_files if (workdir / c).is_file()]
    for path in files:
        digest.update(str(path.relative_to(workdir) if path.is_relative_to(workdir) else path).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _code_files(workdir: Path):
    for root, dirs, names in os.walk(workdir):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".")]
        yield from (Path(root) / n for n in names if n.endswith(".py"))


def _record_path(site: SiteConfig, code_hash: str) -> Path:
    return site.runs_root_path / ".smoke" / f"{code_hash}.json"


def smoke_passed(site: SiteConfig, code_hash: str) -> dict | None:
    try:
        record = json.loads(_record_path(site, code_hash).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return record if record.get("passed") else None


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
    verdict = SmokeVerdict(passed, state, diagnosis, run.run_id, job_id, code_hash,
                           round(time.monotonic() - started, 1), tail_lines(run.log_path(job_id), 15))
    path = _record_path(site, code_hash)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({**verdict.to_dict(), "time": time.time()}))
    return verdict


def judge(run: Run, state: str) -> tuple[bool, str]:
    """Pass/fail and the first thing that went wrong, in plain words."""
    if state != "COMPLETED":
        return False, f"the job ended {state.lower()}; its log tail below says why."
    steps = read_jsonl(run.path / "metrics.jsonl")
    if not steps:
        return False, "the job exited 0 but logged no step: does the training call rt.log(step, ...)?"
    try:
        ack = json.loads((run.path / "drain.ack").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False, "no drain.ack after the first step: does the training poll rt.should_stop() and call rt.ack_drain()?"
    spec = run.spec()
    latest = CheckpointManager(Path(spec.checkpoint.dir or run.path / "checkpoints")).latest()
    if latest is None or not ack.get("checkpoint") or Path(ack["checkpoint"]).resolve() != latest.path.resolve():
        return False, "the drain saved no valid checkpoint (drain.ack names none, or it is not the newest valid one)."
    return True, f"1 step, checkpoint at step {latest.step} written and read back valid."
