"""The orphan sweeper (`slurmctl cleanup`, also from cron): what holds GPUs or queue slots without value.

* held jobs (user/admin hold, requeue hold) of slurmctl runs that ended with no valid checkpoint,
  or whose run directory is gone: nothing can resume from them;
* dev-partition jobs running longer than ``dev_allocation_ttl`` (site config);
* stale drain requests: ``drain.request`` in a run that has no live job (the next attempt would
  otherwise start draining at once).

Dry run by default (a listing for admins); ``apply=True`` releases them (scancel / unlink).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from slurmctl.runtime.checkpoint import CheckpointManager
from slurmctl.errors import SlurmctlError
from slurmctl.rundir import Run, RunRegistry
from slurmctl.slurm.client import Job, SlurmClient
from slurmctl.submit.spec import SiteConfig, parse_duration


@dataclass
class Orphan:
    kind: str            # held-job | dev-ttl | stale-drain-request
    reason: str
    run_id: str | None = None
    job_id: int | None = None
    path: str | None = None
    released: bool = False
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _checkpoint_dir(run: Run) -> Path:
    try:
        configured = run.spec().checkpoint.dir
    except Exception:  # noqa: BLE001 - a broken run.yaml must not stop the sweep
        configured = None
    return Path(configured) if configured else run.path / "checkpoints"


def _run_of(job: Job, registry: RunRegistry) -> Run | None:
    if not job.run_id:
        return None
    path = registry.root / job.run_id
    return Run(job.run_id, path) if (path / "run.json").exists() else None


def find_orphans(site: SiteConfig, client: SlurmClient, registry: RunRegistry,
                 only_run: str | None = None) -> list[Orphan]:
    queue = client.queue(mine=False)  # the one Slurm query of a sweep
    held_ids = {j.job_id for j in queue if j.held}
    live_unheld_runs = {j.run_id for j in queue if j.run_id and j.job_id not in held_ids}
    found: list[Orphan] = []

    for job in queue:
        if only_run and job.run_id != only_run:
            continue
        if job.job_id in held_ids and job.run_id:
            run = _run_of(job, registry)
            if run is None:
                found.append(Orphan("held-job", f"held job of run {job.run_id}, whose run directory is gone",
                                    job.run_id, job.job_id))
                continue
            if job.run_id in live_unheld_runs:
                continue  # the run is still going; this hold is part of its plan
            ended = [e for e in run.events() if e.get("event") == "end"]
            if not ended:
                continue  # never ran an attempt: a deliberate `submit -- --hold`, not ours to judge
            if CheckpointManager(_checkpoint_dir(run)).latest() is None:
                found.append(Orphan("held-job", f"held job of run {job.run_id}, which ended (exit "
                                    f"{ended[-1].get('exit_code')}) with no valid checkpoint to resume from",
                                    job.run_id, job.job_id))
        elif job.state == "RUNNING" and _is_dev(site, job):
            ttl = parse_duration(site.dev_allocation_ttl)
            if job.elapsed_seconds is not None and job.elapsed_seconds > ttl:
                found.append(Orphan("dev-ttl", f"dev allocation in {job.partition} running "
                                    f"{job.elapsed_seconds // 60} min, past the {site.dev_allocation_ttl} TTL",
                                    job.run_id, job.job_id))

    runs = [registry.get(only_run)] if only_run else registry.list()
    live_runs = {j.run_id for j in queue if j.run_id}
    for run in runs:
        request = run.path / "drain.request"
        if request.exists() and run.run_id not in live_runs:
            found.append(Orphan("stale-drain-request", "drain.request left in a run with no live job",
                                run.run_id, path=str(request)))
    return found


def _is_dev(site: SiteConfig, job: Job) -> bool:
    return any(site.partitions.get(p) is not None and site.partitions[p].capacity == "dev"
               for p in job.partition.split(","))


def release(orphans: list[Orphan], client: SlurmClient) -> list[Orphan]:
    """Cancel every orphaned job in one batched scancel, then delete stale files one by one."""
    jobs = [o for o in orphans if o.job_id is not None]
    if jobs:
        try:
            client.cancel_many(o.job_id for o in jobs)
            for orphan in jobs:
                orphan.released = True
        except SlurmctlError as exc:
            for orphan in jobs:
                orphan.error = exc.message
    for orphan in orphans:
        if orphan.job_id is None and orphan.path:
            try:
                Path(orphan.path).unlink(missing_ok=True)
                orphan.released = True
            except OSError as exc:
                orphan.error = str(exc)
    return orphans
