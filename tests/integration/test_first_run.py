"""A first run that works out of the box, as alice on the real cluster: `slurmctl init NAME
--template T` and then, with nothing edited, `slurmctl submit run.yaml --dry-run` passes the real
preflight (sinfo, sacctmgr, the job's python importing the example's modules) and placement
(`sbatch --test-only`), for every template. The choice of shape and partition is unit-tested in
tests/unit/test_init_shape.py."""

from __future__ import annotations

import json

import pytest
import yaml

from slurmctl.config.models import TEMPLATES
from slurmctl.submit.scaffold import first_run_shape

from .conftest import REPO, as_user

CODE = {"PYTHONPATH": str(REPO)}  # this checkout's slurmctl, whatever the venv installed


@pytest.mark.parametrize("template", TEMPLATES)
def test_init_then_dry_run_passes_for_every_template(cluster, workdir, template):
    alice = as_user("alice")
    directory = workdir / f"first-{template}"
    alice.slurmctl("init", f"first-{template}", "--template", template, "--dir", directory, env=CODE)
    spec = yaml.safe_load((directory / "run.yaml").read_text())
    shape = first_run_shape(template, cluster)
    assert (spec["partition"], spec["nodes"], spec["gpus_per_node"]) == (shape.partition, 1, shape.gpus_per_node)

    done = alice.slurmctl("submit", directory / "run.yaml", "--dry-run", "--json", env=CODE, check=False,
                          timeout=240)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    result = json.loads(done.stdout)
    assert result["dry_run"] and result["job_id"] is None and result["forced"] == []
    assert all(check["status"] == "ok" for check in result["checks"]), result["checks"]
    assert not [f for f in result["findings"] if f["level"] == "error"], result["findings"]
    chosen = result["placement"]["chosen"]
    assert chosen == shape.partition and any(o["ok"] for o in result["placement"]["options"]), result["placement"]
    assert "#SBATCH" in result["script"]
