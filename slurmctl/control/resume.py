"""resume: a new job for an ended run, continuing from its newest valid checkpoint (same run id, so
the tracked W&B/MLflow run continues). fork: a new run (new id) that starts from a chosen
checkpoint of another run; the source run is never modified.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from slurmctl.config.models import RunSpec, SiteConfig, load_run_spec
from slurmctl.errors import CostNotConfirmed, ResumeError, SlurmctlError, SpecError
from slurmctl.fsutil import write_atomic
from slurmctl.rundir import RUN_YAML, Run, RunRegistry
from slurmctl.runtime.checkpoint import COMPLETE_MARKER, Checkpoint, CheckpointManager
from slurmctl.slurm.client import SlurmClient
from slurmctl.submit.cost import estimate
from slurmctl.submit.submission import submit

ConfirmFn = Callable[[float], bool]  # asked with the worst case in dollars when it is above the site threshold


@dataclass
class ResumeResult:
    run_id: str
    run_dir: str
    job_id: int
    from_step: int
    source_run_id: str

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def checkpoints_of(run: Run) -> CheckpointManager:
    """The run's checkpoints, where run.json says they are (slurmctl.rundir's one rule)."""
    return CheckpointManager(run.checkpoint_dir)


def _ensure_ended(run: Run, client: SlurmClient, verb: str) -> None:
    job_id = run.latest_job_id()
    job = client.jobs([job_id]).get(job_id) if job_id is not None else None
    if job is not None and job.active:
        raise ResumeError(f"run {run.run_id} is still {job.state.lower()} (job {job_id}); it cannot be {verb} now.",
                          f"Wait for it to end, or stop it with `slurmctl cancel {run.run_id}` first.")


def confirm_cost(max_usd: float, site: SiteConfig | None, yes: bool, confirm: ConfirmFn | None) -> None:
    """As submit and adopt: a new job whose worst case is above the site's threshold needs --yes or a yes
    at the prompt."""
    threshold = site.cost_confirm_threshold if site is not None else None
    if threshold is not None and max_usd > threshold and not yes and not (confirm and confirm(max_usd)):
        raise CostNotConfirmed(f"worst case ${max_usd:,.2f} is above this site's confirmation threshold "
                               f"${threshold:,.2f}; nothing was resumed.",
                               "Confirm at the prompt, or pass --yes (scripts).")


def resume_run(run: Run, client: SlurmClient, site: SiteConfig | None = None, *, yes: bool = False,
               confirm: ConfirmFn | None = None) -> ResumeResult:
    """`site`: the worst case of the new job is confirmed as submit confirms it (none: not asked)."""
    _ensure_ended(run, client, "resumed")
    ck = checkpoints_of(run).latest()
    if ck is None:
        raise ResumeError(f"run {run.run_id} has no valid checkpoint to resume from.",
                          "Submit its run.yaml again to start from step 0.")
    if site is not None:  # the run's own spec, on the partition it was placed on
        confirm_cost(estimate(load_run_spec(run.spec_path), site, run.meta.get("partition")).max_usd, site, yes,
                     confirm)
    run.use_umask()
    job_id = client.submit(run.script_path)
    run.record("submitted", job_id=job_id, resumed_from_step=ck.step, sbatch_args=[])
    return ResumeResult(run.run_id, str(run.path), job_id, ck.step, run.run_id)


def pick_checkpoint(run: Run, step: int | None) -> Checkpoint:
    mgr = checkpoints_of(run)
    ck = mgr.latest() if step is None else mgr.get(step)
    if ck is None:
        steps = [c.step for c in mgr.valid()]
        which = "no valid checkpoint" if step is None else f"no valid checkpoint at step {step}"
        raise ResumeError(f"run {run.run_id} has {which}.",
                          f"Valid steps: {', '.join(map(str, steps))}." if steps else "It never saved one.")
    return ck


def fork_run(source: Run, new_name: str, registry: RunRegistry, site: SiteConfig, client: SlurmClient,
             from_step: int | None = None) -> ResumeResult:
    ck = pick_checkpoint(source, from_step)
    data = source.spec().model_dump(mode="json")
    data["name"] = new_name
    data["checkpoint"] = {**data.get("checkpoint", {}), "dir": None}  # the fork writes into its own run dir
    try:
        RunSpec.model_validate(data)
    except ValueError as exc:
        raise SpecError(f"'{new_name}' is not a valid run name: {exc}",
                        "Use lower-case letters, digits, '.', '_' or '-'.") from None
    with tempfile.TemporaryDirectory(prefix="slurmctl-fork-") as tmp:
        spec_path = Path(tmp) / RUN_YAML
        spec_path.write_text(yaml.safe_dump(data, sort_keys=False))
        # Held until the checkpoint is in place, so the first attempt already resumes from it.
        submitted = submit(spec_path, site, client, extra_sbatch_args=["--hold"])
    new_run = Run(submitted.run_id, Path(submitted.run_dir))
    try:
        checkpoints_of(new_run).save(ck.step, lambda d: _link_tree(ck.path, d))
        client.release(submitted.job_id)
    except (OSError, SlurmctlError):
        client.cancel(submitted.job_id)
        raise
    new_run.record("forked", source_run=source.run_id, source_step=ck.step, source_path=str(ck.path))
    meta = {**new_run.meta, "parent_run": source.run_id, "parent_step": ck.step}  # lineage for cost reports
    write_atomic(new_run.meta_path, json.dumps(meta, indent=2))
    return ResumeResult(new_run.run_id, str(new_run.path), submitted.job_id, ck.step, source.run_id)


def _link_tree(src: Path, dest: Path) -> None:
    """Hard links (instant, no extra space; checkpoints are never modified in place), else copies."""
    for entry in src.iterdir():
        if entry.name == COMPLETE_MARKER:
            continue  # save() writes a fresh marker last
        target = dest / entry.name
        if entry.is_dir():
            shutil.copytree(entry, target, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, target)


def _link_or_copy(src, dest) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)
