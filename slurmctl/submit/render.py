"""Render sbatch scripts from sbatch_templates/ with jinja2.

StrictUndefined makes a missing variable an error instead of an empty string, and the ``q``
filter shell-quotes every user-supplied value. Quoting does not help on #SBATCH lines (sbatch
reads them itself, one line each) nor against a line break, so two guards run as well: before
rendering, every string in the context is checked and an error names the field it came from;
while rendering, jinja's ``finalize`` hook refuses any output value with a control character,
whatever the validation upstream missed.
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from slurmctl import __version__
from slurmctl.config.models import TEMPLATES, control_character
from slurmctl.errors import ConfigError, SpecError

# Where each context value comes from, for the error message.
_FIELD_NAMES = {
    "run_id": "the run id (made from `name`)", "run_dir": "the run directory (site.yaml `runs_root`)",
    "job_log": "the run directory (site.yaml `runs_root`)",
    "workdir": "`workdir` (default: the folder that holds run.yaml)", "partitions": "`partition` (or --where)",
    "account": "site.yaml `account`", "qos": "site.yaml `partitions: ... qos`", "gpu_type": "`gpu_type`",
    "python": "`python`",
    "entrypoint": "`entrypoint`", "args": "`args`", "env": "`env`", "nccl_env": "site.yaml `nccl_env`",
    "tracking": "`tracking`", "secrets": "`secrets`", "secrets_file": "site.yaml `secrets_file`",
    "checkpoint_dir": "`checkpoint.dir`", "image": "`image`",
}
# Written unquoted after `#SBATCH --option=`: sbatch splits those lines at whitespace and treats
# quotes and backslashes itself, so these values must be single plain words.
_SBATCH_WORDS = ("run_id", "run_dir", "job_log", "workdir", "partitions", "account", "qos", "gpu_type")
_NOT_A_WORD = re.compile(r"[\s'\"\\]")


def _strings(value: Any, where: str):
    """(where, string) for every string in a context value, dict keys included."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key, f"a key of {where}")
            yield from _strings(item, f"{where} {key}")
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item, where)


def check_context(context: dict) -> None:
    """Refuse a value that would break out of its line of the job script, naming its field."""
    for key, value in context.items():
        field = _FIELD_NAMES.get(key, f"`{key}`")
        for where, text in _strings(value, field):
            bad = control_character(text)
            if bad is not None:
                raise SpecError(
                    f"{where} is {text!r}, which contains the control character {bad!r}; in the job script it "
                    "would end its line and start a new command.",
                    "Write it on one line without control characters"
                    + (" (move run.yaml to a folder whose path has none)." if key == "workdir" else "."))
            if key in _SBATCH_WORDS and _NOT_A_WORD.search(text):
                raise SpecError(
                    f"{where} is {text!r}, which contains a space, quote or backslash; it goes on an #SBATCH line, "
                    "which sbatch splits at spaces.",
                    "Use a path or name without spaces, quotes or backslashes"
                    + (" (move the code to such a folder, or set `workdir`)." if key == "workdir" else "."))


def _one_line(value: Any) -> Any:
    """jinja2 finalize: the last guard on every {{ ... }} output (after filters such as q)."""
    if isinstance(value, str):
        bad = control_character(value)
        if bad is not None:
            raise SpecError(f"refusing to render the job script: the value {value!r} contains the control "
                            f"character {bad!r}, which would start a new line of the script.",
                            "Remove line breaks and control characters from run.yaml and site.yaml values.")
    return value


DEFAULT_TEMPLATES_DIR = Path(__file__).resolve().parent / "sbatch_templates"


def template_file(template: str = "torchrun") -> str:
    """The sbatch template of a run's `template:` (spec.TEMPLATES). fsdp, hf-lora and deepspeed extend
    torchrun.sbatch.j2 (same launch, drain and requeue) and add their environment in its
    `template_env` block."""
    if template not in TEMPLATES:
        raise SpecError(f"`template` is {template!r}, which is not a run template.",
                        f"Use one of: {', '.join(TEMPLATES)}.")
    return f"{template}.sbatch.j2"


@lru_cache(maxsize=8)  # one per process: jinja compiles a template once per Environment (submit renders 3 times)
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
        finalize=_one_line,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.globals["slurmctl_version"] = __version__
    return env


def render(template: str, context: dict, templates_dir: Path | None = None) -> str:
    check_context(context)
    try:
        return environment(templates_dir).get_template(template).render(**context)
    except jinja2.TemplateNotFound:
        raise ConfigError(f"sbatch template '{template}' not found.",
                          "Check sbatch_templates_dir in site.yaml.") from None
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"sbatch template '{template}' uses an undefined value: {exc.message}.",
                          "This is a template bug; tell the platform team.") from None
