"""Submit's Slurm queries: side by side, sacctmgr only when the site checks an account, and the
user's associations from a short-lived per-user cache that a failing account check bypasses."""

from __future__ import annotations

import json
import os
import stat
import threading
import time

import pytest

import slurmctl.submit.preflight.cluster as cluster
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.parsing import SEP
from slurmctl.slurm.runner import CommandResult, LocalRunner
from slurmctl.submit.preflight.cluster import ClusterView, associations_cache

OUTPUT = {
    "sinfo-N": SEP.join(["l4-1", "l4-dev*", "gpu:l4:4", "16", "64000", "idle"]) + "\n",
    "sinfo": SEP.join(["l4-dev", "2:00:00", "up"]) + "\n",
    "sacctmgr": "vision|normal,high\n",
}


class SlowRunner(LocalRunner):
    """Answers like Slurm after `delay` seconds, counting the calls (a LocalRunner, so queries may overlap)."""

    def __init__(self, delay: float = 0.0):
        super().__init__()
        self.delay, self.calls, self.lock = delay, [], threading.Lock()
        self.running = self.most_at_once = 0

    def run(self, argv, timeout=60.0):
        with self.lock:
            self.calls.append(argv[0])
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(self.delay)
        with self.lock:
            self.running -= 1
        key = "sinfo-N" if argv[:3] == ["sinfo", "-h", "-N"] else argv[0]
        return CommandResult(tuple(argv), 0, OUTPUT[key], "")


def test_the_queries_run_side_by_side():
    runner = SlowRunner(delay=0.3)
    started = time.monotonic()
    view = ClusterView.query(SlurmClient(runner), "alice")
    assert time.monotonic() - started < 0.6 and runner.most_at_once == 3
    assert view.nodes[0].gpus == 4 and view.partitions["l4-dev"].max_time_seconds == 7200
    assert [(a.account, a.qos) for a in view.associations] == [("vision", ["normal", "high"])]


def test_no_sacctmgr_when_the_site_checks_no_account():
    runner = SlowRunner()
    view = ClusterView.query(SlurmClient(runner), "alice", associations=False)
    assert sorted(runner.calls) == ["sinfo", "sinfo"] and view.associations is None


def test_associations_come_from_the_per_user_cache_while_young(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = associations_cache("local")
    assert cache == tmp_path / "cache" / "slurmctl" / "associations-local.json"
    runner = SlowRunner()
    client = SlurmClient(runner)
    first = ClusterView.query(client, "alice", cache=cache)
    assert runner.calls.count("sacctmgr") == 1 and not first.associations_cached
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600 and stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    second = ClusterView.query(client, "alice", cache=cache)
    assert runner.calls.count("sacctmgr") == 1 and second.associations_cached
    assert second.associations == first.associations
    assert ClusterView.query(client, "bob", cache=cache).associations_cached is False  # another user's key
    assert runner.calls.count("sacctmgr") == 2
    data = json.loads(cache.read_text())
    data["time"] -= cluster.ASSOCIATIONS_TTL_SECONDS + 1
    cache.write_text(json.dumps(data))
    assert ClusterView.query(client, "bob", cache=cache).associations_cached is False  # too old
    cache.write_text("{not json")
    assert ClusterView.query(client, "bob", cache=cache).associations_cached is False  # damaged
    assert runner.calls.count("sacctmgr") == 4
    fresh = second.with_fresh_associations(client, "alice", cache)
    assert runner.calls.count("sacctmgr") == 5 and not fresh.associations_cached and fresh.nodes is second.nodes
    assert ClusterView.query(client, "alice", cache=cache).associations_cached  # young and private again
    cache.chmod(0o644)  # readable (so possibly written before) by others: not trusted
    assert ClusterView.query(client, "alice", cache=cache).associations_cached is False
    cache.chmod(0o600)
    cache.parent.chmod(0o777)  # a directory others can write: anyone could have replaced the file
    assert ClusterView.query(client, "alice", cache=cache).associations_cached is False
    cache.parent.chmod(0o700)
    os.chown(cache, 65534, 65534)  # another user's file, whatever its mode
    assert ClusterView.query(client, "alice", cache=cache).associations_cached is False


@pytest.mark.parametrize("name", ["", "../etc", ".hidden", "a/b", "x y"])
def test_a_cluster_name_that_is_no_file_name_gets_no_cache(name):
    assert associations_cache(name) is None


def test_an_unwritable_cache_only_costs_a_query(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    runner = SlowRunner()
    view = ClusterView.query(SlurmClient(runner), "alice", cache=blocked / "sub" / "a.json")
    assert view.associations and runner.calls.count("sacctmgr") == 1
    assert os.listdir(tmp_path) == ["file"]
