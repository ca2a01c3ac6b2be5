"""deploy/images: the digest overlays pin every image the charts render, and the slurmd image's
hooks import with the image's own python (the layout its Containerfile COPYs, checked here with
/usr/bin/python3 and no venv). Building and pushing needs a registry: deploy/images/build, RUNBOOK."""

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .test_deploy_slinky import image_problems, image_refs

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "deploy" / "images"
_spec = importlib.util.spec_from_file_location("deploy_images_overlay", IMAGES / "overlay.py")
overlay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(overlay)


def _merge(base: dict, top: dict) -> dict:
    """Helm's -f merge: maps merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def fake_digests() -> dict[str, str]:
    refs = set()
    for name in ("values.yaml", "operator-values.yaml"):
        refs |= {ref for _, ref in overlay.image_slots(yaml.safe_load((REPO / "deploy" / "slinky" / name).read_text()))}
    refs.add(yaml.safe_load((REPO / "deploy" / "chart" / "values.yaml").read_text())["mariadb"]["upstream"])
    digests = {ref: f"europe-docker.pkg.dev/p/slurm/upstream/{i}@sha256:{i:064x}" for i, ref in enumerate(sorted(refs))}
    digests["slurmctl-login"] = "europe-docker.pkg.dev/p/slurm/login-slurmctl@sha256:" + "a" * 64
    return digests


def test_the_overlays_pin_every_rendered_image_by_digest(tmp_path):
    digests = tmp_path / "digests.json"
    digests.write_text(json.dumps(fake_digests()))
    overlay.main(str(digests), str(tmp_path))
    values = yaml.safe_load((REPO / "deploy" / "slinky" / "values.yaml").read_text())
    merged = _merge(values, yaml.safe_load((tmp_path / "slinky-images.yaml").read_text()))
    assert image_problems(merged) == []
    pinned = {path: ref for path, ref in image_refs(merged).items()
              if not any(path.startswith(f"{s}.") and not merged[s][path.split(".")[1]].get("enabled")
                         for s in ("nodesets", "loginsets"))}
    assert pinned and all("@sha256:" in ref for ref in pinned.values()), pinned
    operator = yaml.safe_load((tmp_path / "operator-images.yaml").read_text())
    assert set(image_refs(operator).values()) == {
        fake_digests()["ghcr.io/slinkyproject/slurm-operator:1.1.2"].replace("@", ":1.1.2@"),
        fake_digests()["ghcr.io/slinkyproject/slurm-operator-webhook:1.1.2"].replace("@", ":1.1.2@")}
    chart = yaml.safe_load((tmp_path / "chart-images.yaml").read_text())
    assert chart == {"image": fake_digests()["slurmctl-login"],
                     "mariadb": {"image": fake_digests()["docker.io/library/mariadb:11.4.5"]}}


@pytest.mark.parametrize("chart, values, overlay_file", [
    ("slurm", "values.yaml", "slinky-images.yaml"), ("slurm-operator", "operator-values.yaml", "operator-images.yaml")])
def test_each_overlay_image_has_the_form_its_chart_reads(chart, values, overlay_file, tmp_path):
    """The operator chart prints "<image.repository>:<image.tag>" (a string image fails to render:
    "can't evaluate field repository"); the result must be a reference pinned by digest."""
    digests = tmp_path / "digests.json"
    digests.write_text(json.dumps(fake_digests()))
    overlay.main(str(digests), str(tmp_path))
    facts = json.loads((REPO / "tests" / "fixtures" / "slinky" / f"{chart}-1.1.2.json").read_text())
    written = yaml.safe_load((tmp_path / overlay_file).read_text())
    slots = list(overlay.image_slots(yaml.safe_load((REPO / "deploy" / "slinky" / values).read_text())))
    assert slots
    for path, _ in slots:
        node = written
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            continue  # a disabled node set or login set
        if facts["imageForm"] == "map":
            assert isinstance(node, dict) and set(node) == {"repository", "tag"}, (path, node)
        ref = node if isinstance(node, str) else "{}:{}".format(node["repository"], node["tag"])  # the template
        assert overlay.DIGEST_REF.fullmatch(re.sub(r":[A-Za-z0-9._-]+@", "@", ref)), (path, ref)


def test_a_missing_or_tag_only_digest_is_refused():
    values = yaml.safe_load((REPO / "deploy" / "slinky" / "values.yaml").read_text())
    digests = fake_digests()
    missing = dict(digests)
    missing.pop("ghcr.io/slinkyproject/slurmrestd:25.11-ubuntu24.04")
    with pytest.raises(SystemExit, match="restapi.slurmrestd.image: no digest"):
        overlay.overlay(values, missing)
    by_tag = dict(digests, **{"ghcr.io/slinkyproject/slurmdbd:25.11-ubuntu24.04": "ghcr.io/x/slurmdbd:25.11"})
    with pytest.raises(SystemExit, match="accounting.slurmdbd.image"):
        overlay.overlay(values, by_tag)


def test_the_slurmd_image_layout_imports_the_hooks_with_the_system_python(tmp_path):
    """Do what the Containerfile does (its COPY lines, then its RUN check) in a temp root."""
    text = (IMAGES / "slurmd" / "Containerfile").read_text().replace("\\\n", "")
    root = tmp_path / "root"
    for line in text.splitlines():
        if line.startswith("COPY "):
            *sources, dest = shlex.split(line[5:])
            target = root / dest.lstrip("/")
            for src in sources:  # COPY semantics: a directory's contents, or files into dest/
                path = REPO / src.rstrip("/")
                if path.is_dir():
                    shutil.copytree(path, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, target)
    [check] = [line for line in text.splitlines() if line.startswith("RUN ")]
    probe = re.search(r'-c "(.+?)"', check).group(1).replace("/opt/slurmctl", str(root / "opt" / "slurmctl"))
    out = subprocess.run(["/usr/bin/python3", "-I", "-c", probe], capture_output=True, text=True, env={})
    assert out.returncode == 0, out.stderr
    assert (root / "opt" / "slurmctl" / "plugins" / "prolog.py").is_file()
    hook = subprocess.run(["/bin/sh", str(REPO / "deploy" / "slurm" / "hooks" / "epilog.sh")], capture_output=True,
                          text=True, env={"SLURMCTL_HOME": str(root / "opt" / "slurmctl"), "SLURM_JOB_ID": "1",
                                          "SLURMCTL_LOCAL_DIR": str(tmp_path / "state"),
                                          "SLURMCTL_SLURM_BIN_DIR": "/nonexistent"})
    assert hook.returncode == 0 and "internal error" not in hook.stderr, hook.stderr


def test_with_slurm_refuses_to_run_without_a_conf_server():
    out = subprocess.run(["/bin/sh", str(IMAGES / "login" / "with-slurm"), "true"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.returncode != 0 and "SLURM_CONF_SERVER" in out.stderr
