"""`slurmctl init`: write a run from a template. Offline: reads at most the local site.yaml.

A template is a folder of init_templates/ (one per spec.TEMPLATES name): `run.yaml.j2` is rendered
into run.yaml, every other file (the example training, e.g. a DeepSpeed config) is copied as it
is, and the Dockerfile (the template's own, else torchrun's) is written only where the site runs
container images.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jinja2

from slurmctl.config.models import NAME_RE, TEMPLATES, SiteConfig, control_character, load_site_config
from slurmctl.errors import ConfigError, SlurmctlError, SpecError

_RENDERED = "run.yaml.j2"
_DOCKERFILE = "Dockerfile"

# GPUs on one node that each template's example is written for: FSDP, DeepSpeed ZeRO and the LoRA
# Trainer show their sharding or data parallelism over two; torchrun's is the one-GPU starter.
EXAMPLE_GPUS = {"torchrun": 1, "fsdp": 2, "hf-lora": 2, "deepspeed": 2}


@dataclass(frozen=True)
class FirstRun:
    """Where and how big the run.yaml that `init` writes asks to run."""

    partition: str
    gpu_type: str | None
    nodes: int
    gpus_per_node: int
    most_gpus: tuple[str, int] | None = None  # the site's partition with the most GPUs per node, and how many

    @property
    def scale_up(self) -> str:
        """How to ask for more GPUs than this first run does (a comment in run.yaml), or ''."""
        if self.most_gpus is None or self.most_gpus[1] <= self.gpus_per_node:
            return ""
        where, most = self.most_gpus
        if where == self.partition:
            return f"more GPUs: nodes of {where} have {most}; raise gpus_per_node up to {most}, then nodes"
        return (f"more GPUs: nodes of {where} have {most}; set partition: {where}, gpus_per_node up to {most}, "
                "then nodes")


def first_run_shape(template: str, site: SiteConfig | None) -> FirstRun:
    """A shape and partition the site's preflight accepts, from site.yaml alone (init is offline).

    One node: site.yaml does not say how many nodes a partition has, and every partition has one.
    The partition is the first that holds the template's example GPUs on a node, in this order: the
    site's smoke (dev) partition, then non-preemptible before preemptible, cheaper before dearer,
    site order last. Where none holds them, the partition with the most GPUs per node, with that many.
    """
    wanted = EXAMPLE_GPUS.get(template, 1)
    if site is None:  # offline without a site config: a neutral default the user edits
        return FirstRun("gpu", None, 1, wanted)
    order = list(site.partitions)
    with_gpus = [p for p in order if site.partitions[p].gpus_per_node > 0] or order
    ranked = sorted(with_gpus, key=lambda p: (p != site.smoke_partition, site.partitions[p].capacity != "dev",
                                              site.partitions[p].preemptible, site.partitions[p].price_per_gpu_hour,
                                              order.index(p)))
    largest = max(with_gpus, key=lambda p: (site.partitions[p].gpus_per_node, -ranked.index(p)))
    chosen = next((p for p in ranked if site.partitions[p].gpus_per_node >= wanted), largest)
    part = site.partitions[chosen]
    return FirstRun(chosen, part.gpu_type, 1, min(wanted, part.gpus_per_node),
                    (largest, site.partitions[largest].gpus_per_node))


def _template_files(template: str) -> tuple[resources.abc.Traversable, list[str]]:
    """The template's folder and the files copied as they are (sorted; no caches, no Dockerfile)."""
    source = resources.files("slurmctl.submit") / "init_templates" / template
    names = sorted(entry.name for entry in source.iterdir()
                   if entry.is_file() and entry.name not in (_RENDERED, _DOCKERFILE)
                   and not entry.name.endswith((".pyc", ".pyo")))
    return source, names


def init_run(name: str, directory: Path, template: str = "torchrun", site: SiteConfig | None = None) -> list[Path]:
    if not NAME_RE.match(name):
        raise SpecError(f"run name {name!r} is not allowed.",
                        "Use lower-case letters, digits, '.', '_' or '-' "
                        "(at most 48, starting with a letter or digit).")
    bad = control_character(str(directory))
    if bad is not None:  # the path is written into the generated run.yaml, where a newline adds fields
        raise SpecError(f"--dir {str(directory)!r} contains the control character {bad!r}.",
                        "Use a folder name without line breaks or control characters.")
    if template not in TEMPLATES:
        raise SpecError(f"unknown template '{template}'.", f"Choose one of: {', '.join(TEMPLATES)}.")
    if site is None:
        try:
            site = load_site_config()
        except ConfigError:
            site = None  # offline and no site config: write a neutral default
    shape = first_run_shape(template, site)

    source, copied = _template_files(template)
    targets: dict[Path, str] = {directory / "run.yaml": _RENDERED, **{directory / n: n for n in copied}}
    base_image = site.containers.base_image if site is not None and site.containers.runtime != "none" else None
    dockerfile = source / _DOCKERFILE
    if not dockerfile.is_file():
        dockerfile = resources.files("slurmctl.submit") / "init_templates" / "torchrun" / _DOCKERFILE
    if base_image:  # the site runs container images: a Dockerfile for `submit --build`
        targets[directory / _DOCKERFILE] = _DOCKERFILE
    existing = [str(p) for p in targets if p.exists()]
    if existing:
        raise SlurmctlError(f"{', '.join(existing)} already exist; init never overwrites.",
                            "Pick another --dir, or delete the files first.", code="init-exists")
    directory.mkdir(parents=True, exist_ok=True)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    for target, name_in_template in targets.items():
        if name_in_template == _RENDERED:
            text = env.from_string((source / _RENDERED).read_text()).render(
                name=name, shape=shape, spec_file=str(directory / "run.yaml"))
        elif name_in_template == _DOCKERFILE:
            text = env.from_string(dockerfile.read_text()).render(name=name, base_image=base_image)
        else:
            text = (source / name_in_template).read_text()
        target.write_text(text)
    return list(targets)
