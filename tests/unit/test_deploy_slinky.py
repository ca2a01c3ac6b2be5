"""deploy/slinky/*.yaml against the facts of the PINNED Slinky release (tests/fixtures/slinky/*.json).

CI cannot fetch the charts, so the facts were recorded from the real release by
tests/fixtures/slinky/record.py: the key tree of each chart's values.yaml, the keys every node set,
login set and partition must carry (1.1.x has no `nodesetDefaults`; a missing one renders empty or
fails `helm template`), the container maps, the image slots. Helm ignores unknown keys silently,
so a typo (`controller.extraconf`) would install a cluster without our slurm.conf: it fails here.
The mutation tests prove each check can fail.
"""

import copy
import json
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SLINKY = REPO / "deploy" / "slinky"
FACTS_DIR = REPO / "tests" / "fixtures" / "slinky"
PINNED = "1.1.2"  # the last release with Slurm 25.11 images (1.2.x installs 26.05)
K8S_VERSION = "1.33"


def _facts(chart: str) -> dict:
    return json.loads((FACTS_DIR / f"{chart}-{PINNED}.json").read_text())


def _container_fields() -> set[str]:
    from kubernetes_validate.utils import schema_contents

    schema = schema_contents(f"kubernetes-json-schema/v{K8S_VERSION}.0-local-strict/container-v1.json", K8S_VERSION)
    return set(schema["properties"])


def _values(name: str = "values.yaml") -> dict:
    return yaml.safe_load((SLINKY / name).read_text())


def _is_container(path: str, facts: dict) -> bool:
    return any(fnmatch(path, pattern) for pattern in facts["containers"])


def unknown_keys(values: dict, tree, facts: dict, path: str = "") -> list[str]:
    """Key paths in `values` that the chart does not read (free-form subtrees excepted)."""
    if tree == "*" or not isinstance(values, dict):
        return []
    found = []
    container = _is_container(path, facts)
    for key, value in values.items():
        sub = f"{path}.{key}" if path else key
        if isinstance(tree, dict) and key in tree:
            if key == "image" and isinstance(value, str):
                continue  # `image` is a string or {repository, tag}
            found += unknown_keys(value, tree[key], facts, sub)
        elif container and key in _container_fields():
            continue  # format-container passes every corev1.Container field through
        else:
            found.append(sub)
    return found


def chart_problems(values: dict, facts: dict) -> list[str]:
    """Everything wrong with `values` for the pinned chart, as readable lines."""
    problems = [f"unknown key {k}" for k in unknown_keys(
        {k: v for k, v in values.items() if k not in facts["entries"]}, facts["keys"], facts)]
    for section, tree in facts["entries"].items():
        for name, entry in (values.get(section) or {}).items():
            base = f"{section}.{name}"
            problems += [f"unknown key {k}" for k in unknown_keys(entry, tree, facts, base)]
            if not entry.get("enabled"):
                continue  # a disabled sample keeps the chart's own defaults
            for key in facts["required"].get(f"{section}.*", []):
                node = entry
                for part in key.split("."):
                    node = node.get(part) if isinstance(node, dict) else None
                if node is None:
                    problems.append(f"{base}.{key} is required (1.1.x has no nodesetDefaults)")
    return problems


def image_refs(values: dict, path: str = "") -> dict[str, str]:
    """{key path: image reference} for every `image` the values set."""
    found = {}
    for key, value in (values.items() if isinstance(values, dict) else []):
        sub = f"{path}.{key}" if path else key
        if key == "image" and isinstance(value, str):
            found[sub] = value
        elif key == "image" and isinstance(value, dict):
            found[sub] = f"{value.get('repository')}:{value.get('tag')}" if value.get("tag") else str(
                value.get("repository"))
        else:
            found.update(image_refs(value, sub))
    return found


def _enabled_image_slots(values: dict, facts: dict) -> set[str]:
    """Every image slot the chart renders for these values (fact paths with entries expanded)."""
    slots = set()
    for slot in facts["images"]:
        section, _, rest = slot.partition(".")
        if section in facts["entries"]:
            sample, _, field = rest.partition(".")
            slots |= {f"{section}.{n}.{field}" for n, e in values[section].items() if e.get("enabled")}
        elif section != "accounting" or values["accounting"].get("enabled"):
            slots.add(slot)
    return slots


# --- the pinned release ---------------------------------------------------------------------------
def test_facts_are_the_pinned_release_with_slurm_25_11():
    slurm, operator = _facts("slurm"), _facts("slurm-operator")
    assert (slurm["version"], slurm["appVersion"]) == (PINNED, "25.11")
    assert operator["version"] == PINNED
    assert all(":25.11-" in ref for slot, ref in slurm["images"].items() if "slinkyproject" in ref)


def test_runbook_installs_exactly_the_pinned_charts():
    runbook = (REPO / "deploy" / "RUNBOOK.md").read_text()
    for chart in ("slurm-operator-crds", "slurm-operator", "slurm"):
        lines = [line for line in runbook.splitlines()
                 if re.search(rf"oci://ghcr\.io/slinkyproject/charts/{chart}(\s|$)", line)]
        assert lines, f"RUNBOOK never installs {chart}"
        for line in lines:
            assert f"--version {PINNED}" in line, line


# --- the values ------------------------------------------------------------------------------------
def test_values_use_only_keys_the_pinned_chart_reads_and_carry_every_required_key():
    assert chart_problems(_values(), _facts("slurm")) == []
    assert chart_problems(_values("operator-values.yaml"), _facts("slurm-operator")) == []


def image_problems(values: dict) -> list[str]:
    """Image slots the chart renders that we leave to its defaults, or set to a floating or bad ref."""
    refs, slots = image_refs(values), _enabled_image_slots(values, _facts("slurm"))
    problems = [f"{slot}: not set (the chart default is used)" for slot in sorted(slots - set(refs))]
    for slot in sorted(slots & set(refs)):
        ref = refs[slot]
        if not re.fullmatch(r"[a-z0-9.-]+(/[a-z0-9._-]+)+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?", ref):
            problems.append(f"{slot}: {ref!r} is not an image reference")
        elif ref.endswith(":latest") or not (":" in ref.rsplit("/", 1)[-1] or "@sha256:" in ref):
            problems.append(f"{slot}: {ref!r} floats (latest or no tag)")
        elif "slinkyproject" in ref and ":25.11-ubuntu24.04" not in ref:
            problems.append(f"{slot}: {ref!r} is not the release's Slurm 25.11 image")
    return problems


def test_every_rendered_image_is_set_and_none_is_latest():
    assert image_problems(_values()) == []
    operator = _values("operator-values.yaml")
    assert {image_refs(operator)[s] for s in ("operator.image", "webhook.image")} == {
        f"ghcr.io/slinkyproject/slurm-operator:{PINNED}", f"ghcr.io/slinkyproject/slurm-operator-webhook:{PINNED}"}


def test_partitions_reference_enabled_nodesets_and_scaling_is_external():
    values = _values()
    enabled = {n for n, s in values["nodesets"].items() if s.get("enabled")}
    for name, part in values["partitions"].items():
        if part.get("enabled"):
            assert set(part["nodesets"]) <= enabled, name
    for name in enabled:  # KEDA owns the replica count (deploy/chart scaledobjects.yaml)
        assert values["nodesets"][name]["replicas"] == 0, name


def test_pods_that_mount_the_bucket_have_the_gcsfuse_annotation_and_a_workload_identity_sa():
    values = _values()
    sets = [("nodesets", n, s) for n, s in values["nodesets"].items() if s.get("enabled")]
    sets += [("loginsets", n, s) for n, s in values["loginsets"].items() if s.get("enabled")]
    for section, name, entry in sets:
        claims = [v for v in entry["podSpec"].get("volumes", []) if "persistentVolumeClaim" in v]
        assert claims, (section, name)
        assert entry["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true", (section, name)
        sa = entry["podSpec"]["serviceAccountName"]
        assert sa == ("slurm-login" if section == "loginsets" else "slurm-compute"), (section, name)


def test_runs_root_is_on_the_filestore_volume_of_every_login_and_compute_pod():
    """site.yaml's runs_root (run dirs, checkpoints) and the operators' data are on the `runs` claim
    (Filestore NFS: owners and modes hold), never on the gcsfuse bucket (one owner for the mount)."""
    values = _values()
    site = yaml.safe_load((REPO / "deploy" / "slinky" / "site.yaml").read_text())
    paths = [site["runs_root"], site["cost_records_dir"], *site["accounting"].values()]
    sets = [s for n, s in values["nodesets"].items() if s.get("enabled")]
    sets += [s for n, s in values["loginsets"].items() if s.get("enabled")]
    for entry in sets:
        container = entry.get("slurmd") or entry.get("login")
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in entry["podSpec"]["volumes"]
                  if "persistentVolumeClaim" in v}
        mounts = {m["mountPath"]: claims.get(m["name"]) for m in container["volumeMounts"]}
        for path in paths:
            [owner] = [claim for mount, claim in mounts.items() if path.startswith(mount.rstrip("/") + "/")]
            assert owner == "runs", (path, mounts)


# --- the checks above can fail ----------------------------------------------------------------------
def _mutate(values: dict, how: str) -> dict:
    values = copy.deepcopy(values)
    if how == "typo-top":
        values["controller"]["extraconf"] = "PreemptType=preempt/qos"
    elif how == "typo-nodeset":
        values["nodesets"]["h100-spot"]["replica"] = values["nodesets"]["h100-spot"].pop("replicas")
    elif how == "missing-required":
        del values["nodesets"]["l4-dev"]["scalingMode"]
    elif how == "missing-image":
        del values["loginsets"]["login"]["initconf"]["image"]
    elif how == "typo-container":
        values["nodesets"]["h100-flex"]["slurmd"]["volumeMount"] = []
    return values


@pytest.mark.parametrize("how", ["typo-top", "typo-nodeset", "missing-required", "missing-image", "typo-container"])
def test_typos_and_missing_required_keys_fail(how):
    problems = chart_problems(_mutate(_values(), how), _facts("slurm"))
    assert len(problems) >= 1, how
    word = {"typo-top": "controller.extraconf", "typo-nodeset": "nodesets.h100-spot.replica",
            "missing-required": "nodesets.l4-dev.scalingMode", "missing-image": "loginsets.login.initconf.image",
            "typo-container": "nodesets.h100-flex.slurmd.volumeMount"}[how]
    assert any(word in p for p in problems), problems


def test_a_latest_or_missing_image_fails():
    values = _values()
    values["nodesets"]["h100-spot"]["logfile"]["image"] = {"repository": "docker.io/library/alpine", "tag": "latest"}
    assert image_problems(values) == ["nodesets.h100-spot.logfile.image: 'docker.io/library/alpine:latest' floats "
                                      "(latest or no tag)"]
    values = _values()
    del values["controller"]["reconfigure"]
    assert image_problems(values) == ["controller.reconfigure.image: not set (the chart default is used)"]
