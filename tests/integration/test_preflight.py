"""Preflight, cost confirmation, --force, placement and --smoke on the real local cluster, as alice
(bob holds the L4 in the placement test)."""

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, as_user, give, slurmctl, slurmctl_json, write_run

TINY = {"name": "pf-tiny", "entrypoint": "train.py", "partition": "l4-dev", "gpus_per_node": 1, "time_limit": "5m"}


def site_copy(workdir, **changes) -> dict:
    """SLURMCTL_SITE_CONFIG pointing at the installed site.yaml with `changes`."""
    data = yaml.safe_load(Path("/etc/slurmctl/site.yaml").read_text())
    path = workdir / "site.yaml"
    path.write_text(yaml.safe_dump({**data, **changes}))
    give(path)
    return {"SLURMCTL_SITE_CONFIG": str(path)}


def test_three_problems_are_listed_at_once(workdir):
    spec = write_run(workdir, {**TINY, "entrypoint": "nope.py", "env": {"URI": "${TRACKING_URI}"},
                                "time_limit": "6h"}, {"train.py": "pass\n"})
    result = slurmctl("submit", spec, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    for code in ("missing-entrypoint", "unresolved-variable", "time-limit-too-long", "3 problems"):
        assert code in result.stderr, result.stderr
    assert "✓ partition, GPU type and node shape fit the cluster" in result.stderr  # the checklist


def test_cost_threshold_then_force_is_recorded(workdir):
    env = site_copy(workdir, cost_confirm_threshold=0.001)
    spec = write_run(workdir / "run", {**TINY, "env": {"URI": "${TRACKING_URI}"}}, {"train.py": "pass\n"})
    refused = slurmctl("submit", spec, "--force", check=False, env=env)
    assert refused.returncode == 2 and "cost-not-confirmed" in refused.stderr and "--yes" in refused.stderr
    result = slurmctl_json("submit", spec, "--force", "--yes", "--", "--hold", env=env)
    try:
        assert result["forced"] == ["unresolved-variable"]
        run_dir = Path(result["run_dir"])
        assert json.loads((run_dir / "run.json").read_text())["forced"] == ["unresolved-variable"]
        assert json.loads((run_dir / "preflight.json").read_text())["forced"] == ["unresolved-variable"]
    finally:
        as_user("alice").scancel(result["job_id"])


def test_placement_picks_the_free_partition(workdir):
    """bob holds l4-1's only GPU with a sleep job: alice's run that accepts l4-dev (cheapest) or
    h100-spot goes to h100-spot."""
    bob = as_user("bob")
    filler = str(bob.sbatch("-p", "l4-dev", "--gres=gpu:l4:1", "-t", "3", "-o", "/dev/null",
                            f"--job-name=pf-filler-{uuid.uuid4().hex[:4]}", "--wrap", "sleep 170"))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and subprocess.run(
                ["squeue", "-h", "-j", filler, "-o", "%T"], capture_output=True, text=True).stdout.strip() == "PENDING":
            time.sleep(1)  # pending behind someone else's l4 job keeps l4 busy too
        spec = write_run(workdir, {**TINY, "partition": ["l4-dev", "h100-spot"]}, {"train.py": "pass\n"})
        placed = slurmctl_json("submit", spec, "--dry-run")["placement"]
        options = {o["partition"]: o for o in placed["options"]}
        assert placed["chosen"] == "h100-spot", placed
        assert options["l4-dev"]["start_time"] > options["h100-spot"]["start_time"]
        forced = slurmctl_json("submit", spec, "--dry-run", "--where", "l4-dev")
        assert forced["placement"]["chosen"] == "l4-dev" and "--partition=l4-dev" in forced["script"]
    finally:
        bob.scancel(filler)


SITE_YAML = Path("/etc/slurmctl/site.yaml")
INSTALLED_SITE = yaml.safe_load(SITE_YAML.read_text()) if SITE_YAML.exists() else {}


@pytest.mark.skipif("smoke_verdicts_dir" not in INSTALLED_SITE,
                    reason="the cluster's installed epilog and site.yaml predate root's smoke verdicts: "
                           "rerun deploy/local/up from this checkout")
def test_smoke_on_l4_dev_gates_the_full_submit(workdir):
    """End to end through the installed epilog: the smoke job's verdict is root's, and it opens the gate."""
    code = workdir / "tiny-lm"
    shutil.copytree(REPO / "examples" / "tiny-lm", code)
    with open(code / "train.py", "a") as fh:
        fh.write(f"# {uuid.uuid4()}: a code hash of its own\n")
    give(code)
    env = site_copy(workdir, require_smoke=True)
    gated = slurmctl("submit", code / "run.yaml", "--dry-run", check=False, env=env)
    assert gated.returncode == 2 and "smoke-required" in gated.stderr and "--smoke" in gated.stderr
    smoke = slurmctl_json("submit", code / "run.yaml", "--smoke", env=env, timeout=400)
    assert smoke["placement"]["chosen"] == "l4-dev" and smoke["smoke"]["passed"], smoke["smoke"]
    run_yaml = yaml.safe_load((Path(smoke["run_dir"]) / "run.yaml").read_text())
    assert run_yaml["nodes"] == 1 and run_yaml["gpus_per_node"] == 1 and run_yaml["env"]["SLURMCTL_SMOKE"] == "1"
    steps = [json.loads(line)["step"] for line in (Path(smoke["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0]  # one step, then the drain path: checkpoint + ack
    full = slurmctl_json("submit", code / "run.yaml", "--dry-run", env=env)
    gate = next(c for c in full["checks"] if c["name"] == "smoke-gate")
    assert gate["status"] == "ok" and smoke["run_id"] in gate["note"]
    verdict = Path(INSTALLED_SITE["smoke_verdicts_dir"]) / "alice" / f"{smoke['code_hash']}.{smoke['job_id']}.json"
    assert verdict.stat().st_uid == 0  # the installed epilog's, not a file of alice's
