"""uvicorn with the MLflow server's connection limits (slurmctl/ops/mlflow_connections.py): a real
uvicorn server in this process, real loopback sockets."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter

import pytest

uvicorn = pytest.importorskip("uvicorn")

from slurmctl.ops.mlflow_connections import BoundedH11Protocol  # noqa: E402 - only with uvicorn


class Tight(BoundedH11Protocol):
    request_deadline = 1.0
    max_per_peer = 4
    open_connections = 0
    per_peer: Counter = Counter()


async def hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def server():
    Tight.open_connections, Tight.per_peer = 0, Counter()  # a fresh server's counts
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(hello, host="127.0.0.1", port=port, http=Tight, log_level="critical", lifespan="off")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    for _ in range(200):
        if served.started:
            break
        time.sleep(0.05)
    yield port
    served.should_exit = True
    thread.join(10)


def answer(s: socket.socket) -> bytes:
    got = b""
    while not got.endswith(b"ok"):
        chunk = s.recv(1000)
        if not chunk:
            break
        got += chunk
    return got


def ask(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        return answer(s)


def closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        return s.recv(100) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_a_half_sent_request_is_closed_at_its_deadline(server):
    with socket.create_connection(("127.0.0.1", server)) as half:
        half.sendall(b"GET / HT")
        assert not closed_by_server(half, 0.5)
        assert closed_by_server(half, 3.0)
    assert ask(server).startswith(b"HTTP/1.1 200")


def test_the_second_request_on_a_kept_alive_connection_has_a_deadline_too(server):
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer(s).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET / HT")
        assert closed_by_server(s, 3.0)


def test_one_account_holds_at_most_its_share_of_connections(server):
    held = [socket.create_connection(("127.0.0.1", server)) for _ in range(Tight.max_per_peer + 3)]
    try:
        time.sleep(0.3)
        closed = [closed_by_server(s, 0.02) for s in held]  # well before the 1 s deadline
        assert closed.count(True) == 3 and closed[:Tight.max_per_peer] == [False] * Tight.max_per_peer
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    assert ask(server).startswith(b"HTTP/1.1 200")  # the share comes back when they are gone
