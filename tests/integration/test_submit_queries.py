"""Submit's per-user cache of associations, as alice on the real cluster (sacctmgr): a stale cache
that says alice may not use her account is bypassed by asking sacctmgr again, and then rewritten.

A copy of the site config names alice's account (the local site names none, so submit asks no
sacctmgr at all there); --dry-run submits nothing.
"""

from __future__ import annotations

import json
import os
import time

import yaml

from slurmctl.config.locate import find_site_config

from .conftest import as_user, write_run


def test_stale_cached_associations_are_refreshed_when_the_account_check_fails(workdir):
    alice = as_user("alice")
    site = yaml.safe_load(find_site_config().read_text())
    site["account"] = alice.account
    site_file = workdir / "site.yaml"
    site_file.write_text(yaml.safe_dump(site))
    os.chown(site_file, alice.uid, alice.gid)
    cache_home = workdir / "cache"
    env = {"SLURMCTL_SITE_CONFIG": str(site_file), "XDG_CACHE_HOME": str(cache_home)}
    spec = write_run(workdir / "code", {"name": "assoc-cache", "entrypoint": "train.py", "partition": "l4-dev",
                                        "gpus_per_node": 1, "time_limit": "5m"}, {"train.py": "print('hi')\n"})

    first = alice.slurmctl_json("submit", spec, "--dry-run", env=env)
    account = next(c for c in first["checks"] if c["name"] == "account")
    assert account["status"] == "ok" and alice.account in account["note"]
    cache = cache_home / "slurmctl" / f"associations-{site['cluster']}.json"
    stored = json.loads(cache.read_text())
    assert [a["account"] for a in stored["associations"]] == [alice.account]

    # the cache now claims alice lost her account: young, so it is read, and the failing check re-asks
    stored["associations"] = [{"account": "someone-elses", "qos": ["normal"]}]
    stored["time"] = time.time()
    cache.write_text(json.dumps(stored))
    second = alice.slurmctl_json("submit", spec, "--dry-run", env=env)
    account = next(c for c in second["checks"] if c["name"] == "account")
    assert account["status"] == "ok" and alice.account in account["note"]
    assert [a["account"] for a in json.loads(cache.read_text())["associations"]] == [alice.account]


def test_stale_cached_partitions_are_refreshed_when_a_check_fails_on_them(workdir):
    alice = as_user("alice")
    cache_home = workdir / "cache"
    env = {"XDG_CACHE_HOME": str(cache_home)}
    spec = write_run(workdir / "code", {"name": "facts-cache", "entrypoint": "train.py", "partition": "l4-dev",
                                        "gpus_per_node": 1, "time_limit": "30m"}, {"train.py": "print('hi')\n"})
    cluster = yaml.safe_load(find_site_config().read_text())["cluster"]

    first = alice.slurmctl_json("submit", spec, "--dry-run", env=env)
    assert next(c for c in first["checks"] if c["name"] == "time-limit")["status"] == "ok"
    cache = cache_home / "slurmctl" / f"partitions-{cluster}.json"
    stored = json.loads(cache.read_text())
    assert (cache.stat().st_mode & 0o777) == 0o600 and cache.stat().st_uid == alice.uid
    real = stored["value"]["facts"]["l4-dev"]["max_time_seconds"]
    nodes = json.loads((cache_home / "slurmctl" / f"nodes-{cluster}.json").read_text())["value"]["facts"]
    assert any("l4-dev" in n["partitions"] for n in nodes)

    # the cache now says l4-dev allows 10 minutes: young, so it is read; the failing check asks sinfo again
    stored["value"]["facts"]["l4-dev"]["max_time_seconds"] = 600
    stored["written"] = time.time()
    cache.write_text(json.dumps(stored))
    second = alice.slurmctl_json("submit", spec, "--dry-run", env=env)
    assert next(c for c in second["checks"] if c["name"] == "time-limit")["status"] == "ok", second
    assert json.loads(cache.read_text())["value"]["facts"]["l4-dev"]["max_time_seconds"] == real
