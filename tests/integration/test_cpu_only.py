"""A CPU-only run on the real cluster, as alice: gpus_per_node 0 with procs_per_node 2 gets 2 x
cpus_per_proc CPUs and its `mem:`, and costs what the site's CPU price says, in the estimate and in
`slurmctl cost`."""

import os
import time

import pytest
import yaml

from slurmctl.config.locate import find_site_config

from .conftest import REPO, slurmctl_json, write_run

TRAIN = """import os
import torch.distributed as dist

dist.init_process_group("gloo")
t = __import__("torch").ones(1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {int(t.item())}", flush=True)
dist.destroy_process_group()
"""


def test_cpu_only_run_gets_its_cpus_and_memory_and_is_priced(workdir, alice):
    # the installed site with the partitions (and CPU prices) this repository ships in deploy/local/site.yaml
    site = yaml.safe_load(find_site_config().read_text())
    site["partitions"] = yaml.safe_load((REPO / "deploy" / "local" / "site.yaml").read_text())["partitions"]
    price = site["partitions"]["l4-dev"]["price_per_cpu_hour"]
    assert price > 0
    site_file = workdir / "site.yaml"
    site_file.write_text(yaml.safe_dump(site))
    os.chown(site_file, alice.uid, alice.gid)
    env = {"SLURMCTL_SITE_CONFIG": str(site_file)}
    spec = write_run(workdir / "cpu", {"name": "cpu-only", "entrypoint": "train.py", "partition": "l4-dev",
                                       "gpus_per_node": 0, "procs_per_node": 2, "cpus_per_proc": 1, "mem": "1G",
                                       "time_limit": "5m"}, {"train.py": TRAIN})
    dry = slurmctl_json("submit", spec, "--dry-run", env=env)
    assert "#SBATCH --cpus-per-task=2" in dry["script"] and "#SBATCH --mem=1G" in dry["script"]
    assert "--gres" not in dry["script"] and "--nproc-per-node=2" in dry["script"]
    assert dry["estimate"]["cpus"] == 2 and dry["estimate"]["max_usd"] == pytest.approx(2 * 5 / 60 * price, abs=0.01)
    run = slurmctl_json("submit", spec, env=env)
    deadline = time.monotonic() + 120
    while (status := slurmctl_json("status", run["run_id"], env=env))["state"] not in {"COMPLETED", "FAILED"}:
        assert time.monotonic() < deadline, status
        time.sleep(2)
    assert status["state"] == "COMPLETED", status
    tres = alice.run(["sacct", "-n", "-X", "-P", "-j", str(run["job_id"]), "-o", "AllocTRES"]).stdout
    assert "cpu=2" in tres and "mem=1G" in tres, tres
    cost = slurmctl_json("cost", run["run_id"], env=env)
    (attempt,) = cost["attempts"]
    assert attempt["gpus"] == 0 and cost["cost_usd"] > 0
    elapsed = attempt["elapsed_s"]
    assert 0 < cost["cost_usd"] <= 2 * elapsed / 3600 * price + 1e-9  # list price, less any off-peak discount
