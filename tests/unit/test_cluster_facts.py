"""ClusterFacts: a submit's nodes and partitions from the per-user cache while young (the cache
itself and a check failing on stale facts are tested as alice in tests/integration/test_submit_queries.py)."""

from __future__ import annotations

import json

import pytest

from slurmctl import usercache
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.facts import ClusterFacts
from slurmctl.submit.preflight.cluster import ClusterView

from .test_submit_queries import SlowRunner


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _sinfo_calls(runner) -> int:
    return runner.calls.count("sinfo")


def test_second_submit_takes_nodes_and_partitions_from_the_cache():
    runner = SlowRunner()
    client = SlurmClient(runner)
    first = ClusterFacts(client, "local")
    view = ClusterView.query(first, "alice", associations=False)
    assert _sinfo_calls(runner) == 2 and not first.from_cache
    second = ClusterFacts(client, "local")
    again = ClusterView.query(second, "alice", associations=False)
    assert _sinfo_calls(runner) == 2 and second.from_cache
    assert again.nodes == view.nodes and again.partitions == view.partitions
    second.forget()
    ClusterView.query(second, "alice", associations=False)
    assert _sinfo_calls(runner) == 4 and not second.from_cache


def test_old_foreign_or_damaged_facts_are_asked_again(monkeypatch):
    runner = SlowRunner()
    client = SlurmClient(runner)
    ClusterView.query(ClusterFacts(client, "local"), "alice", associations=False)
    assert ClusterFacts(client, "local", max_age_seconds=0).nodes()[0].gpus == 4
    assert _sinfo_calls(runner) == 3  # too old: asked
    path = usercache.cache_dir() / "nodes-local.json"
    stored = json.loads(path.read_text())
    stored["value"]["key"] = "another user"
    path.write_text(json.dumps(stored))
    facts = ClusterFacts(client, "local")
    facts.nodes()
    assert _sinfo_calls(runner) == 4 and not facts.from_cache
    stored = json.loads(path.read_text())
    stored["value"]["facts"] = [{"unknown_field": 1}]
    path.write_text(json.dumps(stored))
    facts.nodes()
    assert _sinfo_calls(runner) == 5 and not facts.from_cache
    odd = ClusterFacts(client, "../x")  # not a file name: no cache at all
    odd.nodes()
    odd.nodes()
    assert _sinfo_calls(runner) == 7
