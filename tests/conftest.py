from pathlib import Path

import pytest

from slurmctl.config.models import SiteConfig, load_site_config

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def local_site() -> SiteConfig:
    """The shipped site config of the local cluster (deploy/local/site.yaml)."""
    return load_site_config(REPO / "deploy" / "local" / "site.yaml")
