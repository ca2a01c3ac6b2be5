"""deploy/chart rendered by the real helm (scripts/_install_helm) and every object schema-checked.

Built-in kinds: kubernetes-validate (strict: unknown fields fail). KEDA's ScaledObject: the CRD's
openAPIV3Schema of the pinned KEDA release (tests/fixtures/keda, vendored from kedacore/keda), checked
with jsonschema, unknown fields failing too. The chart must agree with the Slinky values (node set
names, service accounts), Terraform (pool sizes, Workload Identity members) and deploy/cron.
"""

import copy
import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from .test_deploy_consistency import _gpu_pools, _terraform, _tf_resources

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "chart"
HELM = os.environ.get("SLURMCTL_HELM", "/var/cache/slurmctl-tools/helm-v4.1.4/helm")
K8S_VERSION = "1.33"
KEDA_SCHEMA = REPO / "tests" / "fixtures" / "keda" / "scaledobject-v2.20.2.json"
DIGEST = "sha256:" + "0123456789abcdef" * 4
VALUES = {
    "image": f"europe-docker.pkg.dev/proj/slurm/login-slurmctl@{DIGEST}",
    "gcpServiceAccount": "slurm-workloads@proj.iam.gserviceaccount.com",
    "site": {"cluster": "ml-gke", "runs_root": "/mnt/runs/runs"},
    "network": {"ldapCIDRs": ["10.20.0.5/32"]},
    "mariadb": {"image": f"europe-docker.pkg.dev/proj/slurm/upstream/mariadb@{DIGEST}"},
}


def helm_template(values: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    if not os.access(HELM, os.X_OK):
        pytest.fail(f"no helm at {HELM}: run scripts/_install_helm (scripts/setup does)")
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return subprocess.run([HELM, "template", "slurmctl", str(CHART), "-n", "slurm", "-f", str(path)],
                          capture_output=True, text=True, timeout=60)


def render(tmp_path: Path, values: dict | None = None) -> list[dict]:
    out = helm_template(VALUES if values is None else values, tmp_path)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _jsonschema(openapi):
    """openAPIV3Schema -> JSON schema: int-or-string, and unknown fields rejected like the API server."""
    if isinstance(openapi, list):
        return [_jsonschema(s) for s in openapi]
    if not isinstance(openapi, dict):
        return openapi
    schema = {k: _jsonschema(v) for k, v in openapi.items() if not k.startswith("x-kubernetes")}
    if openapi.get("x-kubernetes-int-or-string"):
        schema.pop("type", None)
        schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in schema and not openapi.get("x-kubernetes-preserve-unknown-fields"):
        schema.setdefault("additionalProperties", False)
    return schema


def schema_errors(doc: dict) -> list[str]:
    if doc["apiVersion"] == "keda.sh/v1alpha1":
        facts = json.loads(KEDA_SCHEMA.read_text())
        assert doc["kind"] == facts["kind"], doc["kind"]
        schema = _jsonschema(facts["openAPIV3Schema"])
        schema["properties"]["metadata"] = {"type": "object"}
        return [f"{doc['kind']}/{doc['metadata']['name']} {list(e.path)}: {e.message}"
                for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}"]
    return []


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


# --- renders, and every object is valid ---------------------------------------------------------------
def test_every_rendered_object_matches_its_schema(tmp_path):
    docs = render(tmp_path)
    kinds = {d["kind"] for d in docs}
    assert kinds == {"ServiceAccount", "ConfigMap", "Deployment", "Service", "CronJob", "ScaledObject",
                     "NetworkPolicy", "StatefulSet"}
    assert [e for d in docs for e in schema_errors(d)] == []
    for doc in docs:
        assert doc["metadata"].get("namespace") == "slurm", doc["metadata"]["name"]


def test_a_schema_mistake_is_caught():
    scaled = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"},
              "spec": {"scaleTargetRef": {"name": "n"}, "maxReplicaCount": 2,
                       "triggers": [{"type": "prometheus", "metadata": {}}]}}
    assert schema_errors(scaled) == []
    typo = copy.deepcopy(scaled)
    typo["spec"]["maxReplicas"] = typo["spec"].pop("maxReplicaCount")
    assert schema_errors(typo) and "maxReplicas" in schema_errors(typo)[0]
    wrong = copy.deepcopy(scaled)
    wrong["spec"]["maxReplicaCount"] = "two"
    assert schema_errors(wrong)
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "* * * * *", "concurencyPolicy": "Forbid", "jobTemplate": {"spec": {}}}}
    assert schema_errors(cron)


# --- required values and what may reach a root shell -----------------------------------------------------
@pytest.mark.parametrize("missing, words", [
    ("image", "image is required"), ("gcpServiceAccount", "gcpServiceAccount is required"),
    ("site", "site is required"), ("mariadb", "mariadb.image is required")])
def test_missing_required_values_refuse_to_render(missing, words, tmp_path):
    values = {k: v for k, v in VALUES.items() if k != missing}
    out = helm_template(values, tmp_path)
    assert out.returncode != 0 and words in out.stderr, out.stderr


def test_an_image_by_tag_refuses_to_render(tmp_path):
    out = helm_template({**VALUES, "image": "europe-docker.pkg.dev/proj/slurm/login-slurmctl:v1"}, tmp_path)
    assert out.returncode != 0 and "@sha256:<64 hex>" in out.stderr, out.stderr


@pytest.mark.parametrize("key, value", [("SLURMCTL_COST_SPOOL", "/x'; reboot; '"), ("SLURMCTL_X", "$(id)"),
                                        ("PATH", "/tmp"), ("SLURMCTL_RUNS_ROOT", "/a\nreboot")])
def test_hook_settings_that_could_run_code_in_the_root_shell_refuse_to_render(key, value, tmp_path):
    out = helm_template({**VALUES, "hooks": {key: value}}, tmp_path)
    assert out.returncode != 0 and f"hooks.{key}" in out.stderr, out.stderr


def test_hooks_env_is_what_the_wrapper_sources(tmp_path):
    hooks_env = by_kind(render(tmp_path), "ConfigMap")["slurmctl-hooks"]["data"]["hooks.env"]
    path = tmp_path / "hooks.env"
    path.write_text(hooks_env)
    out = subprocess.run(["/bin/sh", "-c", 'set -a; . "$0"; env', str(path)], capture_output=True, text=True,
                         env={}, check=True)
    seen = dict(line.split("=", 1) for line in out.stdout.splitlines() if line.startswith("SLURMCTL_"))
    chart_defaults = yaml.safe_load((CHART / "values.yaml").read_text())["hooks"]
    assert seen == {k: str(v) for k, v in chart_defaults.items()}


# --- agrees with the Slinky values, Terraform and deploy/cron ---------------------------------------------
def test_scaled_objects_target_every_nodeset_up_to_its_pool_size(tmp_path):
    docs = render(tmp_path)
    slinky = yaml.safe_load((REPO / "deploy" / "slinky" / "values.yaml").read_text())
    nodesets = {n for n, s in slinky["nodesets"].items() if s.get("enabled")}
    pools = _gpu_pools()
    scaled = {d["spec"]["scaleTargetRef"]["name"]: d["spec"] for d in by_kind(docs, "ScaledObject").values()}
    assert set(scaled) == {f"slurm-worker-{n}" for n in nodesets}  # Slinky: <release>-worker-<key>
    exporter_source = (REPO / "slurmctl" / "ops" / "exporter.py").read_text()
    for name in nodesets:
        spec = scaled[f"slurm-worker-{name}"]
        assert spec["scaleTargetRef"]["kind"] == "NodeSet" and spec["idleReplicaCount"] == 0
        assert spec["maxReplicaCount"] == pools[name]["max_nodes"], name
        [trigger] = spec["triggers"]
        query = trigger["metadata"]["query"]
        assert f'partition="{name}"' in query
        for metric in re.findall(r"(slurmctl_[a-z_]+)\{", query):  # series the exporter really serves
            assert f'"{metric}"' in exporter_source, metric


def test_service_accounts_are_the_ones_pods_run_as_and_terraform_binds(tmp_path):
    accounts = by_kind(render(tmp_path), "ServiceAccount")
    for sa in accounts.values():
        assert sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"] == VALUES["gcpServiceAccount"]
    slinky = yaml.safe_load((REPO / "deploy" / "slinky" / "values.yaml").read_text())
    used = {s["podSpec"]["serviceAccountName"] for section in ("nodesets", "loginsets")
            for s in slinky[section].values() if s.get("enabled")}
    assert used == set(accounts)
    binding = _tf_resources(_terraform(), "google_service_account_iam_member")["workload_identity"]
    assert set(re.findall(r'"(slurm-[a-z]+)"', binding["for_each"])) == set(accounts)


def test_cron_jobs_run_what_the_host_cron_files_run(tmp_path):
    jobs = by_kind(render(tmp_path), "CronJob")
    host = {}
    for path in (REPO / "deploy" / "cron").glob("*.cron"):
        for line in path.read_text().splitlines():
            m = re.match(r"^([\d*/,-]+(?: [\d*/,-]+){4})\s+root\s+\$SLURMCTL (.+?) >>", line)
            if m:
                host[m.group(1)] = m.group(2).split()
    rendered = {}
    for job in jobs.values():
        spec = job["spec"]
        [container] = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        rendered[spec["schedule"]] = container["args"]
        assert spec["concurrencyPolicy"] == "Forbid"
    assert rendered == host


def test_prometheus_scrapes_the_exporter_the_scaling_queries_read(tmp_path):
    service = by_kind(render(tmp_path), "Service")["slurmctl-exporter"]
    prometheus = yaml.safe_load((CHART / "prometheus-values.yaml").read_text())["prometheus"]["prometheusSpec"]
    [job] = [j for j in prometheus["additionalScrapeConfigs"] if j["job_name"] == "slurmctl-exporter"]
    [port] = service["spec"]["ports"]
    assert job["static_configs"][0]["targets"] == [f"slurmctl-exporter.{service['metadata']['namespace']}.svc:"
                                                   f"{port['port']}"]
    keda = yaml.safe_load((CHART / "values.yaml").read_text())["keda"]["prometheus"]
    assert keda == "http://prometheus-operated.monitoring:9090"  # kube-prometheus-stack's service, RUNBOOK step 4


def test_only_prometheus_reaches_the_exporter_and_only_slurmdbd_the_database(tmp_path):
    """The exporter listens on its pod's addresses (a Service must reach it) and MariaDB on 3306: the
    rendered NetworkPolicies admit Prometheus's namespace to the one and slurmdbd's pods (slurm-operator's
    label app.kubernetes.io/name=slurmdbd) to the other, nothing else."""
    docs = render(tmp_path)
    policies, services = by_kind(docs, "NetworkPolicy"), by_kind(docs, "Service")
    exporter, mariadb = policies["slurmctl-exporter-scrape"]["spec"], policies["slurmctl-mariadb"]["spec"]
    assert exporter["podSelector"]["matchLabels"] == services["slurmctl-exporter"]["spec"]["selector"]
    [rule] = exporter["ingress"]
    namespace = yaml.safe_load((CHART / "values.yaml").read_text())["keda"]["prometheus"].split(".")[1].split(":")[0]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": services["slurmctl-exporter"]["spec"]["ports"][0]["port"]}]
    [service] = [s for name, s in services.items() if "mariadb" in name]
    assert mariadb["podSelector"]["matchLabels"] == service["spec"]["selector"]
    assert mariadb["ingress"] == [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "slurmdbd"}}}],
                                   "ports": [{"protocol": "TCP", "port": 3306}]}]


def test_a_private_tracking_server_is_reachable_only_when_listed(tmp_path):
    base = by_kind(render(tmp_path), "NetworkPolicy")["slurm-egress"]["spec"]["egress"]
    assert not [r for r in base if any("10.30.0.12" in str(p) for p in r.get("to", []))]
    mlflow = [{"name": "mlflow", "cidr": "10.30.0.12/32", "ports": [5000]}]
    listed = render(tmp_path, {**VALUES, "network": {**VALUES.get("network", {}), "privateServices": mlflow}})
    egress = by_kind(listed, "NetworkPolicy")["slurm-egress"]["spec"]["egress"]
    assert {"to": [{"ipBlock": {"cidr": "10.30.0.12/32"}}], "ports": [{"protocol": "TCP", "port": 5000}]} in egress
    assert all(schema_errors(doc) == [] for doc in listed)


# --- the login node from a laptop (RUNBOOK "Reaching the login node") -------------------------------------
def test_the_login_node_is_an_internal_load_balancer_open_to_the_vpn_clients_only(tmp_path):
    import ipaddress

    from .test_deploy_consistency import _tf_variable

    service = yaml.safe_load((REPO / "deploy" / "slinky" / "values.yaml").read_text())["loginsets"]["login"]["service"]
    # internal passthrough LB: an address in the VPC, client addresses kept (an external LB sees public ones)
    assert service["metadata"]["annotations"]["networking.gke.io/load-balancer-type"] == "Internal"
    assert service["spec"]["type"] == "LoadBalancer"
    ranges = service["spec"]["loadBalancerSourceRanges"]
    assert ranges and all(ipaddress.ip_network(r).is_private for r in ranges), ranges
    tf = _terraform()
    assert _tf_variable(tf, "ssh_client_cidrs")["default"] == ranges
    [rule] = [r for r in _tf_resources(tf, "google_compute_firewall").values()
              if r["source_ranges"] == "${var.ssh_client_cidrs}"]
    assert rule["direction"] == "INGRESS"
    assert [(a["protocol"], a["ports"]) for a in rule["allow"]] == [("tcp", ["22"])]
    for pool in _tf_resources(tf, "google_container_node_pool").values():
        assert set(rule["target_tags"]) <= set(pool["node_config"][0]["tags"])
    policies = by_kind(render(tmp_path), "NetworkPolicy")
    [ingress] = policies["slurm-login-ssh"]["spec"]["ingress"]  # SSH from the VPN, nothing else
    assert [p["ipBlock"]["cidr"] for p in ingress["from"]] == ranges
    assert ingress["ports"] == [{"protocol": "TCP", "port": 22}]
    # srun's callbacks: the SrunPortRange of the slurm.conf part, and only that
    [low, high] = re.findall(r"^SrunPortRange=(\d+)-(\d+)$",
                             (REPO / "deploy" / "slurm" / "scheduling.conf").read_text(), re.M)[0]
    [srun] = policies["slurm-login-srun"]["spec"]["ingress"]
    assert srun["ports"] == [{"protocol": "TCP", "port": int(low), "endPort": int(high)}]
    runbook = (REPO / "deploy" / "RUNBOOK.md").read_text()
    path = runbook.split("### Reaching the login node", 1)[1].split("\n## ", 1)[0]
    assert "INTERNAL" in path and "var.ssh_client_cidrs" in path and "network.sshClientCIDRs" in path
    assert "connected to the site's VPN" in runbook.split("10. **Smoke test**", 1)[1][:200]
