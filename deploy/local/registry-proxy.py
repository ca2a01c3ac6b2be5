"""The local image registry's front door: a login per user and per-user push rights.

docker-registry itself listens on a unix socket only root can connect to (a socket needs write
permission to connect; it is 0755 root). This proxy listens on loopback TCP, checks HTTP Basic
credentials against a bcrypt htpasswd file (one account per Unix user, plus the platform's robot),
and forwards a request only when the account may do it:

- every account may read `slurmctl/*` (the platform's base images) and its own `<user>/*`;
- an account may write (push, delete) only under `<user>/`; the robot may read and write anything;
- `/v2/_catalog` (every repository name) is the robot's only;
- a cross-repository blob mount (`?from=`) must come from a repository the account may read;
- no request carries a form, and no POST a body: docker-registry reads `from=` and `mount=` with Go's
  FormValue, which also reads a form-encoded or multipart body, and a body's `from=` wins over the
  query's that was checked here;
- only a canonical path is forwarded (plain segments: no dot segments, percent-encoding, `;`, `//`),
  so the registry sees exactly the path whose namespace was checked.

Standard library plus bcrypt (the repo's venv has it). Usage:
    registry-proxy.py --listen 127.0.0.1:5000 --backend /path/registry.sock --htpasswd FILE --robot NAME
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import re
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import bcrypt

# The only request targets forwarded: an origin-form path of plain segments (a repository name, a tag,
# a digest, an upload id), none empty and none starting with a dot, so no `.`/`..` segment, no
# percent-encoding, no `;` parameter, no backslash and no `//` can make the registry see a path other
# than the one checked here. (docker-registry cleans such paths into a redirect to another repository.)
CANONICAL_PATH = re.compile(r"\A/v2/(?:[A-Za-z0-9_:-][A-Za-z0-9._:-]*(?:/[A-Za-z0-9_:-][A-Za-z0-9._:-]*)*/?)?\Z")
REPO_NAME = re.compile(r"\A[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*\Z")
REPO_PATH = re.compile(r"\A/v2/(?P<name>[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)"
                       r"/(?:blobs|manifests|tags)(?:/|\Z)")
PLATFORM_NAMESPACE = "slurmctl"
READS = {"GET", "HEAD"}
CHUNK = 64 * 1024
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "authorization"}


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/")


def body_refusal(method: str, headers) -> str | None:
    """Why a request's body could be read as a form by the registry (the reason to refuse it), or
    None. Go's FormValue reads a POST, PUT or PATCH body whose media type, lower-cased, is
    form-urlencoded or multipart; Go lower-cases Unicode too (U+0130 becomes `i`), so a Content-Type
    that is not plain ASCII is refused as well. No registry client sends a form, nor a body with a
    POST (an upload starts empty; its data goes in PATCH and PUT)."""
    for value in headers.get_all("Content-Type") or ():
        if not value.isascii():
            return "a Content-Type must be plain ASCII"
        if value.split(";", 1)[0].strip().lower().startswith(FORM_TYPES):
            return "a registry request never carries a form"
    if method == "POST" and (headers.get("Transfer-Encoding") or (headers.get("Content-Length") or "0").strip() != "0"):
        return "a POST to the registry carries no body"
    return None


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 300):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class Accounts:
    """htpasswd `name:bcrypt-hash` lines; checks are cached per (name, password) for the process."""

    def __init__(self, path: str, robot: str):
        self.path, self.robot = path, robot
        self._ok: set[tuple[str, bytes]] = set()
        self._lock = threading.Lock()

    def check(self, header: str | None) -> str | None:
        if not header or not header.startswith("Basic "):
            return None
        try:
            name, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        key = (name, password.encode())
        with self._lock:
            if key in self._ok:
                return name
        with open(self.path, "rb") as fh:
            hashes = dict(line.strip().split(b":", 1) for line in fh if b":" in line)
        hashed = hashes.get(name.encode())
        if hashed is None or not bcrypt.checkpw(password.encode(), hashed):
            return None
        with self._lock:
            self._ok.add(key)
        return name


def may(account: str, robot: str, method: str, path: str, query: str) -> bool:
    """Whether `account` may send `method path?query` to the registry (see the module doc)."""
    if account == robot:
        return True
    if path in ("/v2/", "/v2"):
        return True
    match = REPO_PATH.match(path)
    if match is None:
        return False  # _catalog and anything else
    namespace = match["name"].split("/", 1)[0]
    if method in READS:
        return namespace in (account, PLATFORM_NAMESPACE)
    if namespace != account:
        return False
    source = parse_qs(query).get("from")
    return not source or all(REPO_NAME.match(s) and s.split("/", 1)[0] in (account, PLATFORM_NAMESPACE)
                             for s in source)


def target(raw: str) -> tuple[str, str] | None:
    """(path, query) of a request target the proxy forwards, or None for one it refuses: not in
    origin form (an absolute URL, a fragment), a path that is not canonical, a `;` in the query."""
    if not raw.startswith("/") or "#" in raw:
        return None
    path, _, query = raw.partition("?")
    if not CANONICAL_PATH.match(path) or ";" in query:
        return None
    return path, query


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "slurmctl-registry-proxy"
    accounts: Accounts
    backend: str

    def log_message(self, fmt, *args):  # one line per request, no credentials
        sys.stderr.write(f"{self.address_string()} {fmt % args}\n")

    def _refuse(self, code: int, message: str) -> None:
        error = {"code": "UNAUTHORIZED" if code == 401 else "DENIED", "message": message}
        body = (json.dumps({"errors": [error]}) + "\n").encode()
        self.send_response(code)
        if code == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="slurmctl-local"')
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self._drain_body()

    def _drain_body(self) -> None:
        for _ in self._body():
            pass

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return
                left = size
                while left:
                    data = self.rfile.read(min(left, CHUNK))
                    if not data:
                        return
                    left -= len(data)
                    yield data
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left > 0:
                data = self.rfile.read(min(left, CHUNK))
                if not data:
                    return
                left -= len(data)
                yield data

    def _handle(self) -> None:
        account = self.accounts.check(self.headers.get("Authorization"))
        if account is None:
            return self._refuse(401, "authentication required")
        checked = target(self.path)
        if checked is None:
            return self._refuse(400, "a request path must be plain segments (no '.', '..', '//', '%', ';' or '#')")
        path, query = checked
        refusal = body_refusal(self.command, self.headers)
        if refusal is not None:
            return self._refuse(400, refusal)
        if not may(account, self.accounts.robot, self.command, path, query):
            return self._refuse(403, f"{account} may not {self.command} {path}")
        conn = UnixConnection(self.backend)
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP]  # Accept repeats
        chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
        conn.putrequest(self.command, f"{path}?{query}" if query else path, skip_host=True, skip_accept_encoding=True)
        for key, value in headers:
            conn.putheader(key, value)
        if chunked:
            conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        for data in self._body():
            conn.send(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
        if chunked:
            conn.send(b"0\r\n\r\n")
        answer = conn.getresponse()
        self.send_response(answer.status, answer.reason)
        length = answer.getheader("Content-Length")
        for key, value in answer.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        if length is None and self.command != "HEAD" and answer.status not in (204, 304):
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            while data := answer.read(CHUNK):
                self.wfile.write(data)
        conn.close()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True, help="host:port, loopback")
    parser.add_argument("--backend", required=True, help="docker-registry's unix socket")
    parser.add_argument("--htpasswd", required=True)
    parser.add_argument("--robot", required=True)
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    Proxy.accounts, Proxy.backend = Accounts(args.htpasswd, args.robot), args.backend
    server = ThreadingHTTPServer((host, int(port)), Proxy)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
