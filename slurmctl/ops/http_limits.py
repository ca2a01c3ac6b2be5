"""Connection limits for the HTTP servers slurmctl starts on a shared login node (`slurmctl web`,
the exporter). Every user of the node can connect to them, and every connection costs a thread.

- A whole-request deadline: a connection must deliver its request (line, headers and, for
  `slurmctl web`, its body) within REQUEST_DEADLINE_SECONDS of when it started waiting for one, or
  it is shut down. A timeout per read is not enough: a client that sends one byte every few seconds
  never trips it and holds its thread for ever.
- A cap on connections at once (MAX_CONNECTIONS); past it a new connection is closed at once.
- A cap per peer (MAX_PER_PEER). On loopback every client has the address 127.0.0.1, so the peer is
  the uid that owns the client's socket, asked of the kernel for that one socket
  (slurmctl/sockowner.py). Elsewhere it is the address. One user who opens a hundred connections
  gets MAX_PER_PEER of them; everyone else still gets in.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections import Counter
from socketserver import ThreadingMixIn

from slurmctl.sockowner import peer_uid

REQUEST_DEADLINE_SECONDS = 10.0
SOCKET_TIMEOUT_SECONDS = 20.0  # per read or write, also while the response is written
MAX_CONNECTIONS = 48
MAX_PER_PEER = 12
_REAP_INTERVAL = 0.25


class BoundedThreadingMixIn(ThreadingMixIn):
    """ThreadingMixIn with the limits above. Mix in before an HTTPServer class; the handler calls
    ``arm`` when it starts waiting for a request and ``disarm`` once it has read all of it."""

    daemon_threads = True
    # socketserver's default backlog of 5 would leave the connections past it to the kernel's SYN
    # retries (seconds each), where they are no one's to refuse: take them and refuse them here
    request_queue_size = 256
    max_connections = MAX_CONNECTIONS
    max_per_peer = MAX_PER_PEER
    request_deadline = REQUEST_DEADLINE_SECONDS

    def server_activate(self) -> None:
        super().server_activate()
        self._limits_lock = threading.Lock()
        self._open = 0
        self._per_peer: Counter = Counter()
        self._peer_of: dict[socket.socket, object] = {}
        self._deadlines: dict[socket.socket, float] = {}
        self._cut: set[socket.socket] = set()
        self._reaper_stop = threading.Event()
        threading.Thread(target=self._reap, name="request-deadlines", daemon=True).start()

    def _peer(self, request, client_address) -> object:
        try:
            local = request.getsockname()
        except OSError:
            return ("local, owner unknown",)
        if client_address[0] in ("127.0.0.1", "::1", "::ffff:127.0.0.1") or client_address[0] == local[0]:
            uid = peer_uid(client_address, local)
            # a local client whose socket is not found (it closed already) shares one bucket with
            # every other such client: no fresh share for anyone
            return ("uid", uid) if uid is not None else ("local, owner unknown",)
        return ("address", client_address[0])

    def process_request(self, request, client_address) -> None:
        peer = self._peer(request, client_address)
        with self._limits_lock:
            refused = self._open >= self.max_connections or self._per_peer[peer] >= self.max_per_peer
            if not refused:
                self._open += 1
                self._per_peer[peer] += 1
                self._peer_of[request] = peer
        if refused:
            self.shutdown_request(request)
            return
        self.arm(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request) -> None:
        with self._limits_lock:
            self._deadlines.pop(request, None)
            self._cut.discard(request)
            peer = self._peer_of.pop(request, None)
            if peer is not None:
                self._open -= 1
                self._per_peer[peer] -= 1
                if not self._per_peer[peer]:
                    del self._per_peer[peer]

    def arm(self, request) -> None:
        with self._limits_lock:
            self._deadlines[request] = time.monotonic() + self.request_deadline

    def disarm(self, request) -> None:
        with self._limits_lock:
            self._deadlines.pop(request, None)

    def _reap(self) -> None:
        while not self._reaper_stop.wait(_REAP_INTERVAL):
            now = time.monotonic()
            with self._limits_lock:
                late = [r for r, deadline in self._deadlines.items() if deadline <= now]
                for request in late:
                    del self._deadlines[request]
                    self._cut.add(request)
            for request in late:
                try:  # the handler's blocked read returns at once; its thread ends and frees the slot
                    request.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def was_cut(self, request) -> bool:
        with self._limits_lock:
            return request in self._cut

    def handle_error(self, request, client_address) -> None:
        # a client gone (or cut at its deadline) while its answer was written is no server error
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def server_close(self) -> None:
        stop = getattr(self, "_reaper_stop", None)  # None when binding failed before activation
        if stop is not None:
            stop.set()
        super().server_close()


class DeadlineHandlerMixIn:
    """For the handler (before BaseHTTPRequestHandler or wsgiref's WSGIRequestHandler): each request
    waits under the server's deadline, and what a cut connection left half-sent is not answered.
    A handler that reads a body calls ``self.server.disarm(self.connection)`` after it; one that
    reads none sets ``disarm_after_headers``."""

    disarm_after_headers = False

    def handle_one_request(self) -> None:
        self.server.arm(self.connection)  # keep-alive: each request has its own deadline
        super().handle_one_request()

    def parse_request(self) -> bool:
        if self.server.was_cut(self.connection):
            self.close_connection = True
            return False
        parsed = super().parse_request()
        if self.server.was_cut(self.connection):  # the headers ended only because the deadline cut them
            self.close_connection = True
            return False
        if parsed and self.disarm_after_headers:
            self.server.disarm(self.connection)
        return parsed
