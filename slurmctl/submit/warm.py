"""`slurmctl data warm SRC --partition P`: stage a dataset into the node caches of a partition before a
big run. It is an ordinary run (run dir, status, cost) whose job stages SRC on every node of the
partition and then exits: the staging is the same job step every run with `data:` has, so the entries
it leaves are what the later runs of the same user find."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import ValidationError

from slurmctl.config.models import DataSource, SiteConfig
from slurmctl.errors import PreflightError, PreflightFailed, SpecError
from slurmctl.fsutil import write_atomic
from slurmctl.rundir import RUN_YAML
from slurmctl.slurm.client import SlurmClient
from slurmctl.submit.submission import SubmitOptions, SubmitResult, submit

WARM_HINTS = {
    "missing-data": "Check SRC (bucket and prefix, e.g. `aws s3 ls SRC/` or `gcloud storage ls SRC`), or upload the "
                    "data first.",
    "no-shared-cache": "Use `--cache node`, or ask the platform team for a shared tier (site.yaml "
                       "data.shared_cache_dir).",
}
WARM_ENTRYPOINT = "warm.py"
WARM_SCRIPT = '"""Written by `slurmctl data warm`: the job step before this one staged the dataset."""\n'


def warm_spec(src: str, cache: str, partition: str, nodes: int, site: SiteConfig) -> dict:
    if partition not in site.partitions:
        raise SpecError(f"--partition {partition!r} is not a partition of cluster {site.cluster}.",
                        f"Pass one of: {', '.join(sorted(site.partitions))}.")
    try:
        dataset = DataSource.model_validate({"src": src, "cache": cache})
    except ValidationError as exc:
        problems = "; ".join(err["msg"].removeprefix("Value error, ") for err in exc.errors())
        raise SpecError(f"SRC {src!r} is not an object-store dataset: {problems}.",
                        "Pass it as s3://bucket/prefix or gs://bucket/prefix, e.g. "
                        "`slurmctl data warm s3://datasets/shards --partition P`.") from None
    if dataset.cache == "none":
        raise SpecError("`data warm` with --cache none stages nothing.", "Use --cache node or --cache shared.")
    name = "warm-" + re.sub(r"[^a-z0-9._-]", "-", dataset.name.lower())[:40]
    return {"name": name, "entrypoint": WARM_ENTRYPOINT, "partition": partition, "nodes": nodes,
            "gpus_per_node": 0, "time_limit": "2h", "max_restarts": 0,
            "data": [{"src": dataset.src, "cache": dataset.cache, "name": dataset.name}]}


def warm(src: str, partition: str, nodes: int, site: SiteConfig, client: SlurmClient, workdir: Path,
         cache: str = "node") -> SubmitResult:
    """`workdir`: the user's own directory for the warm run's tiny spec (~/.cache/slurmctl/warm/<name>)."""
    spec = warm_spec(src, cache, partition, nodes, site)
    directory = workdir / spec["name"]
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(directory / WARM_ENTRYPOINT, WARM_SCRIPT)
    write_atomic(directory / RUN_YAML, yaml.safe_dump(spec, sort_keys=False))
    try:
        return submit(directory / RUN_YAML, site, client, SubmitOptions(where=partition, yes=True))
    except PreflightFailed as exc:
        # the checks speak of run.yaml and --force; warm has neither: say it in the command's own terms
        hints = [WARM_HINTS.get(f.code, f.hint) for f in exc.report.errors]
        raise PreflightError(
            "nothing was staged: " + " ".join(f"({i}) {f.message}" for i, f in enumerate(exc.report.errors, 1)),
            " ".join(dict.fromkeys(hints))) from None
