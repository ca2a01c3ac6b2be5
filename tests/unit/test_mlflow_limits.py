"""The limits in front of the cluster MLflow server (slurmctl/ops/mlflow_limits.py), driven as uvicorn
drives an ASGI app; the app behind them counts what reaches it. The real server with these limits is
tests/integration/test_tracking_auth.py."""

from __future__ import annotations

import asyncio
import base64

import pytest

from slurmctl.ops.mlflow_limits import RequestLimits, refused_route


def test_the_gateway_and_every_family_the_platform_does_not_use_are_refused():
    for path in ("/ajax-api/3.0/mlflow/gateway/supported-models", "/api/3.0/mlflow/gateway/endpoints/create",
                 "/gateway/h3-ep/mlflow/invocations", "/gateway/mlflow/v1/chat/completions",
                 "/ajax-api/2.0/mlflow/gateway-proxy", "/api/3.0/mlflow/scorers/register",
                 "/ajax-api/3.0/mlflow/scorer/invoke", "/ajax-api/3.0/jobs/abc", "/ajax-api/3.0/mlflow/jobs/1",
                 "/api/2.0/mlflow/webhooks", "/ajax-api/3.0/mlflow/assistant/message",
                 "/ajax-api/3.0/mlflow/prompt-optimization/jobs", "/ajax-api/3.0/mlflow/demo/generate",
                 "/api/3.0/mlflow/something-new/create", "/v1/traces", "/api/9/other"):
        assert refused_route(path), path
    for path in ("/api/2.0/mlflow/experiments/create", "/ajax-api/2.0/mlflow/runs/search",
                 "/api/2.0/mlflow/model-versions/create", "/api/3.0/mlflow/traces/x",
                 "/api/2.0/mlflow-artifacts/artifacts/1/2/artifacts/f.txt", "/api/3.0/mlflow/users/permissions/grant",
                 "/api/2.0/mlflow/users/create", "/health", "/", "/static-files/x.js", "/graphql",
                 "/get-artifact", "/ajax-api/3.0/mlflow/server-info"):
        assert not refused_route(path), path


class Behind:
    """The app behind the limits: answers `status`, reads the whole body first, counts calls."""

    def __init__(self, status=200, hold: asyncio.Event | None = None):
        self.status, self.hold, self.calls, self.bodies = status, hold, 0, []

    async def __call__(self, scope, receive, send):
        self.calls += 1
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(len(body))
        if self.hold:
            await self.hold.wait()
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def call(limits, path="/api/2.0/mlflow/runs/log-batch", headers=(), chunks=(b"",), uid=1002):
    limits._peer_uid = lambda client, server: uid
    messages = [{"type": "http.request", "body": c, "more_body": i + 1 < len(chunks)} for i, c in enumerate(chunks)]
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "POST", "headers": list(headers),
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 5050)}
    return scope, receive, send, sent


def run(limits, **kwargs) -> int | None:
    scope, receive, send, sent = call(limits, **kwargs)
    asyncio.run(limits(scope, receive, send))
    return sent[0]["status"] if sent else None


def basic(user, password) -> tuple:
    return (b"authorization", b"Basic " + base64.b64encode(f"{user}:{password}".encode()))


def test_a_declared_body_over_the_cap_is_refused_before_anything_is_read():
    behind = Behind()
    limits = RequestLimits(behind, max_body=1000, max_artifact=5000)
    assert run(limits, headers=[(b"content-length", b"1500000000")]) == 413
    assert run(limits, headers=[(b"content-length", b"nonsense")]) == 413
    assert behind.calls == 0
    # an artifact upload has its own, larger cap
    upload = "/api/2.0/mlflow-artifacts/artifacts/1/r/artifacts/f"
    assert run(limits, path=upload, headers=[(b"content-length", b"4000")], chunks=(b"x" * 4000,)) == 200


def test_a_chunked_body_is_cut_at_the_cap_as_it_arrives():
    behind = Behind()
    limits = RequestLimits(behind, max_body=1000)
    assert run(limits, chunks=(b"x" * 600, b"x" * 600, b"x" * 600)) is None  # the app saw the client leave
    assert behind.bodies == []
    assert run(limits, chunks=(b"x" * 400, b"x" * 400)) == 200


@pytest.mark.parametrize("cap", [3])
def test_one_account_gets_at_most_its_share_of_requests_in_flight(cap):
    async def scenario():
        hold = asyncio.Event()
        behind = Behind(hold=hold)
        limits = RequestLimits(behind, max_in_flight=cap)
        bobs = []
        for _ in range(cap + 2):
            scope, receive, send, sent = call(limits, uid=1002)
            bobs.append((asyncio.ensure_future(limits(scope, receive, send)), sent))
        await asyncio.sleep(0.05)
        refused = [sent[0]["status"] for _, sent in bobs if sent]
        scope, receive, send, alices = call(limits, uid=1001)
        alice = asyncio.ensure_future(limits(scope, receive, send))
        await asyncio.sleep(0.05)
        hold.set()
        await asyncio.gather(alice, *(task for task, _ in bobs))
        return refused, alices[0]["status"]

    refused, alice = asyncio.run(scenario())
    assert refused == [503, 503]
    assert alice == 200


def test_a_wrong_password_is_checked_once_then_refused_without_a_hash():
    behind = Behind(status=401)
    limits = RequestLimits(behind)
    wrong = basic("alice", "guess")
    assert [run(limits, headers=[wrong]) for _ in range(5)] == [401] * 5
    assert behind.calls == 1


def test_after_a_failed_login_the_accounts_next_guesses_wait_and_others_logins_pass(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("slurmctl.ops.mlflow_limits.time.monotonic", lambda: clock[0])
    behind = Behind(status=401)
    limits = RequestLimits(behind)
    assert run(limits, headers=[basic("alice", "guess-1")], uid=1003) == 401
    assert [run(limits, headers=[basic("alice", f"guess-{n}")], uid=1003) for n in range(2, 6)] == [429] * 4
    assert behind.calls == 1  # four guesses, no hash
    clock[0] += 1.1
    assert run(limits, headers=[basic("alice", "guess-6")], uid=1003) == 401
    clock[0] += 1.1  # the second failure in a row: 2 s
    assert run(limits, headers=[basic("alice", "guess-7")], uid=1003) == 429
    behind.status = 200
    assert run(limits, headers=[basic("alice", "right")], uid=1001) == 200  # alice's own account: no wait
    assert behind.calls == 3


def test_one_accounts_unknown_logins_are_checked_one_at_a_time_and_good_ones_are_not_held():
    async def scenario():
        hold = asyncio.Event()
        behind = Behind(status=401, hold=hold)
        limits = RequestLimits(behind)
        tasks = []
        for n in range(5):
            scope, receive, send, _ = call(limits, headers=[basic("alice", f"guess-{n}")], uid=1003)
            tasks.append(asyncio.ensure_future(limits(scope, receive, send)))
        await asyncio.sleep(0.05)
        in_app_at_once = behind.calls
        hold.set()
        await asyncio.gather(*tasks)
        return in_app_at_once

    assert asyncio.run(scenario()) == 1


@pytest.mark.parametrize("path, status", [("/health", 200), ("/api/3.0/mlflow/server-info", 200),
                                          ("/ajax-api/3.0/mlflow/server-info/", 200),
                                          ("/api/2.0/mlflow/server-info", 404),
                                          ("/api/2.0/mlflow/experiments/get-by-name", 404)])
def test_a_route_that_checks_no_login_proves_none(path, status):
    # these answer any password: bob priming his wrong logins there must not make them "known good"
    # (each would then skip the one-at-a-time check and the back-off and cost a hash on every API call)
    behind = Behind(status=status)
    limits = RequestLimits(behind)
    wrong = basic("alice", "guess")
    assert run(limits, path=path, headers=[wrong], uid=1002) == status
    behind.status = 401
    assert run(limits, headers=[wrong], uid=1002) == 401
    assert [run(limits, headers=[basic("alice", f"guess-{n}")], uid=1002) for n in range(3)] == [429] * 3
    assert behind.calls == 2  # the priming call, then one hash for the API call; the rest waited without one
