"""Render sbatch scripts from sbatch_templates/ with jinja2.

StrictUndefined makes a missing variable an error instead of an empty string, and the ``q``
filter shell-quotes every user-supplied value.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import jinja2

from slurmctl import __version__
from slurmctl.errors import ConfigError

DEFAULT_TEMPLATES_DIR = Path(__file__).resolve().parent / "sbatch_templates"


def environment(templates_dir: Path | None = None) -> jinja2.Environment:
    directory = templates_dir or DEFAULT_TEMPLATES_DIR
    if not directory.is_dir():
        raise ConfigError(f"sbatch templates directory {directory} does not exist.",
                          "Set sbatch_templates_dir in site.yaml, or reinstall slurmctl from its repository.")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.globals["slurmctl_version"] = __version__
    return env


def render(template: str, context: dict, templates_dir: Path | None = None) -> str:
    try:
        return environment(templates_dir).get_template(template).render(**context)
    except jinja2.TemplateNotFound:
        raise ConfigError(f"sbatch template '{template}' not found.",
                          "Check sbatch_templates_dir in site.yaml.") from None
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"sbatch template '{template}' uses an undefined value: {exc.message}.",
                          "This is a template bug; tell the platform team.") from None
