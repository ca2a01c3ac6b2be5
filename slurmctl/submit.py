"""submit: validate, estimate, freeze the spec into a run directory, render and sbatch."""

from __future__ import annotations

import getpass
import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .cost import CostEstimate, estimate
from .errors import SlurmctlError
from .fsutil import write_atomic
from .preflight import Finding, raise_on_errors, run_preflight
from .render import render
from .runs import Run, RunRegistry, new_run_id
from .slurm.client import SlurmClient
from .spec import RunSpec, SiteConfig, load_run_spec, slurm_time

TEMPLATE = "torchrun.sbatch.j2"


@dataclass
class SubmitResult:
    run_id: str
    run_dir: str
    script: str
    estimate: CostEstimate
    job_id: int | None = None
    dry_run: bool = False
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"run_id": self.run_id, "run_dir": self.run_dir, "job_id": self.job_id, "dry_run": self.dry_run,
                "estimate": self.estimate.to_dict(), "findings": [f.to_dict() for f in self.findings]}


def resolve_workdir(spec: RunSpec, spec_path: Path) -> Path:
    base = spec_path.resolve().parent
    return (base / spec.workdir).resolve() if spec.workdir else base


def sbatch_context(spec: RunSpec, site: SiteConfig, run_id: str, run_dir: Path, workdir: Path) -> dict:
    gpu_type = spec.gpu_type or site.partitions[spec.partitions[0]].gpu_type
    return {
        "run_id": run_id,
        "run_dir": str(run_dir),
        "workdir": str(workdir),
        "partitions": spec.partitions,
        "account": site.account,
        "nodes": spec.nodes,
        "gpus_per_node": spec.gpus_per_node,
        "gpu_type": gpu_type,
        "cpus_per_task": (spec.cpus_per_gpu or site.cpus_per_gpu) * max(spec.gpus_per_node, 1),
        "time_limit": slurm_time(spec.time_limit_seconds),
        "drain_margin": site.drain_margin_seconds,
        "python": spec.python or site.python,
        "nprocs_per_node": spec.nprocs_per_node,
        "entrypoint": spec.entrypoint,
        "args": spec.args,
        "env": spec.env,
        "nccl_env": site.nccl_env,
        "tracking": spec.tracking,
        "secrets": spec.secrets,
        "secrets_file": str(Path(site.secrets_file).expanduser()),
        "checkpoint_dir": spec.checkpoint.dir or str(run_dir / "checkpoints"),
        "checkpoint_interval": spec.checkpoint.interval_steps,
        "checkpoint_keep": spec.checkpoint.keep_last,
    }


def submit(spec_path: Path, site: SiteConfig, client: SlurmClient, *, dry_run: bool = False,
           extra_sbatch_args: Sequence[str] = ()) -> SubmitResult:
    spec = load_run_spec(spec_path)
    workdir = resolve_workdir(spec, spec_path)
    findings = run_preflight(spec, site, client.nodes(), workdir)
    raise_on_errors(findings)
    cost = estimate(spec, site)
    registry = RunRegistry(site.runs_root_path)

    if dry_run:
        run_id = new_run_id(spec.name)
        run_dir = registry.root / run_id
        script = render(TEMPLATE, sbatch_context(spec, site, run_id, run_dir, workdir), _templates_dir(site))
        return SubmitResult(run_id, str(run_dir), script, cost, dry_run=True, findings=findings)

    run = registry.create(spec)
    try:
        script = render(TEMPLATE, sbatch_context(spec, site, run.run_id, run.path, workdir), _templates_dir(site))
        _freeze(run, spec, spec_path, workdir, site)
        script_path = run.path / "job.sbatch"
        write_atomic(script_path, script, mode=0o755)
        job_id = client.submit(script_path, extra_sbatch_args)
    except SlurmctlError:
        shutil.rmtree(run.path, ignore_errors=True)  # nothing ran; the user's run.yaml is untouched
        raise
    run.record("submitted", job_id=job_id, sbatch_args=list(extra_sbatch_args))
    return SubmitResult(run.run_id, str(run.path), script, cost, job_id=job_id, findings=findings)


def _templates_dir(site: SiteConfig) -> Path | None:
    return Path(site.sbatch_templates_dir).expanduser() if site.sbatch_templates_dir else None


def _freeze(run: Run, spec: RunSpec, spec_path: Path, workdir: Path, site: SiteConfig) -> None:
    """run.yaml is the exact spec that ran (workdir made absolute); run.json is metadata."""
    frozen = spec.model_copy(update={"workdir": str(workdir)})
    write_atomic(run.path / "run.yaml", yaml.safe_dump(frozen.model_dump(mode="json"), sort_keys=False))
    meta = {"run_id": run.run_id, "name": spec.name, "created": time.time(), "user": getpass.getuser(),
            "source_spec": str(spec_path.resolve()), "cluster": site.cluster}
    write_atomic(run.path / "run.json", json.dumps(meta, indent=2))
