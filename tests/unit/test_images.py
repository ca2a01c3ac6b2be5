"""images.py without an engine: reference parsing, the submit hook's refusals, stream errors, and
the pyxis / podman renderings of the launcher (pyxis is golden-file tested). Registry logins and
skopeo against real registries: tests/unit/test_image_registry.py and tests/integration/test_images.py."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from slurmctl.config.models import RunSpec
from slurmctl.submit.image_registry import Credential, SkopeoRegistry
from slurmctl.submit.images import Engine, ImageError, ImageRef, PinnedImage, code_hash, record_image, resolve_run_image
from slurmctl.submit.render import render
from slurmctl.submit.scaffold import init_run
from slurmctl.submit.submission import TEMPLATE, sbatch_context

GOLDEN_PYXIS = Path(__file__).parent / "golden" / "torchrun-pyxis.sbatch"
DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def spec(**overrides) -> RunSpec:
    fields = dict(name="tiny-lm", entrypoint="train.py", nodes=2, gpus_per_node=2, partition="h100-spot")
    return RunSpec(**{**fields, **overrides})


def with_runtime(site, runtime="podman", arch=None):
    site = site.model_copy(update={"containers": site.containers.model_copy(update={"runtime": runtime})})
    if arch:
        parts = {k: v.model_copy(update={"arch": arch}) for k, v in site.partitions.items()}
        site = site.model_copy(update={"partitions": parts})
    return site


class FakeRegistry(SkopeoRegistry):
    """Serves one manifest (or index) per reference, like the registry would."""

    def __init__(self, architecture="amd64", index=None, tags=()):
        super().__init__()
        self.architecture, self.index, self.tags = architecture, index, set(tags)

    def has_tag(self, ref):
        return ref.tag in self.tags

    def resolve(self, ref, arch):
        if self.index:
            return (self.index[arch], {"architecture": arch, "os": "linux"}) if arch in self.index else \
                (DIGEST, {"architecture": ",".join(self.index), "os": "linux"})
        return ref.digest or DIGEST, {"architecture": self.architecture, "os": "linux",
                                      "config": {"WorkingDir": "/app"}}


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:5000/slurmctl/tiny-lm@" + DIGEST, ("127.0.0.1:5000", "slurmctl/tiny-lm", None, DIGEST)),
    ("ghcr.io/org/train:v3", ("ghcr.io", "org/train", "v3", None)),
    ("ubuntu", ("registry-1.docker.io", "library/ubuntu", None, None)),
    ("pytorch/pytorch:2.3", ("registry-1.docker.io", "pytorch/pytorch", "2.3", None)),
    ("localhost/a/b:1@" + DIGEST, ("localhost", "a/b", "1", DIGEST)),
])
def test_parse_reference(text, expected):
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == expected


@pytest.mark.parametrize("text", ["repo@sha256:short", "Bad/Upper:1", "a//b"])
def test_bad_reference_is_refused(text):
    with pytest.raises(ImageError) as exc:
        ImageRef.parse(text)
    assert exc.value.code == "image-reference"


def test_no_image_means_no_container(local_site):
    assert resolve_run_image(spec(), local_site, Path("/nonexistent")) is None


def test_digest_reference_is_pinned_and_recorded(local_site, tmp_path):
    image = f"127.0.0.1:5000/slurmctl/tiny-lm@{DIGEST}"
    pinned = resolve_run_image(spec(image=image), with_runtime(local_site), tmp_path, registry=FakeRegistry())
    assert pinned.reference == image and pinned.architecture == "amd64" and pinned.workdir == "/app"
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "x"}))
    record_image(tmp_path, pinned)
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["run_id"] == "x" and meta["image"]["digest"] == DIGEST


def test_mutable_tag_refused_unless_allowed_then_pinned(local_site, tmp_path):
    site, run = with_runtime(local_site), spec(image="127.0.0.1:5000/team/train:latest")
    with pytest.raises(ImageError) as exc:
        resolve_run_image(run, site, tmp_path, registry=FakeRegistry())
    assert exc.value.code == "image-mutable-tag" and "--allow-mutable-image" in exc.value.hint
    pinned = resolve_run_image(run, site, tmp_path, allow_mutable=True, registry=FakeRegistry())
    assert pinned.reference == f"127.0.0.1:5000/team/train@{DIGEST}" and pinned.source.endswith(":latest")


def test_arm64_image_refused_for_amd64_nodes(local_site, tmp_path):
    run = spec(image=f"127.0.0.1:5000/team/train@{DIGEST}")
    with pytest.raises(ImageError) as exc:
        resolve_run_image(run, with_runtime(local_site), tmp_path, registry=FakeRegistry("arm64"))
    assert exc.value.code == "image-arch-mismatch"
    assert "linux/arm64" in exc.value.message and "exec format error" in exc.value.message
    assert resolve_run_image(run, with_runtime(local_site, arch="arm64"), tmp_path, registry=FakeRegistry("arm64"))


def test_multi_arch_index_pins_the_nodes_platform(local_site, tmp_path):
    run = spec(image=f"127.0.0.1:5000/team/train@{DIGEST}")
    pinned = resolve_run_image(run, with_runtime(local_site), tmp_path,
                               registry=FakeRegistry(index={"amd64": OTHER, "arm64": DIGEST}))
    assert pinned.digest == OTHER
    with pytest.raises(ImageError, match="arm64,ppc64le"):
        resolve_run_image(run, with_runtime(local_site), tmp_path,
                          registry=FakeRegistry(index={"arm64": DIGEST, "ppc64le": OTHER}))


def test_site_without_container_runtime_refuses_images(local_site, tmp_path):
    with pytest.raises(ImageError) as exc:
        resolve_run_image(spec(image=f"r.io/a@{DIGEST}"), with_runtime(local_site, "none"), tmp_path)
    assert exc.value.code == "image-runtime"


def test_image_and_build_together_refused(local_site, tmp_path):
    with pytest.raises(ImageError, match="both `image:` and a build"):
        resolve_run_image(spec(image=f"r.io/a@{DIGEST}", build={}), with_runtime(local_site), tmp_path)


def test_pushed_code_hash_is_reused_without_an_engine(local_site, tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM base\nCOPY . /app\n")
    (tmp_path / "train.py").write_text("print(1)\n")
    tag = code_hash(tmp_path, tmp_path / "Dockerfile", {})
    pinned = resolve_run_image(spec(build={}), with_runtime(local_site), tmp_path,
                               engine=None, registry=FakeRegistry(tags={tag}))
    from slurmctl.rundir import current_user

    assert not pinned.built and pinned.source == f"127.0.0.1:5000/{current_user()}/tiny-lm:{tag}"


def test_code_hash_follows_code_and_args_but_not_caches(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM base\n")
    (tmp_path / "train.py").write_text("print(1)\n")
    first = code_hash(tmp_path, tmp_path / "Dockerfile", {})
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "train.pyc").write_bytes(b"junk")
    assert code_hash(tmp_path, tmp_path / "Dockerfile", {}) == first
    assert code_hash(tmp_path, tmp_path / "Dockerfile", {"A": "1"}) != first
    (tmp_path / "train.py").write_text("print(2)\n")
    assert code_hash(tmp_path, tmp_path / "Dockerfile", {}) != first


class FakeAPI:
    def __init__(self, build_events=(), push_events=(), images=("x",)):
        self.build_events, self.push_events, self._images = build_events, push_events, images

    def build(self, **kwargs):
        return iter(self.build_events)

    def push(self, *args, **kwargs):
        self.push_kwargs = kwargs
        return iter(self.push_events)

    def images(self, name):
        return list(self._images)


def fake_engine(api) -> Engine:
    engine = Engine.__new__(Engine)
    engine.base_url, engine.api = "unix:///fake.sock", api
    return engine


def test_build_failure_names_the_step_and_shows_the_output(tmp_path):
    # Event shapes as podman 4.3's compat API streams them (captured from the local engine).
    events = [{"stream": "STEP 1/3: FROM base\n"}, {"stream": "STEP 2/3: RUN pip install nope\n"},
              {"stream": "ERROR: No matching distribution found for nope\n"},
              {"error": "building at STEP \"RUN pip install nope\": while running runtime: exit status 1\n",
               "errorDetail": {"message": "exit status 1"}}]
    with pytest.raises(ImageError) as exc:
        fake_engine(FakeAPI(build_events=events)).build(tmp_path, "Dockerfile", "r/x:1", {})
    assert exc.value.code == "image-build-failed"
    assert "`STEP 2/3: RUN pip install nope`" in exc.value.message
    assert "No matching distribution found for nope" in exc.value.message


def test_push_error_event_raises(tmp_path):
    events = [{"status": "Pushing"}, {"error": "writing blob: connection reset by peer"}]
    with pytest.raises(ImageError) as exc:
        fake_engine(FakeAPI(push_events=events)).push(ImageRef.parse("127.0.0.1:5000/a/b:1"))
    assert exc.value.code == "image-push-failed" and "connection reset" in exc.value.message


def test_push_carries_the_users_login_and_a_refusal_names_its_source():
    cred = Credential("127.0.0.1:5001", "alice", "s3cret-pw", "/home/alice/.docker/config.json")
    events = [{"status": "Pushing"}, {"error": "unauthorized: authentication required"}]
    api = FakeAPI(push_events=events)
    with pytest.raises(ImageError) as exc:
        fake_engine(api).push(ImageRef.parse("127.0.0.1:5001/a/b:1"), cred)
    assert api.push_kwargs["auth_config"] == {"username": "alice", "password": "s3cret-pw",
                                              "serveraddress": "127.0.0.1:5001"}
    assert exc.value.code == "registry-auth" and "/home/alice/.docker/config.json" in exc.value.message
    assert "s3cret-pw" not in exc.value.message + exc.value.hint
    api = FakeAPI(push_events=[{"status": "Pushed"}])
    fake_engine(api).push(ImageRef.parse("127.0.0.1:5000/a/b:1"))
    assert api.push_kwargs["auth_config"] is None  # no login: the engine's own stored logins are not asked for


def test_unreachable_registry_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ImageError) as exc:
        SkopeoRegistry().resolve(ImageRef.parse(f"127.0.0.1:9/a/b@{DIGEST}"), "amd64")
    assert exc.value.code == "registry-unreachable" and "images-up" in exc.value.hint


def pinned(workdir="/app") -> PinnedImage:
    return PinnedImage(reference=f"registry.example.com/ml/tiny-lm@{DIGEST}", digest=DIGEST,
                       source="registry.example.com/ml/tiny-lm:4bbc0cf71b939ec0", architecture="amd64", os="linux",
                       workdir=workdir)


def image_context(site, runtime):
    site = with_runtime(site, runtime).model_copy(update={"secrets_file": "/home/alice/.config/slurmctl/secrets.env"})
    site.containers.mounts = ["/datasets"]
    run = spec(args=["--steps", "600"], env={"HF_HOME": "/data/hf cache"}, secrets=["WANDB_API_KEY"],
               image=f"registry.example.com/ml/tiny-lm@{DIGEST}")
    return sbatch_context(run, site, "tiny-lm-20261129-abcd", Path("/runs/tiny-lm-20261129-abcd"),
                          Path("/home/alice/tiny-lm"), image=pinned())


def test_pyxis_rendering_matches_golden(local_site):
    script = render(TEMPLATE, image_context(local_site, "pyxis"))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN_PYXIS.write_text(script)
    assert script == GOLDEN_PYXIS.read_text(), "rendered script changed; rerun with UPDATE_GOLDEN=1 and review"
    assert f"--container-image='registry.example.com#ml/tiny-lm@{DIGEST}'" in script  # enroot's URI form
    assert "--container-mounts=/runs/tiny-lm-20261129-abcd,/datasets" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_podman_rendering_runs_the_pinned_image_with_the_job_environment(local_site):
    script = render(TEMPLATE, image_context(local_site, "podman"))
    launcher = script.split("srun --kill-on-bad-exit=1", 1)[1].split(" &\n", 1)[0]
    for part in ["run --rm --network=host --uts=host",
                 "--volume=/runs/tiny-lm-20261129-abcd:/runs/tiny-lm-20261129-abcd",
                 "--workdir=/app", "--env='SLURM_*'", "--env=MASTER_ADDR", "--env=HF_HOME", "--env=WANDB_API_KEY",
                 "--env=NCCL_SOCKET_IFNAME", f"registry.example.com/ml/tiny-lm@{DIGEST}",
                 "python3 -m torch.distributed.run"]:
        assert part in launcher
    assert "WANDB_API_KEY=" not in script and '"$PY" -m torch.distributed.run' not in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_init_writes_a_non_root_dockerfile_when_the_site_runs_images(local_site, tmp_path):
    written = init_run("tiny", tmp_path / "tiny", site=local_site)
    dockerfile = (tmp_path / "tiny" / "Dockerfile").read_text()
    assert tmp_path / "tiny" / "Dockerfile" in written
    assert f"FROM {local_site.containers.base_image}" in dockerfile and "USER trainer" in dockerfile
    init_run("bare", tmp_path / "bare", site=with_runtime(local_site, "none"))
    assert not (tmp_path / "bare" / "Dockerfile").exists()


def test_cached_datasets_are_mounted_into_the_container(local_site, tmp_path):
    from slurmctl.config.models import RunSpec
    from slurmctl.submit.images import PinnedImage, container_context

    spec = RunSpec(name="x", entrypoint="t.py", partition="l4-dev", data=[
        {"src": "s3://slurmctl-datasets/synthetic", "name": "shards", "mount": "/data/shards"},
        {"src": "s3://slurmctl-datasets/eval", "cache": "none"}])
    image = PinnedImage(reference="127.0.0.1:5000/a/b@sha256:" + "0" * 64, digest="sha256:" + "0" * 64,
                        source="pinned", architecture="amd64", os="linux")
    run_dir = tmp_path / "alice" / "x-20261201-abcd"
    mounts = container_context(local_site, spec, image, run_dir, str(run_dir / "checkpoints"))["container_mounts"]
    user = __import__("pwd").getpwuid(__import__("os").geteuid()).pw_name
    cache_user = f"{local_site.data.node_cache_dir}/{user}"
    assert cache_user in mounts  # the view's symlinks point into it
    assert f"{cache_user}/views/x-20261201-abcd/shards:/data/shards" in mounts
    assert not any("eval" in m for m in mounts)
