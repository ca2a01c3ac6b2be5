"""The throwaway cluster's configuration: every daemon and node gets its own port."""

from __future__ import annotations

import shutil
import socket

from tests.integration.throwaway_slurm import ThrowawayCluster, free_ports


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(64)
    assert len(set(ports)) == 64
    for port in ports[:8]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_every_node_and_daemon_of_a_throwaway_cluster_has_its_own_port():
    c = ThrowawayCluster("ports")
    try:
        c.write("", {f"n{i}": "" for i in range(32)})
        nodes = [line.split(" Port=")[1].split()[0] for line in c.conf.read_text().splitlines()
                 if line.startswith("NodeName=")]
        assert len(nodes) == 32
        every = [*map(int, nodes), c.db_port, c.dbd_port, c.ctld_port]
        assert len(set(every)) == len(every), sorted(every)
    finally:
        shutil.rmtree(c.dir, ignore_errors=True)
