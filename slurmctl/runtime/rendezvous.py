"""The port of torchrun's rendezvous store, picked on the batch host (node 0) before each launch.

torchrun's TCPStore has no authentication and listens on every interface, so a port anyone can
compute (such as one derived from the job id) lets another user be there first. This picks one at
random among the ports that are free on this host right now, from a range the kernel never hands
to outgoing connections (so no connection of this node's own takes it before torchrun listens).
Whoever takes it in the seconds between this check and torchrun's bind makes node 0 fail with
EADDRINUSE; torchrun's static rendezvous never connects to that port's holder instead.

    PORT=$(python -m slurmctl.runtime.rendezvous port)

Standard library only (it runs in the batch shell, before any image or training).
"""

from __future__ import annotations

import secrets
import socket
import sys

LOWEST_PORT = 20000
HIGHEST_PORT = 65535
TRIES = 64
_DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default ip_local_port_range


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports."""
    try:
        with open(path) as f:
            low, high = (int(word) for word in f.read().split())
        return (low, high) if 0 < low <= high <= HIGHEST_PORT else _DEFAULT_EPHEMERAL
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL


def candidate_ranges(ephemeral: tuple[int, int]) -> list[range]:
    """[LOWEST_PORT, 65535] without the ephemeral range."""
    low, high = ephemeral
    ranges = [range(LOWEST_PORT, min(low, HIGHEST_PORT + 1)), range(max(high + 1, LOWEST_PORT), HIGHEST_PORT + 1)]
    return [r for r in ranges if len(r)]


def is_free(port: int) -> bool:
    """Nothing is bound to the port on any address, IPv4 or IPv6 (torch's server listens on both)."""
    families = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, address in families:
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this host
            continue
        with probe:
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind((address, port))
            except OSError:
                return False
    return True


def pick_port(ranges: list[range] | None = None, tries: int = TRIES) -> int:
    ranges = candidate_ranges(ephemeral_range()) if ranges is None else ranges
    total = sum(len(r) for r in ranges)
    for _ in range(tries if total else 0):
        index = secrets.randbelow(total)
        for r in ranges:
            if index < len(r):
                port = r[index]
                break
            index -= len(r)
        if is_free(port):
            return port
    raise OSError(f"no free port for torchrun's rendezvous store on {socket.gethostname()} after {tries} random "
                  f"tries in {', '.join(f'{r.start}-{r.stop - 1}' for r in ranges) or 'an empty range'}")


def main(argv: list[str]) -> int:
    if argv != ["port"]:
        print("usage: python -m slurmctl.runtime.rendezvous port", file=sys.stderr)
        return 2
    try:
        print(pick_port())
    except OSError as e:
        print(f"slurmctl: {e}: something on this node holds that many ports; the training was not started",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
