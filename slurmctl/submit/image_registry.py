"""Registry credentials and digest resolution, with the logins users already have.

Credentials are looked up where docker, podman and skopeo keep them, in their order:
``$REGISTRY_AUTH_FILE``, ``$XDG_RUNTIME_DIR/containers/auth.json``, ``~/.config/containers/auth.json``,
``~/.docker/config.json`` (``auths`` entries, ``credHelpers`` and ``credsStore`` — e.g.
``docker-credential-gcloud`` for Artifact Registry), then the site's robot account
(site.yaml ``containers.registry_auth_file``). Never from run.yaml.

Manifests and configs are read with ``skopeo inspect``, which speaks the registry's challenge
flows (Basic, and Bearer tokens from the registry's token service, refresh tokens included).
The one credential it needs travels in an auth file that exists only in memory (a memfd this
process hands to skopeo): nothing is written to disk, and no secret is on a command line (where
``ps`` would show it to every user of the login node).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from slurmctl.errors import ImageError

INDEX_TYPES = ("application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json")
DOCKER_HUB = "registry-1.docker.io"
# The names an auth file may use for Docker Hub (docker login writes the v1 URL).
_HUB_KEYS = ("docker.io", "index.docker.io", "https://index.docker.io/v1/", DOCKER_HUB)
_HELPER_TIMEOUT_S = 30
_SKOPEO_TIMEOUT_S = 120


@dataclass(frozen=True)
class Credential:
    """A login for one registry. ``secret`` is a password or, when ``token`` is set, an identity
    (refresh) token; it never appears in repr, errors or logs."""

    registry: str
    username: str
    secret: str = field(repr=False)
    source: str  # where it came from, as the user knows it: a file path or a credential helper
    token: bool = False  # an identity token (OAuth refresh token) rather than a password
    helper: str | None = None  # docker-credential-<helper> that handed it out, if any

    def auth_config(self) -> dict[str, str]:
        """The Docker Engine API's X-Registry-Auth for a push through the engine."""
        if self.token:
            return {"identitytoken": self.secret, "serveraddress": self.registry}
        return {"username": self.username, "password": self.secret, "serveraddress": self.registry}

    def auth_file(self) -> bytes:
        """A containers auth.json holding only this login (what skopeo reads from the pipe)."""
        if self.token:
            # containers/image skips an entry without a decodable `auth` (docker writes "user:" there).
            entry = {"auth": base64.b64encode(f"{self.username}:".encode()).decode(), "identitytoken": self.secret}
        else:
            entry = {"auth": base64.b64encode(f"{self.username}:{self.secret}".encode()).decode()}
        keys = _HUB_KEYS if self.registry == DOCKER_HUB else (self.registry,)
        return json.dumps({"auths": {key: entry for key in keys}}).encode()


def auth_files(site_auth_file: str | None = None) -> list[Path]:
    """The auth files looked at, in order (those that do not exist are skipped when read)."""
    env = os.environ
    home = Path.home()
    files = []
    if env.get("REGISTRY_AUTH_FILE"):
        files.append(Path(env["REGISTRY_AUTH_FILE"]).expanduser())
    if env.get("XDG_RUNTIME_DIR"):
        files.append(Path(env["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    files.append(Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "containers" / "auth.json")
    files.append(Path(env.get("DOCKER_CONFIG") or home / ".docker").expanduser() / "config.json")
    if site_auth_file:
        files.append(Path(site_auth_file).expanduser())
    return files


def _keys_for(registry: str) -> tuple[str, ...]:
    return _HUB_KEYS if registry == DOCKER_HUB else (registry, f"https://{registry}", f"http://{registry}")


def _entry(table: dict, registry: str):
    """The table's entry for the registry; keys may carry a scheme or a path (docker login writes both)."""
    for key in _keys_for(registry):
        if key in table:
            return table[key]
    for key, value in table.items():
        bare = str(key).split("://", 1)[-1].split("/", 1)[0]
        if bare == registry:
            return value
    return None


def _read_auth_file(path: Path, site: bool = False) -> dict | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        hint = ("Ask the platform team for read access to the site's registry login (site.yaml "
                "containers.registry_auth_file), or log in yourself: podman login <registry>." if site else
                f"Fix its permissions (chmod 600 {path}, owned by you), or unset REGISTRY_AUTH_FILE.")
        raise ImageError(f"cannot read the registry auth file {path}: {exc.strerror}.", hint,
                         code="registry-auth") from None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except ValueError:
        raise ImageError(f"the registry auth file {path} is not valid JSON.",
                         "Log in again to rewrite it (podman login / docker login), or fix the file.",
                         code="registry-auth") from None
    return data


def _from_helper(helper: str, registry: str, path: Path) -> Credential | None:
    exe = shutil.which(f"docker-credential-{helper}")
    source = f"docker-credential-{helper} (named in {path})"
    if exe is None:
        raise ImageError(f"{path} says logins for {registry} come from docker-credential-{helper}, which is not "
                         "installed here.",
                         f"Install it (for gcloud: the Google Cloud SDK), or remove the helper from {path} and log in "
                         f"with `podman login {registry}`.", code="registry-no-credentials")
    try:
        out = subprocess.run([exe, "get"], input=registry, capture_output=True, text=True,
                             timeout=_HELPER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ImageError(f"{source} did not answer within {_HELPER_TIMEOUT_S} s for {registry}.",
                         _login_hint(registry, helper), code="registry-token-expired") from None
    if out.returncode != 0:
        if "not found" in (out.stdout + out.stderr).lower():
            return None  # the store has nothing for this registry: look further
        raise ImageError(f"{source} could not hand out a login for {registry}: "
                         f"{(out.stderr or out.stdout).strip()[:300]}",
                         _login_hint(registry, helper), code="registry-token-expired")
    try:
        data = json.loads(out.stdout)
        username, secret = str(data.get("Username") or ""), str(data["Secret"])
    except (ValueError, KeyError, TypeError):
        raise ImageError(f"{source} answered something that is not a login for {registry}.",
                         _login_hint(registry, helper), code="registry-auth") from None
    # The credential-helper protocol marks an identity token with this user name.
    return Credential(registry, username, secret, source, token=username == "<token>", helper=helper)


def find_credential(registry: str, site_auth_file: str | None = None) -> Credential | None:
    """The login for ``registry`` from the first place that has one, or None (try anonymously)."""
    files = auth_files(site_auth_file)
    for path in files:
        data = _read_auth_file(path, site=bool(site_auth_file) and path == files[-1])
        if data is None:
            continue
        helper = _entry(data.get("credHelpers") or {}, registry)
        if helper:
            found = _from_helper(str(helper), registry, path)
            if found:
                return found
        entry = _entry(data.get("auths") or {}, registry)
        if isinstance(entry, dict):
            if entry.get("identitytoken"):
                return Credential(registry, "<token>", str(entry["identitytoken"]), str(path), token=True)
            if entry.get("auth"):
                try:
                    username, _, secret = base64.b64decode(entry["auth"]).decode().partition(":")
                except (ValueError, UnicodeDecodeError):
                    raise ImageError(f"the login for {registry} in {path} is not valid base64 user:password.",
                                     f"Log in again: podman login --authfile {path} {registry}.",
                                     code="registry-auth") from None
                return Credential(registry, username, secret, str(path))
            if entry.get("username") and entry.get("password"):
                return Credential(registry, str(entry["username"]), str(entry["password"]), str(path))
        store = data.get("credsStore")
        if store and shutil.which(f"docker-credential-{store}"):
            found = _from_helper(str(store), registry, path)
            if found:
                return found
    return None


def _login_hint(registry: str, helper: str | None = None) -> str:
    """The command that (re)creates a login for this registry."""
    if helper == "gcloud" or registry.endswith(("-docker.pkg.dev", "gcr.io")):
        return (f"Run `gcloud auth login` (on a VM or GKE: check the service account), then "
                f"`gcloud auth configure-docker {registry}`; it writes the helper into ~/.docker/config.json.")
    if registry == "ghcr.io":
        return ("Create a GitHub token with read:packages (write:packages to push), then "
                "`echo $TOKEN | podman login ghcr.io -u <github user> --password-stdin`.")
    if registry == DOCKER_HUB:
        return "Run `podman login docker.io` (or `docker login`) with a Docker Hub access token."
    if helper:
        return f"Log in again through docker-credential-{helper}'s tool, or run `podman login {registry}`."
    return (f"Run `podman login {registry}` (writes ${{XDG_RUNTIME_DIR}}/containers/auth.json; "
            f"--authfile ~/.config/containers/auth.json keeps it across logins) or `docker login {registry}`.")


def _is_local(registry: str) -> bool:
    return registry.split(":")[0] in ("127.0.0.1", "localhost")


class SkopeoRegistry:
    """Reads manifests and image configs with ``skopeo inspect`` (the maintained client of the
    containers stack), with the caller's login found by ``find_credential``."""

    def __init__(self, site_auth_file: str | None = None, skopeo: str = "skopeo"):
        self.site_auth_file = site_auth_file
        self.skopeo = skopeo
        self._credentials: dict[str, Credential | None] = {}

    def credential(self, registry: str) -> Credential | None:
        if registry not in self._credentials:
            self._credentials[registry] = find_credential(registry, self.site_auth_file)
        return self._credentials[registry]

    def _inspect(self, ref, target: str, *extra: str) -> bytes:
        exe = shutil.which(self.skopeo)
        if exe is None:
            raise ImageError("`skopeo` is not installed; slurmctl reads image digests from registries with it.",
                             "Install it: apt-get install skopeo (dnf install skopeo; brew install skopeo).",
                             code="skopeo-missing")
        cred = self.credential(ref.registry)
        # The auth file lives in memory (memfd; skopeo opens it again by /dev/fd path, from offset 0):
        # the login never touches the disk or the argv.
        read_fd = os.memfd_create("slurmctl-registry-auth", os.MFD_CLOEXEC)
        os.write(read_fd, cred.auth_file() if cred else b'{"auths": {}}')
        argv = [exe, "inspect", *extra, "--raw", "--authfile", f"/dev/fd/{read_fd}", "--retry-times", "1"]
        if _is_local(ref.registry):
            argv.append("--tls-verify=false")  # the local cluster's loopback registries speak plain HTTP
        argv.append(f"docker://{ref.registry}/{ref.repository}{target}")
        try:
            out = subprocess.run(argv, capture_output=True, pass_fds=(read_fd,), timeout=_SKOPEO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ImageError(f"registry {ref.registry} did not answer within {_SKOPEO_TIMEOUT_S} s.",
                             "Retry; if it persists, check the registry address and your network.",
                             code="registry-unreachable") from None
        finally:
            os.close(read_fd)
        if out.returncode != 0:
            raise self._error(ref, out.stderr.decode(errors="replace"), cred)
        return out.stdout

    def _error(self, ref, stderr: str, cred: Credential | None) -> ImageError:
        text = stderr.lower()
        detail = stderr.strip().splitlines()[-1][:400] if stderr.strip() else "no error text"
        if "manifest unknown" in text or "name unknown" in text or "not found" in text and "manifest" in text:
            return ImageError(f"image {ref} is not in registry {ref.registry}.",
                              "Check the repository and tag, or build and push it with `slurmctl submit --build`.",
                              code="image-not-found")
        denied = "denied" in text or re.search(r"\b403\b", text)
        refused = denied or re.search(r"unauthorized|authentication required|invalid_token|\b401\b", text)
        if refused and cred is None:
            # Docker Hub and GHCR answer "denied" to an anonymous pull of a private or missing repository.
            maybe_missing = " (or it does not exist)" if denied else ""
            return ImageError(
                f"registry {ref.registry} needs a login to read {ref.repository}{maybe_missing}, and you have "
                f"none for it (looked in {', '.join(str(p) for p in auth_files(self.site_auth_file))}).",
                _login_hint(ref.registry), code="registry-no-credentials")
        if denied:
            return ImageError(f"registry {ref.registry} denied the login from {cred.source} access to "
                              f"{ref.repository}.",
                              "Ask the repository's owner for pull access for that account, or log in as an "
                              f"account that has it. {_login_hint(ref.registry, cred.helper)}",
                              code="registry-access-denied")
        if refused:
            if cred.token or cred.helper:
                return ImageError(
                    f"registry {ref.registry} refused the token from {cred.source}: it has expired or was revoked.",
                    _login_hint(ref.registry, cred.helper), code="registry-token-expired")
            return ImageError(
                f"registry {ref.registry} refused the password for user '{cred.username}' from {cred.source}.",
                f"The password is wrong or was changed: log in again to replace it "
                f"(podman login --authfile {cred.source} {ref.registry}).", code="registry-auth")
        return ImageError(f"registry {ref.registry} could not be read for {ref}: {detail}",
                          "Check the registry address in site.yaml (containers.registry); on the local cluster "
                          "run deploy/local/images-up.", code="registry-unreachable")

    def has_tag(self, ref) -> bool:
        try:
            self._inspect(ref, f":{ref.tag or 'latest'}")
            return True
        except ImageError as exc:
            if exc.code == "image-not-found":
                return False
            raise

    def resolve(self, ref, arch: str) -> tuple[str, dict]:
        """(digest of the image manifest for ``arch``, image config) as the registry serves them.

        For a multi-arch index, the digest is the ``arch`` entry's; when the index has no such
        entry, the index digest comes back with the architectures it has, for the arch check."""
        target = f"@{ref.digest}" if ref.digest else f":{ref.tag or 'latest'}"
        raw = self._inspect(ref, target)
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        manifest = json.loads(raw)
        if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
            platforms = {m.get("platform", {}).get("architecture"): m["digest"] for m in manifest["manifests"]}
            if arch not in platforms:
                return digest, {"architecture": ",".join(p for p in platforms if p) or "unknown", "os": "linux"}
            digest = platforms[arch]
        config = self._inspect(ref, f"@{digest}", "--config")
        return digest, json.loads(config)
