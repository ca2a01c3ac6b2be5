"""peer_uid asks the kernel (sock_diag) about one client socket: real loopback sockets, no fakes."""

from __future__ import annotations

import os
import socket
import time

import pytest

from slurmctl.sockowner import listener_uid, peer_uid


@pytest.mark.parametrize("family, host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_the_owner_of_a_loopback_client_socket_is_found_and_a_closed_one_is_nobodys(family, host):
    with socket.socket(family) as listener:
        listener.bind((host, 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, address = listener.accept()
        with accepted:
            assert peer_uid(address, accepted.getsockname()) == os.getuid()
            client.close()
            time.sleep(0.05)
            # its entry is an orphan now, which the kernel reports as uid 0: never counted as root's
            assert peer_uid(address, accepted.getsockname()) is None


def test_an_ipv4_client_of_a_dual_stack_listener_is_found():
    with socket.socket(socket.AF_INET6) as listener:
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind(("::", 0))
        listener.listen()
        with socket.create_connection(("127.0.0.1", listener.getsockname()[1])):
            accepted, address = listener.accept()
            with accepted:
                assert address[0] == "::ffff:127.0.0.1"
                assert peer_uid(address, accepted.getsockname()) == os.getuid()


def test_an_address_that_is_no_socket_here_or_not_an_address_has_no_owner():
    assert peer_uid(("127.0.0.1", 1), ("127.0.0.1", 2)) is None
    assert peer_uid(("not an address", 1), ("127.0.0.1", 2)) is None
    assert peer_uid(("::1", 1), ("127.0.0.1", 2)) is None


@pytest.mark.parametrize("family, host, wildcard", [(socket.AF_INET, "127.0.0.1", "0.0.0.0"),
                                                    (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
                                                    (socket.AF_INET6, "::1", "::")])
def test_the_owner_of_the_listener_a_port_reaches_is_found_and_a_free_port_is_nobodys(family, host, wildcard):
    with socket.socket(family) as listener:
        listener.bind((wildcard, 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert listener_uid(host, port) == os.getuid()
    assert listener_uid(host, port) is None
