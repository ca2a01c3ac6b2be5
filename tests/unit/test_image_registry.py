"""image_registry.py: where a login is found (auth files, credential helpers, the site's robot account),
what skopeo is handed (an in-memory auth file, never a secret in argv), and which error each
registry refusal becomes. Real registries (Basic and Bearer): tests/integration/test_images.py."""

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from slurmctl.errors import ImageError
from slurmctl.submit.image_registry import DOCKER_HUB, Credential, SkopeoRegistry, auth_files, find_credential
from slurmctl.submit.images import ImageRef

REG = "registry.example.com"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty home with no auth-file variables, and a bin/ on PATH for helper executables."""
    for var in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "DOCKER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    return tmp_path


def write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def basic(user: str, password: str) -> dict:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def helper(home: Path, name: str, body: str) -> None:
    """A docker-credential-<name> executable speaking the helper protocol (registry on stdin)."""
    path = home / "bin" / f"docker-credential-{name}"
    path.write_text(f"#!/bin/sh\nread registry\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_no_login_anywhere_is_none(home):
    assert find_credential(REG) is None


def test_lookup_order_follows_podman_then_docker_then_the_site(home, monkeypatch):
    site = write(home / "site-robot.json", {"auths": {REG: basic("robot", "site-pw")}})
    assert find_credential(REG, str(site)).source == str(site)
    docker = write(home / ".docker" / "config.json", {"auths": {f"https://{REG}/v1/": basic("alice", "docker-pw")}})
    assert find_credential(REG, str(site)).secret == "docker-pw"  # a scheme and path in the key still match
    write(home / ".config" / "containers" / "auth.json", {"auths": {REG: basic("alice", "podman-pw")}})
    assert find_credential(REG, str(site)).secret == "podman-pw"
    explicit = write(home / "elsewhere.json", {"auths": {REG: basic("alice", "explicit-pw")}})
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(explicit))
    cred = find_credential(REG, str(site))
    assert (cred.username, cred.secret, cred.source) == ("alice", "explicit-pw", str(explicit))
    assert auth_files(str(site))[-2:] == [docker, site]


def test_a_file_without_this_registry_is_passed_over(home):
    write(home / ".config" / "containers" / "auth.json", {"auths": {"other.example.com": basic("a", "b")}})
    write(home / ".docker" / "config.json", {"auths": {REG: basic("alice", "pw")}})
    assert find_credential(REG).source == str(home / ".docker" / "config.json")


def test_docker_hub_logins_under_the_v1_url(home):
    write(home / ".docker" / "config.json", {"auths": {"https://index.docker.io/v1/": basic("alice", "hub-pat")}})
    cred = find_credential(DOCKER_HUB)
    assert cred.secret == "hub-pat"
    assert set(json.loads(cred.auth_file())["auths"]) >= {"docker.io", DOCKER_HUB}


def test_identity_token_entry(home):
    write(home / ".docker" / "config.json", {"auths": {REG: {"identitytoken": "refresh-123"}}})
    cred = find_credential(REG)
    assert cred.token and cred.auth_config() == {"identitytoken": "refresh-123", "serveraddress": REG}
    entry = json.loads(cred.auth_file())["auths"][REG]
    assert entry["identitytoken"] == "refresh-123" and base64.b64decode(entry["auth"]) == b"<token>:"


def test_cred_helper_hands_out_the_login(home):
    helper(home, "gcloud", 'printf \'{"ServerURL":"%s","Username":"oauth2accesstoken","Secret":"ya29.tok"}\' '
                           '"$registry"')
    write(home / ".docker" / "config.json", {"credHelpers": {"europe-docker.pkg.dev": "gcloud"}})
    cred = find_credential("europe-docker.pkg.dev")
    assert (cred.username, cred.secret, cred.helper) == ("oauth2accesstoken", "ya29.tok", "gcloud")
    assert "docker-credential-gcloud" in cred.source and "ya29" not in repr(cred)


def test_creds_store_not_found_falls_through_and_token_user_marks_a_token(home):
    helper(home, "secretservice", 'if [ "$registry" = other.io ]; then '
                                  'echo \'{"Username":"<token>","Secret":"idtok"}\'; '
                                  'else echo "credentials not found in native keychain"; exit 1; fi')
    write(home / ".docker" / "config.json", {"credsStore": "secretservice"})
    assert find_credential(REG) is None
    assert find_credential("other.io").token


def test_named_helper_not_installed_says_which_file(home):
    config = write(home / ".docker" / "config.json", {"credHelpers": {REG: "ecr-login"}})
    with pytest.raises(ImageError) as exc:
        find_credential(REG)
    assert exc.value.code == "registry-no-credentials"
    assert "docker-credential-ecr-login" in exc.value.message and str(config) in exc.value.message


def test_unreadable_site_robot_file_says_whom_to_ask(home):
    site = home / "robot.json"
    site.mkdir()  # unreadable as a file even for root (where chmod 000 would not stop the read)
    with pytest.raises(ImageError) as exc:
        find_credential(REG, str(site))
    assert str(site) in exc.value.message and "platform team" in exc.value.hint


def test_broken_auth_file_names_itself(home):
    path = home / ".docker" / "config.json"
    path.parent.mkdir()
    path.write_text("{not json")
    with pytest.raises(ImageError) as exc:
        find_credential(REG)
    assert str(path) in exc.value.message and "login" in exc.value.hint


def test_secret_stays_out_of_repr_and_argv(home, tmp_path):
    """skopeo gets the login as an in-memory auth file by /dev/fd path; argv has no secret."""
    write(home / ".docker" / "config.json", {"auths": {REG: basic("alice", "pw-not-in-argv")}})
    seen = tmp_path / "seen"
    fake = home / "bin" / "skopeo"
    fake.write_text("#!/bin/sh\n"
                    f"printf '%s\\n' \"$@\" > {seen}.argv\n"
                    f"for a; do case $a in /dev/fd/*) cat $a > {seen}.auth;; esac; done\n"
                    "echo 'unauthorized: authentication required' >&2; exit 1\n")
    fake.chmod(0o755)
    registry = SkopeoRegistry()
    assert "pw-not-in-argv" not in repr(registry.credential(REG))
    with pytest.raises(ImageError) as exc:
        registry.resolve(ImageRef.parse(f"{REG}/ml/x:1"), "amd64")
    assert "pw-not-in-argv" not in Path(f"{seen}.argv").read_text()
    assert json.loads(Path(f"{seen}.auth").read_text()) == {"auths": {REG: basic("alice", "pw-not-in-argv")}}
    assert exc.value.code == "registry-auth" and "pw-not-in-argv" not in exc.value.message + exc.value.hint


@pytest.mark.parametrize("cred, stderr, code, says", [
    (None, "reading manifest 1 in r/x: unauthorized: authentication required", "registry-no-credentials",
     "podman login registry.example.com"),
    (Credential(REG, "alice", "pw", "/h/.docker/config.json"), "unauthorized: incorrect username or password",
     "registry-auth", "podman login --authfile /h/.docker/config.json"),
    (Credential(REG, "<token>", "t", "/h/auth.json", token=True), "401 Unauthorized", "registry-token-expired",
     "podman login"),
    (Credential("europe-docker.pkg.dev", "oauth2accesstoken", "t", "docker-credential-gcloud", helper="gcloud"),
     "unauthorized: authentication failed", "registry-token-expired", "gcloud auth login"),
    (Credential(REG, "alice", "pw", "/h/auth.json"), "denied: requested access to the resource is denied",
     "registry-access-denied", "pull access"),
    (None, "requested access to the resource is denied", "registry-no-credentials", "does not exist"),
    (Credential(REG, "alice", "pw", "/h/auth.json"), f"reading blob sha256:{'1401' * 16}: connection reset",
     "registry-unreachable", "site.yaml"),  # "401" inside a digest is no refusal
    (None, "reading manifest 1 in r/x: manifest unknown: manifest unknown", "image-not-found", "--build"),
    (None, "pinging container registry: dial tcp: connection refused", "registry-unreachable", "site.yaml"),
])
def test_refusals_become_errors_that_say_the_fix(cred, stderr, code, says):
    registry = cred.registry if cred else REG
    error = SkopeoRegistry()._error(ImageRef.parse(f"{registry}/r/x:1"), stderr, cred)
    assert error.code == code and says in error.hint + error.message, (error.message, error.hint)


def test_missing_skopeo_is_a_clear_error(home, monkeypatch):
    monkeypatch.setenv("PATH", str(home / "bin"))
    with pytest.raises(ImageError) as exc:
        SkopeoRegistry().has_tag(ImageRef.parse(f"{REG}/r/x:1"))
    assert exc.value.code == "skopeo-missing" and "apt-get install skopeo" in exc.value.hint
