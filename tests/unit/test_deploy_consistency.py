"""One source of truth for partitions, GPU types and pools across every deployment file.

Terraform (deploy/gke, parsed with python-hcl2), the Slinky Helm values (deploy/slinky), the
shared slurm.conf parts (deploy/slurm), the local cluster (deploy/local/site.yaml and the
slurm.conf that deploy/local/up writes) must name the same partitions with the same GPUs.
Kubernetes manifests and pod specs are schema-checked offline with kubernetes-validate. The Helm
values' keys are checked against the pinned Slinky release in test_deploy_slinky.py, and the
project's chart is rendered by the real helm in test_deploy_chart.py.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import hcl2
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PRODUCTION_PARTITIONS = {"h100-ondemand", "h100-spot", "h100-flex", "l4-dev"}
ACCELERATOR_GPU_TYPE = {"nvidia-h100-80gb": "h100", "nvidia-l4": "l4"}
# vCPUs and memory (MiB) of the pools' machine types (cloud.google.com/compute/docs/gpus: A3 High
# a3-highgpu-8g 208 vCPUs, 1,872 GB; G2 g2-standard-8 8 vCPUs, 32 GB; GB as Compute Engine counts it, GiB)
MACHINE_SHAPE = {"a3-highgpu-8g": (208, 1872 * 1024), "g2-standard-8": (8, 32 * 1024)}
K8S_VERSION = "1.30"

# slurm.conf keys the Slinky operator (1.1.2, controller_config.go) writes itself: a line in our
# extraConf would replace its value (SlurmctldParameters: configless mode lost; TaskPlugin: no GPU
# isolation) and makes slurmctld log "specified more than once" as an error at every start.
OPERATOR_OWNED = {"ClusterName", "SlurmUser", "SlurmctldHost", "SlurmctldPort", "StateSaveLocation", "SlurmdUser",
                  "SlurmdPort", "SlurmdSpoolDir", "GresTypes", "AuthType", "CredType", "AuthAltTypes",
                  "AuthAltParameters", "AuthInfo", "SlurmctldParameters", "ProctrackType", "TaskPlugin",
                  "SelectTypeParameters", "MetricsType", "AccountingStorageType", "AccountingStorageHost",
                  "AccountingStoragePort", "JobAcctGatherType", "Prolog", "Epilog", "PrologSlurmctld",
                  "EpilogSlurmctld", "SlurmctldLogFile", "SlurmdLogFile", "PrologFlags", "AccountingStorageTRES",
                  "CommunicationParameters", "SlurmSchedLogFile", "LogTimeFormat", "MaxNodeCount",
                  "ReturnToService"}
OPERATOR_FACTS = REPO / "tests" / "fixtures" / "slinky" / "slurm-operator-1.1.2.json"


def _unquote(value):
    """python-hcl2 keeps HCL string quotes: '"x"' -> 'x', recursively."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    if isinstance(value, dict):
        return {_unquote(k): _unquote(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unquote(v) for v in value]
    return value


def _terraform() -> dict:
    merged: dict = {}
    for path in sorted((DEPLOY / "gke").glob("*.tf")):
        with path.open() as f:
            for key, blocks in _unquote(hcl2.load(f)).items():
                merged.setdefault(key, []).extend(blocks)
    return merged


def _tf_variable(tf: dict, name: str) -> dict:
    return next(block[name] for block in tf["variable"] if name in block)


def _tf_resources(tf: dict, kind: str) -> dict:
    return {name: body for block in tf["resource"] if kind in block for name, body in block[kind].items()}


def _gpu_pools() -> dict:
    return _tf_variable(_terraform(), "gpu_pools")["default"]


def _values() -> dict:
    return yaml.safe_load((DEPLOY / "slinky" / "values.yaml").read_text())


def _enabled(section: dict) -> dict:
    return {name: body for name, body in section.items() if body.get("enabled")}


def _conf_lines(text: str, key: str) -> dict[str, dict[str, str]]:
    """`PartitionName=x A=1 B=2` lines -> {x: {A: 1, B: 2}}."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(f"{key}="):
            fields = dict(part.split("=", 1) for part in line.split())
            found[fields.pop(key)] = fields
    return found


def _conf_settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in map(str.strip, text.splitlines())
                if line and not line.startswith("#") and "=" in line)


def _shared_partitions() -> dict[str, dict[str, str]]:
    return _conf_lines((DEPLOY / "slurm" / "partitions.conf").read_text(), "PartitionName")


def _local_slurm_conf() -> str:
    """The slurm.conf heredoc that deploy/local/up writes to /etc/slurm/slurm.conf."""
    return (DEPLOY / "local" / "up").read_text()


def _gres(spec: str) -> tuple[str, int]:
    m = re.fullmatch(r"gpu:([a-z0-9]+):(\d+)", spec)
    assert m, f"GRES {spec!r} is not gpu:TYPE:COUNT"
    return m.group(1), int(m.group(2))


# --- syntax and schema ------------------------------------------------------------------------
def test_terraform_parses_and_is_formatted():
    tf = _terraform()
    assert {"terraform", "provider", "variable", "resource", "output"} <= set(tf)
    if shutil.which("terraform"):  # in the dev image; providers cannot be fetched offline, so no `validate`
        fmt = subprocess.run(["terraform", "fmt", "-check", "-recursive", "-diff", str(DEPLOY / "gke")],
                             capture_output=True, text=True)
        assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_kubernetes_manifests_match_the_api_schema():
    docs = [d for f in sorted((DEPLOY / "gke" / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
    assert {d["kind"] for d in docs} >= {"PersistentVolume", "PersistentVolumeClaim"}
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_helm_pod_specs_are_valid_kubernetes_pod_specs():
    values = _values()
    # every pod spec we extend must be a valid Kubernetes PodSpec once the chart adds its container
    pods = {f"nodeset/{n}": (s.get("podSpec", {}), s.get("slurmd", {}))
            for n, s in _enabled(values["nodesets"]).items()}
    pods.update({f"loginset/{n}": (s.get("podSpec", {}), s.get("login", {}))
                 for n, s in _enabled(values["loginsets"]).items()})
    pods.update({c: (values[c].get("podSpec", {}), {}) for c in ("controller", "restapi", "accounting")})
    for where, (pod_spec, container) in pods.items():
        container = {"name": "main", "image": "slurm", **{k: v for k, v in container.items() if k != "image"}}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": where.replace("/", "-")},
               "spec": {**pod_spec, "containers": [container]}}
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def _scheduling() -> str:
    return (DEPLOY / "slurm" / "scheduling.conf").read_text()


def test_slurm_parts_compose_with_the_operator_and_preempt_by_qos():
    settings = _conf_settings(_scheduling())
    assert set(settings) & OPERATOR_OWNED == set(), "the operator writes these: " + str(set(settings) & OPERATOR_OWNED)
    assert settings["PreemptType"] == "preempt/qos" and settings["PreemptMode"] == "REQUEUE"
    assert settings["PreemptParameters"] == "send_user_signal"
    assert re.fullmatch(r"\d\d:\d\d:\d\d", settings["PreemptExemptTime"])
    assert settings["JobRequeue"] == "1" and int(settings["SlurmdTimeout"]) <= 300  # node loss requeues
    assert settings["PriorityType"] == "priority/multifactor" and int(settings["PriorityWeightFairshare"]) > 0
    assert {"associations", "qos", "limits"} <= set(settings["AccountingStorageEnforce"].split(","))
    # the task/cgroup plugin and GPU isolation come from the operator only with cgroup.conf's plugin on
    cgroup = _conf_settings(_values()["configFiles"]["cgroup.conf"])
    assert cgroup["CgroupPlugin"] == "cgroup/v2" and cgroup["ConstrainDevices"] == "yes"
    assert subprocess.run(["bash", "-n", str(DEPLOY / "slurm" / "accounting.sh")]).returncode == 0


def test_qos_tiers_preempt_downwards_and_dev_is_bound_to_l4_dev():
    script = (DEPLOY / "slurm" / "accounting.sh").read_text()
    qos = {m.group(1): m.group(2) for m in re.finditer(r"modify qos (\w+) set (.+?)(?<!\\)\n", script, re.S)}
    preempts = {name: set(re.search(r"Preempt=(\S+)", opts).group(1).split(","))
                for name, opts in qos.items() if "Preempt=" in opts}
    assert preempts == {"production": {"experiments", "burst"}, "experiments": {"burst"}}
    assert all("PreemptMode=REQUEUE" in qos[n] for n in ("production", "experiments", "burst"))
    shared = _shared_partitions()
    assert shared["l4-dev"]["QOS"] == "dev"
    for name, part in shared.items():
        allowed = set(part["AllowQos"].split(","))
        assert ("dev" in allowed) == (name == "l4-dev"), name
        if part["PreemptMode"] == "OFF":
            # preempt/qos ignores a partition's PreemptMode: no admitted QOS may preempt another one
            pairs = {(a, b) for a in allowed for b in preempts.get(a, set()) & allowed}
            assert pairs == set(), f"{name} promises no preemption, but these tiers preempt there: {pairs}"
    assert "experiments" in shared["l4-dev"]["AllowQos"].split(",")  # the default QOS: `slurmctl dev` needs no --qos


# --- one source of truth -------------------------------------------------------------------------
def test_terraform_pools_are_the_production_partitions():
    tf = _terraform()
    pools = _gpu_pools()
    assert set(pools) == PRODUCTION_PARTITIONS
    assert pools["h100-spot"]["spot"] and pools["h100-flex"]["flex_start"]
    assert not any(p["spot"] and p["flex_start"] for p in pools.values())
    node_pools = _tf_resources(tf, "google_container_node_pool")
    gpu = node_pools["gpu"]
    assert gpu["initial_node_count"] == 0 and gpu["autoscaling"][0]["total_min_node_count"] == 0
    config = gpu["node_config"][0]
    taint = config["taint"][0]
    assert (taint["key"], taint["value"], taint["effect"]) == ("slurmctl/pool", "${each.key}", "NO_SCHEDULE")
    assert config["labels"]["slurmctl/pool"] == "${each.key}"
    # flex-start (plain pods scale it), not queued provisioning (needs ProvisioningRequests Slinky never makes)
    assert "queued_provisioning" not in gpu and "each.value.flex_start" in config["flex_start"]
    assert "guest_accelerator" not in node_pools["system"]["node_config"][0]  # the control plane's pool
    for pool in pools.values():
        assert pool["accelerator_type"] in ACCELERATOR_GPU_TYPE
    # a release-channel cluster rejects auto_upgrade = false on any pool
    assert _tf_resources(tf, "google_container_cluster")["ml"]["release_channel"]
    for name, body in node_pools.items():
        assert body["management"][0]["auto_upgrade"] is True, name


def test_terraform_private_nodes_have_nat_and_the_webhook_port_is_open():
    tf = _terraform()
    cluster = _tf_resources(tf, "google_container_cluster")["ml"]
    assert cluster["private_cluster_config"][0]["enable_private_nodes"] is True
    nat = _tf_resources(tf, "google_compute_router_nat")["nat"]
    assert nat["source_subnetwork_ip_ranges_to_nat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert _tf_resources(tf, "google_compute_subnetwork")["nodes"]["private_ip_google_access"] is True
    port = json.loads(OPERATOR_FACTS.read_text())["webhookPort"]
    [rule] = [r for r in _tf_resources(tf, "google_compute_firewall").values()
              if any(str(port) in a["ports"] for a in r["allow"])]
    assert rule["source_ranges"] == ["${var.master_ipv4_cidr_block}"]
    assert cluster["private_cluster_config"][0]["master_ipv4_cidr_block"] == "${var.master_ipv4_cidr_block}"
    for body in _tf_resources(tf, "google_container_node_pool").values():
        assert set(rule["target_tags"]) <= set(body["node_config"][0]["tags"])


def test_terraform_control_plane_answers_only_authorized_networks():
    tf = _terraform()
    cluster = _tf_resources(tf, "google_container_cluster")["ml"]
    [authorized] = cluster["master_authorized_networks_config"]
    assert authorized["gcp_public_cidrs_access_enabled"] is False
    [blocks] = authorized["dynamic"]
    assert blocks["cidr_blocks"]["for_each"] == "${var.master_authorized_cidrs}"
    variable = next(v["master_authorized_cidrs"] for v in tf["variable"] if "master_authorized_cidrs" in v)
    assert "default" not in variable  # the operator must name the ranges
    assert "0.0.0.0/0" in variable["validation"][0]["condition"]


def test_helm_nodesets_and_partitions_match_the_pools():
    values, pools = _values(), _gpu_pools()
    nodesets, partitions = _enabled(values["nodesets"]), _enabled(values["partitions"])
    assert set(nodesets) == set(partitions) == set(pools)
    for name, nodeset in nodesets.items():
        pool = pools[name]
        gpu_type, count = _gres(nodeset["extraConfMap"]["Gres"][0])
        assert (gpu_type, count) == (ACCELERATOR_GPU_TYPE[pool["accelerator_type"]], pool["gpus_per_node"]), name
        assert nodeset["slurmd"]["resources"]["limits"]["nvidia.com/gpu"] == count
        assert nodeset["podSpec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] == name
        assert {"key": "slurmctl/pool", "operator": "Equal", "value": name, "effect": "NoSchedule"} \
            in nodeset["podSpec"]["tolerations"]
        assert partitions[name]["nodesets"] == [name]
    for component in ("controller", "restapi", "accounting"):
        assert values[component]["podSpec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "system"}
    for loginset in _enabled(values["loginsets"]).values():
        assert loginset["podSpec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "system"}


def test_helm_partition_options_equal_the_shared_slurm_parts():
    shared = _shared_partitions()
    assert set(shared) == PRODUCTION_PARTITIONS
    for name, partition in _enabled(_values()["partitions"]).items():
        assert {k: str(v) for k, v in partition["configMap"].items()} == shared[name], name


def test_accounting_knows_every_gpu_type_and_the_quota_total():
    pools = _gpu_pools()
    gpu_types = {ACCELERATOR_GPU_TYPE[p["accelerator_type"]] for p in pools.values()}
    assert gpu_types == {"h100", "l4"}
    # the operator's AccountingStorageTRES is gres/gpu alone (ours would be a duplicate key): typed GPU
    # TRES do not exist in production, so every cap is on gres/gpu
    script = (DEPLOY / "slurm" / "accounting.sh").read_text()
    assert re.findall(r"TRES\w*=gres/gpu:", script) == []
    h100_total = sum(p["max_nodes"] * p["gpus_per_node"] for p in pools.values()
                     if p["accelerator_type"] == "nvidia-h100-80gb")
    script = (DEPLOY / "slurm" / "accounting.sh").read_text()
    assert f"H100_GPUS=${{H100_GPUS:-{h100_total}}}" in script
    assert {"pct 60", "pct 30", "pct 10"} <= set(re.findall(r"pct \d+", script))


def test_local_cluster_is_a_consistent_subset_of_production():
    pools, shared = _gpu_pools(), _shared_partitions()
    site = yaml.safe_load((DEPLOY / "local" / "site.yaml").read_text())["partitions"]
    conf = _local_slurm_conf()
    local_parts, local_nodes = _conf_lines(conf, "PartitionName"), _conf_lines(conf, "NodeName")
    assert set(site) == set(local_parts) and set(site) <= PRODUCTION_PARTITIONS
    for name, part in site.items():
        pool = pools[name]
        assert part["gpu_type"] == ACCELERATOR_GPU_TYPE[pool["accelerator_type"]], name
        assert part["gpus_per_node"] == pool["gpus_per_node"], name
        node_names = _expand(local_parts[name]["Nodes"])
        assert {_gres(local_nodes[n]["Gres"]) for n in node_names} == {(part["gpu_type"], part["gpus_per_node"])}
        # same preemption semantics as production (local GraceTime is shorter so tests stay fast)
        assert local_parts[name].get("PreemptMode", "OFF") == shared[name].get("PreemptMode", "OFF"), name
        assert part.get("preemptible", False) == (shared[name].get("PreemptMode") == "REQUEUE"), name
    tiers = {n: int(p.get("PriorityTier", 1)) for n, p in local_parts.items()}
    assert tiers["h100-ondemand"] > tiers["h100-spot"]
    local_tres = set(re.search(r"^AccountingStorageTRES=(\S+)", conf, re.M).group(1).split(","))
    assert {f"gres/gpu:{p['gpu_type']}" for p in site.values()} <= local_tres


def _expand(nodes: str) -> list[str]:
    """'h100-[1-3]' -> ['h100-1', 'h100-2', 'h100-3']; 'l4-1' -> ['l4-1']."""
    m = re.fullmatch(r"(.*)\[(\d+)-(\d+)\]", nodes)
    return [f"{m.group(1)}{i}" for i in range(int(m.group(2)), int(m.group(3)) + 1)] if m else nodes.split(",")


@pytest.mark.parametrize("line", ["SlurmctldParameters=preempt_send_user_signal", "TaskPlugin=task/affinity",
                                  "Prolog=/etc/slurm/prolog.d/*", "PrologFlags=Alloc"])
def test_a_slurm_conf_line_that_clobbers_the_operator_fails(line, monkeypatch):
    text = _scheduling() + "\n" + line + "\n"
    monkeypatch.setitem(globals(), "_scheduling", lambda: text)
    with pytest.raises(AssertionError):
        test_slurm_parts_compose_with_the_operator_and_preempt_by_qos()


@pytest.mark.parametrize("broken", ["auto_upgrade", "queued_provisioning", "no_firewall_tag"])
def test_terraform_checks_catch_the_old_mistakes(broken, monkeypatch):
    tf = _terraform()
    pools = _tf_resources(tf, "google_container_node_pool")
    if broken == "auto_upgrade":
        pools["gpu"]["management"][0]["auto_upgrade"] = "${!each.value.flex_start}"
        check = test_terraform_pools_are_the_production_partitions
    elif broken == "queued_provisioning":
        pools["gpu"]["queued_provisioning"] = [{"enabled": True}]
        check = test_terraform_pools_are_the_production_partitions
    else:
        pools["system"]["node_config"][0]["tags"] = []
        check = test_terraform_private_nodes_have_nat_and_the_webhook_port_is_open
    monkeypatch.setitem(globals(), "_terraform", lambda: tf)
    with pytest.raises(AssertionError):
        check()


@pytest.mark.parametrize("broken", ["pool", "gres"])
def test_the_consistency_check_catches_drift(broken, monkeypatch):
    """The checks above fail when one file drifts (guards against a test that cannot fail)."""
    values = _values()
    if broken == "pool":
        values["nodesets"]["l4-dev"]["podSpec"]["nodeSelector"] = {"cloud.google.com/gke-nodepool": "l4-devv"}
    else:
        values["nodesets"]["h100-spot"]["extraConfMap"]["Gres"] = ["gpu:h100:4"]
    monkeypatch.setitem(globals(), "_values", lambda: values)
    with pytest.raises(AssertionError):
        test_helm_nodesets_and_partitions_match_the_pools()


# --- slurmctl's production site config ------------------------------------------------------------
def test_the_production_site_config_loads_and_sends_each_partition_a_qos_it_admits():
    from slurmctl.config.models import load_site_config

    site = load_site_config(DEPLOY / "slinky" / "site.yaml")  # slurmctl's own loader: what the login pods read
    assert set(site.partitions) == PRODUCTION_PARTITIONS
    pools = _gpu_pools()
    for name, part in site.partitions.items():
        assert part.gpus_per_node == pools[name]["gpus_per_node"], name
        assert part.gpu_type == ACCELERATOR_GPU_TYPE[pools[name]["accelerator_type"]], name
        assert part.preemptible == pools[name]["spot"], name
        assert part.max_nodes == pools[name]["max_nodes"], name  # autoscaled from zero up to the pool's size
        # the node shape the exporter checks pending jobs against is the pool's machine type
        assert (part.cpus_per_node, part.mem_per_node_mb) == MACHINE_SHAPE[pools[name]["machine_type"]], name
    assert site.cluster == yaml.safe_load((DEPLOY / "slinky" / "values.yaml").read_text())["clusterName"]
    shared, script = _shared_partitions(), (DEPLOY / "slurm" / "accounting.sh").read_text()
    account_qos = set(re.search(r"modify account .* set Fairshare=\S+ *\\?\n? *QOS=([\w,]+)", script)
                      .group(1).split(","))
    account_default = re.search(r"DefaultQOS=(\w+)", script).group(1)
    for name, part in site.partitions.items():
        allowed = set(shared[name]["AllowQos"].split(","))
        sent = part.qos or account_default
        # the QOS a plain `slurmctl submit` there runs under is one the partition admits (else the job
        # pends for good, QOSNotAllowed) and one every user's association has (else sbatch refuses it)
        assert sent in allowed and sent in account_qos, (name, sent, allowed, account_qos)
    assert site.partitions["h100-ondemand"].qos == "production"


def test_every_user_has_one_association_not_one_per_partition():
    """One association per user and account: one fair-share standing, and jobs may name several
    partitions (Slurm refuses a multi-partition job of a user with a partition-bound association)."""
    script = (DEPLOY / "slurm" / "accounting.sh").read_text()
    adds = re.findall(r"add user .*", script)
    assert adds and not [a for a in adds if "Partition" in a], adds
    assert "delete user where name=" in script  # partition-bound ones from before are removed
