"""KEDA's demand when the pools are scaled to zero, on real daemons: production's Slurm parts
(scheduling.conf, partitions.conf, accounting.sh) on a throwaway cluster whose only node is in
h100-spot, so h100-ondemand, h100-flex and l4-dev have NO node, as in production at rest.

There Slurm gives every pending job PartitionConfig before it looks at AllowQos, the QOS limits or a
dependency, so the exporter must check them itself: a job that can never start in its partition
must not scale the pool up."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml

from .test_deploy_preemption import JOB, ours_on_22_05, runbook_step_9, submit
from .throwaway_slurm import ThrowawayCluster

REPO = Path(__file__).resolve().parents[2]
NODES = {"spot-0": "h100-spot"}  # h100-ondemand, h100-flex, l4-dev: no node (scaled to zero)


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0 or not shutil.which("slurmctld") or not shutil.which("mariadbd"):
        pytest.fail("needs root, Slurm and MariaDB (scripts/setup installs them)")
    c = ThrowawayCluster("zeropools")
    try:
        c.write(ours_on_22_05(NODES), NODES)
        c.start()
        code, first = c.first_start()  # creates the gres/gpu TRES, stops: the QOS do not exist yet
        assert code not in (None, 0), first
        acct = runbook_step_9(c)
        assert acct.returncode == 0, acct.stdout + acct.stderr
        c.start_slurm()
        c.restart_slurmctld()
        (c.dir / "job.sh").write_text(JOB)
        (c.dir / "job.sh").chmod(0o755)
        yield c
    finally:
        c.close()


def exporter_demand(c: ThrowawayCluster, monkeypatch) -> dict[tuple[str, str], float]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from slurmctl.config.models import SiteConfig
    from slurmctl.ops.exporter import build

    production = yaml.safe_load((REPO / "deploy" / "slinky" / "site.yaml").read_text())
    site = SiteConfig.model_validate({"cluster": c.name, "runs_root": str(c.dir / "runs"), "python": sys.executable,
                                      "partitions": production["partitions"]})
    monkeypatch.setenv("SLURM_CONF", str(c.conf))
    registry, _ = build(site, 15.0)
    return {(s.name, s.labels["partition"]): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples if "waiting_for_nodes" in s.name}


def test_jobs_that_can_never_start_on_a_pool_scaled_to_zero_are_not_demand(cluster, monkeypatch):
    c = cluster
    gpus8 = ["--gres=gpu:8"]
    wanted = {
        # h100-ondemand admits only production (AllowQos): plain sbatch sends alice's default, experiments
        "od-default": ("h100-ondemand", None, gpus8),
        "od-burst": ("h100-ondemand", "burst", gpus8),
        "od-production": ("h100-ondemand", "production", gpus8),                  # counted
        # burst: MaxTRESPerUser gres/gpu=16; 24 GPUs never fit; 16 + 8 of one user: one of the two
        "flex-burst-3x8": ("h100-flex", "burst", ["-N", "3", *gpus8]),
        "flex-burst-2x8": ("h100-flex", "burst", ["-N", "2", *gpus8]),
        "flex-burst-1x8": ("h100-flex", "burst", gpus8),
        "flex-exp-5x8": ("h100-flex", "experiments", ["-N", "5", *gpus8]),       # experiments: 32 per user
        "flex-dev": ("h100-flex", "dev", []),                                      # dev: only on l4-dev
        "flex-production": ("h100-flex", "production", []),                       # counted
        "flex-held": ("h100-flex", "production", ["--hold"]),
        # a dependency on a job Slurm does not know is lifted (the job starts once there are nodes, as
        # spot-missing-dependency below shows where a node is): demand like any other
        "flex-missing-dependency": ("h100-flex", "production", ["--dependency=afterok:999999"]),
        "spot-missing-dependency": ("h100-spot", "production", ["--dependency=afterok:999999"]),
        # l4-dev admits dev and experiments; its partition QOS dev allows one job and one GPU per user
        "l4-production": ("l4-dev", "production", []),
        "l4-first": ("l4-dev", None, ["--gres=gpu:1"]),
        "l4-second": ("l4-dev", None, ["--gres=gpu:1"]),
        # no A3 node (site.yaml: 208 vCPUs, 1872 GiB, H100) can ever hold these: never demand
        "flex-cpus": ("h100-flex", "production", ["-c", "256"]),
        "flex-mem": ("h100-flex", "production", ["--mem=4000000"]),
        "flex-l4type": ("h100-flex", "production", ["--gres=gpu:l4:1"]),
        # ten tasks, three at a time: three nodes' worth of demand, not one
        "flex-array": ("h100-flex", "production", ["-a", "0-9%3"]),
        # h100-ondemand refuses experiments, h100-flex takes it: counted for flex
        "flex-or-od-experiments": ("h100-flex,h100-ondemand", "experiments", gpus8),
    }
    ids, refused = {}, {}
    for name, (partition, qos, extra) in wanted.items():
        job_id, msg = submit(c, name, partition, qos, extra)
        (ids if job_id else refused)[name] = job_id or msg
    after, msg = submit(c, "flex-after-production", "h100-flex", "production",
                        [f"--dependency=afterok:{ids['flex-production']}"])
    assert after, msg
    time.sleep(8)  # scheduler passes: the reasons are set
    queue = c.run(["squeue", "-h", "-o", "%A|%j|%P|%q|%T|%D|%b|%r|%E"]).stdout
    demand = exporter_demand(c, monkeypatch)
    # what the exporter read, as tests/unit/test_exporter_qos.py replays it
    print("CAPTURE scontrol:\n" + c.run(["scontrol", "show", "partition", "-o"]).stdout)
    print("CAPTURE sacctmgr:\n" + c.run(["sacctmgr", "-n", "-P", "show", "qos",
                                          "format=Name,MaxTRES,MaxTRESPU,GrpTRES,MaxJobsPU,MaxWall"]).stdout)
    print(f"\nrefused at submit: {refused}\nsqueue:\n{queue}exporter: {demand}")
    print(c.run(["squeue", "-h", "-O", "JobID:8,Name:26,tres-alloc:70,ArrayTaskID:12"]).stdout)
    # every job sent to a partition with no node pends with PartitionConfig (Slurm's reason says nothing
    # of AllowQos or the QOS limits there), but for a hold and a dependency on a job not yet done
    reasons = {line.split("|")[1]: line.split("|")[7] for line in queue.splitlines()}
    assert reasons.pop("flex-held") == "JobHeldUser" and reasons.pop("flex-after-production") == "Dependency"
    assert reasons.pop("spot-missing-dependency") == "None", queue  # running: the dependency was lifted
    # a job sent to several partitions: the reason of the one that refuses its QOS
    assert reasons.pop("flex-or-od-experiments").startswith("Job's QOS not permitted"), queue
    assert set(reasons.values()) == {"PartitionConfig"}, queue
    assert not refused, refused
    waiting = {p: demand[("slurmctl_jobs_waiting_for_nodes", p)] for p in ("h100-ondemand", "h100-flex", "l4-dev")}
    # h100-ondemand: od-production only; h100-flex: flex-production, flex-missing-dependency, one of
    # the two burst jobs that do not fit alice's 16 burst GPUs together, three tasks of flex-array and
    # flex-or-od-experiments; l4-dev: one of alice's two jobs (dev: one job per user)
    assert waiting == {"h100-ondemand": 1, "h100-flex": 7, "l4-dev": 1}, queue
    assert demand[("slurmctl_job_waiting_for_nodes_max_nodes", "h100-flex")] in (1, 2), queue
