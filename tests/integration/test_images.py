"""Training images on the real local cluster: build -> push -> digest -> run inside the image,
tag immutability by digest, the architecture refusal, and registries that need a login: the
local htpasswd registry (Basic) and a token registry started here (Bearer, with a password and
with an identity token). Needs deploy/local/images-up (started here; a no-op when already up).
Prints build/push/pull timings (run with -s to see them).

Building and training run as root: the local image engine is root's podman (its API socket is
root-equivalent, so it is not handed to users), and a job's `podman run` as a normal user needs
rootless podman on the nodes (subordinate ids, user namespaces), which the local cluster does not
set up yet. Reading a digest with a login needs no engine, so those tests run as alice with her
own auth files."""

import base64
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from slurmctl.config.locate import find_site_config
from slurmctl.submit.image_registry import SkopeoRegistry
from slurmctl.submit.images import Engine, ImageRef

from .conftest import REPO, as_user, wait_for_state, write_run
from .token_registry import TokenRegistry

ROOT = as_user("root")
IMAGES = Path(os.environ.get("SLURMCTL_LOCAL_DIR", "/var/lib/slurmctl-local")) / "images"
ROBOT = "slurmctl-robot"  # deploy/local/images-up's account on the login registry

TRAIN = """\
import os, socket, torch
marker = open("/app/marker.txt").read().strip()
line = f"IN-IMAGE marker={marker} torch={torch.__version__} host={socket.gethostname()} rank={os.environ['RANK']}"
print(line, flush=True)
with open(os.path.join(os.environ["SLURMCTL_RUN_DIR"], f"in-image-{os.environ['RANK']}.txt"), "w") as f:
    f.write(line)
"""


def basic(user: str, password: str) -> dict:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def images():
    """The engine + registries up, and site configs (the live one) that run images with podman:
    `env` uses the site registry (a login per user, pushes under <user>/ only), `auth_env` the one
    with the robot's htpasswd login. The site files are world-readable (users read them); nothing
    secret is in them."""
    up = subprocess.run([str(REPO / "deploy/local/images-up")], capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    site = yaml.safe_load(find_site_config().read_text())
    shipped = yaml.safe_load((REPO / "deploy/local/site.yaml").read_text())["containers"]
    auth_registry = "127.0.0.1:" + os.environ.get("SLURMCTL_LOCAL_AUTH_REGISTRY_PORT", "5001")
    where = Path(tempfile.mkdtemp(prefix="slurmctl-images-site-"))
    where.chmod(0o755)
    paths = {}
    for label, registry in (("open", shipped["registry"]), ("auth", auth_registry)):
        paths[label] = where / f"site-{label}.yaml"
        paths[label].write_text(yaml.safe_dump({**site, "containers": {**shipped, "registry": registry}}))
        paths[label].chmod(0o644)
    yield {"env": {"SLURMCTL_SITE_CONFIG": str(paths["open"]), "DOCKER_HOST": shipped["engine_host"]},
           "auth_env": {"SLURMCTL_SITE_CONFIG": str(paths["auth"]), "DOCKER_HOST": shipped["engine_host"]},
           "podman": shipped["podman"], "registry": shipped["registry"], "auth_registry": auth_registry,
           "base": shipped["base_image"], "password": (IMAGES / "etc/registry-auth/robot.password").read_text().strip()}
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def root_login(images, tmp_path):
    """Root's login for the login registry, in an auth file only root can read."""
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"auths": {images["auth_registry"]: basic(ROBOT, images["password"])}}))
    path.chmod(0o600)
    return path


def podman(images, *args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([images["podman"], *args], capture_output=True, text=True, timeout=120, **kwargs)


def tiny_image(images, tag: str, arch: str = "amd64") -> None:
    """A one-file image made without a build (podman import), pushed to `tag`."""
    rootfs = io.BytesIO()
    with tarfile.open(fileobj=rootfs, mode="w") as tar:
        data = f"tiny {tag}\n".encode()
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    made = subprocess.run([images["podman"], "import", "-q", "--arch", arch, "-", tag], input=rootfs.getvalue(),
                          capture_output=True, timeout=60)
    assert made.returncode == 0, made.stderr
    pushed = podman(images, "push", "-q", tag)  # the nodes' robot login (the podman wrapper's auth file)
    assert pushed.returncode == 0, pushed.stderr


def secrets_in(text: str, *secrets: str) -> list[str]:
    return [s for s in secrets if s and s in text]


def assert_clean_refusal(result: subprocess.CompletedProcess, code_words: str, *fix: str) -> None:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr and code_words in result.stderr, result.stderr
    for words in fix:
        assert words in result.stderr, result.stderr


def test_build_push_pin_and_train_with_a_registry_login(images, root_login, tmp_path, monkeypatch):
    """The whole path against the htpasswd registry: the user's login reads the tag and the digest
    and goes with the engine's push; the nodes pull with their own robot auth file. No login and
    a wrong password are refused before anything is built or submitted. No credential reaches the
    run dir, the job's Slurm record, or slurmctl's output."""
    name = f"img-{uuid.uuid4().hex[:6]}"
    dockerfile = (f"FROM {images['base']}\nRUN useradd --create-home --uid 1000 trainer\n"
                  "WORKDIR /app\nCOPY --chown=trainer:trainer . /app\nUSER trainer\n")
    spec_path = write_run(tmp_path / name, {
        "name": name, "entrypoint": "train.py", "partition": "h100-ondemand", "nodes": 1, "gpus_per_node": 1,
        "procs_per_node": 2, "time_limit": "5m", "build": {"dockerfile": "Dockerfile"}},
        {"train.py": TRAIN, "Dockerfile": dockerfile, "marker.txt": "first\n"})
    secret_forms = (images["password"], basic(ROBOT, images["password"])["auth"])

    nobody = tmp_path / "no-login.json"
    nobody.write_text('{"auths": {}}')
    refused = ROOT.slurmctl("submit", spec_path, "-y", check=False,
                            env={**images["auth_env"], "REGISTRY_AUTH_FILE": nobody})
    assert_clean_refusal(refused, "needs a login", f"podman login {images['auth_registry']}")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"auths": {images["auth_registry"]: basic(ROBOT, "not-the-password")}}))
    refused = ROOT.slurmctl("submit", spec_path, "-y", check=False,
                            env={**images["auth_env"], "REGISTRY_AUTH_FILE": wrong})
    assert_clean_refusal(refused, f"refused the password for user '{ROBOT}' from {wrong}", "podman login")
    assert name not in ROOT.slurmctl("ls", "--json", env=images["auth_env"]).stdout

    env = {**images["auth_env"], "REGISTRY_AUTH_FILE": root_login}
    t0 = time.monotonic()
    submitted = ROOT.slurmctl("submit", spec_path, "-y", "--json", env=env)
    submit_s = time.monotonic() - t0
    result = json.loads(submitted.stdout)
    run_dir = Path(result["run_dir"])
    image = json.loads((run_dir / "run.json").read_text())["image"]
    print(f"\n[images] submit with build+push+resolve (login registry) {submit_s:.1f} s; timings {image['timings']}")
    assert image["built"] and image["architecture"] == "amd64" and image["workdir"] == "/app"
    source = ImageRef.parse(image["source"])
    assert source.registry == images["auth_registry"]
    assert image["reference"] == f"{source.name}@{image['digest']}"
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(root_login))
    assert SkopeoRegistry().resolve(source, "amd64")[0] == image["digest"]  # the registry's digest
    assert image["reference"] in (run_dir / "job.sbatch").read_text()

    status = wait_for_state(result["run_id"], {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=180,
                            user="root")
    log = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    assert status["state"] == "COMPLETED", log[-3000:]
    lines = sorted((run_dir / f"in-image-{rank}.txt").read_text() for rank in (0, 1))
    assert all("marker=first" in line and "torch=2.13.0" in line and "host=h100-" in line for line in lines), lines

    shown = subprocess.run(["scontrol", "show", "job", "-d", str(result["job_id"])], capture_output=True, text=True)
    assert shown.returncode == 0 and result["run_id"] in shown.stdout, shown.stderr
    leaks = {str(p): secrets_in(p.read_bytes().decode(errors="replace"), *secret_forms)
             for p in run_dir.rglob("*") if p.is_file()}
    assert not any(leaks.values()), leaks
    assert not secrets_in(shown.stdout + submitted.stdout + submitted.stderr, *secret_forms)

    # Same code again: the pushed code-hash tag is reused, nothing is rebuilt.
    again = ROOT.slurmctl_json("submit", spec_path, "--dry-run", env=env)
    assert image["reference"] in again["script"]

    # Move the tag to new content: the run's digest still pulls the old content.
    (tmp_path / name / "marker.txt").write_text("second\n")
    engine = Engine(images["env"]["DOCKER_HOST"])
    engine.build(tmp_path / name, str(tmp_path / name / "Dockerfile"), str(source), {})
    registry = SkopeoRegistry()
    engine.push(source, registry.credential(source.registry))
    assert registry.resolve(source, "amd64")[0] != image["digest"]
    podman(images, "rmi", "-f", image["reference"])
    t0 = time.monotonic()
    pulled = podman(images, "pull", "-q", image["reference"])  # as a node does: the robot auth file
    pull_s = time.monotonic() - t0
    assert pulled.returncode == 0, pulled.stderr
    shown = podman(images, "run", "--rm", "--network=none", image["reference"], "cat", "/app/marker.txt")
    print(f"[images] pull by digest {pull_s:.2f} s")
    assert shown.stdout.strip() == "first", shown.stderr


def test_engine_push_without_a_login_is_refused(images, tmp_path):
    """The engine keeps no login of its own: a push carries the user's, or the registry says no."""
    tag = f"{images['auth_registry']}/slurmctl/no-login:{uuid.uuid4().hex[:6]}"
    made = podman(images, "tag", images["base"], tag)
    assert made.returncode == 0, made.stderr
    try:
        with pytest.raises(Exception) as exc:
            Engine(images["env"]["DOCKER_HOST"]).push(ImageRef.parse(tag), None)
        assert getattr(exc.value, "code", None) == "registry-auth", exc.value
    finally:
        podman(images, "rmi", tag)


def test_arm64_image_is_refused_for_amd64_nodes(images, user_dir):
    """A real arm64 image config in the registry (podman import --arch); nothing is submitted."""
    tag = f"{images['registry']}/slurmctl/fake-arm64:{uuid.uuid4().hex[:6]}"
    tiny_image(images, tag, arch="arm64")
    robot_file = IMAGES / "etc/registry-auth/nodes-auth.json"  # users may not read slurmctl/ images as root does
    digest, config = SkopeoRegistry(site_auth_file=str(robot_file)).resolve(ImageRef.parse(tag), "amd64")
    assert config["architecture"] == "arm64"

    name = f"arm-{uuid.uuid4().hex[:6]}"
    spec_path = write_run(user_dir("alice") / name, {"name": name, "entrypoint": "train.py", "partition": "l4-dev",
                                                     "image": f"{ImageRef.parse(tag).name}@{digest}"},
                          {"train.py": "pass\n"})
    alice = as_user("alice")
    refused = alice.slurmctl("submit", spec_path, "-y", check=False, env=images["env"])
    assert_clean_refusal(refused, "arm64", "exec format error")
    assert name not in alice.slurmctl("ls", "--json", env=images["env"]).stdout


def alice_pins(images, directory: Path, image: str, *, submit: bool = False) -> subprocess.CompletedProcess:
    """alice's `slurmctl submit` of a run that uses `image` (a tag: pinned at submit)."""
    name = f"login-{uuid.uuid4().hex[:6]}"
    spec_path = write_run(directory / name, {"name": name, "entrypoint": "train.py", "partition": "l4-dev",
                                             "time_limit": "5m", "image": image}, {"train.py": "pass\n"})
    args = ["submit", spec_path, "--allow-mutable-image", "-y"] + ([] if submit else ["--dry-run", "--json"])
    return as_user("alice").slurmctl(*args, check=False, env=images["env"])


def alice_file(path: Path, data: dict) -> Path:
    """A file of alice's, 0600, as `podman login` / `docker login` would leave it."""
    alice = as_user("alice")
    for missing in reversed([p for p in path.parents if not p.exists()]):
        missing.mkdir(mode=0o700)
        os.chown(missing, alice.uid, alice.gid)
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    os.chown(path, alice.uid, alice.gid)
    return path


@pytest.fixture
def alice_auth(images):
    """alice's own auth files, put back as they were after the test (her real home: the CLI runs as
    her; images-up leaves her site-registry login in the first)."""
    home = as_user("alice").home
    made = [home / ".config" / "containers" / "auth.json", home / ".docker" / "config.json"]
    before = {path: path.read_bytes() if path.exists() else None for path in made}
    for path in made:
        path.unlink(missing_ok=True)
    yield made
    for path, data in before.items():
        if data is None:
            path.unlink(missing_ok=True)
        else:
            alice_file(path, json.loads(data))


def test_alice_pins_a_private_image_with_her_own_login(images, user_dir, alice_auth):
    """htpasswd (Basic): no login -> says how to log in, submits nothing; a wrong password names
    her file; her podman auth file pins the digest the registry serves."""
    tag = f"{images['auth_registry']}/slurmctl/private-{uuid.uuid4().hex[:6]}:1"
    tiny_image(images, tag)
    robot_file = IMAGES / "etc/registry-auth/nodes-auth.json"
    digest = SkopeoRegistry(site_auth_file=str(robot_file)).resolve(ImageRef.parse(tag), "amd64")[0]
    work = user_dir("alice")

    refused = alice_pins(images, work, tag, submit=True)
    assert_clean_refusal(refused, "needs a login", f"podman login {images['auth_registry']}")
    assert "nodes-auth.json" not in refused.stderr  # root's robot file is no source of hers
    podman_file, _ = alice_auth
    alice_file(podman_file, {"auths": {images["auth_registry"]: basic("alice", "guess")}})
    refused = alice_pins(images, work, tag, submit=True)
    assert_clean_refusal(refused, f"refused the password for user 'alice' from {podman_file}", "podman login")
    assert "login-" not in as_user("alice").squeue("-h", "-o", "%j")

    alice_file(podman_file, {"auths": {images["auth_registry"]: basic(ROBOT, images["password"])}})
    t0 = time.monotonic()
    pinned = alice_pins(images, work, tag)
    elapsed = time.monotonic() - t0
    assert pinned.returncode == 0, pinned.stderr
    assert f"{ImageRef.parse(tag).name}@{digest}" in json.loads(pinned.stdout)["script"]
    assert not secrets_in(pinned.stdout + pinned.stderr, images["password"])
    print(f"\n[images] alice: dry-run submit pinning through the htpasswd registry {elapsed:.2f} s")


def index_image(images, tag: str, archs: tuple[str, ...]) -> dict[str, str]:
    """A multi-arch index at `tag` with one tiny image per architecture; returns arch -> digest."""
    for arch in archs:
        tiny_image(images, f"{tag}-{arch}", arch=arch)
    assert podman(images, "manifest", "create", tag).returncode == 0
    try:
        for arch in archs:
            added = podman(images, "manifest", "add", tag, f"docker://{tag}-{arch}")
            assert added.returncode == 0, added.stderr
        pushed = podman(images, "manifest", "push", "-q", "--all", tag, f"docker://{tag}")
        assert pushed.returncode == 0, pushed.stderr
    finally:
        podman(images, "manifest", "rm", tag)
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", "--authfile",
                          str(IMAGES / "etc/registry-auth/nodes-auth.json"), f"docker://{tag}"],
                         capture_output=True, text=True, timeout=60)
    assert raw.returncode == 0, raw.stderr
    return {m["platform"]["architecture"]: m["digest"] for m in json.loads(raw.stdout)["manifests"]}


def test_multi_arch_index_behind_a_login_pins_the_nodes_architecture(images, user_dir, alice_auth):
    """An OCI index in the login registry: alice's submit pins the amd64 entry's digest (l4-dev is
    amd64); an index without amd64 is refused with the architectures it has."""
    base = f"{images['auth_registry']}/slurmctl/multi-{uuid.uuid4().hex[:6]}"
    digests = index_image(images, f"{base}:both", ("amd64", "arm64"))
    index_image(images, f"{base}:armonly", ("arm64",))
    alice_file(alice_auth[0], {"auths": {images["auth_registry"]: basic(ROBOT, images["password"])}})
    work = user_dir("alice")

    pinned = alice_pins(images, work, f"{base}:both")
    assert pinned.returncode == 0, pinned.stderr
    assert f"{ImageRef.parse(base + ':both').name}@{digests['amd64']}" in json.loads(pinned.stdout)["script"]
    refused = alice_pins(images, work, f"{base}:armonly", submit=True)
    assert_clean_refusal(refused, "arm64", "exec format error")


@pytest.fixture
def token_registry(tmp_path):
    registry = TokenRegistry(tmp_path / "token-registry", {"alice": "alice-token-pw"}, {"refresh-alice-ok"}).start()
    yield registry
    registry.stop()


def test_alice_pins_through_a_bearer_token_registry(images, user_dir, alice_auth, token_registry):
    """Bearer: the registry sends clients to a token service. A password in her docker config gets
    a token (GET with Basic); an identity token gets one by OAuth2 refresh (POST); a revoked
    identity token is reported as expired, naming the file and the login command."""
    source = f"{images['registry']}/slurmctl/tok-{uuid.uuid4().hex[:6]}:1"
    tiny_image(images, source)
    tag = f"{token_registry.address}/slurmctl/tok:1"
    root_file = Path(token_registry.workdir) / "root-auth.json"
    root_file.write_text(json.dumps({"auths": {token_registry.address: basic("alice", "alice-token-pw")}}))
    copied = subprocess.run(["skopeo", "copy", "-q", "--src-tls-verify=false", "--dest-tls-verify=false",
                             "--dest-authfile", str(root_file), f"docker://{source}", f"docker://{tag}"],
                            capture_output=True, text=True, timeout=120)
    assert copied.returncode == 0, copied.stderr
    digest = SkopeoRegistry(site_auth_file=str(root_file)).resolve(ImageRef.parse(tag), "amd64")[0]
    pinned_ref = f"{ImageRef.parse(tag).name}@{digest}"
    work = user_dir("alice")
    _, docker_file = alice_auth

    alice_file(docker_file, {"auths": {f"https://{token_registry.address}": basic("alice", "alice-token-pw")}})
    token_registry.requests.clear()
    pinned = alice_pins(images, work, tag)
    assert pinned.returncode == 0, pinned.stderr
    assert pinned_ref in json.loads(pinned.stdout)["script"]
    assert "GET basic alice" in token_registry.requests

    alice_file(docker_file, {"auths": {token_registry.address: {"auth": base64.b64encode(b"alice:").decode(),
                                                                "identitytoken": "refresh-alice-ok"}}})
    token_registry.requests.clear()
    pinned = alice_pins(images, work, tag)
    assert pinned.returncode == 0, pinned.stderr
    assert pinned_ref in json.loads(pinned.stdout)["script"]
    assert token_registry.requests and set(token_registry.requests) == {"POST refresh_token"}

    alice_file(docker_file, {"auths": {token_registry.address: {"identitytoken": "refresh-alice-revoked"}}})
    refused = alice_pins(images, work, tag, submit=True)
    assert_clean_refusal(refused, f"refused the token from {docker_file}: it has expired",
                         f"podman login {token_registry.address}")
    assert "POST refresh_token refused" in token_registry.requests
    assert not secrets_in(refused.stderr + refused.stdout, "refresh-alice-revoked", "alice-token-pw")
