"""Training images on the real local cluster: build -> push -> digest -> run inside the image,
tag immutability by digest, and the architecture refusal. Needs deploy/local/images-up (started
here; a no-op when already up). Prints build/push/pull timings (run with -s to see them).

Still run as root, unlike the other integration tests: the local image engine is root's podman
(its API socket is root-equivalent, so it is not handed to users), and a job's `podman run` as a
normal user needs rootless podman on the nodes (subordinate ids, user namespaces), which the
local cluster does not set up yet."""

import io
import json
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from slurmctl.submit.images import Engine, ImageRef, RegistryClient
from slurmctl.submit.spec import find_site_config

from .conftest import REPO, slurmctl, slurmctl_json, wait_for_state, write_run

TRAIN = """\
import os, socket, torch
marker = open("/app/marker.txt").read().strip()
line = f"IN-IMAGE marker={marker} torch={torch.__version__} host={socket.gethostname()} rank={os.environ['RANK']}"
print(line, flush=True)
with open(os.path.join(os.environ["SLURMCTL_RUN_DIR"], f"in-image-{os.environ['RANK']}.txt"), "w") as f:
    f.write(line)
"""


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The engine + registry up, and a site config (the live one) that runs images with podman."""
    up = subprocess.run([str(REPO / "deploy/local/images-up")], capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    site = yaml.safe_load(find_site_config().read_text())
    shipped = yaml.safe_load((REPO / "deploy/local/site.yaml").read_text())["containers"]
    site["containers"] = shipped
    path = tmp_path_factory.mktemp("site") / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    return {"env": {"SLURMCTL_SITE_CONFIG": str(path), "DOCKER_HOST": shipped["engine_host"]},
            "podman": shipped["podman"], "registry": shipped["registry"], "base": shipped["base_image"]}


def podman(images, *args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([images["podman"], *args], capture_output=True, text=True, timeout=120, **kwargs)


def test_build_push_pin_and_train_inside_the_image(images, tmp_path):
    name = f"img-{uuid.uuid4().hex[:6]}"
    dockerfile = (f"FROM {images['base']}\nRUN useradd --create-home --uid 1000 trainer\n"
                  "WORKDIR /app\nCOPY --chown=trainer:trainer . /app\nUSER trainer\n")
    spec_path = write_run(tmp_path / name, {
        "name": name, "entrypoint": "train.py", "partition": "h100-ondemand", "nodes": 1, "gpus_per_node": 1,
        "procs_per_node": 2, "time_limit": "5m", "build": {"dockerfile": "Dockerfile"}},
        {"train.py": TRAIN, "Dockerfile": dockerfile, "marker.txt": "first\n"})

    t0 = time.monotonic()
    result = slurmctl_json("submit", spec_path, "-y", env=images["env"])
    submit_s = time.monotonic() - t0
    run_dir = Path(result["run_dir"])
    image = json.loads((run_dir / "run.json").read_text())["image"]
    print(f"\n[images] submit with build+push+resolve {submit_s:.1f} s; engine timings {image['timings']}")
    assert image["built"] and image["architecture"] == "amd64" and image["workdir"] == "/app"
    source = ImageRef.parse(image["source"])
    assert image["reference"] == f"{source.name}@{image['digest']}"
    # the digest is the registry's, and the script runs exactly that reference
    assert RegistryClient().resolve(source, "amd64")[0] == image["digest"]
    assert image["reference"] in (run_dir / "job.sbatch").read_text()

    status = wait_for_state(result["run_id"], {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=120)
    log = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    assert status["state"] == "COMPLETED", log[-3000:]
    lines = sorted((run_dir / f"in-image-{rank}.txt").read_text() for rank in (0, 1))
    assert all("marker=first" in line and "torch=2.13.0" in line and "host=h100-" in line for line in lines), lines

    # Same code again: the pushed code-hash tag is reused, nothing is rebuilt.
    again = slurmctl_json("submit", spec_path, "--dry-run", env=images["env"])
    assert image["reference"] in again["script"]

    # Move the tag to new content: the run's digest still pulls the old content.
    (tmp_path / name / "marker.txt").write_text("second\n")
    engine = Engine(images["env"]["DOCKER_HOST"])
    engine.build(tmp_path / name, str(tmp_path / name / "Dockerfile"), str(source), {})
    engine.push(source)
    assert RegistryClient().resolve(source, "amd64")[0] != image["digest"]
    podman(images, "rmi", "-f", image["reference"])
    t0 = time.monotonic()
    pulled = podman(images, "pull", "-q", image["reference"])
    pull_s = time.monotonic() - t0
    assert pulled.returncode == 0, pulled.stderr
    shown = podman(images, "run", "--rm", "--network=none", image["reference"], "cat", "/app/marker.txt")
    print(f"[images] pull by digest {pull_s:.2f} s")
    assert shown.stdout.strip() == "first", shown.stderr


def test_arm64_image_is_refused_for_amd64_nodes(images, tmp_path):
    """A real arm64 image config in the registry (podman import --arch); nothing is submitted."""
    rootfs = io.BytesIO()
    with tarfile.open(fileobj=rootfs, mode="w") as tar:
        data = b"not really arm64\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    tag = f"{images['registry']}/slurmctl/fake-arm64:{uuid.uuid4().hex[:6]}"
    made = subprocess.run([images["podman"], "import", "-q", "--arch", "arm64", "-", tag], input=rootfs.getvalue(),
                          capture_output=True, timeout=60)
    assert made.returncode == 0, made.stderr
    pushed = podman(images, "push", "-q", tag)
    assert pushed.returncode == 0, pushed.stderr
    digest, config = RegistryClient().resolve(ImageRef.parse(tag), "amd64")
    assert config["architecture"] == "arm64"

    name = f"arm-{uuid.uuid4().hex[:6]}"
    spec_path = write_run(tmp_path / name, {"name": name, "entrypoint": "train.py", "partition": "l4-dev",
                                            "image": f"{ImageRef.parse(tag).name}@{digest}"}, {"train.py": "pass\n"})
    refused = slurmctl("submit", spec_path, "-y", check=False, env=images["env"])
    assert refused.returncode != 0
    assert "arm64" in refused.stderr and "exec format error" in refused.stderr, refused.stderr
    assert name not in slurmctl("ls", "--json", env=images["env"]).stdout
