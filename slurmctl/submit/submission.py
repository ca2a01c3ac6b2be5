"""submit: preflight checklist -> placement (earliest start) -> cost -> run directory -> sbatch.

`--smoke` runs the same code on the smoke partition for one step and waits for the verdict.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from slurmctl.config.models import RunSpec, SiteConfig, load_run_spec
from slurmctl.durations import parse_duration, slurm_time
from slurmctl.errors import CostNotConfirmed, PreflightFailed, SlurmctlError, SpecError
from slurmctl.fsutil import write_atomic
from slurmctl.rundir import DATA_PLAN, Run, RunRegistry, current_user, job_log_path, new_run_id, resolve_checkpoint_dir
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.facts import ClusterFacts
from slurmctl.submit.cost import CostEstimate, estimate
from slurmctl.submit.datasets import data_context, data_plan
from slurmctl.submit.images import PinnedImage, container_context, record_image, resolve_run_image
from slurmctl.submit.placement import Placement, place
from slurmctl.submit.preflight import ClusterView, PreflightReport, run_preflight, secret_leaks
from slurmctl.submit.preflight.cluster import associations_cache
from slurmctl.submit.preflight.findings import CheckResult, error
from slurmctl.submit.render import render, template_file
from slurmctl.submit.smoke import SmokeVerdict, code_config_hash, smoke_passed, smoke_spec, wait_and_judge
from slurmctl.submit.tracking import forget_tracked_run, tracked_run

TEMPLATE = "torchrun.sbatch.j2"
SMOKE_WAIT_MARGIN_SECONDS = 120  # queueing + Slurm's kill delay beyond the smoke time limit


@dataclass
class SubmitOptions:
    dry_run: bool = False
    extra_sbatch_args: Sequence[str] = ()
    force: bool = False
    allow_mutable_image: bool = False
    smoke: bool = False
    where: str | None = None
    yes: bool = False
    build: bool = False  # build + push the run's image, then pin its digest (images.py)
    confirm: Callable[[CostEstimate], bool] | None = None  # asked when the cost is above the site threshold


@dataclass
class SubmitResult:
    run_id: str
    run_dir: str
    script: str
    estimate: CostEstimate
    job_id: int | None = None
    dry_run: bool = False
    report: PreflightReport = field(default_factory=PreflightReport)
    placement: Placement | None = None
    forced: list[str] = field(default_factory=list)
    code_hash: str = ""
    smoke: SmokeVerdict | None = None
    image: PinnedImage | None = None

    @property
    def findings(self):
        return self.report.findings

    def to_dict(self) -> dict:
        return {"run_id": self.run_id, "run_dir": self.run_dir, "job_id": self.job_id, "dry_run": self.dry_run,
                "estimate": self.estimate.to_dict(), "findings": [f.to_dict() for f in self.findings],
                "checks": self.report.to_dict()["checks"],
                "placement": self.placement.to_dict() if self.placement else None, "forced": self.forced,
                "code_hash": self.code_hash, "smoke": self.smoke.to_dict() if self.smoke else None,
                "image": self.image.to_dict() if self.image else None}


def resolve_workdir(spec: RunSpec, spec_path: Path) -> Path:
    base = spec_path.resolve().parent
    return (base / spec.workdir).resolve() if spec.workdir else base


def sbatch_context(spec: RunSpec, site: SiteConfig, run_id: str, run_dir: Path, workdir: Path,
                   partition: str | None = None, image: PinnedImage | None = None, tracked: dict | None = None) -> dict:
    """`partition`: the placement's choice; otherwise every acceptable partition (Slurm picks).
    `tracked`: the run's tracked run (submit/tracking.py), once created."""
    partitions = [partition] if partition else spec.partitions
    gpu_type = spec.gpu_type or site.partitions[partitions[0]].gpu_type
    checkpoint_dir = str(resolve_checkpoint_dir(spec.checkpoint.dir, workdir, run_dir))
    return {
        "run_id": run_id,
        "run_dir": str(run_dir),
        "job_log": str(job_log_path(run_dir, "%j")),  # Slurm's --output pattern: every attempt of a job
        "workdir": str(workdir),
        "partitions": partitions,
        "account": site.account,
        # one --qos per job: set when the partitions it may go to name one (the same) QOS
        "qos": _one({site.partitions[p].qos if p in site.partitions else None for p in partitions}),
        "nodes": spec.nodes,
        "gpus_per_node": spec.gpus_per_node,
        "gpu_type": gpu_type,
        # a CPU-only run: every process its cores (one task per node runs torchrun and its processes)
        "cpus_per_task": ((spec.cpus_per_gpu or site.cpus_per_gpu) * spec.gpus_per_node if spec.gpus_per_node
                          else spec.nprocs_per_node * (spec.cpus_per_proc or 1)),
        "mem": spec.mem,
        "time_limit": slurm_time(spec.time_limit_seconds),
        "drain_margin": site.drain_margin_seconds,
        "python": spec.python or site.python,
        "nprocs_per_node": spec.nprocs_per_node,
        "entrypoint": spec.entrypoint,
        "args": spec.args,
        "env": spec.env,
        "nccl_env": site.nccl_env,
        "tracking": spec.tracking,
        "notify": effective_notify(spec) is not None,
        "tracking_uri": site.tracking.mlflow_uri or "",
        "mlflow_server_user": site.tracking.mlflow_server_user or "",
        "wandb_mode": site.tracking.wandb_mode or "",
        "tracked_run_id": (tracked or {}).get("run_id", "") if (tracked or {}).get("backend") == "mlflow" else "",
        # the job exports the MLflow login from this file at start (never written into the script)
        "mlflow_credentials_file": _existing_file(site.tracking.mlflow_credentials),
        "secrets": spec.secrets,
        "secrets_file": str(Path(site.secrets_file).expanduser()),
        "checkpoint_dir": checkpoint_dir,
        "checkpoint_interval": spec.checkpoint.interval_steps,
        "checkpoint_keep": spec.checkpoint.keep_last,
        # Files the job writes (logs, checkpoints, heartbeat): owner only, or the team group.
        "umask": "027" if site.share_runs_with_group else "077",
        **container_context(site, spec, image, run_dir, checkpoint_dir),
        **data_context(spec, site, current_user(), run_id),
    }


def _existing_file(path: str | None) -> str:
    return str(Path(path).expanduser()) if path and Path(path).expanduser().exists() else ""


def _one(values: set[str | None]) -> str | None:
    return next(iter(values)) if len(values) == 1 else None


def submit(spec_path: Path, site: SiteConfig, client: SlurmClient, options: SubmitOptions | None = None,
           **legacy) -> SubmitResult:
    opts = options or SubmitOptions(**legacy)
    spec = load_run_spec(spec_path)
    workdir = resolve_workdir(spec, spec_path)
    code_hash = code_config_hash(spec, workdir)  # of what the researcher wrote, so smoke and full match
    if opts.smoke:  # a few minutes on the smoke partition: its verdict is printed, nobody is messaged
        spec = smoke_spec(spec, site, code_hash).model_copy(update={"notify": False})
    elif opts.where:
        spec = spec.with_partition(opts.where, site)

    user = current_user()
    cache = associations_cache(site.cluster)
    facts = ClusterFacts(client, site.cluster)  # nodes and partitions from the per-user cache while young
    view = ClusterView.query(facts, user, associations=bool(site.account), cache=cache)
    report = run_preflight(spec, site, view, workdir, allow_mutable_image=opts.allow_mutable_image, smoke=opts.smoke)
    if facts.from_cache and any(r.name in _SHAPE_CHECKS and r.findings for r in report.checks):
        # the cached nodes or partitions may be out of date: ask sinfo, and check everything again
        facts.forget()
        view = ClusterView.query(facts, user, associations=bool(site.account), cache=cache)
        report = run_preflight(spec, site, view, workdir, allow_mutable_image=opts.allow_mutable_image,
                               smoke=opts.smoke)
    if view.associations_cached and any(r.name == "account" and r.findings for r in report.checks):
        # the cached accounts may be out of date: ask sacctmgr, and check everything again with them
        report = run_preflight(spec, site, view.with_fresh_associations(client, user, cache), workdir,
                               allow_mutable_image=opts.allow_mutable_image, smoke=opts.smoke)
    registry = RunRegistry(site.runs_root_path)
    if site.require_smoke and not opts.smoke:
        report.add(_smoke_gate(site, code_hash, spec_path, client))
    _stop_unless_forced(report, opts)
    refuse_mount_without_image(spec, opts.build)
    # Build/push if asked, then pin the image to the registry's digest (preflight enforced the tag rule).
    image = resolve_run_image(spec, site, workdir, build=opts.build, allow_mutable=True)

    provisional_id = new_run_id(spec.name)

    def script_for(partition: str, run_id: str = provisional_id, run_dir: Path | None = None) -> str:
        context = sbatch_context(spec, site, run_id, run_dir or registry.path_of(run_id), workdir, partition,
                                 image)
        return render(template_file(spec.template), context, _templates_dir(site))

    placement = place(spec, site, client, script_for)
    cost = estimate(spec, site, placement.chosen)
    leaks = secret_leaks(script_for(placement.chosen), spec, site)
    if leaks:
        report.add(CheckResult("secret-in-script", "no secret value in the job script", leaks))
        _stop_unless_forced(report, opts)
    forced = [f.code for f in report.errors]

    if opts.dry_run:
        return SubmitResult(provisional_id, str(registry.path_of(provisional_id)), script_for(placement.chosen), cost,
                            dry_run=True, report=report, placement=placement, forced=forced, code_hash=code_hash,
                            image=image)
    if cost.needs_confirmation(site) and not opts.yes and not (opts.confirm and opts.confirm(cost)):
        raise CostNotConfirmed(
            f"worst case ${cost.max_usd:,.2f} is above this site's confirmation threshold "
            f"${site.cost_confirm_threshold:,.2f}; nothing was submitted.",
            "Confirm at the prompt, or pass --yes (scripts), or shorten `time_limit` / use fewer GPUs.")

    run = registry.create(spec, share_with_group=site.share_runs_with_group)
    tracked = None
    try:
        tracked = tracked_run(spec, site, run.run_id, user=user)
        script = render(template_file(spec.template),
                        sbatch_context(spec, site, run.run_id, run.path, workdir, placement.chosen, image, tracked),
                        _templates_dir(site))
        _freeze(run, spec, spec_path, workdir, site, report=report, placement=placement, forced=forced,
                code_hash=code_hash, smoke=opts.smoke, extra_meta=run_meta_extras(spec, site, tracked))
        record_image(run.path, image)
        script_path = run.script_path
        write_atomic(script_path, script)
        job_id = client.submit(script_path, opts.extra_sbatch_args)
    except SlurmctlError:
        shutil.rmtree(run.path, ignore_errors=True)  # nothing ran; the user's run.yaml is untouched
        forget_tracked_run(tracked, site)
        raise
    run.record("submitted", job_id=job_id, sbatch_args=list(opts.extra_sbatch_args), partition=placement.chosen,
               **({"forced": forced} if forced else {}))
    start_pending_watcher(run, job_id, run.meta.get("notify"))
    result = SubmitResult(run.run_id, str(run.path), script, cost, job_id=job_id, report=report,
                          placement=placement, forced=forced, code_hash=code_hash, image=image)
    if opts.smoke:
        timeout = spec.time_limit_seconds + SMOKE_WAIT_MARGIN_SECONDS
        result.smoke = wait_and_judge(run, client, job_id, site, code_hash, timeout)
    return result


# The preflight checks that read the cluster's nodes and partitions (sinfo): one of them failing on
# cached facts asks sinfo again before the submit is refused.
_SHAPE_CHECKS = frozenset({"cluster", "time-limit", "memory"})


def refuse_mount_without_image(spec: RunSpec, build: bool) -> None:
    """A dataset's `mount:` is where it appears inside the run's container; a run without one (no `image:`,
    no build) has nowhere to mount it, and reads it at $SLURMCTL_DATA_<NAME> instead."""
    if spec.image or spec.build is not None or build:
        return
    mounted = [d for d in spec.datasets if d.mount]
    if mounted:
        d = mounted[0]
        raise SpecError(f"data entry {d.name} ({d.src}) has `mount: {d.mount}`, but the run has no container "
                        "(`image:` or `build:`), so there is nothing to mount it in.",
                        f"Remove `mount:` and read the dataset at ${d.env_var} (a local directory on every node), or "
                        "run in a container with `image:`/`build:` in run.yaml.")


def _stop_unless_forced(report: PreflightReport, opts: SubmitOptions) -> None:
    if report.must_stop(opts.force):
        raise PreflightFailed(report)


def _smoke_gate(site: SiteConfig, code_hash: str, spec_path: Path, client: SlurmClient) -> CheckResult:
    result = CheckResult("smoke-gate", "a smoke test of this code+config passed (root's verdict, Slurm accounting)")
    record = smoke_passed(site, code_hash, client)
    if record:
        result.note = f"{record['run_id']}, job {record['job_id']} (code+config {code_hash})"
    else:
        result.findings.append(error(
            "smoke-required", f"this site requires a passed smoke test of the same code+config ({code_hash}) first.",
            f"Run `slurmctl submit {spec_path} --smoke` (1 GPU, one step, a few minutes)."))
    return result


def _templates_dir(site: SiteConfig) -> Path | None:
    return Path(site.sbatch_templates_dir).expanduser() if site.sbatch_templates_dir else None


def effective_notify(spec: RunSpec) -> dict | None:
    """run.yaml's `notify:`, else the user's default (~/.config/slurmctl/config.yaml `notify:`); None when
    it is off (`notify: false`) or names no channel. Frozen into run.json: the job reads it there."""
    if spec.notify is False:
        return None
    chosen = spec.notify if not isinstance(spec.notify, bool) else None
    if chosen is None:
        from slurmctl.config.user import load_user_config  # why: only a run without its own notify: reads it

        chosen = load_user_config().notify
    if chosen is None or not chosen.channels:
        return None
    return chosen.model_dump(mode="json")


def run_meta_extras(spec: RunSpec, site: SiteConfig, tracked: dict | None) -> dict:
    """run.json's record of the tracked run and of where messages go (channel names only: the URLs stay
    in the secrets file, read at send time)."""
    extras = {}
    if tracked:
        extras["tracking"] = tracked
    notify = effective_notify(spec)
    if notify:
        # python: the job's own, for a sender the epilog starts when the batch script was killed (hooks/run_records.py)
        extras["notify"] = {**notify, "secrets_file": str(Path(site.secrets_file).expanduser()),
                            "python": spec.python or site.python}
    return extras


def start_pending_watcher(run: Run, job_id: int, notify: dict | None) -> None:
    """One look at the job `pending_after` from now, as the user, detached from this command: a job still
    pending then sends one `pending` message (slurmctl/notify/__main__.py)."""
    if not notify or "pending" not in notify.get("events", ()):
        return
    import subprocess
    import sys

    after = parse_duration(notify.get("pending_after", "30m"))
    subprocess.Popen([sys.executable, "-m", "slurmctl.notify", "pending", "--run-dir", str(run.path),
                      "--job-id", str(job_id), "--after", str(after)], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _freeze(run: Run, spec: RunSpec, spec_path: Path, workdir: Path, site: SiteConfig, *, report: PreflightReport,
            placement: Placement, forced: list[str], code_hash: str, smoke: bool,
            extra_meta: dict | None = None) -> None:
    """run.yaml is the exact spec that ran (workdir made absolute); run.json is metadata (`extra_meta`: a
    sweep element's sweep id, array index and values)."""
    frozen = spec.model_copy(update={"workdir": str(workdir)})
    write_atomic(run.spec_path, yaml.safe_dump(frozen.model_dump(mode="json"), sort_keys=False))
    meta = {"run_id": run.run_id, "name": spec.name, "created": time.time(), "user": current_user(),
            "checkpoint_dir": str(resolve_checkpoint_dir(spec.checkpoint.dir, workdir, run.path)),
            "source_spec": str(spec_path.resolve()), "cluster": site.cluster, "partition": placement.chosen,
            "code_hash": code_hash, "smoke": smoke, "forced": forced, **(extra_meta or {})}
    write_atomic(run.meta_path, json.dumps(meta, indent=2))
    plan = data_plan(spec, site, current_user(), run.run_id)
    if plan is not None:
        write_atomic(run.path / DATA_PLAN, json.dumps(plan, indent=2))
    write_atomic(run.preflight_path, json.dumps({**report.to_dict(), "forced": forced,
                                                          "placement": placement.to_dict()}, indent=2))
