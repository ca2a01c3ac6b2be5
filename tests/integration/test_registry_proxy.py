"""The local image registry's front door (deploy/local/registry-proxy.py), bob against alice.

A throwaway docker-registry on a unix socket of its own and the proxy on a free loopback port,
started here exactly as deploy/local/images-up starts them (the shared cluster's registry is not
touched). Real pushes and pulls with skopeo, as the real users. Before: the loopback registry took
pushes and deletes from anyone, and `_catalog` listed every user's repositories.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path

import bcrypt
import pytest

from .conftest import REPO, as_user

ROBOT = "slurmctl-robot"


def _oci_image(root: Path) -> None:
    """A one-file OCI image layout (what skopeo copies from `oci:`), made without any engine."""
    (root / "blobs" / "sha256").mkdir(parents=True)

    def blob(data: bytes) -> tuple[str, int]:
        digest = hashlib.sha256(data).hexdigest()
        (root / "blobs" / "sha256" / digest).write_bytes(data)
        return "sha256:" + digest, len(data)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"hi\n"))
    layer, layer_size = blob(gzip.compress(buf.getvalue(), mtime=0))
    config, config_size = blob(json.dumps({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(buf.getvalue()).hexdigest()]}}).encode())
    manifest, manifest_size = blob(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer,
                    "size": layer_size}]}).encode())
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest, "size": manifest_size,
        "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}))
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def registry():
    for tool in ("docker-registry", "skopeo"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: deploy/local/images-up installs it (apt-get install {tool})")
    tmp = Path(tempfile.mkdtemp(prefix="slurmctl-registry-test-"))
    os.chmod(tmp, 0o755)
    sock = tmp / "registry.sock"
    (tmp / "registry.yml").write_text(json.dumps({  # YAML is a superset of JSON
        "version": 0.1, "log": {"level": "warn"}, "storage": {"filesystem": {"rootdirectory": str(tmp / "data")},
                                                              "delete": {"enabled": True}},
        "http": {"net": "unix", "addr": str(sock), "secret": secrets.token_hex(16)}}))
    passwords = {name: secrets.token_urlsafe(12) for name in (ROBOT, "alice", "bob")}
    (tmp / "htpasswd").write_text("".join(f"{n}:{bcrypt.hashpw(p.encode(), bcrypt.gensalt(10)).decode()}\n"
                                          for n, p in passwords.items()))
    os.chmod(tmp / "htpasswd", 0o600)
    _oci_image(tmp / "image")
    subprocess.run(["chmod", "-R", "a+rX", str(tmp / "image")], check=True)
    port = _free_port()
    backend = subprocess.Popen(["docker-registry", "serve", str(tmp / "registry.yml")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy = subprocess.Popen([sys.executable, str(REPO / "deploy" / "local" / "registry-proxy.py"),
                              "--listen", f"127.0.0.1:{port}", "--backend", str(sock),
                              "--htpasswd", str(tmp / "htpasswd"), "--robot", ROBOT],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (not sock.exists() or _status(port, "/v2/") is None):
            time.sleep(0.2)
        yield {"port": port, "passwords": passwords, "image": tmp / "image", "socket": sock}
    finally:
        proxy.terminate()
        backend.terminate()
        proxy.wait(10)
        backend.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def _status(port: int, path: str, user: str | None = None, password: str = "", method: str = "GET") -> int | None:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    if user:
        request.add_header("Authorization", "Basic " + b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def _skopeo(user: str, password: str, *args: str) -> subprocess.CompletedProcess:
    return as_user(user).run(["skopeo", *args, "--creds" if args[0] != "copy" else "--dest-creds",
                              f"{user}:{password}", "--tls-verify=false" if args[0] != "copy" else
                              "--dest-tls-verify=false"], timeout=120)


def test_bob_pushes_only_under_bob_and_reads_neither_alices_images_nor_the_catalog(registry):
    port, pw, image = registry["port"], registry["passwords"], registry["image"]
    at = f"docker://127.0.0.1:{port}"
    robot = subprocess.run(["skopeo", "copy", "-q", "--dest-creds", f"{ROBOT}:{pw[ROBOT]}", "--dest-tls-verify=false",
                            f"oci:{image}:latest", f"{at}/slurmctl/base:local"], capture_output=True, text=True)
    assert robot.returncode == 0, robot.stderr
    pushed = _skopeo("alice", pw["alice"], "copy", "-q", f"oci:{image}:latest", f"{at}/alice/demo:1")
    assert pushed.returncode == 0, pushed.stderr
    assert _skopeo("alice", pw["alice"], "inspect", f"{at}/alice/demo:1").returncode == 0
    assert _skopeo("alice", pw["alice"], "inspect", f"{at}/slurmctl/base:local").returncode == 0  # the base image

    # bob: his own namespace works; alice's and the platform's do not
    assert _skopeo("bob", pw["bob"], "copy", "-q", f"oci:{image}:latest", f"{at}/bob/demo:1").returncode == 0
    for target in ("alice/demo:1", "alice/other:1", "slurmctl/base:local"):
        refused = _skopeo("bob", pw["bob"], "copy", "-q", f"oci:{image}:latest", f"{at}/{target}")
        assert refused.returncode != 0 and ("403" in refused.stderr or "denied" in refused.stderr), refused.stderr
    refused = _skopeo("bob", pw["bob"], "inspect", f"{at}/alice/demo:1")
    assert refused.returncode != 0 and "denied" in refused.stderr
    refused = _skopeo("bob", pw["bob"], "delete", f"{at}/alice/demo:1")
    assert refused.returncode != 0 and "403" in refused.stderr
    assert _status(port, "/v2/_catalog", "bob", pw["bob"]) == 403
    assert _status(port, "/v2/_catalog", ROBOT, pw[ROBOT]) == 200
    # no login, a wrong password, a mount of alice's blob into bob's repository
    assert _status(port, "/v2/bob/x/blobs/uploads/", method="POST") == 401
    assert _status(port, "/v2/bob/x/blobs/uploads/", "bob", "wrong", method="POST") == 401
    mount = "/v2/bob/x/blobs/uploads/?mount=sha256:" + "0" * 64 + "&from=alice/demo"
    assert _status(port, mount, "bob", pw["bob"], method="POST") == 403
    # and around the proxy: the registry's socket is root's
    direct = as_user("bob").run(["curl", "-s", "--unix-socket", str(registry["socket"]), "http://x/v2/_catalog"])
    assert direct.returncode != 0 and "alice" not in direct.stdout
    assert _skopeo("alice", pw["alice"], "inspect", f"{at}/alice/demo:1").returncode == 0  # alice's image is intact


# bob's requests, sent byte for byte (http.client does not clean a path): dot segments, encoded dots
# and slashes, empty segments, `;` parameters, a second `from=` and the absolute form, each aimed at
# alice's repository from a path that starts in his own
ATTACK = r"""
import base64, http.client, json, sys
port, password, manifest, config = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
auth = "Basic " + base64.b64encode(f"bob:{password}".encode()).decode()
accept = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
reads = [
    "/v2/alice/demo/manifests/1",
    "/v2/bob/../alice/demo/manifests/1",
    "/v2/bob/./../alice/demo/manifests/1",
    "/v2/bob/%2e%2e/alice/demo/manifests/1",
    "/v2/bob/%2E%2E/alice/demo/manifests/1",
    "/v2/bob%2f..%2falice/demo/manifests/1",
    "/v2/bob/x/manifests/1/../../../../alice/demo/manifests/1",
    "/v2/bob/x/manifests/%2e%2e/%2e%2e/%2e%2e/alice/demo/manifests/1",
    "/v2/bob/x/manifests/..%2f..%2f..%2falice%2fdemo%2fmanifests%2f1",
    "/v2/bob/x/blobs/..%2f..%2f..%2falice%2fdemo%2fmanifests%2f1",
    "/v2/bob/x/tags/list/../../../../alice/demo/tags/list",
    "//v2/alice/demo/manifests/1",
    "/v2//alice/demo/manifests/1",
    "/v2/bob//../alice/demo/manifests/1",
    "/v2/bob;x=1/../alice/demo/manifests/1",
    "/v2/bob/x/manifests/1;/../../../../alice/demo/manifests/1",
    "/v2/alice/demo/manifests/1;bob",
    "/v2/bob/x/manifests/1?/../../../../alice/demo/manifests/1",
    "/v2/bob/x/manifests/1#/../../../../alice/demo/manifests/1",
    "http://127.0.0.1/v2/bob/../alice/demo/manifests/1",
    "/v2/alice/demo/tags/list",
    "/v2/bob/x/manifests/1\\..\\..\\..\\..\\alice\\demo\\manifests\\1",
]
writes = [
    ("POST", "/v2/bob/../alice/demo/blobs/uploads/"),
    ("POST", "/v2/bob/%2e%2e/alice/demo/blobs/uploads/"),
    ("POST", "/v2/bob/x/blobs/uploads/../../../../alice/demo/blobs/uploads/"),
    ("POST", "/v2/bob/x/blobs/uploads/..%2f..%2f..%2f..%2falice%2fdemo%2fblobs%2fuploads%2f"),
    ("POST", "/v2/bob/x/blobs/uploads/?mount=" + manifest + "&from=bob/x;from=alice/demo"),
    ("POST", "/v2/bob/x/blobs/uploads/?mount=" + manifest + "&from=alice%2fdemo"),
    ("POST", "/v2/bob/x/blobs/uploads/?mount=" + manifest + "&fr%6fm=alice/demo"),
    ("POST", "/v2/bob/x/blobs/uploads/?mount=" + manifest + "&from=bob/../alice/demo"),
    ("POST", "/v2/bob/x/blobs/uploads/?mount=" + manifest + ";from=alice/demo"),
    ("PUT", "/v2/bob/x/manifests/..%2f..%2f..%2falice%2fdemo%2fmanifests%2fevil"),
    ("PUT", "/v2/bob/x/manifests/1/../../../../alice/demo/manifests/evil"),
    ("DELETE", "/v2/bob/x/manifests/1/../../../../alice/demo/manifests/" + manifest),
    ("DELETE", "/v2/bob/%2e%2e/alice/demo/manifests/" + manifest),
]
out = []
for method, path in [("GET", p) for p in reads] + [("HEAD", p) for p in reads[:6]] + writes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.putrequest(method, path, skip_accept_encoding=True)
    conn.putheader("Authorization", auth)
    conn.putheader("Accept", accept)
    body = b"{}" if method == "PUT" else b""
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    answer = conn.getresponse()
    data = answer.read()
    out.append({"method": method, "path": path, "status": answer.status,
                "location": answer.getheader("Location") or "", "alices": config.encode() in data})
    conn.close()
print(json.dumps(out))
"""


def test_paths_and_queries_bob_bends_never_reach_alices_repository(registry):
    """Path normalisation tricks (`..`, `%2e%2e`, `%2f`, `//`, `;`, a query or fragment, the
    absolute form) and second `from=` values, as bob over real HTTP: every one is refused by the
    proxy itself (or answered without alice's data), and alice's image and tags are unchanged."""
    port, pw, image = registry["port"], registry["passwords"], registry["image"]
    at = f"docker://127.0.0.1:{port}"
    assert _skopeo("alice", pw["alice"], "copy", "-q", f"oci:{image}:latest", f"{at}/alice/demo:1").returncode == 0
    assert _skopeo("bob", pw["bob"], "copy", "-q", f"oci:{image}:latest", f"{at}/bob/x:1").returncode == 0
    manifest = json.loads((image / "index.json").read_text())["manifests"][0]["digest"]
    config = json.loads((image / "blobs" / "sha256" / manifest.split(":")[1]).read_text())["config"]["digest"]
    before = _status(port, "/v2/alice/demo/tags/list", ROBOT, pw[ROBOT])

    done = as_user("bob").run([sys.executable, "-c", ATTACK, str(port), pw["bob"], manifest, config],
                              check=True, timeout=300)
    answers = json.loads(done.stdout)
    # the proxy refuses all of them itself (403: not bob's; 400: a path that is not canonical), but
    # one: after `?` it is a query, so that request reads bob's own manifest (the same image as alice's)
    own = "/v2/bob/x/manifests/1?/../../../../alice/demo/manifests/1"
    leaks = [a for a in answers if (a["alices"] and a["path"] != own) or "alice" in a["location"]]
    assert leaks == [], leaks
    assert [a for a in answers if a["status"] not in (400, 403) and a["path"] != own] == []
    assert [a["status"] for a in answers if a["path"] == own] == [200]

    tags = urllib.request.Request(f"http://127.0.0.1:{port}/v2/alice/demo/tags/list")
    tags.add_header("Authorization", "Basic " + b64encode(f"{ROBOT}:{pw[ROBOT]}".encode()).decode())
    with urllib.request.urlopen(tags, timeout=10) as answer:
        assert json.load(answer)["tags"] == ["1"]
    assert before == 200
    assert _skopeo("alice", pw["alice"], "inspect", f"{at}/alice/demo:1").returncode == 0


# bob's mount of alice's blob with `from=` in the body: docker-registry reads it with Go's FormValue,
# which takes a form-encoded (or multipart) POST body and prefers it to the query the proxy checked
FORM_MOUNT = r"""
import base64, http.client, json, sys
port, password, blob = int(sys.argv[1]), sys.argv[2], sys.argv[3]
auth = "Basic " + base64.b64encode(f"bob:{password}".encode()).decode()
form = f"from=alice/demo&mount={blob}".encode()
multipart = (b"--b\r\nContent-Disposition: form-data; name=\"from\"\r\n\r\nalice/demo\r\n"
             b"--b\r\nContent-Disposition: form-data; name=\"mount\"\r\n\r\n" + blob.encode() + b"\r\n--b--\r\n")
attempts = [
    ("application/x-www-form-urlencoded", form, False),
    ("Application/X-WWW-Form-Urlencoded; charset=utf-8", form, False),
    ("appl\u0130cation/x-www-form-urlencoded".encode().decode("latin-1"), form, False),  # Go lower-cases U+0130 to i
    ("multipart/form-data; boundary=b", multipart, False),
    ("application/x-www-form-urlencoded", form, True),  # chunked
    (None, form, False),
]
out = []
for content_type, body, chunked in attempts:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.putrequest("POST", f"/v2/bob/x/blobs/uploads/?mount={blob}", skip_accept_encoding=True)
    conn.putheader("Authorization", auth)
    if content_type is not None:
        conn.putheader("Content-Type", content_type.encode("latin-1"))
    if chunked:
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    else:
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
    answer = conn.getresponse()
    answer.read()
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.request("GET", f"/v2/bob/x/blobs/{blob}", headers={"Authorization": auth})
    read = conn.getresponse()
    data = read.read()
    out.append({"content_type": content_type, "chunked": chunked, "mount": answer.status,
                "location": answer.getheader("Location") or "", "read": read.status,
                "alices": b"ALICE SECRET LAYER" in data})
    conn.close()
print(json.dumps(out))
"""
ALICES_BLOB = r"""
import base64, hashlib, http.client, sys
port, password = int(sys.argv[1]), sys.argv[2]
auth = "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()
blob = b"ALICE SECRET LAYER DATA 42\n"
digest = "sha256:" + hashlib.sha256(blob).hexdigest()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
conn.request("POST", "/v2/alice/demo/blobs/uploads/", headers={"Authorization": auth, "Content-Length": "0"})
started = conn.getresponse()
started.read()
location = started.getheader("Location")
location = location[location.index("/v2/"):]
conn.request("PUT", f"{location}{'&' if '?' in location else '?'}digest={digest}", body=blob,
             headers={"Authorization": auth, "Content-Type": "application/octet-stream"})
put = conn.getresponse()
put.read()
assert put.status == 201, put.status
print(digest)
"""


def test_bobs_mount_with_from_in_a_form_body_never_reaches_alices_blob(registry):
    """bob's exact attack: alice uploads a layer; bob POSTs a mount into his repository whose `from=`
    is in a form body (form-urlencoded in any spelling, multipart, chunked). Every one is refused by the
    proxy (400) and bob's repository never gets her layer; alice's own upload and push still work."""
    port, pw, image = registry["port"], registry["passwords"], registry["image"]
    digest = as_user("alice").run([sys.executable, "-c", ALICES_BLOB, str(port), pw["alice"]],
                                  check=True).stdout.strip()
    at = f"docker://127.0.0.1:{port}"
    assert _skopeo("bob", pw["bob"], "copy", "-q", f"oci:{image}:latest", f"{at}/bob/x:1").returncode == 0
    done = as_user("bob").run([sys.executable, "-c", FORM_MOUNT, str(port), pw["bob"], digest], check=True)
    answers = json.loads(done.stdout)
    print(f"\nbob's mounts of alice's blob with from= in the body: {answers}")
    assert [a for a in answers if a["alices"] or a["read"] != 404 or a["mount"] != 400] == [], answers
    assert _skopeo("alice", pw["alice"], "copy", "-q", f"oci:{image}:latest", f"{at}/alice/demo:2").returncode == 0


# --- images-up never sends a login to a port someone else holds -----------------------------------

# bob's stand-in registry: answers /v2/ with 401 (all images-up used to check) and writes down every
# Authorization header it is sent.
SQUATTER = r"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port, seen = int(sys.argv[1]), sys.argv[2]
class Squat(BaseHTTPRequestHandler):
    def do_GET(self):
        with open(seen, "a") as out:
            out.write(f"{self.command} {self.path} {self.headers.get('Authorization')}\n")
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="bob"')
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_HEAD = do_PUT = do_POST = do_PATCH = do_GET
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", port), Squat).serve_forever()
"""


def test_images_up_refuses_a_registry_port_bob_holds_and_sends_him_no_login():
    """Before: images-up took any 401 on /v2/ for its registry, then pushed the base image there with
    the robot's login. Now it checks the listener's owner (the kernel's record) first."""
    from slurmctl.sockowner import listener_uid

    bob = as_user("bob")
    state = Path(tempfile.mkdtemp(prefix="slurmctl-images-squat-"))
    port, auth_port = _free_port(), _free_port()
    seen = bob.make_dir("registry-squat") / "seen.txt"
    squatter = subprocess.Popen(bob.argv([sys.executable, "-c", SQUATTER, str(port), str(seen)]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    env = {**os.environ, "SLURMCTL_LOCAL_DIR": str(state), "SLURMCTL_LOCAL_REGISTRY_PORT": str(port),
           "SLURMCTL_LOCAL_AUTH_REGISTRY_PORT": str(auth_port), "SLURMCTL_PYTHON": sys.executable}
    try:
        deadline = time.monotonic() + 30
        while listener_uid("127.0.0.1", port) != bob.uid:
            assert time.monotonic() < deadline, "bob's stand-in registry did not start"
            time.sleep(0.2)
        try:
            up = subprocess.run([str(REPO / "deploy" / "local" / "images-up")], env=env, capture_output=True,
                                text=True, timeout=240)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"images-up went on past bob's port:\n{exc.stdout}") from None
        assert up.returncode != 0, up.stdout + up.stderr
        assert f"127.0.0.1:{port} is held by bob (uid {bob.uid}), not by root" in up.stderr, up.stderr
        assert "debootstrap" not in up.stdout and "pushing" not in up.stdout, up.stdout
        assert "Basic" not in (seen.read_text() if seen.exists() else ""), seen.read_text()
    finally:
        subprocess.run([str(REPO / "deploy" / "local" / "images-down"), "--purge"], env=env,
                       capture_output=True, timeout=120)
        os.killpg(squatter.pid, 15)
        squatter.wait(timeout=30)
        shutil.rmtree(seen.parent, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
