"""Where site.yaml is: $SLURMCTL_SITE_CONFIG, else /etc/slurmctl/site.yaml.

Standard library only: the read path (config.views) finds the file without importing pydantic.
"""

from __future__ import annotations

import os
from pathlib import Path

from slurmctl.errors import ConfigError

SITE_CONFIG_ENV = "SLURMCTL_SITE_CONFIG"
SITE_CONFIG_PATHS = (Path("/etc/slurmctl/site.yaml"),)


def find_site_config() -> Path:
    env = os.environ.get(SITE_CONFIG_ENV)
    if env:
        return Path(env)
    for candidate in SITE_CONFIG_PATHS:
        if candidate.exists():
            return candidate
    raise ConfigError(
        "no site configuration found (looked at $SLURMCTL_SITE_CONFIG and /etc/slurmctl/site.yaml).",
        "Ask your cluster admin for site.yaml, or on the local dev cluster run deploy/local/up, which installs it.",
    )
