"""Object-store datasets of a run (run.yaml `data: [{src: ...}]`): the plan the job's staging step
follows (written into the run dir at submit) and the job script's $SLURMCTL_DATA_<NAME> values.

The staging itself is slurmctl/runtime/datastage.py; the cache layout and its checks are
slurmctl/runtime/datacache.py."""

from __future__ import annotations

from slurmctl.config.models import RunSpec, SiteConfig
from slurmctl.runtime.datacache import view_path


def dataset_path(spec_dataset, site: SiteConfig, user: str, run_id: str) -> str:
    """What $SLURMCTL_DATA_<NAME> holds: the run's view in the cache, or the object-store URL (`cache: none`)."""
    if spec_dataset.cache == "none":
        return spec_dataset.src
    root = site.data.shared_cache_dir if spec_dataset.cache == "shared" else site.data.node_cache_dir
    return str(view_path(root or "", user, run_id, spec_dataset.name))


def data_plan(spec: RunSpec, site: SiteConfig, user: str, run_id: str) -> dict | None:
    if not spec.datasets:
        return None
    return {
        "datasets": [{"name": d.name, "src": d.src, "cache": d.cache, "env_var": d.env_var,
                      "path": dataset_path(d, site, user, run_id)} for d in spec.datasets],
        "node_cache_dir": site.data.node_cache_dir,
        "node_cache_budget": site.data.node_cache_bytes,
        "shared_cache_dir": site.data.shared_cache_dir,
        "shared_cache_budget": site.data.shared_cache_bytes,
        "verify_on_reuse": site.data.verify_on_reuse,
        "user_cache_share": site.data.user_cache_share,
        "staging_timeout": site.data.staging_seconds,
        "options": {d.src: site.data.client_options(d.src) for d in spec.datasets},
    }


def data_context(spec: RunSpec, site: SiteConfig, user: str, run_id: str) -> dict:
    """Template values: the exports, and whether a staging step runs before the training."""
    return {
        "datasets": [{"env_var": d.env_var, "path": dataset_path(d, site, user, run_id)} for d in spec.datasets],
        "stage_data": any(d.cache != "none" for d in spec.datasets),
    }
