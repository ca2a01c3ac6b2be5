"""Limits in front of the cluster MLflow server (an ASGI layer around the app uvicorn serves,
slurmctl/ops/mlflow_server.py). Every user of the login node can reach the server, with or without a
login, and MLflow itself caps nothing:

* Routes the platform does not use are refused before MLflow sees them: the AI gateway (its
  supported-models call held a request thread for ~11 min fetching a model catalog from the internet,
  and an endpoint attached itself to another user's experiment `gateway/<name>`), gateway secrets,
  scorers, jobs, prompt optimization, the assistant, MCP servers, webhooks and demo data. Everything
  under /api and /ajax-api is allowed only if its family is in ALLOWED_API (deny by default).
* A request body is capped before it is read: MLflow's WSGI bridge reads a whole body into memory,
  twice, before the login is checked (a 1.5 GiB body took the server from 0.4 to 3 GB). A declared
  Content-Length over the cap is refused at once; a chunked body is counted as it arrives and cut.
  Artifact uploads (streamed to disk by MLflow, after the login is checked) get MAX_ARTIFACT_BYTES.
* Requests in flight per peer are capped (MAX_IN_FLIGHT_PER_PEER; the peer is the uid owning the
  client's socket, slurmctl/sockowner.py): MLflow runs every request on one pool of 40 threads, and
  one user holding them all stopped everyone.
* A wrong password costs a password hash (1-3 s of CPU here) and MLflow caches only right ones: a
  login that just failed is refused here without a hash for FAILED_LOGIN_SECONDS; a peer's logins
  that are not known good are checked one at a time, and after a failure that peer's next unproven
  login waits 1, 2, 4 ... up to MAX_LOGIN_BACKOFF_SECONDS (429 until then; a success resets it).
  So one user guessing at 40 at once costs a hash now and then, not the server's CPU; logins already
  known good (every other user's) pass straight through.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections import Counter

from slurmctl.sockowner import peer_uid

MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_ARTIFACT_BYTES = 4 * 1024 * 1024 * 1024
MAX_IN_FLIGHT_PER_PEER = 16
FAILED_LOGIN_SECONDS = 60.0
MAX_LOGIN_BACKOFF_SECONDS = 30.0
GOOD_LOGIN_SECONDS = 600.0  # as MLflow's own cache of right logins (auth_cache_ttl_seconds, mlflow-up)
_MAX_REMEMBERED_LOGINS = 10000

# /api/<version>/mlflow/<family>/... and /ajax-api/...: the families experiment tracking, the model
# registry, artifacts, traces, logged models, datasets, prompts and MLflow's user management use.
# (users: MLflow's logins and permission grants; registered-models: prompts too.)
ALLOWED_API = frozenset({
    "experiments", "runs", "metrics", "artifacts", "upload-artifact", "registered-models", "model-versions",
    "logged-models", "traces", "unified-traces", "get-trace-artifact", "datasets", "users", "server-info",
    "ui-telemetry", "workspaces",
})
_API_PATH = re.compile(r"/(?:ajax-)?api/[0-9.]+/(mlflow(?:-artifacts)?)(?:/([^/]*))?")
# Where MLflow's basic auth checks the login on every request: the API, less what
# mlflow.server.auth.is_unprotected_route leaves open (/health, /static, /favicon.ico and, under the API,
# .../mlflow/server-info).
_LOGIN_CHECKED = ("/api/", "/ajax-api/")
_UNPROTECTED_API_SUFFIXES = ("/mlflow/server-info",)


def _login_verdict(path: str, status: int | None) -> int | None:
    """The status that tells what a login is (401: wrong; 2xx or 403: right, the login was checked and
    only the permission refused), or None when this answer says nothing about it: a route that checks
    no login, a 404 (which may come before any check) or an error."""
    if status is None or not path.startswith(_LOGIN_CHECKED) or path.rstrip("/").endswith(_UNPROTECTED_API_SUFFIXES):
        return None
    return status if status == 401 or 200 <= status < 300 or status == 403 else None
ARTIFACT_PATH = re.compile(r"/(?:ajax-)?api/[0-9.]+/mlflow-artifacts/")


def refused_route(path: str) -> bool:
    """True for a path the platform does not serve (see the module docstring)."""
    if path == "/gateway" or path.startswith(("/gateway/", "/v1/")):
        return True
    match = _API_PATH.match(path)
    if match is None:
        return path.startswith(("/api/", "/ajax-api/"))  # an API family of no known shape
    if match.group(1) == "mlflow-artifacts":
        return False
    return (match.group(2) or "") not in ALLOWED_API


def _answer(status: int, code: str, message: str, extra_headers: tuple = ()):
    body = json.dumps({"error_code": code, "message": message}).encode()
    return ({"type": "http.response.start", "status": status,
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                         (b"connection", b"close"), *extra_headers]},
            {"type": "http.response.body", "body": body})


class RequestLimits:
    """ASGI middleware with the limits above around `app` (MLflow's FastAPI app with its auth)."""

    def __init__(self, app, *, max_body: int = MAX_BODY_BYTES, max_artifact: int = MAX_ARTIFACT_BYTES,
                 max_in_flight: int = MAX_IN_FLIGHT_PER_PEER, peer_of=None):
        self.app = app
        self.max_body, self.max_artifact, self.max_in_flight = max_body, max_artifact, max_in_flight
        self._peer_uid = peer_of or peer_uid
        self._in_flight: Counter = Counter()
        self._failed: dict[bytes, float] = {}
        self._good: dict[bytes, float] = {}
        self._checking: dict[object, asyncio.Lock] = {}
        self._backoff: dict[object, tuple[float, int]] = {}  # peer -> (no unproven login before, failures in a row)

    def peer(self, scope) -> object:
        client, server = scope.get("client"), scope.get("server")
        if not client or not server:
            return ("unknown",)
        uid = self._peer_uid(tuple(client), tuple(server))
        return ("uid", uid) if uid is not None else ("address", client[0])

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if refused_route(path):
            return await self._send(send, 404, "ENDPOINT_NOT_FOUND",
                                    f"{path} is not served by this MLflow server (the platform does not use it).")
        limit = self.max_artifact if ARTIFACT_PATH.match(path) else self.max_body
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length", b"").strip()
        if declared and (not declared.isdigit() or int(declared) > limit):
            return await self._send(send, 413, "REQUEST_TOO_LARGE",
                                    f"the request body is over this server's limit of {limit} bytes.")
        peer = self.peer(scope)
        if self._in_flight[peer] >= self.max_in_flight:
            return await self._send(send, 503, "TEMPORARILY_UNAVAILABLE",
                                    f"too many requests in flight from your account (at most {self.max_in_flight}).",
                                    ((b"retry-after", b"1"),))
        self._in_flight[peer] += 1
        try:
            await self._serve(scope, self._counted(receive, limit), send, headers, peer)
        finally:
            self._in_flight[peer] -= 1
            if not self._in_flight[peer]:
                del self._in_flight[peer]
                self._checking.pop(peer, None)

    async def _serve(self, scope, receive, send, headers, peer):
        authorization = headers.get(b"authorization")
        if not authorization:
            return await self.app(scope, receive, send)
        key = hashlib.sha256(authorization).digest()
        now = time.monotonic()
        if self._failed.get(key, 0.0) > now:
            return await self._send(send, 401, "UNAUTHENTICATED", "wrong user name or password (just tried).",
                                    ((b"www-authenticate", b'Basic realm="mlflow"'),))
        status: list[int] = []

        async def watched_send(message):
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        if self._good.get(key, 0.0) > now:
            return await self.app(scope, receive, watched_send)
        # a login not known good costs a hash: one at a time per peer
        lock = self._checking.setdefault(peer, asyncio.Lock())
        async with lock:
            now = time.monotonic()
            if self._failed.get(key, 0.0) > now:
                return await self._send(send, 401, "UNAUTHENTICATED", "wrong user name or password (just tried).",
                                        ((b"www-authenticate", b'Basic realm="mlflow"'),))
            not_before, _ = self._backoff.get(peer, (0.0, 0))
            if not_before > now:
                wait = int(not_before - now) + 1
                return await self._send(send, 429, "REQUEST_LIMIT_EXCEEDED",
                                        f"too many failed logins from your account; try again in {wait} s.",
                                        ((b"retry-after", str(wait).encode()),))
            try:
                await self.app(scope, receive, watched_send)
            finally:
                # Only an answer from a route that checks logins proves one: /health, the static pages and
                # server-info answer any password, and counting that as proof would let a wrong login
                # skip the one-at-a-time check and the back-off (and cost a hash every time after).
                self._remember(key, _login_verdict(scope.get("path", ""), status[0] if status else None), peer)

    def _remember(self, key: bytes, status: int | None, peer: object = None) -> None:
        now = time.monotonic()
        if status == 401:
            streak = self._backoff.get(peer, (0.0, 0))[1] + 1
            self._backoff[peer] = (now + min(2.0 ** (streak - 1), MAX_LOGIN_BACKOFF_SECONDS), streak)
        elif status is not None:
            self._backoff.pop(peer, None)
        for table in (self._failed, self._good):
            if len(table) > _MAX_REMEMBERED_LOGINS:
                for stale in [k for k, until in table.items() if until <= now]:
                    del table[stale]
                if len(table) > _MAX_REMEMBERED_LOGINS:
                    table.clear()
        if status == 401:
            self._failed[key] = now + FAILED_LOGIN_SECONDS
        elif status is not None:
            self._good[key] = now + GOOD_LOGIN_SECONDS

    @staticmethod
    def _counted(receive, limit: int):
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # the app sees the client gone: it stops reading and answers nobody
                    return {"type": "http.disconnect"}
            return message
        return counted

    @staticmethod
    async def _send(send, status: int, code: str, message: str, extra_headers: tuple = ()):
        start, body = _answer(status, code, message, extra_headers)
        await send(start)
        await send(body)
