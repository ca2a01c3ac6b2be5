"""Checks before any GPU is spent. Each check is one line of the checklist `submit` shows;
errors stop the submission (unless --force, which is recorded), warnings are shown."""

from __future__ import annotations

import getpass
from pathlib import Path

from slurmctl.config.models import RunSpec, SiteConfig
from slurmctl.errors import PreflightFailed
from slurmctl.submit.preflight.cluster import ClusterView, check_account, check_memory, check_shape, check_time_limit
from slurmctl.submit.preflight.files import (
    check_config_files,
    check_data,
    check_entrypoint,
    check_imports,
    check_placeholders,
)
from slurmctl.submit.preflight.findings import CheckResult, Finding, PreflightReport, raise_on_errors
from slurmctl.submit.preflight.security import (
    check_env_credentials,
    check_image,
    check_nccl_overrides,
    check_secrets,
    secret_leaks,
)

__all__ = ["CheckResult", "ClusterView", "Finding", "PreflightFailed", "PreflightReport", "raise_on_errors",
           "run_preflight", "secret_leaks"]


def run_preflight(spec: RunSpec, site: SiteConfig, view: ClusterView, workdir: Path, *,
                  allow_mutable_image: bool = False, smoke: bool = False, user: str | None = None) -> PreflightReport:
    """Every check runs, so a spec with three problems reports all three at once."""
    user = user or getpass.getuser()
    report = PreflightReport()
    for result in (
        check_placeholders(spec, workdir),
        check_config_files(spec, workdir),
        check_entrypoint(spec, workdir),
        check_imports(spec, workdir, spec.python or site.python),
        check_data(spec, workdir, site.data),
        check_secrets(spec, site),
        check_env_credentials(spec, site),
        check_image(spec, allow_mutable_image),
        check_shape(spec, site, view),
        check_time_limit(spec, view),
        check_account(site, view, user, spec.partitions),
        check_memory(spec, site, smoke=smoke, workdir=workdir),
        check_nccl_overrides(spec, site),
    ):
        report.add(result)
    return report
