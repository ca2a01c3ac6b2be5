"""Checks on secrets, the container image and the platform's NCCL environment."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from slurmctl.config.models import RunSpec, SiteConfig
from slurmctl.errors import PreflightError
from slurmctl.runtime.secrets import parse_secrets_file
from slurmctl.submit.preflight.findings import CheckResult, Finding, error, warning

DIGEST_RE = re.compile(r"@sha256:[0-9a-f]{64}$")
_NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")
_MIN_SECRET_LEN = 4  # shorter values match by accident


def secrets_path(site: SiteConfig) -> Path:
    return Path(site.secrets_file).expanduser()


def check_secrets(spec: RunSpec, site: SiteConfig) -> CheckResult:
    result = CheckResult("secrets", "secrets file exists, is 0600 and has every key")
    if not spec.secrets:
        result.note = "none requested"
        return result
    path = secrets_path(site)
    try:
        st = path.stat()
    except FileNotFoundError:
        result.findings.append(error("secrets-file-missing",
                                     f"secrets file {path} does not exist but run.yaml asks for "
                                     f"{', '.join(spec.secrets)}.",
                                     f"Create it with one KEY=VALUE per line and `chmod 600 {path}`."))
        return result
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        result.findings.append(error("secrets-file-mode", f"secrets file {path} is readable by others (mode {mode:o}).",
                                     f"Run `chmod 600 {path}`."))
    if st.st_uid != os.getuid():
        result.findings.append(error("secrets-file-owner", f"secrets file {path} belongs to another user.",
                                     "Use a file you own."))
    try:
        values = parse_secrets_file(path)
    except PreflightError as exc:
        result.findings.append(error("secrets-file-invalid", exc.message, exc.hint))
        return result
    except OSError as exc:
        result.findings.append(error("secrets-file-unreadable", f"cannot read secrets file {path}: {exc.strerror}.",
                                     f"Run `chmod 600 {path}` as its owner."))
        return result
    missing = [k for k in spec.secrets if k not in values]
    if missing:
        result.findings.append(error("secrets-missing-key", f"secrets file {path} has no {', '.join(missing)}.",
                                     f"Add {' and '.join(k + '=...' for k in missing)} to it."))
    result.note = f"{len(spec.secrets)} key(s), values stay out of the script"
    return result


# Name parts that mark a credential (WANDB_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD,
# OPENAI_APIKEY). Matched per '_'-separated part, so TOKENIZERS_PARALLELISM is not one.
_CREDENTIAL_WORDS = ("KEY", "KEYS", "TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD")


def looks_like_credential(name: str) -> bool:
    return any(part.endswith(_CREDENTIAL_WORDS) for part in name.upper().split("_") if part)


def check_env_credentials(spec: RunSpec, site: SiteConfig) -> CheckResult:
    """`env:` values are written into job.sbatch and run.yaml; credentials belong under `secrets:`."""
    result = CheckResult("env-credentials", "no credentials in env: (they go under secrets:)")
    for key in spec.env:
        if looks_like_credential(key):
            result.findings.append(error(
                "credential-in-env",
                f"`env.{key}` looks like a credential; env: values are written into job.sbatch and run.yaml "
                "in the run directory, where they stay after the run.",
                f"Put {key}=... in your secrets file ({secrets_path(site)}, mode 0600), remove it from `env:` "
                f"and list it under `secrets:` in run.yaml; the job reads it at start."))
    return result


def secret_leaks(script: str, spec: RunSpec, site: SiteConfig) -> list[Finding]:
    """A secret value that made it into the rendered script (e.g. pasted into env or args)."""
    if not spec.secrets:
        return []
    try:
        values = parse_secrets_file(secrets_path(site))
    except (OSError, PreflightError):
        return []  # check_secrets reports it
    return [error("secret-in-script", f"the value of secret {key} appears in the job script.",
                  "Remove it from run.yaml env/args; list the key under `secrets:` so the job reads it at start.")
            for key in spec.secrets if len(values.get(key, "")) >= _MIN_SECRET_LEN and values[key] in script]


def check_image(spec: RunSpec, allow_mutable: bool) -> CheckResult:
    result = CheckResult("image", "container image pinned by digest")
    if not spec.image:
        result.note = "no image (runs in the site python)"
        return result
    if DIGEST_RE.search(spec.image):
        result.note = spec.image.rsplit("@", 1)[1][:19] + "…"
        return result
    name = spec.image.rsplit("/", 1)[-1]
    why = "`:latest` moves whenever someone pushes" if name.endswith(":latest") or ":" not in name \
        else "a tag can be re-pushed to different content"
    make = warning if allow_mutable else error
    result.findings.append(make(
        "mutable-image", f"image '{spec.image}' is not pinned by digest: {why}, so restarts may run other code.",
        "Use registry/repo@sha256:<digest> (`docker buildx imagetools inspect IMAGE` prints it), "
        "or pass --allow-mutable-image."))
    return result


def check_nccl_overrides(spec: RunSpec, site: SiteConfig) -> CheckResult:
    result = CheckResult("nccl", "no overrides of the platform's NCCL settings")
    for key, value in spec.env.items():
        if key in site.nccl_env and site.nccl_env[key] != value:
            result.findings.append(warning(
                "nccl-override", f"`env.{key}`={value!r} overrides the platform's {key}={site.nccl_env[key]!r}.",
                f"Remove {key} from run.yaml env unless the platform team asked you to set it."))
        elif key.startswith(_NCCL_PREFIXES) and key not in site.nccl_env:
            result.findings.append(warning(
                "nccl-override", f"`env.{key}` tunes NCCL, which the platform configures for this network.",
                f"Remove {key} from run.yaml env unless you know this fabric needs it."))
    return result
