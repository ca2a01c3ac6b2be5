"""`adopt --convert`: for those who want to move over, a run.yaml equivalent to an sbatch script, with a
line-by-line mapping: each #SBATCH line and each body line says where it went in run.yaml, or that it
stays an sbatch option (`slurmctl submit run.yaml -- OPTION`), or what to do with it instead."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from slurmctl.config.models import RunSpec
from slurmctl.errors import SpecError
from slurmctl.fsutil import write_atomic
from slurmctl.rundir import JOB_SCRIPT, RUN_YAML, RunRegistry, new_run_id
from slurmctl.submit.adopt.body import BodyReading, read_body
from slurmctl.submit.adopt.plan import Shape, _gpu_count, read_shape
from slurmctl.submit.adopt.script import PLATFORM, SbatchScript, parse_script
from slurmctl.submit.adopt.wrapper import run_name
from slurmctl.submit.render import render, template_file
from slurmctl.submit.submission import sbatch_context

# the launchers' own options that run.yaml replaces (the platform's torchrun sets them)
_LAUNCH_OPTIONS = {"--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-backend", "--rdzv_backend",
                   "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--master-addr", "--master_addr",
                   "--master-port", "--master_port", "--node-rank", "--node_rank", "--max-restarts", "--standalone",
                   "--ntasks", "--ntasks-per-node", "-n", "-N", "--nodes", "--kill-on-bad-exit", "--cpu-bind"}
_LITERAL_EXPORT = re.compile(r"export\s+([A-Za-z_][A-Za-z0-9_]*)=([^$`\s;&|]*)$")


@dataclass
class Conversion:
    run_yaml: dict
    mapping: list[str] = field(default_factory=list)  # one line per line of the script
    sbatch_args: list[str] = field(default_factory=list)  # what stays an sbatch option

    def submit_command(self, path: str) -> str:
        extra = " ".join(shlex.quote(a) for a in self.sbatch_args)
        return f"slurmctl submit {shlex.quote(path)}" + (f" -- {extra}" if extra else "")


def _program_args(text: str, program: str) -> list[str]:
    words = shlex.split(text, comments=True)
    return words[words.index(program) + 1:] if program in words else []


def convert(script: SbatchScript, shape: Shape, body: BodyReading, name: str) -> Conversion:
    launch = next((launch for launch in reversed(body.launches) if launch.program), None)
    if launch is None:
        raise SpecError(f"{script.path} launches no Python program slurmctl can see (srun/torchrun/python X.py).",
                        "Adopt it as it is (`slurmctl adopt SCRIPT`); --convert needs the training script's name.")
    nodes = int(shape.nodes.split("-")[0]) if shape.nodes and shape.nodes.split("-")[0].isdigit() else 1
    per_node, gpu_type = _gpu_count(shape.gres, gres=True)
    if per_node is None:
        per_node, gpu_type = _gpu_count(shape.gpus_per_node)
    if per_node is None and shape.gpus_total:
        per_node = shape.gpus_total // nodes
    procs = next((int(v) for k, v in launch.options.items()
                  if k in {"--nproc-per-node", "--nproc_per_node", "--num_processes", "--num_gpus"} and v.isdigit()),
                 None)
    spec: dict = {"name": name, "entrypoint": launch.program, "nodes": nodes, "gpus_per_node": per_node or 0}
    args = [a for a in _program_args(launch.text, launch.program)]
    if args:
        spec["args"] = args
    if gpu_type:
        spec["gpu_type"] = gpu_type
    if procs and procs != (per_node or 1):
        spec["procs_per_node"] = procs
    if not per_node and shape.cpus_per_task and shape.cpus_per_task.isdigit():
        spec["cpus_per_proc"] = int(shape.cpus_per_task)
    if shape.partition:
        spec["partition"] = shape.partition.split(",") if "," in shape.partition else shape.partition
    if shape.time_seconds:
        spec["time_limit"] = f"{shape.time_seconds // 3600:02d}:{shape.time_seconds % 3600 // 60:02d}:" \
                             f"{shape.time_seconds % 60:02d}"
    if shape.mem and re.fullmatch(r"[1-9][0-9]*[KMGT]?", shape.mem) and script.value("mem"):
        spec["mem"] = shape.mem
    conversion = Conversion(spec)
    keys = {"nodes": "nodes", "gres": "gpus_per_node/gpu_type", "gpus-per-node": "gpus_per_node/gpu_type",
            "gpus": "gpus_per_node", "partition": "partition", "time": "time_limit", "mem": "mem",
            "cpus-per-task": "cpus_per_proc" if not per_node else "(the site's cpus_per_gpu)",
            "ntasks-per-node": "(one task per node runs torchrun; procs_per_node)",
            "ntasks": "(nodes x procs_per_node)",
            "signal": "(the platform's drain signal)", "requeue": "(the platform requeues after a checkpoint)",
            "no-requeue": "(the platform requeues only after a checkpoint)"}
    for d in script.directives:
        if d.option in PLATFORM:
            conversion.mapping.append(f"{d.where}: {d.raw} -> set by the platform (run id, run dir logs)")
        elif d.option in keys:
            conversion.mapping.append(f"{d.where}: {d.raw} -> run.yaml {keys[d.option]}")
        else:
            conversion.sbatch_args.append(f"--{d.option}" + (f"={d.value}" if d.value is not None else ""))
            conversion.mapping.append(f"{d.where}: {d.raw} -> stays an sbatch option (after `--`)")
    env: dict[str, str] = {}
    for number, kind, text in body.environment:
        m = _LITERAL_EXPORT.match(text)
        if kind == "export" and m:
            env[m.group(1)] = m.group(2)
            conversion.mapping.append(f"line {number}: {text} -> run.yaml env.{m.group(1)}")
        elif kind == "export":
            conversion.mapping.append(f"line {number}: {text} -> not mapped (computed at run time: the platform "
                                      "sets MASTER_ADDR/PORT itself; others go in the program)")
        else:
            conversion.mapping.append(f"line {number}: {text} -> not mapped ({kind}: make the site's python or "
                                      "run.yaml `python:`/`image:` provide this environment)")
    for number, text in body.traps:
        conversion.mapping.append(f"line {number}: {text} -> not mapped (the platform's drain signal and "
                                  "slurmctl.runtime's should_stop() take its place)")
    for number, text in body.other:
        conversion.mapping.append(f"line {number}: {text} -> not mapped (runs before the program in the original; "
                                  "move it into the program, the image, or a setup step)")
    conversion.mapping.sort(key=lambda line: (line.startswith("line "), int(line.split(":")[0].split()[-1])
                                              if line.startswith("line ") else 0))
    if env:
        spec["env"] = env
    for other in body.launches:
        if other is launch:
            conversion.mapping.append(f"line {other.line}: {other.text} -> run.yaml entrypoint {launch.program}"
                                      + (f", args {' '.join(args)}" if args else "")
                                      + (f", procs_per_node {procs}" if procs else "")
                                      + " (launched by the platform's srun + torchrun)")
        else:
            conversion.mapping.append(f"line {other.line}: {other.text} -> not mapped (run.yaml runs one program)")
    return conversion


def write_conversion(script_path: Path, sbatch_args: list[str], site, out_dir: Path) -> dict:
    """run.yaml, the job script the platform would run for it, and MAPPING.txt, in `out_dir` (new or
    empty). The run.yaml is checked by the same model `slurmctl submit` reads."""
    script = parse_script(script_path, sbatch_args)
    body, shape = read_body(script.body), read_shape(script)
    conversion = convert(script, shape, body, run_name(script))
    conversion.run_yaml["workdir"] = os.getcwd()  # the directory the original ran in (sbatch's default)
    try:
        spec = RunSpec.model_validate(conversion.run_yaml)
    except ValidationError as exc:
        raise SpecError(f"the converted run.yaml is not valid: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}.",
                        "Adopt the script as it is instead (`slurmctl adopt SCRIPT`).") from None
    if out_dir.exists() and any(out_dir.iterdir()):
        raise SpecError(f"{out_dir} is not empty; --convert never overwrites.", "Give a new directory.")
    out_dir.mkdir(parents=True, exist_ok=True)
    run_yaml = out_dir / RUN_YAML
    write_atomic(run_yaml, yaml.safe_dump(conversion.run_yaml, sort_keys=False), mode=0o644)
    registry = RunRegistry(site.runs_root_path)
    run_id = new_run_id(spec.name)
    partition = spec.partitions[0]
    job_script = render(template_file(spec.template),
                        sbatch_context(spec, site, run_id, registry.root / run_id, Path(spec.workdir), partition))
    write_atomic(out_dir / JOB_SCRIPT, job_script, mode=0o644)
    command = conversion.submit_command(str(run_yaml))
    mapping = [f"# {script_path} -> {run_yaml}", *conversion.mapping, "", f"submit with: {command}"]
    write_atomic(out_dir / "MAPPING.txt", "\n".join(mapping) + "\n", mode=0o644)
    return {"run_yaml": str(run_yaml), "job_script": str(out_dir / JOB_SCRIPT),
            "mapping_file": str(out_dir / "MAPPING.txt"), "mapping": conversion.mapping,
            "sbatch_args": conversion.sbatch_args, "submit": command, "spec": conversion.run_yaml}
