"""The cluster's shape (nodes with their GRES, CPUs and memory; partitions with their MaxTime) from
the per-user cache (slurmctl.usercache) while young, asked of Slurm otherwise."""

from __future__ import annotations

import dataclasses
import os

from slurmctl.slurm.records import NodeInfo, PartitionInfo
from slurmctl.usercache import forget, is_safe_name, read_entry, write_entry

# --- cluster facts ----------------------------------------------------------------------------
# Nodes with their GRES, CPUs and memory, and partitions with their MaxTime change when an admin
# changes the cluster: a submit takes them from the cache while this young, and asks sinfo again
# when a check fails on them (see ClusterFacts.from_cache).
FACTS_TTL_SECONDS = 300


class ClusterFacts:
    """A SlurmClient's answers about the cluster's shape (``nodes``, ``partitions``) from the
    per-user cache while young, asked (and kept) otherwise; everything else goes to the client.
    ``from_cache`` says whether an answer came from the cache, so a caller whose check fails on it
    can ``forget`` and ask again."""

    def __init__(self, client, cluster: str, max_age_seconds: float = FACTS_TTL_SECONDS):
        self.client, self.runner = client, client.runner
        self.max_age_seconds = max_age_seconds
        self.from_cache = False
        safe = is_safe_name(cluster)
        self._names = {kind: f"{kind}-{cluster}.json" for kind in ("nodes", "partitions")} if safe else {}
        self._key = f"{os.geteuid()}|{os.environ.get('SLURM_CONF', '')}"

    def __getattr__(self, name: str):
        return getattr(self.client, name)

    def _cached(self, kind: str):
        name = self._names.get(kind)
        entry = read_entry(name, self.max_age_seconds) if name else None
        if entry is None or entry.get("key") != self._key:
            return None
        return entry.get("facts")

    def nodes(self):
        cached = self._cached("nodes")
        if isinstance(cached, list):
            try:
                nodes = [NodeInfo(**n) for n in cached]
            except TypeError:
                nodes = None  # another version's fields: ask
            if nodes is not None:
                self.from_cache = True
                return nodes
        nodes = self.client.nodes()
        self._keep("nodes", [dataclasses.asdict(n) for n in nodes])
        return nodes

    def partitions(self):
        cached = self._cached("partitions")
        if isinstance(cached, dict):
            try:
                partitions = {name: PartitionInfo(**p) for name, p in cached.items()}
            except TypeError:
                partitions = None
            if partitions is not None:
                self.from_cache = True
                return partitions
        partitions = self.client.partitions()
        self._keep("partitions", {name: dataclasses.asdict(p) for name, p in partitions.items()})
        return partitions

    def _keep(self, kind: str, facts) -> None:
        if kind in self._names:
            write_entry(self._names[kind], {"key": self._key, "facts": facts})

    def forget(self) -> None:
        for name in self._names.values():
            forget(name)
        self.from_cache = False
