"""`slurmctl sweep`: a grid of args/env values submitted as ONE Slurm array of ordinary runs.

Each combination is an element: a run of its own (run id ``<name>-<index>-<day>-<hex>``, run dir,
checkpoints, tracked run, job script), grouped under the sweep id ``<name>-<day>-<hex>``, whose
directory (``slurmctl/rundir/sweep.py``) holds the array's job script. Preflight runs once for the
sweep (every element runs the same code with the same resources; only values differ); then every
element's job script is rendered and checked (control characters, secret values) before anything
is created. The array is ``--array=0-<n-1>[%max_parallel]``; task i `exec`s element i's own
job.sbatch, so drain, requeue and restarts work per element exactly as for a run.

Slurm 22.05, tested on the local cluster: each task gets its own job id when it starts (SLURM_JOB_ID,
``%j`` in --output, squeue ``%A``, sacct JobIDRaw), ``%a`` in --output is its index, `scontrol
update JobId=<task id> Requeue=1` and `scontrol requeue <task id>` act on that one task (it waits
in PENDING/BeginTime like a requeued job; the freed ``%N`` slot starts the next task), and
`scancel <array id>` ends every task.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from slurmctl.config.models import (
    NAME_RE,
    RunSpec,
    SiteConfig,
    SweepSpec,
    control_character,
    format_validation_error,
    load_run_spec,
)
from slurmctl.errors import CostNotConfirmed, SlurmctlError, SpecError
from slurmctl.fsutil import write_atomic
from slurmctl.rundir import Run, RunRegistry, current_user, new_run_id, sweep_element_id
from slurmctl.rundir.sweep import MAX_ELEMENTS, create_sweep_dir
from slurmctl.slurm.client import SlurmClient
from slurmctl.submit.cost import CostEstimate, estimate
from slurmctl.submit.images import PinnedImage, record_image, resolve_run_image
from slurmctl.submit.placement import Placement, place
from slurmctl.submit.preflight import ClusterView, PreflightReport, run_preflight, secret_leaks
from slurmctl.submit.preflight.cluster import associations_cache
from slurmctl.submit.preflight.findings import CheckResult
from slurmctl.submit.render import render, template_file
from slurmctl.submit.smoke import code_config_hash
from slurmctl.submit.submission import (
    SubmitOptions,
    _freeze,
    _smoke_gate,
    _stop_unless_forced,
    _templates_dir,
    resolve_workdir,
    run_meta_extras,
    sbatch_context,
    start_pending_watcher,
)
from slurmctl.submit.tracking import create_tracked_run, forget_tracked_run, tracked_run

# A grid key is an option name (--lr, --warmup-steps) or an environment variable name.
_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_ID_ATTEMPTS = 5  # a new sweep id when an element's run id is already taken (1 in 65,536 per day and name)


@dataclass
class SweepPlan:
    """What `slurmctl sweep` will submit: the grid, the elements' values, and the array's shape."""

    grid: dict[str, list[str]]
    combinations: list[dict[str, str]]
    max_parallel: int | None
    metric: str
    goal: str

    @property
    def array(self) -> str:
        last = len(self.combinations) - 1
        return f"0-{last}" + (f"%{self.max_parallel}" if self.max_parallel else "")


@dataclass
class SweepResult:
    sweep_id: str
    sweep_dir: str
    plan: SweepPlan
    run_ids: list[str]
    estimate: CostEstimate
    script: str
    job_id: int | None = None
    dry_run: bool = False
    report: PreflightReport = field(default_factory=PreflightReport)
    placement: Placement | None = None
    forced: list[str] = field(default_factory=list)
    image: PinnedImage | None = None

    @property
    def total_max_usd(self) -> float:
        return round(self.estimate.max_usd * len(self.run_ids), 2)

    def to_dict(self) -> dict:
        return {"sweep_id": self.sweep_id, "sweep_dir": self.sweep_dir, "job_id": self.job_id,
                "dry_run": self.dry_run, "array": self.plan.array, "grid": self.plan.grid,
                "elements": [{"index": i, "run_id": r, "values": v}
                             for i, (r, v) in enumerate(zip(self.run_ids, self.plan.combinations, strict=True))],
                "estimate_per_element": self.estimate.to_dict(), "max_usd_total": self.total_max_usd,
                "findings": [f.to_dict() for f in self.report.findings],
                "placement": self.placement.to_dict() if self.placement else None, "forced": self.forced}


# --- the grid ---------------------------------------------------------------------------------

def parse_grid_options(options: Sequence[str]) -> dict[str, list[str]]:
    """`--grid lr=1e-4,3e-4 --grid seed=1,2,3` -> {"lr": [...], "seed": [...]} (checked)."""
    grid: dict[str, list] = {}
    for option in options:
        key, sep, values = option.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--grid {option!r} is not KEY=VALUE,VALUE,...",
                            "Write one key per --grid, e.g. --grid lr=1e-4,3e-4 --grid seed=1,2,3.")
        if key in grid:
            raise SpecError(f"--grid names `{key}` twice.",
                            f"Give each key once with all its values: --grid {key}=A,B,C.")
        grid[key] = values.split(",")
    return normalise_grid(grid, "--grid")


def _value_text(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return value if isinstance(value, str) else str(value)


def normalise_grid(raw: dict, where: str) -> dict[str, list[str]]:
    """Every key a plain name, every value a non-empty one-line string, no value twice in a key."""
    if not raw:
        raise SpecError(f"{where} is empty: a sweep needs at least one key with values.",
                        "Pass --grid KEY=V1,V2 (or write sweep: grid: in run.yaml).")
    grid: dict[str, list[str]] = {}
    for key, values in raw.items():
        if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
            raise SpecError(f"{where} key {key!r} is not an option or environment variable name.",
                            "Use letters, digits, '_', '-' or '.', starting with a letter or '_' (e.g. lr, seed).")
        if not isinstance(values, (list, tuple)) or not values:
            raise SpecError(f"{where} `{key}` has no values.", f"Give at least one: {key}=A,B.")
        texts: list[str] = []
        for value in values:
            text = _value_text(value).strip()
            if not text:
                given = [v.strip() for v in map(_value_text, values) if v.strip()]
                raise SpecError(f"{where} `{key}` has an empty value (between commas, or at an end).",
                                f"Remove the extra comma: {key}={','.join(given)}." if given
                                else f"Give at least one value: {key}=A,B.")
            bad = control_character(text)
            if bad is not None:
                raise SpecError(f"{where} `{key}` value {text!r} contains the control character {bad!r}; it would "
                                "start a new line of the job script.", "Write every value on one line.")
            if text in texts:
                raise SpecError(f"{where} `{key}` lists {text!r} twice, which would run the same element twice.",
                                "List each value once.")
            texts.append(text)
        grid[key] = texts
    return grid


def _arg_slot(args: list[str], key: str) -> tuple[int, str] | None:
    """Where `key`'s value sits in args: ("--key", VALUE) -> (index of VALUE, ""), "--key=V" -> (index, "--key=")."""
    flag = f"--{key}"
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return i + 1, ""
        if arg.startswith(flag + "="):
            return i, flag + "="
    return None


def plan_sweep(spec: RunSpec, grid_options: Sequence[str] = (), max_parallel: int | None = None,
               metric: str | None = None) -> SweepPlan:
    """The sweep from --grid (which replaces run.yaml's `sweep.grid` when given) and run.yaml's `sweep:`."""
    block = spec.sweep or SweepSpec(grid={})
    grid = parse_grid_options(grid_options) if grid_options else normalise_grid(block.grid, "run.yaml sweep.grid")
    for key in grid:
        if _arg_slot(spec.args, key) is None and key not in spec.env:
            raise SpecError(
                f"grid key `{key}` is neither an option in `args` (--{key} VALUE or --{key}=VALUE) nor a variable "
                "in `env` of run.yaml, so no element would see its value.",
                f"Add a default to run.yaml, e.g. args: [..., \"--{key}\", \"<default>\"] or env: {{{key}: "
                "\"<default>\"}; the sweep replaces it per element.")
    sizes = [len(v) for v in grid.values()]
    total = 1
    for size in sizes:
        total *= size
    if total > MAX_ELEMENTS:
        raise SpecError(f"the grid has {total:,} combinations ({' x '.join(map(str, sizes))}), more than "
                        f"{MAX_ELEMENTS}, the most one sweep (one Slurm array) may have.",
                        "Drop values, or split the grid into several sweeps.")
    longest = f"{spec.name}-{total - 1}"
    if not NAME_RE.fullmatch(longest):
        raise SpecError(f"`name` {spec.name!r} is too long for a sweep of {total}: element runs are named "
                        f"<name>-<index> (e.g. {longest}), at most 48 characters.",
                        f"Shorten `name` to at most {47 - len(str(total - 1))} characters.")
    parallel = max_parallel if max_parallel is not None else block.max_parallel
    if parallel is not None and parallel < 1:
        raise SpecError(f"--max-parallel is {parallel}; at least one element must be able to run.",
                        "Pass --max-parallel 1 or more (or leave it out: Slurm runs as many as fit).")
    metric = metric or block.metric
    if not re.fullmatch(r"[A-Za-z0-9_./-]{1,64}", metric):
        raise SpecError(f"metric {metric!r} is not a metrics.jsonl field name.",
                        "Use letters, digits, '_', '.', '/' or '-' (e.g. loss, val/acc).")
    combos = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    return SweepPlan(grid, combos, parallel, metric, block.goal)


def element_spec(base: RunSpec, values: dict[str, str], index: int, run_id: str) -> RunSpec:
    """Element `index`: the base spec with its values in args/env, named <name>-<index>, without `sweep:`.
    A configured checkpoint dir gets the element's run id appended (elements never share checkpoints)."""
    data = base.model_dump(mode="json")
    args, env = list(data["args"]), dict(data["env"])
    for key, value in values.items():
        slot = _arg_slot(args, key)
        if slot is not None:
            args[slot[0]] = slot[1] + value
        if key in env:
            env[key] = value
    data.update(args=args, env=env, name=f"{base.name}-{index}", sweep=None)
    if data["checkpoint"].get("dir"):
        data["checkpoint"]["dir"] = f"{data['checkpoint']['dir'].rstrip('/')}/{run_id}"
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"sweep element {index} ({_values_text(values)}): "
                        + format_validation_error(exc, "the element's run spec"),
                        "Fix that value in the grid.") from None


def _values_text(values: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items())


# --- submit -------------------------------------------------------------------------------------

def submit_sweep(spec_path: Path, site: SiteConfig, client: SlurmClient, grid_options: Sequence[str] = (),
                 max_parallel: int | None = None, metric: str | None = None,
                 options: SubmitOptions | None = None) -> SweepResult:
    opts = options or SubmitOptions()
    loaded = load_run_spec(spec_path)
    plan = plan_sweep(loaded, grid_options, max_parallel, metric)
    workdir = resolve_workdir(loaded, spec_path)
    code_hash = code_config_hash(loaded, workdir)  # as `submit --smoke run.yaml` computes it
    base = loaded.with_partition(opts.where, site) if opts.where else loaded
    base = base.model_copy(update={"sweep": None})
    registry = RunRegistry(site.runs_root_path)
    sweep_id = new_run_id(base.name)
    elements = _element_specs(base, plan, sweep_id)
    first = elements[0][1]
    # Preflight once: elements differ only in args/env values, which the checks read from the first.
    report = _preflight(first, site, client, workdir, opts, code_hash, spec_path, registry)
    image = resolve_run_image(base, site, workdir, build=opts.build, allow_mutable=True)
    scripts = _Scripts(site, registry, workdir, image, template_file(base.template), _templates_dir(site))
    placement = place(first, site, client, lambda partition: scripts.element(first, elements[0][0], partition))
    per_element = estimate(first, site, placement.chosen)
    # The per-element check: every element's own script renders (one-line values, quoting) and
    # carries no secret value.
    rendered = _render_elements(elements, plan, placement.chosen, scripts.element, site, report, opts)
    forced = [f.code for f in report.errors]
    run_ids = [rid for rid, _ in elements]
    if opts.dry_run:
        return SweepResult(sweep_id, str(registry.path_of(sweep_id)), plan, run_ids, per_element,
                           scripts.array(first, plan, placement.chosen, sweep_id, run_ids), dry_run=True,
                           report=report, placement=placement, forced=forced, image=image)
    _confirm_cost(per_element, len(elements), site, opts)

    created: list[Path] = []
    made_tracked: list[dict] = []
    try:
        sweep_dir = None
        for _ in range(_ID_ATTEMPTS):
            try:
                sweep_dir, runs = _create_dirs(registry, site, sweep_id, elements, created)
                break
            except FileExistsError:  # the id was taken meanwhile: a new one, its elements and scripts
                for path in created:
                    shutil.rmtree(path, ignore_errors=True)
                created.clear()
                sweep_id = new_run_id(base.name)
                elements = _element_specs(base, plan, sweep_id)
                rendered = [scripts.element(spec, rid, placement.chosen) for rid, spec in elements]
        if sweep_dir is None:
            raise SpecError(f"could not find a free sweep id for `{base.name}` in {_ID_ATTEMPTS} tries.",
                            "Try again, or rename the sweep.")
        run_ids = [rid for rid, _ in elements]
        # One tracked run per element, filed under a parent run named after the sweep.
        user = current_user()
        parent = create_tracked_run(base, site, sweep_id, sweep_id=sweep_id, user=user)
        if parent:
            made_tracked.append(parent)
        for index, (run, (rid, spec), script) in enumerate(zip(runs, elements, rendered, strict=True)):
            tracked = tracked_run(spec, site, rid, parent=parent, sweep_id=sweep_id, user=user)
            if tracked and tracked.get("backend") == "mlflow":
                made_tracked.append(tracked)
                script = scripts.element(spec, rid, placement.chosen, tracked)
            _freeze(run, spec, spec_path, workdir, site, report=report, placement=placement, forced=forced,
                    code_hash=code_hash, smoke=False,
                    extra_meta={"sweep_id": sweep_id, "array_index": index, "sweep_values": plan.combinations[index],
                                **run_meta_extras(spec, site, tracked)})
            record_image(run.path, image)
            write_atomic(run.script_path, script)
        script = scripts.array(first, plan, placement.chosen, sweep_id, run_ids)
        write_atomic(sweep_dir.script_path, script)
        meta = {"sweep_id": sweep_id, "name": base.name, "created": time.time(), "user": current_user(),
                "source_spec": str(spec_path.resolve()), "cluster": site.cluster, "partition": placement.chosen,
                "grid": plan.grid, "array": plan.array, "max_parallel": plan.max_parallel, "metric": plan.metric,
                "goal": plan.goal, "code_hash": code_hash, "forced": forced,
                **({"tracking": parent} if parent else {}),
                "elements": [{"index": i, "run_id": rid, "values": plan.combinations[i]}
                             for i, rid in enumerate(run_ids)]}
        write_atomic(sweep_dir.meta_path, json.dumps(meta, indent=2))
        write_atomic(sweep_dir.preflight_path, json.dumps({**report.to_dict(), "forced": forced,
                                                           "placement": placement.to_dict()}, indent=2))
        job_id = client.submit(sweep_dir.script_path, opts.extra_sbatch_args)
    except SlurmctlError:
        for path in created:  # nothing ran; the user's run.yaml is untouched
            shutil.rmtree(path, ignore_errors=True)
        for record in made_tracked:
            forget_tracked_run(record, site)
        raise
    meta["array_job_id"] = job_id
    write_atomic(sweep_dir.meta_path, json.dumps(meta, indent=2))
    for index, run in enumerate(runs):
        run.record("submitted", job_id=job_id, array_task_id=index, sweep_id=sweep_id, partition=placement.chosen,
                   sbatch_args=list(opts.extra_sbatch_args), **({"forced": forced} if forced else {}))
        if index == 0:  # one watcher for the array (not one process per element): its first task
            start_pending_watcher(run, job_id, run.meta.get("notify"))
    return SweepResult(sweep_id, str(sweep_dir.path), plan, run_ids, per_element, script, job_id=job_id,
                       report=report, placement=placement, forced=forced, image=image)


def _element_specs(base: RunSpec, plan: SweepPlan, sweep_id: str) -> list[tuple[str, RunSpec]]:
    """(run id, spec) of every element of sweep `sweep_id`, in array order."""
    ids = [sweep_element_id(sweep_id, i) for i in range(len(plan.combinations))]
    return [(rid, element_spec(base, values, i, rid))
            for i, (rid, values) in enumerate(zip(ids, plan.combinations, strict=True))]


def _preflight(first: RunSpec, site: SiteConfig, client: SlurmClient, workdir: Path, opts: SubmitOptions,
               code_hash: str, spec_path: Path, registry: RunRegistry) -> PreflightReport:
    """The sweep's one preflight (on its first element), the smoke gate where the site asks for it;
    stops here unless everything passed or --force."""
    user, cache = current_user(), associations_cache(site.cluster)
    view = ClusterView.query(client, user, associations=bool(site.account), cache=cache)
    report = run_preflight(first, site, view, workdir, allow_mutable_image=opts.allow_mutable_image)
    if view.associations_cached and any(r.name == "account" and r.findings for r in report.checks):
        report = run_preflight(first, site, view.with_fresh_associations(client, user, cache), workdir,
                               allow_mutable_image=opts.allow_mutable_image)
    if site.require_smoke:
        report.add(_smoke_gate(site, code_hash, spec_path, client, registry))
    _stop_unless_forced(report, opts)
    return report


def _confirm_cost(per_element: CostEstimate, count: int, site: SiteConfig, opts: SubmitOptions) -> None:
    """The whole array's worst case against the site's threshold: confirmed, --yes, or nothing is submitted."""
    total = round(per_element.max_usd * count, 2)
    worst = CostEstimate(per_element.gpus * count, per_element.hours, per_element.gpu_hours * count,
                         per_element.price_per_gpu_hour, total, per_element.partition,
                         usd_per_hour=per_element.usd_per_hour * count, capacity=per_element.capacity,
                         preemptible=per_element.preemptible)
    if worst.needs_confirmation(site) and not opts.yes and not (opts.confirm and opts.confirm(worst)):
        raise CostNotConfirmed(
            f"worst case ${total:,.2f} for {count} elements is above this site's confirmation threshold "
            f"${site.cost_confirm_threshold:,.2f}; nothing was submitted.",
            "Confirm at the prompt, or pass --yes (scripts), or shrink the grid / time_limit.")


@dataclass
class _Scripts:
    """The job scripts of a sweep: each element's own (its run's job.sbatch) and the array's."""

    site: SiteConfig
    registry: RunRegistry
    workdir: Path
    image: PinnedImage | None
    template: str  # fsdp, hf-lora, deepspeed extend torchrun's array block
    templates: Path | None

    def element(self, spec: RunSpec, run_id: str, partition: str, tracked: dict | None = None) -> str:
        context = sbatch_context(spec, self.site, run_id, self.registry.path_of(run_id), self.workdir, partition,
                                 self.image, tracked)
        return render(self.template, context, self.templates)

    def array(self, first: RunSpec, plan: SweepPlan, partition: str, sweep_id: str, run_ids: list[str]) -> str:
        pattern = self.registry.path_of(sweep_element_id(sweep_id, "%a"))
        context = sbatch_context(first, self.site, sweep_id, pattern, self.workdir, partition, self.image)
        elements = [{"run_id": rid, "script": str(Run(rid, self.registry.path_of(rid)).script_path)}
                    for rid in run_ids]
        context["sweep"] = {"id": sweep_id, "array": plan.array, "element_pattern": str(pattern), "elements": elements}
        return render(self.template, context, self.templates)


def _render_elements(elements, plan: SweepPlan, partition: str, element_script, site: SiteConfig,
                     report: PreflightReport, opts: SubmitOptions) -> list[str]:
    scripts = []
    for index, (rid, spec) in enumerate(elements):
        try:
            script = element_script(spec, rid, partition)
        except SlurmctlError as exc:
            raise SpecError(f"sweep element {index} ({_values_text(plan.combinations[index])}): {exc.message}",
                            exc.hint) from None
        leaks = secret_leaks(script, spec, site)
        if leaks:
            report.add(CheckResult("secret-in-script", f"no secret value in element {index}'s job script", leaks))
            _stop_unless_forced(report, opts)
        scripts.append(script)
    return scripts


def _create_dirs(registry: RunRegistry, site: SiteConfig, sweep_id: str, elements, created: list[Path]):
    sweep_dir = create_sweep_dir(registry, sweep_id, site.share_runs_with_group)
    created.append(sweep_dir.path)
    runs = []
    for rid, spec in elements:
        run = registry.create(spec, share_with_group=site.share_runs_with_group, run_id=rid)
        created.append(run.path)
        runs.append(run)
    return sweep_dir, runs
