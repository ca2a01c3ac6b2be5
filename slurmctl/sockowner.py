"""Who owns a TCP socket on this machine, in the kernel's own words (sock_diag, as `ss` does).

Loopback clients all have the address 127.0.0.1, and a loopback port below nothing is reserved: any
user can listen on a free one. So the owner of a socket is the uid the kernel keeps for it, asked for
that one socket by its exact address pair, never by reading /proc/net/tcp: any user can make that
table tens of thousands of lines long, and reading it per connection let one user's connect-and-close
loop stall everyone.

* ``peer_uid``: the owner of the client end of a connection a server accepted (slurmctl/ops/http_limits.py
  caps connections per owner);
* ``listener_uid``: the owner of the socket that a connection to 127.0.0.1:PORT would reach, checked by
  every slurmctl process before it sends a secret to a loopback service (the MLflow server's logins).

Standard library only: the job's runtime uses it.
"""

from __future__ import annotations

import socket
import struct

# sock_diag (linux/inet_diag.h): ask the kernel about one TCP socket by its exact 4-tuple. The kernel
# finds it in its connection hash, so the answer costs the same however many sockets the machine has;
# reading /proc/net/tcp costs a pass over all of them, which any user can make tens of thousands long.
_SOCK_DIAG_BY_FAMILY = 20
_NETLINK_SOCK_DIAG = 4  # linux/netlink.h; the socket module does not name it
_NLM_F_REQUEST = 1
_INET_DIAG_NOCOOKIE = 0xFFFFFFFF
_ALL_STATES = 0xFFFFFFFF
_NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_DIAG_REQUEST = struct.Struct("=BBBxI2s2s16s16sIII")  # family, protocol, extensions, states, sockid
_DIAG_ANSWER = struct.Struct("=BBBB2s2s16s16sIIIIIIII")  # family, state, ..., sockid, expires, queues, uid, inode
_NETLINK_TIMEOUT_SECONDS = 0.5


def _family_and_address(host: str) -> tuple[int, bytes] | None:
    """The address family and the 16 bytes of an address as sock_diag takes it (an IPv4 address in the
    first four). An IPv4-mapped IPv6 address is an IPv4 client of a dual-stack listener."""
    host = host.split("%")[0]
    if host.startswith("::ffff:") and "." in host:
        host = host[len("::ffff:"):]
    try:
        if ":" in host:
            return socket.AF_INET6, socket.inet_pton(socket.AF_INET6, host)
        return socket.AF_INET, socket.inet_pton(socket.AF_INET, host).ljust(16, b"\0")
    except OSError:
        return None


def peer_uid(client: tuple, server: tuple) -> int | None:
    """The uid owning the client end of a TCP connection made on this machine (``client`` is the
    accepted socket's peer address, ``server`` its own address: getsockname(), not the listening
    address, which may be a wildcard), or None: another
    machine, a client that closed its socket already (the kernel keeps no owner for it), or no
    sock_diag here. One netlink request for the exact socket whose local end is the client's address
    and whose remote end is ours; the kernel answers from its hash table."""
    local, remote = _family_and_address(client[0]), _family_and_address(server[0])
    if local is None or remote is None or local[0] != remote[0]:
        return None
    family = local[0]
    request = _DIAG_REQUEST.pack(family, socket.IPPROTO_TCP, 0, _ALL_STATES,
                                 client[1].to_bytes(2, "big"), server[1].to_bytes(2, "big"),
                                 local[1], remote[1], 0, _INET_DIAG_NOCOOKIE, _INET_DIAG_NOCOOKIE)
    message = _NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST,
                                 1, 0) + request
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(_NETLINK_TIMEOUT_SECONDS)
            diag.send(message)
            answer = diag.recv(8192)
    except (OSError, AttributeError):  # AttributeError: no AF_NETLINK (not Linux)
        return None
    if len(answer) < _NLMSG_HEADER.size + _DIAG_ANSWER.size:
        return None  # an NLMSG_ERROR: no such socket
    _, kind, _, _, _ = _NLMSG_HEADER.unpack_from(answer)
    if kind != _SOCK_DIAG_BY_FAMILY:
        return None
    fields = _DIAG_ANSWER.unpack_from(answer, _NLMSG_HEADER.size)
    uid, inode = fields[14], fields[15]
    # a socket its owner closed is a time-wait or orphan entry: the kernel reports uid 0 and inode 0
    # for it, and it must not count as root's
    return uid if inode else None


def listener_uid(host: str, port: int) -> int | None:
    """The uid owning the socket that a connection to host:port on this machine reaches (a listener on
    that address or on the wildcard), or None when nothing listens there. The kernel answers the exact
    lookup a connection makes, so a second listener that would not get the connection does not count."""
    # an IPv4-mapped IPv6 address is an IPv4 connection: the IPv4 wildcard listener gets it
    wildcard = "::" if ":" in host.split("%")[0] and not host.startswith("::ffff:") else "0.0.0.0"
    return peer_uid((host, port), (wildcard, 0))


def is_loopback(host: str) -> bool:
    """A host name or address that always means this machine."""
    import ipaddress

    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return False
