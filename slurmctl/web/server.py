"""The socket side of `slurmctl web`: a ThreadingHTTPServer (standard library) whose handler passes
each request to WebApp.handle and writes the Response with headers that keep the pages to themselves
(no inline scripts, no framing, no referrer carrying a token, no content sniffing).
"""

from __future__ import annotations

import socket
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from slurmctl.ops.http_limits import SOCKET_TIMEOUT_SECONDS, BoundedThreadingMixIn, DeadlineHandlerMixIn
from slurmctl.web.app import MAX_BODY, Response, WebApp
from slurmctl.web.auth import COOKIE

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


class _Server(BoundedThreadingMixIn, HTTPServer):
    """Anyone on the login node can open connections to a user's server: slurmctl.ops.http_limits
    bounds them (a whole-request deadline, a cap at once and a cap per connecting user)."""

    allow_reuse_address = True

    def __init__(self, address, app: WebApp, allowed_hosts: set[str] | None):
        self.app, self.allowed_hosts = app, allowed_hosts
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)


class _Handler(DeadlineHandlerMixIn, BaseHTTPRequestHandler):
    server: _Server
    server_version = "slurmctl-web"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_SECONDS  # per socket operation; the whole request has the server's deadline

    def _serve(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self._write(Response(413, b"request body too large or its length unreadable", "text/plain"), method)
            return
        body = self.rfile.read(length) if length else b""
        if len(body) < length or self.server.was_cut(self.connection):  # the deadline cut it mid-body
            self.close_connection = True
            return
        self.server.disarm(self.connection)  # the request is in: answering it is not the client's to slow
        host = (self.headers.get("Host") or "").lower()
        if self.server.allowed_hosts is not None and host not in self.server.allowed_hosts:
            # a page on another site that rebinds its name to 127.0.0.1 arrives with its own Host
            self._write(Response(403, b"unexpected Host header", "text/plain"), method)
            return
        self._write(self.server.app.handle(method, self.path, self.headers, body), method)

    def _write(self, response: Response, method: str) -> None:
        self.send_response(response.status)
        for key, value in {**SECURITY_HEADERS, **response.headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(response.body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._serve("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's signature
        # the request line is logged without its query: the first one carries the token. A connection
        # that timed out before sending a request line has no command or path yet.
        command, path = getattr(self, "command", None), getattr(self, "path", None)
        if command is None:
            print(f"slurmctl web: {self.address_string()} closed: no whole request in time", file=sys.stderr)
            return
        print(f"slurmctl web: {self.address_string()} {command} {(path or '').split('?')[0]} "
              f"{args[1] if len(args) > 1 else ''}", file=sys.stderr)


def make_server(app: WebApp, listen: str = "127.0.0.1", port: int = 8765) -> _Server:
    """Bound and ready (port 0: any free port; the chosen one is server.server_address[1])."""
    server = _Server((listen, port), app, None)
    bound = server.server_address[1]
    app.sessions.cookie_name = f"{COOKIE}_{bound}"
    if listen in {"127.0.0.1", "localhost", "::1"}:
        server.allowed_hosts = {f"{h}:{bound}" for h in ("127.0.0.1", "localhost", "[::1]")}
    return server
