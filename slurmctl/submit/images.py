"""Training images: build, push, and pin by the registry's digest (never a tag that can move).

Two seams: ``Engine`` builds and pushes through the ``docker`` SDK (the engine is whatever
``DOCKER_HOST`` points at: Docker in production, podman's Docker-compatible API on the local
cluster), and ``SkopeoRegistry`` (image_registry.py) asks the registry itself for the digest and the
image config, because local engine metadata is wrong right after a push on podman. Both use the
submitting user's registry login (registry.find_credential); the engine needs none of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurmctl.config.models import BuildSpec, RunSpec, SiteConfig
from slurmctl.errors import ImageError
from slurmctl.fsutil import read_json, write_atomic
from slurmctl.rundir import RUN_JSON, current_user
from slurmctl.submit.datasets import dataset_path
from slurmctl.submit.image_registry import Credential, SkopeoRegistry

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_IGNORED_IN_HASH = {".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"}


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        name, _, digest = text.partition("@")
        if digest and not DIGEST_RE.match(digest):
            raise ImageError(f"image '{text}': '{digest}' is not a sha256 digest.",
                             "Write registry/repository@sha256:<64 hex digits>.", code="image-reference")
        first, slash, rest = name.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, rest
        else:  # Docker Hub's implicit registry and library/ namespace
            registry, path = "registry-1.docker.io", name if slash else f"library/{name}"
        repo, colon, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
        if not re.match(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*$", repo or ""):
            raise ImageError(f"image '{text}' is not a valid image reference.",
                             "Write registry/repository@sha256:<digest>, e.g. 127.0.0.1:5000/slurmctl/tiny-lm@sha256:…",
                             code="image-reference")
        return cls(registry, repo, tag or None, digest or None)

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    def pinned(self, digest: str) -> str:
        return f"{self.name}@{digest}"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


@dataclass
class PinnedImage:
    """What the run executes: ``reference`` is ``registry/repo@sha256:…``; stored in run.json."""

    reference: str
    digest: str
    source: str
    architecture: str
    os: str
    workdir: str | None = None
    built: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


# --- engine (docker SDK) -----------------------------------------------------------------------

class Engine:
    """Build and push through the Docker Engine API at ``DOCKER_HOST`` (or site containers.engine_host)."""

    def __init__(self, base_url: str | None = None):
        try:
            import docker
        except ImportError:
            raise ImageError("the `docker` Python package is not installed.",
                             "Install slurmctl with the images extra: pip install 'slurmctl[images]'.",
                             code="engine-unreachable") from None
        self.base_url = os.environ.get("DOCKER_HOST") or base_url or "unix:///var/run/docker.sock"
        try:
            self.api = docker.APIClient(base_url=self.base_url, version="auto", timeout=600)
        except Exception as exc:  # docker raises DockerException / requests errors on connect
            raise ImageError(f"no container engine answers at {self.base_url}: {exc}.",
                             "Start Docker, or set DOCKER_HOST; on the local cluster run deploy/local/images-up.",
                             code="engine-unreachable") from None

    def build(self, context: Path, dockerfile: str, tag: str, buildargs: dict[str, str]) -> None:
        step, tail = "", []
        stream = self.api.build(path=str(context), dockerfile=dockerfile, tag=tag, buildargs=buildargs, rm=True,
                                forcerm=True, network_mode="host", decode=True)
        for event in stream:
            text = event.get("stream") or ""
            for line in text.splitlines():
                if re.match(r"^(STEP|Step) \d+/\d+", line):
                    step = line.strip()
                if line.strip():
                    tail = (tail + [line.rstrip()])[-15:]
            if "error" in event or "errorDetail" in event:
                message = event.get("error") or event["errorDetail"].get("message", "")
                last = "\n".join(tail[-10:])
                raise ImageError(f"building the image failed at `{step or 'the first step'}`: "
                                 f"{message.strip()}\n{last}",
                                 f"Fix that step of {dockerfile} and submit again.", code="image-build-failed")
        if not self.api.images(name=tag):
            raise ImageError(f"the engine finished building but has no image {tag}.\n" + "\n".join(tail[-10:]),
                             f"Check {dockerfile}; build it by hand with `docker build` to see more.",
                             code="image-build-failed")

    def push(self, ref: ImageRef, credential: Credential | None = None) -> None:
        """Push with the user's login (X-Registry-Auth); the engine's own stored logins are not used."""
        auth = credential.auth_config() if credential else None
        # Push failures do not raise: they arrive as {"error": ...} events in the stream.
        for event in self.api.push(ref.name, tag=ref.tag, stream=True, decode=True, auth_config=auth):
            if "error" in event or "errorDetail" in event:
                message = (event.get("error") or event["errorDetail"].get("message", "")).strip()
                lowered = message.lower()
                if "unauthorized" in lowered or "authentication required" in lowered or "denied" in lowered:
                    who = f"the login from {credential.source}" if credential else "no login (you have none for it)"
                    raise ImageError(f"registry {ref.registry} refused to let {who} push {ref.repository}: {message}",
                                     f"Log in with an account that may push there: podman login {ref.registry} "
                                     "(or docker login), or set build.repository to a repository you own.",
                                     code="registry-auth")
                raise ImageError(f"pushing {ref} failed: {message}",
                                 "Check that the registry is up and that you may push to this repository.",
                                 code="image-push-failed")


# --- the submit hook ---------------------------------------------------------------------------

def code_hash(context: Path, dockerfile: Path, buildargs: dict[str, str]) -> str:
    """Content hash of the build inputs: same code + Dockerfile + args -> same tag -> no rebuild."""
    h = hashlib.sha256()
    h.update(json.dumps(sorted(buildargs.items())).encode())
    h.update(dockerfile.read_bytes())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        rel = path.relative_to(context)
        if _IGNORED_IN_HASH.intersection(rel.parts):
            continue
        h.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def node_architectures(spec: RunSpec, site: SiteConfig) -> set[str]:
    return {site.partitions[p].arch for p in spec.partitions if p in site.partitions} or {"amd64"}


def check_architecture(pinned: PinnedImage, archs: set[str], spec: RunSpec) -> None:
    if pinned.architecture not in archs or len(archs) > 1:
        raise ImageError(
            f"image {pinned.source} is built for {pinned.os}/{pinned.architecture}, but partition(s) "
            f"{', '.join(spec.partitions)} have {'/'.join(sorted(archs))} nodes; it would fail there with "
            f"'exec format error'.",
            f"Build the image on (or for) {'/'.join(sorted(archs))}: docker build --platform linux/{min(archs)}, "
            "or pick partitions whose nodes match the image.", code="image-arch-mismatch")


def build_and_push(spec: RunSpec, site: SiteConfig, workdir: Path, engine: Engine | None = None,
                   registry: SkopeoRegistry | None = None) -> tuple[ImageRef, bool, dict[str, float]]:
    """Build the run's image, tag it with the code hash and push it; reuse a pushed code hash."""
    build = spec.build
    if build is None:
        raise ImageError("`submit --build` needs a `build:` section in run.yaml.",
                         "Add `build: {dockerfile: Dockerfile}` (slurmctl init writes a Dockerfile).",
                         code="image-build")
    if not site.containers.registry:
        raise ImageError("this site has no image registry (site.yaml containers.registry).",
                         "Ask the platform team; on the local cluster run deploy/local/images-up.", code="image-build")
    context = (workdir / build.context).resolve()
    dockerfile = (workdir / build.dockerfile).resolve()
    if not dockerfile.is_file():
        raise ImageError(f"Dockerfile {dockerfile} does not exist.",
                         "Set build.dockerfile in run.yaml (relative to workdir).", code="image-build")
    registry = registry or SkopeoRegistry(site.containers.registry_auth_file)
    # The user's own namespace by default: a site registry lets a user push only under <user>/.
    ref = ImageRef.parse(f"{site.containers.registry}/{build.repository or current_user() + '/' + spec.name}:"
                         f"{code_hash(context, dockerfile, build.args)}")
    timings: dict[str, float] = {}
    if registry.has_tag(ref):
        return ref, False, timings
    engine = engine or Engine(site.containers.engine_host)
    t0 = time.monotonic()
    engine.build(context, str(dockerfile), str(ref), build.args)  # the SDK sends a Dockerfile outside the context
    timings["build_s"] = round(time.monotonic() - t0, 2)
    t0 = time.monotonic()
    engine.push(ref, registry.credential(ref.registry))
    timings["push_s"] = round(time.monotonic() - t0, 2)
    return ref, True, timings


def pin(ref: ImageRef, archs: set[str], registry: SkopeoRegistry | None = None) -> PinnedImage:
    registry = registry or SkopeoRegistry()
    t0 = time.monotonic()
    digest, config = registry.resolve(ref, min(archs))
    cfg = config.get("config") or {}
    return PinnedImage(reference=ref.pinned(digest), digest=digest, source=str(ref),
                       architecture=config.get("architecture", "unknown"), os=config.get("os", "linux"),
                       workdir=cfg.get("WorkingDir") or None, timings={"resolve_s": round(time.monotonic() - t0, 3)})


def resolve_run_image(spec: RunSpec, site: SiteConfig, workdir: Path, *, build: bool = False,
                      allow_mutable: bool = False, engine: Engine | None = None,
                      registry: SkopeoRegistry | None = None) -> PinnedImage | None:
    """The submit hook: build if asked, then pin ``image:`` to a registry digest and check the arch.

    A ``build:`` section in run.yaml builds like --build; a reused code hash reuses the pushed image.
    Returns None when the run has no image (it runs on the nodes' own python)."""
    build = build or spec.build is not None
    if not (build or spec.image):
        return None
    if build and spec.image:
        raise ImageError("run.yaml has both `image:` and a build (`build:` or --build).",
                         "Keep `image:` to run a pushed image, or `build:` to build one (build.repository names it).",
                         code="image-build")
    if build and spec.build is None:
        spec = spec.model_copy(update={"build": BuildSpec()})
    if site.containers.runtime == "none":
        raise ImageError(f"this cluster ({site.cluster}) does not run container images (site.yaml containers.runtime).",
                         "Remove `image:`/--build from the run, or ask the platform team to enable pyxis or podman.",
                         code="image-runtime")
    registry = registry or SkopeoRegistry(site.containers.registry_auth_file)
    timings: dict[str, float] = {}
    built = False
    if build:
        ref, built, timings = build_and_push(spec, site, workdir, engine, registry)
    else:
        ref = ImageRef.parse(spec.image)
        if ref.digest is None and not allow_mutable:
            raise ImageError(f"image '{spec.image}' is a tag, which can move to other content after you submit.",
                             "Pin it: image: <registry/repo>@sha256:<digest> (or pass --allow-mutable-image, and "
                             "slurmctl pins the digest the tag has now).", code="image-mutable-tag")
    archs = node_architectures(spec, site)
    pinned = pin(ref, archs, registry)
    pinned.built = built
    pinned.timings = {**timings, **pinned.timings}
    check_architecture(pinned, archs, spec)
    return pinned


def container_context(site: SiteConfig, spec: RunSpec, image: PinnedImage | None, run_dir: Path,
                      checkpoint_dir: str) -> dict:
    """Template values for sbatch_templates/_container_launch.j2 (``image`` is None without a container)."""
    if image is None:
        return {"image": None}
    extra = [checkpoint_dir, *site.containers.mounts, *spec.data_paths]
    inside_run_dir = [p for p in extra if Path(p).is_relative_to(run_dir)]  # already mounted with it
    mounts = list(dict.fromkeys([str(run_dir), *(p for p in extra if p not in inside_run_dir)]))
    # Cached datasets: the user's cache directory at its own path ($SLURMCTL_DATA_<NAME>'s symlinks point
    # into it), and the run's view again at `mount:` where the dataset names one (HOST:CONTAINER).
    for dataset in spec.datasets:
        if dataset.cache == "none":
            continue
        view = Path(dataset_path(dataset, site, current_user(), Path(run_dir).name))
        mounts = list(dict.fromkeys([*mounts, str(view.parents[2])]))
        if dataset.mount:
            mounts.append(f"{view}:{dataset.mount}")
    ref = ImageRef.parse(image.reference)
    return {
        "image": image.reference,
        "enroot_image": f"{ref.registry}#{ref.repository}@{image.digest}",  # pyxis/enroot URI form
        "container_runtime": site.containers.runtime,
        "container_mounts": mounts,
        "container_workdir": image.workdir,
        "podman": site.containers.podman,
        # Passed into the container by name (values stay in the batch shell's environment).
        "container_env": sorted({*site.nccl_env, *spec.env, *spec.secrets}),
    }


def record_image(run_dir: Path, image: PinnedImage | None) -> None:
    """Add the pinned image to run.json (what `status` shows and what a rerun must use)."""
    if image is None:
        return
    meta_path = run_dir / RUN_JSON
    meta = read_json(meta_path) or {}
    meta["image"] = image.to_dict()
    write_atomic(meta_path, json.dumps(meta, indent=2))
