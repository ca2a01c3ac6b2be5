"""The rendezvous port picker (slurmctl/runtime/rendezvous.py) against real sockets: a port that anything
holds, on IPv4 or IPv6, is never picked; the kernel's range for outgoing connections is left out."""

import socket

import pytest

from slurmctl.runtime import rendezvous


def _held(family=socket.AF_INET, address="127.0.0.1"):
    holder = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        holder.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    holder.bind((address, 0))
    holder.listen()
    return holder


@pytest.mark.parametrize("family, address", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "0.0.0.0"),
                                             (socket.AF_INET6, "::1"), (socket.AF_INET6, "::")])
def test_a_held_port_is_never_picked(family, address):
    try:
        holder = _held(family, address)
    except OSError:
        pytest.skip(f"no {address} on this host")
    with holder:
        port = holder.getsockname()[1]
        assert not rendezvous.is_free(port)
        with pytest.raises(OSError, match="no free port"):
            rendezvous.pick_port([range(port, port + 1)], tries=8)
        free = next(p for p in range(port + 1, port + 200) if rendezvous.is_free(p))
        assert {rendezvous.pick_port([range(port, port + 1), range(free, free + 1)]) for _ in range(20)} == {free}


def test_candidates_leave_out_the_kernels_range_for_outgoing_connections():
    assert rendezvous.candidate_ranges((32768, 60999)) == [range(20000, 32768), range(61000, 65536)]
    assert rendezvous.candidate_ranges((1024, 65535)) == []
    assert rendezvous.candidate_ranges((10000, 40000)) == [range(40001, 65536)]
    picked = {rendezvous.pick_port() for _ in range(20)}
    low, high = rendezvous.ephemeral_range()
    assert all(20000 <= p <= 65535 and not low <= p <= high for p in picked) and len(picked) > 10


def test_the_command_prints_a_port_or_says_why_not(capsys, monkeypatch):
    assert rendezvous.main(["port"]) == 0 and 20000 <= int(capsys.readouterr().out) <= 65535
    monkeypatch.setattr(rendezvous, "candidate_ranges", lambda ephemeral: [])
    assert rendezvous.main(["port"]) == 1
    err = capsys.readouterr().err
    assert "no free port for torchrun's rendezvous store" in err and "training was not started" in err
    assert rendezvous.main([]) == 2
