"""Values overlays that pin every image of the Slinky charts and deploy/chart by digest.

    python deploy/images/overlay.py <digests.json> <out dir>

digests.json maps each image reference the values files name (`repository:tag`) to the
`registry/path@sha256:...` reference deploy/images/build mirrored or built for it; for the slurmd
and login images that is the image WITH slurmctl. Writes slinky-images.yaml (for
deploy/slinky/values.yaml), operator-images.yaml (operator-values.yaml) and chart-images.yaml
(deploy/chart: the login image and MariaDB). Refuses a reference that is not a digest or an image slot with no digest.

The two Slinky charts read `image` differently: the slurm chart's format-image takes a string or
{repository, tag}; the slurm-operator chart takes only {repository, tag} and prints
"<repository>:<tag>" (a string there fails: "can't evaluate field repository"). So an image is
written as the map {repository: <mirror>, tag: "<tag>@sha256:<digest>"} wherever the values give a
map: "<mirror>:<tag>@sha256:..." is a valid reference, and the runtime pulls it by the digest.
"""

import json
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DIGEST_REF = re.compile(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}")


def image_slots(values, path=()):
    """(path, 'repository:tag') of every `image` map in a values tree."""
    if not isinstance(values, dict):
        return
    for key, value in values.items():
        if key == "image" and isinstance(value, dict) and value.get("repository"):
            tag = f":{value['tag']}" if value.get("tag") else ""
            yield (*path, key), f"{value['repository']}{tag}"
        else:
            yield from image_slots(value, (*path, key))


def container_lists(values, path=()):
    """(path, list) of every raw `initContainers` list in a values tree (a node set's podSpec): their
    `image` is a plain string, and Helm replaces a list whole, so the overlay writes the whole list."""
    if not isinstance(values, dict):
        return
    for key, value in values.items():
        if key == "initContainers" and isinstance(value, list):
            yield (*path, key), value
        else:
            yield from container_lists(value, (*path, key))


def string_images(values) -> set[str]:
    """Every `repository:tag` the raw container lists name."""
    return {c["image"] for _, containers in container_lists(values) for c in containers
            if isinstance(c, dict) and isinstance(c.get("image"), str)}


def pinned_image(source: dict, pinned: str) -> dict:
    """{repository, tag} of a digest reference, keeping the source's tag for people to read."""
    if not source.get("tag"):  # the operator chart would print "<repository>:" and the chart version
        raise SystemExit(f"{source['repository']}: give the image a tag in the values (it carries the digest)")
    repository, digest = pinned.split("@", 1)
    return {"repository": repository, "tag": f"{source['tag']}@{digest}"}


def overlay(values: dict, digests: dict[str, str], only_enabled: bool = True) -> dict:
    """The values tree with only the image slots, each set to {repository, tag@digest}."""
    out: dict = {}
    for path, ref in image_slots(values):
        if only_enabled and len(path) > 2 and path[0] in ("nodesets", "loginsets"):
            if not values[path[0]][path[1]].get("enabled"):
                continue
        pinned = digests.get(ref)
        if pinned is None:
            raise SystemExit(f"{'.'.join(path)}: no digest for {ref} in the digests file")
        if not DIGEST_REF.fullmatch(pinned):
            raise SystemExit(f"{'.'.join(path)}: {pinned!r} is not <registry>/<path>@sha256:<64 hex>")
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        source = values
        for key in path:
            source = source[key]
        node[path[-1]] = pinned_image(source, pinned)
    for path, containers in container_lists(values):
        if only_enabled and len(path) > 2 and path[0] in ("nodesets", "loginsets"):
            if not values[path[0]][path[1]].get("enabled"):
                continue
        pinned_list = []
        for container in containers:
            container = dict(container)
            pinned = digests.get(container.get("image"))
            if pinned is None or not DIGEST_REF.fullmatch(pinned):
                raise SystemExit(f"{'.'.join(path)}: no digest for {container.get('image')} in the digests file")
            container["image"] = pinned
            pinned_list.append(container)
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = pinned_list
    return out


def main(digests_file: str, out_dir: str) -> None:
    digests = json.loads(Path(digests_file).read_text())
    out = Path(out_dir)
    for source, target in (("slinky/values.yaml", "slinky-images.yaml"),
                           ("slinky/operator-values.yaml", "operator-images.yaml")):
        values = yaml.safe_load((REPO / "deploy" / source).read_text())
        (out / target).write_text(f"# written by deploy/images/build from deploy/{source}\n"
                                  + yaml.safe_dump(overlay(values, digests), sort_keys=True))
    login = digests.get("slurmctl-login")
    if not login or not DIGEST_REF.fullmatch(login):
        raise SystemExit("slurmctl-login: the built login image is missing from the digests file")
    chart = yaml.safe_load((REPO / "deploy" / "chart" / "values.yaml").read_text())
    mariadb = digests.get(chart["mariadb"]["upstream"])
    if not mariadb or not DIGEST_REF.fullmatch(mariadb):
        raise SystemExit(f"mariadb: no digest for {chart['mariadb']['upstream']} in the digests file")
    (out / "chart-images.yaml").write_text("# written by deploy/images/build\n"
                                           + yaml.safe_dump({"image": login, "mariadb": {"image": mariadb}}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
