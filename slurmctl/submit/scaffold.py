"""`slurmctl init`: write a run from a template. Offline: reads at most the local site.yaml."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import jinja2

from slurmctl.errors import ConfigError, SlurmctlError, SpecError
from slurmctl.submit.spec import NAME_RE, SiteConfig, control_character, load_site_config

TEMPLATES = ("torchrun",)


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

    source = resources.files("slurmctl.submit") / "init_templates" / template
    targets = {directory / "run.yaml": None, directory / "train.py": source / "train.py"}
    base_image = site.containers.base_image if site is not None and site.containers.runtime != "none" else None
    if base_image:  # the site runs container images: a Dockerfile for `submit --build`
        targets[directory / "Dockerfile"] = source / "Dockerfile"
    existing = [str(p) for p in targets if p.exists()]
    if existing:
        raise SlurmctlError(f"{', '.join(existing)} already exist; init never overwrites.",
                            "Pick another --dir, or delete the files first.", code="init-exists")
    directory.mkdir(parents=True, exist_ok=True)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    run_yaml = env.from_string((source / "run.yaml.j2").read_text()).render(
        name=name, partition=partition, gpu_type=gpu_type, spec_file=str(directory / "run.yaml"))
    (directory / "run.yaml").write_text(run_yaml)
    (directory / "train.py").write_text((source / "train.py").read_text())
    if base_image:
        (directory / "Dockerfile").write_text(
            env.from_string((source / "Dockerfile").read_text()).render(name=name, base_image=base_image))
    return list(targets)
