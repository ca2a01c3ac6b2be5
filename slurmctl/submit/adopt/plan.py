"""`slurmctl adopt SCRIPT [-- sbatch options]`: run an existing sbatch script as written, inside the
platform.

The plan: read the script (script.py) and its body (body.py), ask Slurm for its own reading of the
original (`sbatch -v --test-only`) and compare every option with ours, then build the job that
runs: a small wrapper whose #SBATCH lines are the original's, verbatim, and whose body runs the
original file (copied into the run directory) as its own process, with the platform around it —
the run id as job name and comment, one log per job in the run dir (attempts appended), the attempt
records, the drain signal and the epilog's cost record. Slurm's reading of the wrapper must equal its
reading of the original in every option the platform does not set (checked before submitting).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from slurmctl.config.pricing import allocated_cost, price_at
from slurmctl.durations import parse_slurm_duration
from slurmctl.errors import CostNotConfirmed, SlurmctlError, SpecError
from slurmctl.fsutil import write_atomic
from slurmctl.rundir import (
    ADOPTED_SCRIPT,
    JOB_SCRIPT,
    RunRegistry,
    current_user,
    new_run_id,
)
from slurmctl.runtime.adapters import ADAPTERS, Resilience, detect
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.sbatch_reading import SbatchReading, sbatch_reading
from slurmctl.submit.adopt.body import BodyReading, read_body
from slurmctl.submit.adopt.checkpoint_location import job_workdir, program_output_dir
from slurmctl.submit.adopt.script import PLATFORM, SbatchScript, parse_script
from slurmctl.submit.adopt.wrapper import CONTROL_RE, job_name, platform_args, render_wrapper, run_name, uses_singleton

# control characters that would end or hide a line in the wrapper (bash splits lines on \n only)


@dataclass
class Shape:
    nodes: str | None = None
    ntasks: str | None = None
    ntasks_per_node: str | None = None
    cpus_per_task: str | None = None
    gres: str | None = None
    gpus: str | None = None
    gpus_per_node: str | None = None
    gpu_type: str | None = None
    gpus_total: int | None = None  # for the cost estimate
    mem: str | None = None
    time: str | None = None
    time_seconds: int | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    array: str | None = None
    array_tasks: int | None = None
    array_throttle: int | None = None
    dependency: str | None = None
    signal: str | None = None
    requeue: bool | None = None


@dataclass
class AdoptPlan:
    script: str
    run_id: str
    run_dir: str
    shape: Shape
    directives: list[dict]
    body: dict
    slurm_original: dict
    slurm_wrapped: dict | None = None
    differences: list[str] = field(default_factory=list)  # ours vs Slurm's reading of the original
    wrapper_differences: list[str] = field(default_factory=list)  # Slurm: wrapper vs original
    notes: list[str] = field(default_factory=list)
    platform_args: list[str] = field(default_factory=list)
    cost: dict = field(default_factory=dict)
    ignored_lines: list[dict] = field(default_factory=list)
    resilience: dict | None = None  # the adopt block (runtime.adapters.Resilience) and how it was found
    job_id: int | None = None
    smoke: dict | None = None  # adopt --smoke: the verdict (control/adopted_smoke.py)
    dry_run: bool = True
    wrapper: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _gpu_count(value: str | None, gres: bool = False) -> tuple[int | None, str | None]:
    """--gres 'gpu:h100:2' / 'gres:gpu:2' (another gres, e.g. 'shard:1', is no GPU), or --gpus* 'h100:2' /
    '2' -> (count, type or None); (None, None) when no GPU is named."""
    if not value:
        return None, None
    for part in value.split(","):
        fields = part.removeprefix("gres:").split(":")
        if fields[0] == "gpu":
            fields = fields[1:]
        elif gres or len(fields) > 2:
            continue
        count = fields[-1].split("(")[0] if fields else "1"
        gpu_type = fields[0] if len(fields) == 2 else None
        if count.isdigit():
            return int(count), gpu_type
    return None, None


def _array_size(spec: str | None) -> tuple[int | None, int | None]:
    """'0-7%2' -> (8, 2); '1,3,5' -> (3, None); '0-15:4' -> (4, None)."""
    if not spec:
        return None, None
    indexes, _, throttle = spec.partition("%")
    count = 0
    for part in indexes.split(","):
        rng, _, step = part.partition(":")
        low, _, high = rng.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return None, int(throttle) if throttle.isdigit() else None
        count += (int(high) - int(low)) // int(step or 1) + 1 if high else 1
    return count, int(throttle) if throttle.isdigit() else None


def read_shape(script: SbatchScript) -> Shape:
    v = script.value
    shape = Shape(nodes=v("nodes"), ntasks=v("ntasks"), ntasks_per_node=v("ntasks-per-node"),
                  cpus_per_task=v("cpus-per-task"), gres=v("gres"), gpus=v("gpus"), gpus_per_node=v("gpus-per-node"),
                  mem=v("mem") or v("mem-per-cpu") or v("mem-per-gpu"), time=v("time"),
                  partition=v("partition"), account=v("account"), qos=v("qos"), array=v("array"),
                  dependency=v("dependency"), signal=v("signal"))
    shape.time_seconds = parse_slurm_duration(shape.time) if shape.time else None
    if script.has("requeue") or script.has("no-requeue"):
        shape.requeue = [d.option for d in script.directives if d.option in {"requeue", "no-requeue"}][-1] == "requeue"
    shape.array_tasks, shape.array_throttle = _array_size(shape.array)
    nodes = int(shape.nodes.split("-")[0]) if shape.nodes and shape.nodes.split("-")[0].isdigit() else 1
    per_node, gpu_type = _gpu_count(shape.gres, gres=True)
    if per_node is None:
        per_node, gpu_type = _gpu_count(shape.gpus_per_node)
    if per_node is not None:
        shape.gpus_total = per_node * nodes
    else:
        total, gpu_type = _gpu_count(shape.gpus)
        shape.gpus_total = total if total is not None else 0
    shape.gpu_type = gpu_type
    return shape


# Options whose value sbatch -v prints in its own short form (--open-mode=append -> 'a').
_SLURM_SPELLING = {"open-mode": lambda value: value[:1].lower()}


def _same(option: str, ours: str | None, slurms: str) -> bool:
    if ours is None:  # a flag: sbatch prints the flag's name (or "set")
        return True
    if option in _SLURM_SPELLING:
        return _SLURM_SPELLING[option](ours) == _SLURM_SPELLING[option](slurms)
    if option == "time":
        return parse_slurm_duration(ours) == parse_slurm_duration(slurms)
    if option == "gres":
        return ours.removeprefix("gres:") == slurms.removeprefix("gres:")
    if option == "signal":  # sbatch -v prints 'B:USR1' for B:SIGUSR1@60, 'USR1@90' for SIGUSR1@90
        def parts(text: str) -> tuple[bool, str, str]:
            batch = text.startswith("B:")
            name, _, when = text.removeprefix("B:").partition("@")
            return batch, name.removeprefix("SIG"), when
        (b1, n1, w1), (b2, n2, w2) = parts(ours), parts(slurms)
        return b1 == b2 and n1 == n2 and (w1 == w2 or not w2)
    if option in {"output", "error", "input", "chdir"}:
        return slurms == ours or slurms.endswith("/" + ours.lstrip("./")) or Path(slurms).name == Path(ours).name
    return ours == slurms


def compare_with_slurm(script: SbatchScript, reading: SbatchReading) -> list[str]:
    """Every difference between our reading and Slurm's (empty when they agree on every option)."""
    differences = []
    ours = {d.option for d in script.directives}
    for option, value in reading.options.items():
        if option not in ours:
            differences.append(f"Slurm read --{option}={value} where slurmctl read nothing")
        elif not _same(option, script.value(option), value):
            differences.append(f"--{option}: slurmctl read {script.value(option)!r}, Slurm read {value!r}")
    for option in sorted(ours - reading.options.keys()):
        differences.append(f"slurmctl read --{option} where Slurm's verbose listing shows nothing "
                           "(Slurm may print it under another name)")
    return differences


def estimate_cost(shape: Shape, site, partition: str | None, processors: int | None = None,
                  now: datetime | None = None) -> dict:
    """The worst case: GPUs x hours at the list GPU price; a job without GPUs by the CPUs Slurm would
    give it (`processors` of its --test-only answer) at the partition's CPU price, as the ledger bills
    it. Beside it, the price now and the cost if it started now and ran its whole time, by the ledger's
    own rule (config.pricing, the site's off-peak and weekend discounts), so the rate shown is the one
    `cost` charges."""
    config = site.partitions.get(partition or "") if partition else None
    price = config.price_per_gpu_hour if config else 0.0
    hours = (shape.time_seconds or 0) / 3600
    copies = shape.array_tasks or 1
    gpus = (shape.gpus_total or 0) * copies
    cost = {"partition": partition, "gpus": gpus, "hours": round(hours, 3), "price_per_gpu_hour": price,
            "max_usd": round(gpus * hours * price, 2), "array_tasks": copies,
            "note": "" if config else f"partition {partition!r} has no price in the site config"}
    if not gpus and processors:
        cpu_price = getattr(config, "price_per_cpu_hour", 0.0) if config else 0.0
        cost.update(cpus=processors * copies, price_per_cpu_hour=cpu_price,
                    max_usd=round(processors * copies * hours * cpu_price, 2))
    now = now or datetime.now()
    discounts = site.accounting.discounts
    list_price = cost.get("price_per_cpu_hour", price)
    cost["price_now"] = round(price_at(list_price, now, discounts), 4)
    if config is not None:
        started_now = allocated_cost(gpus, cost.get("cpus", 0), now, now + timedelta(hours=hours), config, discounts)
        cost["if_started_now_usd"] = round(started_now, 2)
    return cost


# torchrun's dynamic rendezvous, however the option is spelled (the script runs as written: only a note)
_C10D_RENDEZVOUS = re.compile(r"--rdzv[-_]backend(?:=|\s+)[\"']?c10d\b")


def _notes(script: SbatchScript, shape: Shape, body: BodyReading, add_drain_signal: bool, margin: int) -> list[str]:
    notes = []
    if add_drain_signal:
        notes.append(f"drain: the script asks for no signal; slurmctl adds --signal=B:USR1@{margin} and records "
                     "the drain request")  # what the program hears of it: _program_told, once its block is known
    elif shape.signal and shape.signal.startswith("B:"):
        notes.append(f"drain: the script asks for {shape.signal}; the batch shell's signal is passed on to the "
                     "original script (its own trap gets it) and recorded as a drain request"
                     + ("; that trap requeues the job (scontrol requeue), as written — a cancel never does."
                        if body.requeues_itself else "."))
    elif shape.signal:
        notes.append(f"drain: --signal={shape.signal} goes to the job's srun steps, as the script asks.")
    if uses_singleton(script):
        notes.append(f"dependency singleton: the job keeps the name {job_name(script, '')!r}, so it still waits "
                     "for your other jobs of that name; the run id is in its comment.")
    if shape.requeue is None:
        notes.append("requeue: the script says nothing; the cluster's default applies (JobRequeue).")
    else:
        notes.append("requeue: " + ("--requeue (Slurm requeues it after preemption or node failure)"
                                   if shape.requeue else "--no-requeue (it is never requeued)"))
    if body.launches and not body.under_srun:
        notes.append("the program is started without srun: at preemption only srun steps get Slurm's early "
                     "SIGTERM; the batch shell's processes get nothing until the grace time ends.")
    if any("torchrun" in launch.launchers and _C10D_RENDEZVOUS.search(launch.text) for launch in body.launches):
        notes.append("rendezvous: torchrun's c10d backend keeps its state as a pickle in a store that any user on the "
                     "network can write, so they can run code as you; use --rdzv-backend=static with each node's "
                     "own SLURM_NODEID as --node-rank (SECURITY.md).")
    for number, text in script.ignored:
        notes.append(f"line {number}: {text.strip()!r} comes after the first command; sbatch ignores it "
                     "(as it would for the original).")
    return notes


def _resilience(body: BodyReading, shape: Shape, framework: str | None, checkpoint_dir: str | None,
                signal: str | None, step_pattern: str | None,
                workdir: Path | None = None) -> tuple[Resilience | None, str, str]:
    """The adopt block: given, or detected from the program the script launches (its imports).
    `workdir`: where the program starts (None: only known when the job runs)."""
    how, text, chosen, texts = "given", "", None, {}
    for launch in body.launches:
        program = (workdir or Path()) / launch.program if launch.program else None
        try:
            text = program.read_text(errors="replace")[:1024 * 1024] if program and program.is_file() else ""
        except OSError:
            text = ""
        texts[launch.line] = text
        found = detect(text)
        if framework is None and found:
            framework, how = found, f"detected: {program} imports it"
        if found and found == framework:
            chosen = launch
            break  # the program the block is about: its text says how it restores
    # the launch the block is about: its program's, else the first that runs a .py file, else the only one
    chosen = chosen or next((launch for launch in body.launches if launch.program), None) or (
        body.launches[0] if len(body.launches) == 1 else None)
    text = texts.get(chosen.line, "") if chosen is not None else ""
    if framework is None:
        return None, "not detected", ""
    if framework == "none":
        return None, "none", ""
    if framework not in ADAPTERS:
        raise SpecError(f"--framework {framework!r} is not one slurmctl knows.",
                        f"Use one of: {', '.join(ADAPTERS)} (or none).")
    adapter = ADAPTERS[framework]
    if step_pattern:
        try:
            if "step" not in re.compile(step_pattern).groupindex:
                raise re.error("it has no group named step")
        except re.error as exc:
            raise SpecError(f"--step-pattern {step_pattern!r}: {exc}.",
                            "Give a regex with a named group, e.g. 'iter (?P<step>\\d+)'.") from None
    program_signal = signal or adapter.SIGNAL
    if program_signal is None and shape.signal:  # the script's own --signal may say what the program listens to
        named = shape.signal.split("@")[0].removeprefix("B:").removeprefix("SIG")
        # ... unless the program's text, read, handles no such signal (the batch shell's own trap gets a B: one)
        if not text or re.search(rf"\bSIG{re.escape(named)}\b", text):
            program_signal = named
    signal_to = "batch" if (shape.signal or "").startswith("B:") and not signal else adapter.SIGNAL_TO
    if body.launches and not body.under_srun:
        signal_to = "batch"  # no srun step to signal: the batch shell passes it on (render_wrapper)
    if signal_to == "batch" and body.requeues_itself and body.under_srun:
        # the batch shell's own trap requeues on that signal: a cancel sends it to the program instead
        signal_to = "steps"
    where, where_how = _checkpoint_dir(adapter, chosen, text, checkpoint_dir, workdir)
    block = Resilience(framework, str(where),
                       program_signal.removeprefix("SIG") if program_signal else None, signal_to, step_pattern)
    if hasattr(adapter, "restore_mode"):  # which of its checkpoints the framework restores by itself
        block.restore = adapter.restore_mode(text, body.under_srun)
    return block, how, where_how


def start_directory(script: SbatchScript, body: BodyReading) -> Path | None:
    """Where the program starts: sbatch runs in this directory (or --chdir), then the body's `cd`s up
    to the launch line; None when one of them is known only when the job runs."""
    first_launch = body.launches[0].line if body.launches else None
    cd_lines = [text for line, kind, text in body.environment
                if kind == "cd" and (first_launch is None or line <= first_launch)]
    return job_workdir(script.value("chdir"), cd_lines, Path.cwd())


def _checkpoint_dir(adapter, launch, program_text: str, given: str | None, workdir: Path | None) -> tuple[Path, str]:
    """Where the program's checkpoints are looked for, and how that was concluded (a note for the dry
    run): --checkpoint-dir, else the program's own setting (checkpoint_location), else the directory
    the job starts in, as before."""
    override = "give --checkpoint-dir DIR to look elsewhere"
    if given:
        return Path(given).resolve(), f"checkpoints: {Path(given).resolve()} (given with --checkpoint-dir)."
    start = workdir or Path.cwd().resolve()
    found = None
    if launch is not None and workdir is not None:
        found = program_output_dir(launch.text, launch.program, program_text, adapter.OUTPUT_NAMES, workdir)
    if found is not None and found[1].path is not None:
        name, location = found
        secondary = name != adapter.OUTPUT_NAMES[0]
        if secondary and location.path.is_relative_to(start):
            # a later setting inside the framework's default root: that root holds both (its scan reaches it)
            return start, (f"checkpoints: {start}, the directory the job starts in ({adapter.NAME}'s default "
                           f"{adapter.OUTPUT_NAMES[0]}), which holds {name} {location.path} read from "
                           f"{location.source}; {override}.")
        return location.path, (f"checkpoints: {location.path}, the program's {name}, read from {location.source}; "
                               f"{override}.")
    names = " / ".join(adapter.OUTPUT_NAMES)
    if found is not None:
        why = f"its {found[0]} comes from {found[1].source}"
    elif workdir is None:
        why = "the job changes directory to a place only known when it runs"
    else:
        why = f"neither its command line nor its own text sets {names}"
    return start, (f"checkpoints: looked for in {start}, the directory the job starts in, because {why}; if the "
                   "program saves elsewhere, give --checkpoint-dir DIR.")


def plan_adopt(script_path: Path, sbatch_args: list[str], site, client: SlurmClient,
               registry: RunRegistry, *, framework: str | None = None, checkpoint_dir: str | None = None,
               signal: str | None = None, step_pattern: str | None = None) -> tuple[AdoptPlan, SbatchScript]:
    script = parse_script(script_path, sbatch_args)
    for d in script.directives:
        if d.line is None and CONTROL_RE.search(d.raw):
            raise SpecError(f"the sbatch option {d.raw!r} holds a control character.", "Remove it.")
    body = read_body(script.body)
    shape = read_shape(script)
    original = sbatch_reading(client, script_path, sbatch_args)
    run_id = new_run_id(run_name(script))
    run_dir = registry.root / run_id
    add_signal = not script.has("signal")
    margin = site.drain_margin_seconds
    plan = AdoptPlan(
        script=str(script_path.resolve()), run_id=run_id, run_dir=str(run_dir), shape=shape,
        directives=[{**d.to_dict(), "status": _status(d, uses_singleton(script))} for d in script.directives],
        body=body.to_dict(),
        slurm_original=original.to_dict(), differences=compare_with_slurm(script, original),
        notes=_notes(script, shape, body, add_signal, margin),
        platform_args=platform_args(run_id, run_dir, add_signal, margin, job_name(script, run_id)),
        cost=estimate_cost(shape, site, original.partition or (shape.partition or "").split(",")[0] or None,
                   original.processors),
        ignored_lines=[{"line": n, "text": t} for n, t in script.ignored])
    block, how, where = _resilience(body, shape, framework, checkpoint_dir, signal, step_pattern,
                                    start_directory(script, body))
    plan.resilience = {**block.to_dict(), "how": how, "checkpoint_dir_how": where} if block else None
    if where:
        plan.notes.append(where)
    if block and block.signal:
        plan.notes.append(f"resilience ({block.framework}, {how}): cancel sends {block.signal} to the "
                          f"{_signal_target(block, body, shape.signal)}; the program saves "
                          f"on it; its checkpoints in {block.checkpoint_dir} are what resume uses.")
    elif block:
        plan.notes.append(f"resilience ({block.framework}, {how}): its checkpoints in {block.checkpoint_dir} are "
                          "listed and used by resume; it saves on no signal, so cancel says so at once and "
                          "offers `cancel --now` (adopt it with --signal SIG if it does save on one).")
    elif how == "not detected":
        programs = ", ".join(str(launch.program) for launch in body.launches if launch.program) or \
            "the script's commands (no .py program named)"
        plan.notes.append(
            f"resilience: NONE — no framework slurmctl knows (Lightning, HF Trainer, PyTorch) is imported by "
            f"{programs}. So cancel cannot ask the program to save (only `cancel --now`, which loses the work "
            "since its last save), and resume finds no checkpoint of its own. If it does checkpoint, adopt it "
            f"again with --framework {'|'.join(ADAPTERS)} --checkpoint-dir DIR (and --signal SIG if it saves "
            "on one).")
    pass_on = block.signal if block and block.signal and body.launches and not body.under_srun else None
    if add_signal:
        plan.notes[0] += _program_told(block, pass_on)
    plan.wrapper = render_wrapper(script, run_id, run_dir, site.python, margin, add_signal,
                                  "027" if site.share_runs_with_group else "077", pass_on)
    return plan, script


def _program_told(block: Resilience | None, pass_on: str | None) -> str:
    """The end of the drain note when slurmctl adds its own USR1 to the batch shell: whether the program
    hears it (render_wrapper passes it on only to a program started without srun that saves on USR1)."""
    if pass_on == "USR1":
        return ": the batch shell passes it on to the program, which saves on it."
    if block is not None and block.signal:
        return (f"; the program is not told (it runs under srun; only cancel sends it {block.signal}): at the time "
                "limit or a preemption it loses the work since its last checkpoint of its own.")
    return ("; the program is not told (it saves on no signal slurmctl knows of; adopt it with --signal SIG if it "
            "does): at the time limit or a preemption it loses the work since its last checkpoint of its own.")


def _signal_target(block: Resilience, body: BodyReading, shape_signal: str | None) -> str:
    """Who gets cancel's signal, in words, and what stops the script's own requeue."""
    batch_trap = (block.signal or "") == (shape_signal or "").split("@")[0].removeprefix("B:").removeprefix("SIG")
    if block.signal_to == "batch" and body.launches and not body.under_srun and not batch_trap:
        target = "batch shell, which passes it on to the program (started without srun, so no step gets it)"
    elif block.signal_to == "batch":
        target = "batch shell (the original script's own trap gets it)"
    elif body.requeues_itself and body.under_srun:
        target = ("program's srun tasks, not the batch shell, whose own trap would requeue the job "
                  "(Slurm's signal before the time limit still goes to that trap, as written)")
    else:
        target = "srun tasks"
    if body.requeues_itself:
        target += ("; cancel first sets the job's Requeue=0, so the script's `scontrol requeue` fails "
                   "and a cancelled job never restarts")
    return target


def _status(d, singleton: bool) -> str:
    if d.option == "job-name" and singleton:
        return "kept (--dependency=singleton waits on it; the run id goes in the comment)"
    if d.option in PLATFORM:
        return "set by slurmctl (original shown)"
    return "read, passed through unchanged" if d.kind != "passed-through" else "passed through unchanged"


def check_wrapper(plan: AdoptPlan, client: SlurmClient, wrapper_path: Path, sbatch_args: list[str]) -> None:
    """Slurm's reading of the wrapper (with the platform's options) against its reading of the original:
    equal in every option the platform does not set."""
    wrapped = sbatch_reading(client, wrapper_path, [*sbatch_args, *plan.platform_args])
    plan.slurm_wrapped = wrapped.to_dict()
    original = plan.slurm_original["options"]
    ours = {a.split("=", 1)[0].lstrip("-") for a in plan.platform_args}
    for option in sorted(set(original) | set(wrapped.options)):
        if option in ours or option in PLATFORM:
            continue
        if original.get(option) != wrapped.options.get(option):
            plan.wrapper_differences.append(
                f"--{option}: original {original.get(option)!r}, adopted {wrapped.options.get(option)!r}")


def adopt(script_path: Path, sbatch_args: list[str], site, client: SlurmClient, *, dry_run: bool = False,
          yes: bool = False, confirm=None, **resilience) -> AdoptPlan:
    """`resilience`: framework, checkpoint_dir, signal, step_pattern (the adopt block's options)."""
    registry = RunRegistry(site.runs_root_path)
    plan, script = plan_adopt(script_path, sbatch_args, site, client, registry, **resilience)
    if dry_run:
        return plan
    if not plan.slurm_original.get("ok"):
        raise SpecError(f"Slurm would not run the original script: {plan.slurm_original.get('message')}.",
                        "Fix the script (or the options after --) so that `sbatch --test-only` accepts it.",
                        code="preflight-failed")
    threshold = getattr(site, "cost_confirm_threshold", None)
    if threshold is not None and plan.cost["max_usd"] > threshold and not yes and not (confirm and confirm(plan)):
        raise CostNotConfirmed(f"worst case ${plan.cost['max_usd']:,.2f} is above this site's confirmation "
                               f"threshold ${threshold:,.2f}; nothing was submitted.",
                               "Confirm at the prompt, or pass --yes, or lower --time / the GPUs.")
    run = _create_run_dir(registry, site, plan, sbatch_args)
    try:
        shutil.copyfile(script_path, run.path / ADOPTED_SCRIPT)
        os.chmod(run.path / ADOPTED_SCRIPT, 0o700)
        write_atomic(run.path / JOB_SCRIPT, plan.wrapper, mode=0o700)
        check_wrapper(plan, client, run.path / JOB_SCRIPT, sbatch_args)
        if plan.wrapper_differences:
            raise SlurmctlError("Slurm reads the adopted job differently from the original: "
                                + "; ".join(plan.wrapper_differences) + ". Nothing was submitted.",
                                "This is a slurmctl bug; submit the original with sbatch and tell the platform team.")
        # sbatch runs in this directory, as for the original: it is the job's working directory
        plan.job_id = client.submit(run.path / JOB_SCRIPT, [*sbatch_args, *plan.platform_args])
    except (SlurmctlError, OSError):
        shutil.rmtree(run.path, ignore_errors=True)
        raise
    plan.dry_run = False
    run.record("submitted", job_id=plan.job_id, sbatch_args=list(sbatch_args), adopted=True,
               partition=plan.slurm_original.get("partition"))
    return plan


def _create_run_dir(registry: RunRegistry, site, plan: AdoptPlan, sbatch_args: list[str]):
    class _Named:  # RunRegistry.create takes a spec for its name only
        name = plan.run_id.rsplit("-", 2)[0]

    run = registry.create(_Named, share_with_group=site.share_runs_with_group, run_id=plan.run_id)
    meta = {"run_id": run.run_id, "name": _Named.name, "created": time.time(), "user": current_user(),
            "cluster": site.cluster, "partition": plan.slurm_original.get("partition"),
            "adopted": {"script": plan.script, "platform_args": plan.platform_args, "cwd": os.getcwd(),
                        "sbatch_args": sbatch_args, "shape": asdict(plan.shape), "resilience": plan.resilience,
                        "cost": plan.cost}}
    write_atomic(run.meta_path, json.dumps(meta, indent=2))
    return run
