"""deploy/RUNBOOK.md is executable: every command of its code blocks runs here, exactly as written.

Each ```bash block runs in order with bash (`set -euo pipefail`) in a scratch copy of the checkout.
The real tools run where they can: bash, sed, ls, openssl, deploy/images/build, helm (the pinned
4.1.4), kubectl (client). Only what needs a cloud is a dry stand-in, first on PATH
(tests/fixtures/runbook/shims.py):
- `helm install R CHART …` runs the real `helm template R <chart from the chart store> …` (same
  flags); `helm repo add` records the repository, which the installs then resolve;
- `kubectl create …` runs the real `kubectl create … --dry-run=client -o yaml`; `kubectl apply -f -`
  keeps the manifests; `kubectl exec … bash -s < script` checks the script with `bash -n` (the real
  run of deploy/slurm/accounting.sh is tests/integration/test_deploy_preemption.py);
- `terraform` checks `-var` names and `output` names against deploy/gke/*.tf and prints placeholders;
- `gcloud`, `skopeo`, `podman` record their arguments; skopeo and podman answer placeholder digests,
  so deploy/images/build writes real overlays pinned by (placeholder) digests.
Every object rendered or created is then checked: Kubernetes kinds with kubernetes-validate
(strict), Slinky CRs against the CRDs the RUNBOOK's own slurm-operator-crds install rendered, KEDA's
ScaledObject against its pinned CRD schema. The charts come from the chart store
(deploy/charts/store); CI cannot download charts, so one missing from the store is named and its
checks are skipped; everything else still runs. A command in the RUNBOOK that no test here runs fails
test_every_runbook_command_is_run_by_a_test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from .test_deploy_chart import HELM, K8S_VERSION, _jsonschema, schema_errors

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "deploy" / "RUNBOOK.md"
SHIMS = REPO / "tests" / "fixtures" / "runbook" / "shims.py"
STORE = Path(os.environ.get("SLURMCTL_CHARTS", "/var/cache/slurmctl-tools/charts"))
ENV = {"PROJECT": "proj", "REGION": "europe-west4"}
RENDERS = "test_every_chart_install_renders_and_every_object_is_valid"
# The test (below) that checks each RUNBOOK command's effect after the run.
COVERED = {
    ".venv/bin/pytest -q tests/unit/test_deploy_*.py": "this module's session: these ARE the deploy tests",
    "cd deploy/gke": "test_terraform_commands_name_declared_variables_and_outputs",
    "terraform init": "test_terraform_commands_name_declared_variables_and_outputs",
    "terraform plan -var project=$PROJECT -var checkpoint_bucket=$PROJECT-ml-checkpoints "
    "-var 'master_authorized_cidrs=[\"203.0.113.0/24\"]' -out plan":
        "test_terraform_commands_name_declared_variables_and_outputs",
    "terraform apply plan": "test_terraform_commands_name_declared_variables_and_outputs",
    "$(terraform output -raw get_credentials); cd ../..": "test_terraform_commands_name_declared_variables_and_outputs",
    "gcloud artifacts repositories create slurm --repository-format=docker --location=$REGION":
        "test_the_registry_is_the_one_the_build_pushes_to",
    "gcloud auth configure-docker $REGION-docker.pkg.dev": "test_the_registry_is_the_one_the_build_pushes_to",
    "deploy/images/build $REGION-docker.pkg.dev/$PROJECT/slurm": "test_the_build_writes_every_overlay_by_digest",
    "ls build/images/": "test_the_build_writes_every_overlay_by_digest",
    "helm repo add jetstack https://charts.jetstack.io": RENDERS,
    "helm repo add prometheus-community https://prometheus-community.github.io/helm-charts":
        RENDERS,
    "helm repo add kedacore https://kedacore.github.io/charts": RENDERS,
    "helm install cert-manager jetstack/cert-manager --version v1.18.2 -n cert-manager --create-namespace "
    "--set crds.enabled=true --wait --timeout 5m": RENDERS,
    "helm install prometheus prometheus-community/kube-prometheus-stack --version 65.5.0 -n monitoring "
    "--create-namespace -f deploy/chart/prometheus-values.yaml": RENDERS,
    "helm install keda kedacore/keda --version 2.20.2 -n keda --create-namespace":
        RENDERS,
    "helm install slurm-operator-crds oci://ghcr.io/slinkyproject/charts/slurm-operator-crds --version 1.1.2":
        RENDERS,
    "helm install slurm-operator oci://ghcr.io/slinkyproject/charts/slurm-operator --version 1.1.2 -n slinky "
    "--create-namespace -f deploy/slinky/operator-values.yaml -f build/images/operator-images.yaml":
        "test_the_operator_chart_runs_the_built_images_by_digest",
    "kubectl create namespace slurm": "test_kubectl_objects_are_valid",
    'kubectl -n slurm create secret generic mariadb-password --from-literal=password="$(openssl rand -hex 24)"':
        "test_kubectl_objects_are_valid",
    "kubectl -n slurm create secret generic slurm-sssd-conf --from-file=sssd.conf=/secure/sssd.conf":
        "test_kubectl_objects_are_valid",
    'sed "s/RUNS_FILESTORE_IP/$(terraform -chdir=deploy/gke output -raw runs_filestore_ip)/" '
    'deploy/gke/k8s/runs.yaml | kubectl apply -f -': "test_kubectl_objects_are_valid",
    'sed "s/CHECKPOINT_BUCKET/$PROJECT-ml-checkpoints/" deploy/gke/k8s/checkpoints.yaml | kubectl apply -f -':
        "test_kubectl_objects_are_valid",
    "helm install slurmctl deploy/chart -n slurm -f build/images/chart-images.yaml --set "
    "gcpServiceAccount=$(terraform -chdir=deploy/gke output -raw workload_service_account) "
    "--set-file site=deploy/slinky/site.yaml "
    "--set 'network.ldapCIDRs={10.20.0.5/32}'": RENDERS,
    "helm install slurm oci://ghcr.io/slinkyproject/charts/slurm --version 1.1.2 -n slurm -f deploy/slinky/values.yaml "
    "-f build/images/slinky-images.yaml --set-file controller.extraConf=deploy/slurm/scheduling.conf --set-file "
    "'prologScripts.slurmctl\\.sh'=deploy/slurm/hooks/prolog.sh --set-file "
    "'epilogScripts.slurmctl\\.sh'=deploy/slurm/hooks/epilog.sh --set-file "
    "loginsets.login.rootSshAuthorizedKeys=admin_keys.pub": "test_the_slurm_chart_runs_our_slurm_conf_parts_and_images",
    'kubectl -n slurm exec -i statefulset/slurm-controller -c reconfigure -- env SLURMCTL_USERS="$(cat users.txt)" '
    "bash -s < deploy/slurm/accounting.sh": "test_kubectl_objects_are_valid",
    'kubectl -n slurm exec -i deploy/slurm-login-login -- env SLURMCTL_USERS="$(cat users.txt)" '
    "bash -s < deploy/slurm/runs-dirs.sh": "test_kubectl_objects_are_valid",
}
SELF_BLOCK = ".venv/bin/pytest"  # the block that runs these tests is not run from inside them


def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def runbook_blocks() -> list[str]:
    return re.findall(r"^ *```bash\n(.*?)^ *```", RUNBOOK.read_text(), re.S | re.M)


def runbook_commands() -> list[str]:
    commands = []
    for block in runbook_blocks():
        for line in re.sub(r"\\\n", " ", block).splitlines():
            line = " ".join(_strip_comment(line).split())
            if line:
                commands.append(line)
    return commands


def test_every_runbook_command_is_run_by_a_test():
    commands = runbook_commands()
    assert len(commands) == len(set(commands)) >= 20
    assert set(commands) - set(COVERED) == set(), "RUNBOOK commands no test runs: add them to COVERED"
    assert set(COVERED) - set(commands) == set(), "COVERED names commands the RUNBOOK no longer has"
    for how in set(COVERED.values()):
        assert how.startswith("this module's session") or callable(globals().get(how)), how


def _scratch_checkout(dest: Path) -> Path:
    """The checkout's files (tracked and new, not ignored) in a fresh git repository, + the venv."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    git = ["git", "-c", "user.name=runbook", "-c", "user.email=runbook@localhost"]
    subprocess.run([*git, "init", "-q"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "runbook test"], cwd=dest, check=True)
    (dest / ".venv").symlink_to(sys.prefix)
    # the inputs the RUNBOOK names: the platform team's key, users, SSSD config
    (dest / "admin_keys.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBm admin@example.org\n")
    (dest / "users.txt").write_text("alice ml-research\nbob ml-applied\n")
    return dest


@pytest.fixture(scope="module")
def runbook(tmp_path_factory):
    """Run every block; {'blocks': [(text, CompletedProcess)], 'dir', 'log'} for the tests below."""
    if not os.access(HELM, os.X_OK):
        pytest.fail(f"no helm at {HELM}: run scripts/_install_helm (scripts/setup does)")
    root = tmp_path_factory.mktemp("runbook")
    work = _scratch_checkout(root / "checkout")
    shims, log = root / "shims", root / "log"
    shims.mkdir()
    log.mkdir()
    (log / "secure").mkdir()
    (log / "secure" / "sssd.conf").write_text("[sssd]\nservices = nss, pam\ndomains = example\n")
    for tool in ("helm", "kubectl", "terraform", "gcloud", "skopeo", "podman"):
        (shims / tool).write_text(f"#!{sys.executable}\nimport os, runpy\nos.environ['RUNBOOK_TOOL'] = {tool!r}\n"
                                  f"runpy.run_path({str(SHIMS)!r}, run_name='__main__')\n")
        (shims / tool).chmod(0o755)
    env = {"PATH": f"{shims}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(root),
           "RUNBOOK_LOG": str(log), "RUNBOOK_STORE": str(STORE), "RUNBOOK_HELM": HELM,
           "RUNBOOK_KUBECTL": shutil.which("kubectl") or "kubectl", "RUNBOOK_REPO": str(work), **ENV,
           # deploy/images/build's `pip wheel` with the venv's setuptools: build isolation would fetch
           # setuptools from the index on every run (40 s instead of 7)
           "PIP_NO_BUILD_ISOLATION": "0"}
    blocks = []
    for block in runbook_blocks():
        if block.lstrip().startswith(SELF_BLOCK):
            continue
        started = time.monotonic()
        out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + block], cwd=work, env=env, capture_output=True,
                             text=True, timeout=300)
        print(f"[runbook] {time.monotonic() - started:5.1f} s  exit {out.returncode}  {block.split()[0:3]}")
        blocks.append((block, out))
    return {"blocks": blocks, "dir": work, "log": log}


def _calls(log: Path, tool: str) -> list[list[str]]:
    path = log / f"{tool}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class GoYAMLLoader(yaml.SafeLoader):
    """YAML as the Kubernetes clients read it: Go's yaml takes `1e+09` (Helm's print of a large
    integer) as a number, and sigs.k8s.io/yaml sends it as the JSON integer 1000000000."""


def _number(loader, node):
    value = float(loader.construct_scalar(node))
    return int(value) if value.is_integer() else value


GoYAMLLoader.add_implicit_resolver("tag:yaml.org,2002:go-float", re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$"),
                                   list("-+0123456789"))
GoYAMLLoader.add_constructor("tag:yaml.org,2002:go-float", _number)
# a plain `=` (an enum value in the Prometheus operator's CRDs) is YAML 1.1's "value" tag to PyYAML
# and a string to Go
GoYAMLLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.load_all(path.read_text(), Loader=GoYAMLLoader) if d] if path.exists() else []


def _without_nulls(node):
    """The API server prunes null fields of a custom resource (not `nullable`) before validating."""
    if isinstance(node, dict):
        return {k: _without_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_without_nulls(v) for v in node]
    return node


def test_every_block_runs(runbook):
    for block, out in runbook["blocks"]:
        assert out.returncode == 0, f"{block}\n--- exit {out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-4000:]}"


def _missing_charts(runbook) -> list[str]:
    path = runbook["log"] / "missing-charts.txt"
    return path.read_text().split() if path.exists() else []


def _rendered(runbook, release: str) -> list[dict]:
    if f"{release}" in {m.split("=")[0] for m in _missing_charts(runbook)}:
        pytest.skip(f"{release}: chart not in the chart store {STORE} (deploy/charts/store fills it)")
    return _docs(runbook["log"] / "renders" / f"{release}.yaml")


# --- step 1: Terraform -------------------------------------------------------------------------------------
def test_terraform_commands_name_declared_variables_and_outputs(runbook):
    calls = _calls(runbook["log"], "terraform")
    assert [c[0] for c in calls[:4]] == ["init", "plan", "apply", "output"], calls
    plan = calls[1]
    assert [a for a in plan if a.startswith(("project=", "checkpoint_bucket="))] == [
        "project=proj", "checkpoint_bucket=proj-ml-checkpoints"]
    # the control plane answers only the operators' ranges (main.tf master_authorized_networks_config)
    assert 'master_authorized_cidrs=["203.0.113.0/24"]' in plan
    # the shim refuses unknown -var and output names (exit 2): every block ran, so all are declared
    assert ["container", "clusters", "get-credentials"] == _calls(runbook["log"], "gcloud")[0][:3]


# --- steps 2 and 3: registry and images -----------------------------------------------------------------------
def test_the_registry_is_the_one_the_build_pushes_to(runbook):
    gcloud = _calls(runbook["log"], "gcloud")
    assert ["artifacts", "repositories", "create", "slurm", "--repository-format=docker",
            "--location=europe-west4"] in gcloud
    assert ["auth", "configure-docker", "europe-docker.pkg.dev".replace("europe", "europe-west4")] in gcloud
    pushed = [c for c in _calls(runbook["log"], "podman") if c[0] == "push"]
    assert pushed and all(c[-1].startswith("europe-west4-docker.pkg.dev/proj/slurm/") for c in pushed), pushed


def test_the_build_writes_every_overlay_by_digest(runbook):
    images = runbook["dir"] / "build" / "images"
    assert {"digests.json", "slinky-images.yaml", "operator-images.yaml", "chart-images.yaml"} <= {
        p.name for p in images.iterdir()}
    digests = json.loads((images / "digests.json").read_text())
    assert all(re.fullmatch(r"europe-west4-docker\.pkg\.dev/proj/slurm/[a-z0-9/_.-]+@sha256:[0-9a-f]{64}", ref)
               for ref in digests.values()), digests
    copies = [c for c in _calls(runbook["log"], "skopeo") if c[0] == "copy"]
    assert len(copies) == len(digests) - 1  # every upstream image mirrored (slurmctl-login is ours, built)


# --- steps 4, 7, 8: the charts, rendered, every object valid ------------------------------------------------------
def _schemas_of(crds: list[dict]) -> dict[tuple[str, str], dict]:
    schemas = {}
    for crd in crds:
        assert crd["kind"] == "CustomResourceDefinition"
        for version in crd["spec"]["versions"]:
            schemas[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = \
                version["schema"]["openAPIV3Schema"]
    return schemas


def _crd_schemas(runbook) -> dict[tuple[str, str], dict]:
    return _schemas_of(_rendered(runbook, "slurm-operator-crds"))


# kube-prometheus-stack installs its CRDs from the crds/ folder of its `crds` subchart (Helm installs
# a chart's crds/ before its templates and `helm template` does not print them): read from the store
KPS_CRDS = STORE / "kube-prometheus-stack-65.5.0" / "kube-prometheus-stack" / "charts" / "crds" / "crds"


def _all_crd_schemas(renders: dict[str, list[dict]]) -> dict[tuple[str, str], dict]:
    """Every CRD the RUNBOOK's installs create: the Slinky CRD chart's, cert-manager's (crds.enabled)
    and kube-prometheus-stack's, each from the release the RUNBOOK pins."""
    crds = [d for docs in renders.values() for d in docs if d.get("kind") == "CustomResourceDefinition"]
    crds += [d for path in sorted(KPS_CRDS.glob("*.yaml")) for d in _docs(path)]
    return _schemas_of(crds)


def object_errors(doc: dict, crds: dict) -> list[str]:
    key = (doc["apiVersion"], doc["kind"])
    if key in crds:
        schema = _jsonschema(crds[key])
        schema["properties"]["metadata"] = {"type": "object"}
        return [f"{doc['kind']}/{doc['metadata']['name']} {list(e.path)}: {e.message}"
                for e in jsonschema.Draft7Validator(schema).iter_errors(_without_nulls(doc))]
    return schema_errors(doc)


# groups of custom resources whose CRDs come with another chart of the RUNBOOK (cert-manager's, the
# Prometheus operator's): checked against those CRDs when that chart is in the store, else named
FOREIGN = {"cert-manager.io", "monitoring.coreos.com"}


def _check_all(docs: list[dict], crds: dict) -> tuple[list[str], set[str]]:
    errors, unchecked = [], set()
    for doc in docs:
        group = doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else ""
        if group in FOREIGN and (doc["apiVersion"], doc["kind"]) not in crds:
            unchecked.add(f"{doc['apiVersion']} {doc['kind']}")
            continue
        try:
            errors += object_errors(doc, crds)
        except kubernetes_validate.SchemaNotFoundError:
            errors.append(f"{doc['apiVersion']} {doc['kind']}: no schema")
    return errors, unchecked


def test_every_chart_install_renders_and_every_object_is_valid(runbook):
    missing = _missing_charts(runbook)
    renders = {p.stem: _docs(p) for p in sorted((runbook["log"] / "renders").glob("*.yaml"))}
    assert "slurmctl" in renders and renders["slurmctl"], "our chart did not render"
    crds = _all_crd_schemas(renders)
    report = {}
    for release, docs in renders.items():
        errors, unchecked = _check_all(docs, crds)
        assert errors == [], (release, errors)
        report[release] = (len(docs), sorted(unchecked))
    print(f"\nrendered and checked: {report}\nnot in the chart store: {missing}")
    if missing:
        pytest.skip(f"rendered {sorted(renders)}; not in the chart store {STORE}: {missing}")
    # with every chart in the store, every custom resource is checked against its CRD
    assert all(not unchecked for _, unchecked in report.values()), report


def test_the_operator_chart_runs_the_built_images_by_digest(runbook):
    docs = _rendered(runbook, "slurm-operator")
    digests = json.loads((runbook["dir"] / "build" / "images" / "digests.json").read_text())
    images = {c["image"] for d in docs if d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]}
    expected = {digests[f"ghcr.io/slinkyproject/{name}:1.1.2"].replace("@", ":1.1.2@")
                for name in ("slurm-operator", "slurm-operator-webhook")}
    assert images == expected
    errors, _ = _check_all(docs, _crd_schemas(runbook))
    assert errors == []
    # the API server calls the webhook Service's targetPort: what deploy/gke/network.tf opens
    [service] = [d for d in docs if d["kind"] == "Service" and "webhook" in d["metadata"]["name"]]
    [https] = [p for p in service["spec"]["ports"] if p["port"] == 443]
    assert https["targetPort"] == 9443


def test_the_slurm_chart_runs_our_slurm_conf_parts_and_images(runbook):
    docs = _rendered(runbook, "slurm")
    errors, _ = _check_all(docs, _crd_schemas(runbook))
    assert errors == []
    [controller] = [d for d in docs if d["kind"] == "Controller"]
    scheduling = (REPO / "deploy" / "slurm" / "scheduling.conf").read_text()
    extra = controller["spec"]["extraConf"]
    assert extra.startswith(scheduling)  # the chart appends one PartitionName line per partition
    partitions = (REPO / "deploy" / "slurm" / "partitions.conf").read_text()
    rendered = {line.split()[0]: set(line.split()[1:]) for line in extra[len(scheduling):].splitlines() if line.strip()}
    ours = {line.split()[0]: set(line.split()[1:]) for line in partitions.splitlines() if line.startswith("Partition")}
    assert {name: opts - {f"Nodes={name.split('=')[1]}"} for name, opts in rendered.items()} == ours
    digests = set(json.loads((runbook["dir"] / "build" / "images" / "digests.json").read_text()).values())
    images = set()

    def collect(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    images.add(value)
                else:
                    collect(value)
        elif isinstance(node, list):
            for item in node:
                collect(item)
    for doc in docs:
        if doc["apiVersion"].startswith("slinky.slurm.net/"):
            collect(doc["spec"])
    assert images and {re.sub(r":[^:@/]+@", "@", i) for i in images} <= digests, images
    [login] = [d for d in docs if d["kind"] == "LoginSet"]
    assert login["spec"]["service"]["metadata"]["annotations"]["networking.gke.io/load-balancer-type"] == "Internal"
    # reachable from a VPN gateway in any region of the VPC, not only the cluster's
    assert login["spec"]["service"]["metadata"]["annotations"][
        "networking.gke.io/internal-load-balancer-allow-global-access"] == "true"



def test_an_interactive_srun_on_the_login_pods_gets_its_calls_back_and_ssh_keeps_client_addresses(runbook):
    """RUNBOOK step 10 (`slurmctl dev`: srun --pty on a login pod). slurmctld and the slurmstepds
    connect back to srun on a port of SrunPortRange: the login pods' NetworkPolicy must admit that
    range from the Slurm pods. And the SSH rule's VPN range sees client addresses only if the load
    balancer hands connections over unSNATed (externalTrafficPolicy Local; Cluster SNATs them)."""
    slurm, ours = _rendered(runbook, "slurm"), _rendered(runbook, "slurmctl")
    [controller] = [d for d in slurm if d["kind"] == "Controller"]
    [srun_ports] = re.findall(r"^SrunPortRange=(\d+)-(\d+)$", controller["spec"]["extraConf"], re.M)
    low, high = map(int, srun_ports)
    [login] = [d for d in slurm if d["kind"] == "LoginSet"]
    service = login["spec"]["service"]["spec"]
    assert service["type"] == "LoadBalancer" and service["externalTrafficPolicy"] == "Local", service
    policies = {d["metadata"]["name"]: d["spec"] for d in ours if d["kind"] == "NetworkPolicy"}
    login = {name: spec for name, spec in policies.items() if spec["podSelector"] ==
             {"matchLabels": {"app.kubernetes.io/name": "login"}}}
    assert set(login) == {"slurm-login-ssh", "slurm-login-srun"}, policies
    # SSH from the VPN's clients, and nothing else, in a policy of its own (a dataplane that drops
    # the srun policy for its port range still keeps this one)
    [ssh] = login["slurm-login-ssh"]["ingress"]
    assert all(set(peer) == {"ipBlock"} for peer in ssh["from"]) and ssh["ports"] == [{"protocol": "TCP", "port": 22}]
    # srun's callbacks: exactly SrunPortRange, from slurmctld and the slurmds only
    [srun] = login["slurm-login-srun"]["ingress"]
    assert srun["ports"] == [{"protocol": "TCP", "port": low, "endPort": high}], srun
    assert srun["from"] == [{"podSelector": {"matchExpressions": [
        {"key": "app.kubernetes.io/name", "operator": "In", "values": ["slurmctld", "slurmd"]}]}}], srun
    assert low < high
    # and the Slurm pods may send there (egress inside the namespace is open)
    [egress] = [d for d in ours if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "slurm-egress"]
    assert {"to": [{"podSelector": {}}]} in egress["spec"]["egress"]

# --- steps 5, 6, 9: kubectl ---------------------------------------------------------------------------------------
def test_kubectl_objects_are_valid(runbook):
    created = _docs(runbook["log"] / "renders" / "kubectl-create.yaml")
    applied = _docs(runbook["log"] / "renders" / "kubectl-apply.yaml")
    assert [(d["kind"], d["metadata"]["name"]) for d in created] == [
        ("Namespace", "slurm"), ("Secret", "mariadb-password"), ("Secret", "slurm-sssd-conf")]
    assert created[1]["data"]["password"] and "sssd.conf" in created[2]["data"]
    assert {d["kind"] for d in applied} >= {"PersistentVolume", "PersistentVolumeClaim"}
    assert "CHECKPOINT_BUCKET" not in json.dumps(applied) and "proj-ml-checkpoints" in json.dumps(applied)
    # runs_root on Filestore (NFS keeps owners and modes), its address from terraform's output
    [runs] = [d for d in applied if d["kind"] == "PersistentVolume" and d["metadata"]["name"] == "runs"]
    assert runs["spec"]["nfs"]["server"] == "10.3.0.2" and "RUNS_FILESTORE_IP" not in json.dumps(applied)
    [bucket] = [d for d in applied if d["kind"] == "PersistentVolume" and d["metadata"]["name"] == "checkpoints"]
    assert {"uid=0", "gid=0", "file-mode=644", "dir-mode=755"} <= set(bucket["spec"]["mountOptions"])
    for doc in created + applied:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    exec_call, runs_call = [c for c in _calls(runbook["log"], "kubectl") if "exec" in c]
    for call in (exec_call, runs_call):
        assert call[call.index("--") + 1:] == ["env", "SLURMCTL_USERS=alice ml-research\nbob ml-applied",
                                               "bash", "-s"]
    assert (runbook["log"] / "exec-stdin-1").read_text() == \
        (REPO / "deploy" / "slurm" / "accounting.sh").read_text()
    # the runs root and the users' directories: from the login pod (the share mounted, the LDAP users known)
    assert (runbook["log"] / "exec-stdin-2").read_text() == (REPO / "deploy" / "slurm" / "runs-dirs.sh").read_text()
    assert runs_call[runs_call.index("exec") + 1:runs_call.index("--")] == ["-i", "deploy/slurm-login-login"]
    # not the default container (slurmctld: crash-looping on a fresh database until this step has run)
    # but the reconfigure sidecar, which runs all the time with slurmctld's image (scontrol's client
    # package has sacctmgr) and /etc/slurm (slurm-operator 1.1.2 controllerbuilder.reconfigureContainer)
    assert exec_call[exec_call.index("-c") + 1] == "reconfigure", exec_call
    if "slurm" not in {m.split("=")[0] for m in _missing_charts(runbook)}:
        [controller] = [d for d in _rendered(runbook, "slurm") if d["kind"] == "Controller"]
        image = controller["spec"]["reconfigure"]["image"]
        assert image.split(":")[0] == controller["spec"]["slurmctld"]["image"].split(":")[0], image


def test_files_that_cite_a_runbook_step_cite_the_step_that_uses_them():
    runbook = (REPO / "deploy" / "RUNBOOK.md").read_text()
    steps = {m.group(1): m.group(0)
             for m in re.finditer(r"^(\d+)\. \*\*.*?(?=^\d+\. \*\*|^## )", runbook, re.M | re.S)}
    cited = re.findall(r"RUNBOOK step (\d+)", (REPO / "deploy" / "gke" / "k8s" / "checkpoints.yaml").read_text())
    assert cited and all("deploy/gke/k8s/checkpoints.yaml" in steps[n] for n in cited), cited


def test_step_9_runs_dirs_script_makes_what_submit_needs_on_a_fresh_share(tmp_path):
    """deploy/slurm/runs-dirs.sh for real (root, the local cluster's users), on an empty "share": the
    runs root root's 0755, each user's directory theirs 0700, an existing one left alone; then alice's
    own slurmctl accepts her runs directory (what `slurmctl submit` checks first)."""
    import pwd
    import tempfile

    if os.geteuid() != 0:
        pytest.fail("needs root (the script chowns, as on the login pod)")
    # a share alice can reach (pytest's tmp_path is under root's 0700 directory)
    share = Path(tempfile.mkdtemp(prefix="slurmctl-share-"))
    share.chmod(0o755)
    try:
        _runs_dirs_on(share, tmp_path, pwd)
    finally:
        shutil.rmtree(share)


def _runs_dirs_on(share: Path, tmp_path: Path, pwd) -> None:
    (tmp_path / "site.yaml").write_text(f"cluster: t\nruns_root: {share}/runs   # Filestore\n")
    (share / "runs" / "bob").mkdir(parents=True)
    os.chown(share / "runs" / "bob", pwd.getpwnam("bob").pw_uid, -1)
    (share / "runs" / "bob").chmod(0o750)
    env = {"PATH": "/usr/bin:/bin", "SLURMCTL_SITE": str(tmp_path / "site.yaml"),
           "SLURMCTL_USERS": "alice ml-research\nbob ml-applied\n"}
    script = REPO / "deploy" / "slurm" / "runs-dirs.sh"
    out = subprocess.run(["bash", "-s"], stdin=script.open(), env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    modes = {p.name: (p.owner(), oct(p.stat().st_mode & 0o7777)) for p in [share / "runs", *(share / "runs").iterdir()]}
    assert modes == {"runs": ("root", "0o755"), "alice": ("alice", "0o700"), "bob": ("bob", "0o750")}
    check = subprocess.run(["runuser", "-u", "alice", "--", "env", f"PYTHONPATH={REPO}", sys.executable, "-c",
                            "import sys; from slurmctl.rundir.registry import RunRegistry; "
                            "print(RunRegistry(sys.argv[1]).user_dir())", str(share / "runs")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and check.stdout.strip() == str(share / "runs" / "alice"), check.stderr
    # a name the pod does not know: refused before anything is made
    bad = subprocess.run(["bash", "-s"], stdin=script.open(), env={**env, "SLURMCTL_USERS": "nosuchuser x"},
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "nosuchuser" in bad.stderr
