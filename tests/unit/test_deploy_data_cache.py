"""The GKE files give every compute node set the node data cache on the VM's local SSD, where the site
config says it is: the slurmd container mounts it at site.yaml data.node_cache_dir, the volume is a
hostPath on GKE's local-SSD ephemeral storage (which main.tf gives every GPU pool), and an init container
makes it root's, 0755 (the prolog makes each job user's 0700 directory in it)."""

from pathlib import Path

import hcl2
import yaml

from slurmctl.config.models import load_site_config

REPO = Path(__file__).resolve().parents[2]
LOCAL_SSD = "/mnt/stateful_partition/kube-ephemeral-ssd/"


def test_every_compute_nodeset_mounts_the_local_ssd_cache_at_the_site_cache_dir():
    site = load_site_config(REPO / "deploy" / "slinky" / "site.yaml")
    values = yaml.safe_load((REPO / "deploy" / "slinky" / "values.yaml").read_text())
    nodesets = {n: s for n, s in values["nodesets"].items() if s.get("enabled")}
    assert nodesets and site.data.node_cache_bytes >= 2**40
    for name, nodeset in nodesets.items():
        mounts = {m["name"]: m["mountPath"] for m in nodeset["slurmd"]["volumeMounts"]}
        assert mounts.get("data-cache") == site.data.node_cache_dir, name
        volumes = {v["name"]: v for v in nodeset["podSpec"]["volumes"]}
        host = volumes["data-cache"]["hostPath"]
        assert host["path"].startswith(LOCAL_SSD) and host["type"] == "DirectoryOrCreate", name
        init = nodeset["podSpec"]["initContainers"]
        assert any("chmod 0755" in " ".join(c["command"]) and c["volumeMounts"][0]["name"] == "data-cache"
                   for c in init), name


def test_gpu_pools_have_local_ssd_for_ephemeral_storage():
    tf = hcl2.loads((REPO / "deploy" / "gke" / "main.tf").read_text())
    # python-hcl2 keeps the quotes of block labels: '"google_container_node_pool"', '"gpu"'
    pools = [r['"google_container_node_pool"'] for r in tf["resource"] if '"google_container_node_pool"' in r]
    gpu = next(p['"gpu"'] for p in pools if '"gpu"' in p)
    local_ssd = gpu["node_config"][0]["ephemeral_storage_local_ssd_config"][0]
    assert local_ssd["local_ssd_count"]
