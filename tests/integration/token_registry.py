"""A registry with Bearer-token authentication, for tests: docker-registry configured with
`auth: token`, and a small token service (the part Docker Hub, GHCR and Artifact Registry run
themselves) that hands out RS256 JWTs signed with a key whose certificate the registry trusts.

The token service speaks both flows clients use (the Docker token spec): GET with Basic
user:password, and the OAuth2 POST with `grant_type=refresh_token` that an identity token in an
auth file triggers. Refresh tokens it never issued (or revoked ones) are refused with 401, which
is what a client with an expired stored token sees."""

from __future__ import annotations

import base64
import datetime
import json
import secrets
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

SERVICE = "slurmctl-test-registry"
ISSUER = "slurmctl-test-token-service"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TokenRegistry:
    def __init__(self, workdir: Path, users: dict[str, str], refresh_tokens: set[str]):
        self.workdir, self.users, self.refresh_tokens = workdir, users, refresh_tokens
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.requests: list[str] = []  # "GET basic alice" / "POST refresh_token" / "... refused"
        self.registry_port, self.token_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.registry_port}"
        self._server: ThreadingHTTPServer | None = None
        self._process: subprocess.Popen | None = None

    def token(self, scope: str) -> str:
        access = []
        for item in filter(None, scope.split(" ")):
            kind, _, rest = item.partition(":")
            repo, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": repo, "actions": actions.split(",")})
        now = int(time.time())
        der = self.cert.public_bytes(serialization.Encoding.DER)
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        claims = {"iss": ISSUER, "sub": "test", "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": secrets.token_hex(8), "access": access}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def _handler(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                query = parse_qs(urlparse(self.path).query)
                header = self.headers.get("Authorization", "")
                user, _, password = (base64.b64decode(header[6:]).decode().partition(":")
                                     if header.startswith("Basic ") else ("", "", ""))
                if outer.users.get(user) != password or not user:
                    outer.requests.append(f"GET basic {user or '-'} refused")
                    return self._answer(401, {"errors": [{"code": "UNAUTHORIZED", "message": "bad login"}]})
                outer.requests.append(f"GET basic {user}")
                token = outer.token(" ".join(query.get("scope", [])))
                self._answer(200, {"token": token, "access_token": token, "expires_in": 300})

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() != "chunked":  # Go's client chunks it
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = b""
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    body += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
                return body

            def do_POST(self):
                form = parse_qs(self._body().decode())
                grant = form.get("grant_type", [""])[0]
                refresh = form.get("refresh_token", [""])[0]
                if grant != "refresh_token" or refresh not in outer.refresh_tokens:
                    outer.requests.append(f"POST {grant} refused")
                    return self._answer(401, {"error": "invalid_grant", "error_description": "token expired"})
                outer.requests.append(f"POST {grant}")
                token = outer.token(" ".join(form.get("scope", [])))
                self._answer(200, {"access_token": token, "expires_in": 300, "refresh_token": refresh})

        return Handler

    def start(self) -> TokenRegistry:
        self.workdir.mkdir(parents=True, exist_ok=True)
        bundle = self.workdir / "token-ca.pem"
        bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self._server = ThreadingHTTPServer(("127.0.0.1", self.token_port), self._handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        config = self.workdir / "registry.yml"
        config.write_text(json.dumps({  # YAML is a superset of JSON
            "version": 0.1, "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(self.workdir / "data")}},
            "auth": {"token": {"realm": f"http://127.0.0.1:{self.token_port}/token", "service": SERVICE,
                               "issuer": ISSUER, "rootcertbundle": str(bundle)}},
            "http": {"addr": self.address}}))
        log = open(self.workdir / "registry.log", "ab")
        self._process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://{self.address}/v2/", timeout=1)
            except urllib.error.HTTPError as exc:
                if exc.code == 401 and "Bearer" in exc.headers.get("WWW-Authenticate", ""):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError("the token registry did not come up: " + (self.workdir / "registry.log").read_text())

    def stop(self) -> None:
        if self._process:
            self._process.terminate()
            self._process.wait(timeout=10)
        if self._server:
            self._server.shutdown()
