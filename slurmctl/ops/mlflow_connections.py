"""Connection limits for the cluster MLflow server, where uvicorn takes its connections
(`mlflow server --uvicorn-opts "--http slurmctl.ops.mlflow_connections:BoundedH11Protocol"`,
deploy/local/mlflow-up). uvicorn arms no timer on a connection until it has answered a first request:
a connection that sends half a request line is held for ever, and 20,000 of them (no login needed)
took every file handle the server had. The same rules as slurmctl/ops/http_limits.py, on uvicorn's
event loop instead of threads:

* a request's line and headers must arrive within REQUEST_DEADLINE_SECONDS of the connection's start
  or of the previous answer, or the connection is closed (a body is not under it: artifact uploads
  stream for as long as they need, and slurmctl/ops/mlflow_limits.py caps their size);
* at most MAX_CONNECTIONS at once, and MAX_CONNECTIONS_PER_PEER per peer (the uid owning the client's
  socket, slurmctl/sockowner.py): past either, a new connection is closed at once.
"""

from __future__ import annotations

from collections import Counter

from uvicorn.protocols.http.h11_impl import H11Protocol

from slurmctl.sockowner import peer_uid

REQUEST_DEADLINE_SECONDS = 10.0
MAX_CONNECTIONS = 2000
MAX_CONNECTIONS_PER_PEER = 64


class BoundedH11Protocol(H11Protocol):
    request_deadline = REQUEST_DEADLINE_SECONDS
    max_connections = MAX_CONNECTIONS
    max_per_peer = MAX_CONNECTIONS_PER_PEER
    # one event loop per server process: plain class-level counts, no lock needed
    open_connections = 0
    per_peer: Counter = Counter()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._peer = None
        self._deadline = None
        self._waiting = False
        peer = self._peer_of(transport)
        cls = type(self)
        if cls.open_connections >= self.max_connections or cls.per_peer[peer] >= self.max_per_peer:
            transport.close()
            return
        self._peer = peer
        cls.open_connections += 1
        cls.per_peer[peer] += 1
        self._arm()

    @staticmethod
    def _peer_of(transport) -> object:
        client, server = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        if not client or not server:
            return ("unknown",)
        uid = peer_uid(tuple(client[:2]), tuple(server[:2]))
        return ("uid", uid) if uid is not None else ("address", client[0])

    def _arm(self) -> None:
        self._waiting = True
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.request_deadline, self._cut)

    def _cut(self) -> None:
        if self._waiting and not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not None and self.cycle is not cycle:  # a whole request line and headers arrived
            self._waiting = False

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._arm()  # the next request on this connection has its own deadline
        super().on_response_complete()

    def connection_lost(self, exc) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        if self._peer is not None:
            cls = type(self)
            cls.open_connections -= 1
            cls.per_peer[self._peer] -= 1
            if not cls.per_peer[self._peer]:
                del cls.per_peer[self._peer]
            self._peer = None
        super().connection_lost(exc)
