"""`slurmctl init`: write a run from a template. Offline: reads at most the local site.yaml.

A template is a folder of init_templates/ (one per spec.TEMPLATES name): `run.yaml.j2` is rendered
into run.yaml, every other file (the example training, e.g. a DeepSpeed config) is copied as it
is, and the Dockerfile (the template's own, else torchrun's) is written only where the site runs
container images.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import jinja2

from slurmctl.config.models import NAME_RE, TEMPLATES, SiteConfig, control_character, load_site_config
from slurmctl.errors import ConfigError, SlurmctlError, SpecError

_RENDERED = "run.yaml.j2"
_DOCKERFILE = "Dockerfile"


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
    partition, gpu_type = "gpu", None
    if site is not None:
        partition = site.smoke_partition or next(iter(site.partitions))
        gpu_type = site.partitions[partition].gpu_type

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
                name=name, partition=partition, gpu_type=gpu_type, spec_file=str(directory / "run.yaml"))
        elif name_in_template == _DOCKERFILE:
            text = env.from_string(dockerfile.read_text()).render(name=name, base_image=base_image)
        else:
            text = (source / name_in_template).read_text()
        target.write_text(text)
    return list(targets)
