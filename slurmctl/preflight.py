"""Checks before any GPU is spent. Each returns Findings; errors stop the submission."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import PreflightError
from .runtime.secrets import check_secrets_file
from .slurm.client import NodeInfo
from .spec import RunSpec, SiteConfig

_UNRESOLVED_RE = re.compile(r"\$\{[^}]*\}")


@dataclass(frozen=True)
class Finding:
    code: str
    level: str  # "error" | "warning"
    message: str
    hint: str

    def to_dict(self) -> dict:
        return asdict(self)


def _error(code: str, message: str, hint: str) -> Finding:
    return Finding(code, "error", message, hint)


def check_cluster_shape(spec: RunSpec, site: SiteConfig, nodes: list[NodeInfo]) -> list[Finding]:
    """Partition exists (site and Slurm), GPU type matches, the shape fits on its nodes."""
    findings = []
    live = sorted({p for n in nodes for p in n.partitions})
    for name in spec.partitions:
        if name not in site.partitions or name not in live:
            known = ", ".join(sorted(set(site.partitions) & set(live))) or "none"
            findings.append(_error("unknown-partition", f"partition '{name}' does not exist on cluster {site.cluster}.",
                                   f"Set `partition` in run.yaml to one of: {known}."))
            continue
        part = site.partitions[name]
        if spec.gpu_type and spec.gpu_type != part.gpu_type:
            offering = sorted(p for p, c in site.partitions.items() if c.gpu_type == spec.gpu_type)
            findings.append(_error(
                "gpu-type-mismatch", f"partition '{name}' has {part.gpu_type} GPUs, not '{spec.gpu_type}'.",
                f"Use a partition with {spec.gpu_type} GPUs ({', '.join(offering)})" if offering else
                f"No partition has '{spec.gpu_type}' GPUs; known types: "
                f"{', '.join(sorted({c.gpu_type for c in site.partitions.values()}))}. Fix `gpu_type` in run.yaml."))
            continue
        members = [n for n in nodes if name in n.partitions]
        most_gpus = max((n.gpus for n in members), default=0)
        if spec.gpus_per_node > most_gpus:
            findings.append(_error(
                "too-many-gpus", f"gpus_per_node={spec.gpus_per_node} but nodes in '{name}' have at most {most_gpus}.",
                f"Set `gpus_per_node` to {most_gpus} or fewer and raise `nodes` instead."))
        fitting = [n for n in members if n.gpus >= spec.gpus_per_node]
        if spec.nodes > len(fitting):
            findings.append(_error(
                "too-many-nodes", f"nodes={spec.nodes} but partition '{name}' has only {len(fitting)} node(s) that fit.",
                f"Set `nodes` to {len(fitting)} or fewer."))
    return findings


def check_files(spec: RunSpec, workdir: Path) -> list[Finding]:
    findings = []
    if not workdir.is_dir():
        findings.append(_error("missing-workdir", f"workdir {workdir} does not exist.",
                               "Fix `workdir` in run.yaml (relative paths are relative to run.yaml)."))
        return findings
    entry = workdir / spec.entrypoint
    if not entry.is_file():
        findings.append(_error("missing-entrypoint", f"entrypoint {spec.entrypoint} not found in {workdir}.",
                               "Fix `entrypoint` in run.yaml (relative to workdir)."))
    for data_path in spec.data:
        if _UNRESOLVED_RE.search(data_path):
            continue  # reported by check_unresolved
        path = Path(data_path) if Path(data_path).is_absolute() else workdir / data_path
        if not path.exists():
            findings.append(_error("missing-data", f"data path {data_path} does not exist (looked at {path}).",
                                   "Fix `data` in run.yaml, or stage the data first."))
    return findings


def check_unresolved(spec: RunSpec) -> list[Finding]:
    """`${VAR}` left in a value means a template or shell expansion never happened."""
    values = [("entrypoint", spec.entrypoint), *((f"args[{i}]", a) for i, a in enumerate(spec.args)),
              *((f"env.{k}", v) for k, v in spec.env.items()), *((f"data[{i}]", d) for i, d in enumerate(spec.data))]
    return [_error("unresolved-variable", f"`{field}` still contains {_UNRESOLVED_RE.search(value).group(0)}.",
                   f"Replace it with the real value in run.yaml (slurmctl does not expand variables).")
            for field, value in values if _UNRESOLVED_RE.search(value)]


def check_secrets(spec: RunSpec, site: SiteConfig) -> list[Finding]:
    if not spec.secrets:
        return []
    try:
        check_secrets_file(Path(site.secrets_file).expanduser(), spec.secrets)
    except PreflightError as exc:
        return [_error("secrets", exc.message, exc.hint)]
    return []


def run_preflight(spec: RunSpec, site: SiteConfig, nodes: list[NodeInfo], workdir: Path) -> list[Finding]:
    return [*check_unresolved(spec), *check_files(spec, workdir), *check_cluster_shape(spec, site, nodes),
            *check_secrets(spec, site)]


def raise_on_errors(findings: list[Finding]) -> None:
    errors = [f for f in findings if f.level == "error"]
    if errors:
        raise PreflightError(
            "nothing was submitted: " + " ".join(f"{f.message}" for f in errors),
            " ".join(f.hint for f in errors),
        )
