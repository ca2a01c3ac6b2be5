"""The node data cache against a real S3 HTTP API (moto's server on a free loopback port) through the real
s3fs client: staging, reuse, corrupt and planted entries, eviction within the budget and leases,
concurrent stagers, the run's view; plus run.yaml `data:` validation and rt.data's prefetch."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer
from pydantic import ValidationError

from slurmctl.config.models import DataSource, RunSpec, SiteDataConfig, parse_size
from slurmctl.runtime.datacache import CacheError, UserCache, list_objects
from slurmctl.runtime.datastage import stage_dataset
from slurmctl.runtime.prefetch import prefetched

BUCKET = "unit-datasets"
SHARD = 256 * 1024


@pytest.fixture(scope="module")
def s3():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="unit", aws_secret_access_key="unit")
    client.create_bucket(Bucket=BUCKET)
    for i in range(6):
        client.put_object(Bucket=BUCKET, Key=f"shards/part-{i}.bin", Body=bytes([i]) * SHARD)
    client.put_object(Bucket=BUCKET, Key="other/a.bin", Body=b"x" * SHARD)
    options = {"key": "unit", "secret": "unit", "client_kwargs": {"endpoint_url": endpoint}}
    yield client, options
    server.stop()


def dataset(src="shards", name="shards"):
    return {"name": name, "src": f"s3://{BUCKET}/{src}", "cache": "node"}


def fresh(tmp_path: Path, budget: int = 64 * SHARD) -> UserCache:
    root = tmp_path / "cache"
    root.mkdir(mode=0o1777, exist_ok=True)  # what the operator makes (deploy/local/up, the GKE init container)
    os.chmod(root, 0o1777)
    return UserCache(root, budget).open()


def test_stage_then_reuse_serves_from_cache(s3, tmp_path):
    _, options = s3
    cache = fresh(tmp_path)
    seen = []
    first = stage_dataset(dataset(), cache, "run-a", "1", options,
                          progress=lambda s: seen.append((s.objects, s.hits + s.misses, s.bytes_staged)))
    assert (first.objects, first.misses, first.hits, first.bytes_staged) == (6, 6, 0, 6 * SHARD)
    assert seen[:2] == [(0, 0, 0), (6, 0, 0)] and seen[-1] == (6, 6, 6 * SHARD)  # listing, listed, each object
    second = stage_dataset(dataset(), cache, "run-b", "2", options)
    assert (second.hits, second.misses, second.bytes_staged) == (6, 0, 0)
    view = Path(second.path)
    assert sorted(p.name for p in view.iterdir()) == [f"part-{i}.bin" for i in range(6)]
    assert (view / "part-3.bin").read_bytes() == bytes([3]) * SHARD
    assert oct(os.stat(cache.dir).st_mode & 0o777) == "0o700"


def test_corrupted_entry_is_detected_and_restaged_never_read(s3, tmp_path):
    _, options = s3
    cache = fresh(tmp_path)
    stage_dataset(dataset(), cache, "run-a", "1", options)
    _, objects, _ = list_objects(f"s3://{BUCKET}/shards", options)
    victim = cache.object_path(objects[2][1].entry_id)
    os.chmod(victim, 0o600)
    with open(victim, "r+b") as fh:  # same size, one byte flipped
        fh.seek(100)
        fh.write(b"\xff")
    os.chmod(victim, 0o400)
    again = stage_dataset(dataset(), cache, "run-b", "2", options)
    assert (again.hits, again.rejected, again.bytes_staged) == (5, 1, SHARD)
    assert (Path(again.path) / "part-2.bin").read_bytes() == bytes([2]) * SHARD


def test_planted_symlink_or_writable_entry_is_replaced(s3, tmp_path):
    _, options = s3
    cache = fresh(tmp_path)
    _, objects, _ = list_objects(f"s3://{BUCKET}/shards", options)
    secret = tmp_path / "elsewhere"
    secret.write_bytes(bytes([0]) * SHARD)
    os.symlink(secret, cache.object_path(objects[0][1].entry_id))  # a planted link to some other file
    writable = cache.object_path(objects[1][1].entry_id)
    writable.write_bytes(bytes([1]) * SHARD)
    os.chmod(writable, 0o666)  # anyone could have altered it
    result = stage_dataset(dataset(), cache, "run-a", "1", options)
    assert result.rejected == 2 and result.bytes_staged == 6 * SHARD
    assert not cache.object_path(objects[0][1].entry_id).is_symlink()
    assert secret.read_bytes() == bytes([0]) * SHARD  # the link's target was never written through


def test_eviction_keeps_the_budget_and_spares_held_entries(s3, tmp_path):
    _, options = s3
    cache = fresh(tmp_path, budget=7 * SHARD)
    stage_dataset(dataset(), cache, "run-a", "4242", options)  # 6 shards, held by job 4242
    # Job 4242 is "live" only as the current job: a second dataset that needs 1 more shard fits exactly.
    other = stage_dataset(dataset("other", "other"), cache, "run-b", "4242", options)
    assert other.evicted == 0 and cache.used_bytes() == 7 * SHARD
    # A new job (the old lease's job is unknown to Slurm, so its lease is dead) needs the 6 shards: it
    # holds them itself (hits), and nothing else needs room.
    again = stage_dataset(dataset(), cache, "run-c", "999999991", options)
    assert again.hits == 6
    # One more shard's room: the unheld `other` entry goes; the six the live job holds stay.
    assert cache.make_room(SHARD, set(), "999999991") == (1, SHARD)
    assert cache.used_bytes() == 6 * SHARD
    # Room for two more cannot be made without taking the live job's entries: refused, nothing taken.
    with pytest.raises(CacheError, match="budget"):
        cache.make_room(2 * SHARD, set(), "999999991")
    assert len(cache.entries()) == 6  # every entry the live job holds survived


def test_least_recently_used_goes_first(s3, tmp_path):
    _, options = s3
    cache = fresh(tmp_path, budget=7 * SHARD)
    stage_dataset(dataset(), cache, "run-a", None, options)
    time.sleep(0.01)
    stage_dataset(dataset("other", "other"), cache, "run-b", None, options)
    _, objects, _ = list_objects(f"s3://{BUCKET}/shards", options)
    evicted, freed = cache.make_room(SHARD, set(), None)
    assert (evicted, freed) == (1, SHARD)
    gone = [obj for _, obj in objects if not cache.object_path(obj.entry_id).exists()]
    assert len(gone) == 1  # one of the older shards, never the newest `other` entry
    assert cache.used_bytes() + SHARD <= cache.budget


def test_concurrent_stagers_download_each_object_once(s3, tmp_path):
    _, options = s3
    results = []

    fresh(tmp_path)

    def job(i):
        results.append(stage_dataset(dataset(), UserCache(tmp_path / "cache", 64 * SHARD).open(), f"run-{i}",
                                     str(900000 + i), options))

    threads = [threading.Thread(target=job, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.bytes_staged for r in results) == 6 * SHARD
    assert sum(r.hits for r in results) == 3 * 6


def test_another_users_directory_under_our_name_is_refused(tmp_path):
    root = tmp_path / "cache"
    with pytest.raises(CacheError, match="missing on this node"):
        UserCache(root, SHARD).open()
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.raises(CacheError, match="sticky bit"):
        UserCache(root, SHARD).open()
    os.chmod(root, 0o1777)
    me = UserCache(root, SHARD)
    os.mkdir(me.dir)
    os.chmod(me.dir, 0o755)  # not private: someone else could have planted it (chmod: the umask may be 077)
    with pytest.raises(CacheError, match="not a private directory"):
        me.open()


def test_data_entries_validate_with_clear_errors():
    ok = RunSpec.model_validate({"name": "x", "entrypoint": "t.py", "partition": "p",
                                 "data": ["/data/local", {"src": "s3://bucket-1/a/b/", "mount": "/data/shards"}]})
    assert ok.data_paths == ["/data/local"]
    assert ok.datasets[0].src == "s3://bucket-1/a/b" and ok.datasets[0].name == "shards"
    assert ok.datasets[0].env_var == "SLURMCTL_DATA_SHARDS" and ok.datasets[0].cache == "node"
    for bad, words in (({"src": "http://x/y"}, "s3://bucket/prefix"), ({"src": "s3://b1/../etc"}, "no '..'"),
                       ({"src": "s3://bkt/a", "cache": "disk"}, "'node', 'shared' or 'none'"),
                       ({"src": "s3://bkt/a", "mount": "data"}, "absolute path"),
                       ({"src": "s3://bkt/a", "name": "has space"}, "SLURMCTL_DATA_")):
        with pytest.raises(ValidationError, match=words.replace("(", r"\(")):
            DataSource.model_validate(bad)
    with pytest.raises(ValidationError, match="two datasets"):
        RunSpec.model_validate({"name": "x", "entrypoint": "t.py", "partition": "p",
                                "data": [{"src": "s3://bkt/a/x"}, {"src": "s3://bkt/b/x"}]})


def test_site_data_config():
    site = SiteDataConfig(endpoint_url="http://127.0.0.1:1", node_cache_budget="1.5G")
    assert site.node_cache_bytes == int(1.5 * 2**30) and parse_size("200MiB") == 200 * 2**20
    assert site.client_options("s3://b/p") == {"client_kwargs": {"endpoint_url": "http://127.0.0.1:1"},
                                               "config_kwargs": {"connect_timeout": 10.0, "read_timeout": 60.0}}
    assert site.client_options("gs://b/p") == {"timeout": 60.0}
    quick = site.client_options("s3://b/p", connect=2, read=3, attempts=1)["config_kwargs"]
    assert quick == {"connect_timeout": 2, "read_timeout": 3, "retries": {"max_attempts": 1, "mode": "standard"}}
    assert SiteDataConfig(staging_timeout="90m").staging_seconds == 5400 and SiteDataConfig().user_cache_share == 0.5
    for bad in ({"staging_timeout": "soon"}, {"user_cache_share": 0}, {"user_cache_share": 2}):
        with pytest.raises(ValidationError):
            SiteDataConfig(**bad)
    with pytest.raises(ValidationError, match="size"):
        SiteDataConfig(node_cache_budget="lots")


def test_prefetch_keeps_order_bounds_memory_and_raises_where_it_failed():
    produced = []

    def loader():
        for i in range(10):
            produced.append(i)
            yield i
        raise RuntimeError("shard 10 is unreadable")

    out = []
    stream = prefetched(loader(), 2)
    out.append(next(stream))
    time.sleep(0.2)
    assert len(produced) <= 1 + 2 + 1  # taken, queued (2), and the one waiting to be put
    with pytest.raises(RuntimeError, match="shard 10"):
        for item in stream:
            out.append(item)
    assert out == list(range(10))


def test_md5_of_single_part_etag_is_the_identity(s3):
    _, options = s3
    _, objects, _ = list_objects(f"s3://{BUCKET}/shards", options)
    obj = objects[0][1]
    assert obj.md5 == hashlib.md5(bytes([0]) * SHARD).hexdigest() and obj.size == SHARD


def test_exporter_sums_running_jobs_staging_per_node_as_gauges(tmp_path):
    """The data series are the running jobs' staging per node, recomputed at each snapshot: gauges, since
    they fall when a job ends or a fresh exporter (`--once`, a restart) starts; promtool accepts them."""
    import shutil
    import subprocess
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import GaugeMetricFamily

    from slurmctl.ops.exporter import SnapshotCache, data_metrics
    from slurmctl.rundir import Run, write_stage_record

    run = Run("r-20261201-abcd", tmp_path / "r-20261201-abcd")
    run.path.mkdir()
    ds = {"hits": 5, "objects": 6, "bytes_staged": 1024, "seconds": 2.5}
    write_stage_record(run.path, "77", "h100-2", {"node": "h100-2", "job_id": "77", "datasets": [
        ds, ds, {**ds, "name": "forged", "hits": 9e17, "objects": 9e17}]})  # one dataset twice, a forged count
    write_stage_record(run.path, "77", "evil\nnode", {"node": "evil\nnode", "job_id": "77", "datasets": [ds]})
    write_stage_record(run.path, "12", "h100-1", {"node": "h100-1", "job_id": "12", "datasets": [ds]})  # old job
    write_stage_record(run.path, "77", "h100-3", {"node": "h100-3", "job_id": "77", "datasets": [
        {"hits": "nan", "objects": -1, "bytes_staged": 1e300, "seconds": float("inf")}]})  # user-written nonsense
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_stage_record(elsewhere, "78", "h100-1", {"node": "h100-1", "job_id": "78", "datasets": [ds]})
    linked = Run("r-20261201-ef01", tmp_path / "r-20261201-ef01")
    linked.path.mkdir()
    os.symlink(elsewhere / "data-stage", linked.path / "data-stage")  # read as root: never followed
    cache = SnapshotCache.__new__(SnapshotCache)  # only the staging sums are exercised here
    cache.data_by_node = {}
    cache.site = None
    me = __import__("pwd").getpwuid(os.geteuid()).pw_name
    jobs = [(run, SimpleNamespace(user=me, job_id=77)), (linked, SimpleNamespace(user=me, job_id=78)),
            (run, SimpleNamespace(user="no-such-user", job_id=77))]
    for _ in range(2):  # two snapshots see the same record: the same value, not twice it
        cache._read_staging(jobs, {"h100-1", "h100-2", "h100-3"})
    families = {f.name: f for f in data_metrics(cache.data_by_node)}
    assert all(isinstance(f, GaugeMetricFamily) for f in families.values())
    samples = {(f.name, s.labels["node"]): s.value for f in families.values() for s in f.samples}
    assert {k: v for k, v in samples.items() if k[1] == "h100-2"} == {
        ("slurmctl_data_cache_hits", "h100-2"): 5, ("slurmctl_data_cache_lookups", "h100-2"): 6,
        ("slurmctl_data_staged_bytes", "h100-2"): 1024, ("slurmctl_data_staging_seconds", "h100-2"): 2.5}
    assert {v for k, v in samples.items() if k[1] == "h100-3"} == {0}  # no NaN, inf or negative published
    class Collector:
        def collect(self):
            return data_metrics(cache.data_by_node)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    text = generate_latest(registry).decode()
    assert "# TYPE slurmctl_data_cache_hits gauge" in text and "_total" not in text
    if shutil.which("promtool") is None:
        pytest.fail("promtool is missing (deploy/local/apt-extras.txt installs prometheus)")
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    cache._read_staging([], {"h100-1", "h100-2"})  # the job ended: its node's sums leave with it
    assert cache.data_by_node == {}


def test_status_words_for_staging_and_uncached_data(tmp_path):
    from slurmctl.config.views import View
    from slurmctl.observe.data import cache_suggestion, data_note, data_summary
    from slurmctl.rundir import Run, write_stage_record

    run = Run("r-20261201-abcd", tmp_path)
    ds = {"name": "shards", "cache": "node", "objects": 6, "hits": 5, "rejected": 1, "bytes_staged": 3 * 2**20,
          "seconds": 4.2}
    write_stage_record(tmp_path, "9", "h100-1", {"node": "h100-1", "job_id": "9", "time": 1, "datasets": [ds]})
    write_stage_record(tmp_path, "9", "h100-2", {"node": "h100-2", "job_id": "9", "time": 2, "datasets": [ds]})
    summary = data_summary(run, 9)
    assert (summary["objects"], summary["hits"], summary["hit_rate"], summary["bytes_staged"]) == (12, 10, 0.8333,
                                                                                                  6 * 2**20)
    assert data_note(summary) == ("Data: shards: 83% of objects from the node cache on h100-1, h100-2; 6.0 MiB "
                                  "staged, staging took 4s; 2 bad cache entries re-staged.")
    spec = RunSpec.model_validate({"name": "x", "entrypoint": "t.py", "partition": "p", "data": [
        {"src": "s3://bkt/a/train", "cache": "none"}, {"src": "s3://bkt/a/eval"}]})
    assert "cache train on the nodes" in cache_suggestion(spec.datasets, summary)
    assert cache_suggestion([View({"name": "eval", "cache": "node"})], summary) is None
    # a run whose datasets all came from the cache is never told to cache them
    cached = RunSpec.model_validate({"name": "x", "entrypoint": "t.py", "partition": "p",
                                     "data": [{"src": "s3://bkt/a/shards"}]})
    assert cache_suggestion(cached.datasets, summary) is None
    shared = Run("r-20261201-ef01", tmp_path / "shared")
    shared.path.mkdir()
    write_stage_record(shared.path, "9", "h100-1", {"node": "h100-1", "job_id": "9", "datasets": [
        {**ds, "cache": "shared"}]})
    assert "83% of objects from the shared cache on h100-1" in data_note(data_summary(shared, 9))
    # user-written nonsense (a forged count, the same dataset twice) is not summed
    forged = Run("r-20261201-ef02", tmp_path / "forged")
    forged.path.mkdir()
    write_stage_record(forged.path, "9", "h100-1", {"node": "h100-1", "job_id": "9", "datasets": [
        ds, ds, {**ds, "name": "x", "hits": 9e17, "objects": 9e17}, {**ds, "name": "y", "bytes_staged": float("nan")}]})
    assert (data_summary(forged, 9)["objects"], data_summary(forged, 9)["datasets"]) == (6, ["shards"])


def _root_owned_cache(tmp_path: Path) -> Path:
    root = tmp_path / "cache"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)  # what deploy/local/up and the GKE init container make: root's, 0755
    return root


def test_a_users_self_published_usage_counts_for_nothing(tmp_path):
    """Only root's measure (the prolog's usage/, root-owned, not writable by others) enters the budget."""
    root = _root_owned_cache(tmp_path)
    usage = root / "usage"
    usage.mkdir(mode=0o755)
    os.chmod(usage, 0o755)
    (usage / "alice").write_text("1000 1764000000000000000\n")
    os.symlink(usage / "alice", usage / "linked")
    me = UserCache(root, SHARD)
    if os.geteuid() == 0:
        (usage / "bob").write_text("999999999999999\n")
        os.chown(usage / "bob", 65534, 65534)  # a user's own file in root's usage/: ignored
        assert me.others_bytes() == 1000
        os.chown(usage, 65534, 65534)  # usage/ made by a user (an older, world-writable root): ignored whole
        assert me.others_bytes() == 0
    else:  # the files are ours, not root's: nothing counts
        assert me.others_bytes() == 0


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the prolog's steps: chown to a second uid needs root")


@needs_root
def test_prolog_makes_the_users_directory_and_renames_a_squatters_aside(tmp_path):
    from slurmctl.ops.hooks.datacache import prepare_caches

    root = _root_owned_cache(tmp_path)
    squat = root / "victim"
    squat.mkdir(mode=0o700)
    os.chown(squat, 65534, 65534)  # another user's directory under the victim's name
    notes = prepare_caches([root], 4242, 4242, "victim")
    made = os.lstat(root / "victim")
    assert (made.st_uid, stat_mode(made)) == (4242, 0o700)
    assert any("renamed to .squatted-victim-" in n for n in notes)
    assert [p.name for p in root.iterdir() if p.name.startswith(".squatted-victim-")]
    os.symlink(tmp_path, root / "other")  # a symlink under a user's name: renamed aside too, never followed
    prepare_caches([root], 4343, 4343, "other")
    assert os.lstat(root / "other").st_uid == 4343 and (tmp_path / "cache").is_dir()
    # the user's job opens it as its own; a second prolog leaves it as it is
    prepare_caches([root], 4242, 4242, "victim")
    assert os.lstat(root / "victim").st_uid == 4242
    legacy = tmp_path / "legacy"  # what older versions made: 1777, a user's usage/ in it
    legacy.mkdir()
    os.chmod(legacy, 0o1777)
    (legacy / "usage").mkdir()
    os.chown(legacy / "usage", 65534, 65534)
    notes = prepare_caches([legacy], 4242, 4242, "victim")
    assert "tightened to 0755" in notes[0] and stat_mode(legacy.stat()) == 0o755
    assert os.lstat(legacy / "usage").st_uid == 0 and os.lstat(legacy / "victim").st_uid == 4242
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)
    assert "skipped" in prepare_caches([foreign], 4242, 4242, "victim")[0]
    assert "missing" in prepare_caches([tmp_path / "none"], 4242, 4242, "victim")[0]


@needs_root
def test_prolog_measures_usage_on_disk_by_owner(tmp_path):
    import pwd

    from slurmctl.ops.hooks.datacache import publish_usage

    root = _root_owned_cache(tmp_path)
    nobody = pwd.getpwuid(65534).pw_name
    objects = root / nobody / "objects"
    objects.mkdir(parents=True)
    for path in (root / nobody, objects):
        os.chown(path, 65534, 65534)
    (objects / "a").write_bytes(b"x" * 3 * SHARD)
    os.chown(objects / "a", 65534, 65534)
    for i in range(40):  # one file under many names is on disk once
        os.link(objects / "a", objects / f"a-{i}")
    (objects / "planted").write_bytes(b"x" * 50 * SHARD)  # not the user's own file: not the user's usage
    os.symlink(objects, root / "root")  # a symlink under another user's name counts nothing
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        totals = publish_usage(fd)
    finally:
        os.close(fd)
    assert 3 * SHARD <= totals[nobody] < 4 * SHARD and totals["root"] == 0
    published = root / "usage" / nobody
    assert int(published.read_text().split()[0]) == totals[nobody] and published.stat().st_uid == 0
    assert stat_mode(published.stat()) == 0o644 and stat_mode((root / "usage").stat()) == 0o755
    assert UserCache(root, 64 * SHARD).others_bytes() == totals[nobody]

    def measure() -> int:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return publish_usage(fd)[nobody]
        finally:
            os.close(fd)

    mtime = published.read_text().split()[1]
    published.write_text(f"5 {mtime}\n")  # root's earlier measure, its directory unchanged since: reused
    assert measure() == 5
    (objects / "e").write_bytes(b"x" * SHARD)
    os.chown(objects / "e", 65534, 65534)  # a new entry changes the directory: measured again
    assert 4 * SHARD <= measure() < 5 * SHARD


def stat_mode(st) -> int:
    import stat

    return stat.S_IMODE(st.st_mode)


def test_the_hooks_find_the_cache_dirs_in_the_site_config(tmp_path):
    from slurmctl.ops.hooks.config import _data_cache_dirs
    from slurmctl.ops.hooks.datacache import USAGE_DIR
    from slurmctl.runtime import datacache

    site = tmp_path / "site.yaml"
    site.write_text("runs_root: /r\ndata:\n  endpoint_url: http://x:1\n  node_cache_dir: /mnt/ssd/data  # NVMe\n"
                    "  node_cache_budget: 1T\n  shared_cache_dir: '/shared/data'\nother:\n  node_cache_dir: /not\n")
    assert _data_cache_dirs({"SLURMCTL_SITE_CONFIG": str(site)}) == (Path("/mnt/ssd/data"), Path("/shared/data"))
    assert _data_cache_dirs({"SLURMCTL_SITE_CONFIG": str(site), "SLURMCTL_DATA_CACHE_DIRS": "/a:rel:/b"}) == (
        Path("/a"), Path("/b"))
    assert _data_cache_dirs({"SLURMCTL_SITE_CONFIG": str(tmp_path / "none")}) == ()
    assert USAGE_DIR == datacache.USAGE_DIR  # two spellings (the hooks import no runtime module): one name


@needs_root
def test_all_users_listing_follows_no_symlink_and_trusts_no_directory_name(tmp_path):
    import json
    import pwd

    from slurmctl.observe.data import cache_listing

    root = _root_owned_cache(tmp_path)
    nobody, daemon = pwd.getpwuid(65534).pw_name, pwd.getpwuid(1).pw_name

    def user_dir(name: str, uid: int, records: dict) -> Path:
        objects = root / name / "objects"
        objects.mkdir(parents=True)
        for rel, record in records.items():
            (objects / rel).write_text(json.dumps(record))
            os.chown(objects / rel, uid, uid)
        for path in (root / name, objects):
            os.chown(path, uid, uid)
        return objects

    victim = user_dir(daemon, 1, {"a.json": {"url": "s3://b/private/a", "size": 5, "last_used": 1e9}})
    os.rename(victim, root / daemon / "real-objects")
    os.chown(root / daemon, 1, 1)
    os.symlink(root / daemon / "real-objects", root / daemon / "objects")  # a symlinked objects/: not followed
    user_dir(nobody, 65534, {"b.json": {"url": "s3://b/mine/b", "size": 7, "last_used": float("inf")},
                             "c.json": {"url": "s3://b/mine/c", "size": "huge", "last_used": "x"}})
    os.chown(root / nobody / "objects" / "c.json", 1, 1)  # a file of someone else's inside: not counted
    squat = user_dir("root", 65534, {"d.json": {"url": "s3://b/planted/d", "size": 9}})  # not root's directory
    assert squat.is_dir()
    listing = cache_listing(root, 100, all_users=True)
    assert listing["users"] == [{"user": daemon, "bytes": 0, "datasets": []}, {"user": nobody, "bytes": 7, "datasets": [
        {"src": "s3://b/mine", "objects": 1, "bytes": 7, "last_used": 0.0}]}]


# --- staging failures: one paragraph, recorded, read by status and diagnose ----------------------------------
REPO = Path(__file__).resolve().parents[2]


def _staging_run(tmp_path: Path, name: str, src: str, options: dict, budget: int = 64 * SHARD) -> Path:
    """A run dir as submit leaves it (run.json, data-plan.json) whose one dataset is `src`."""
    import json

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o1777, parents=True, exist_ok=True)
    os.chmod(cache, 0o1777)
    run_dir = tmp_path / f"{name}-20261201-abcd"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"name": name, "created": time.time()}))
    (run_dir / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": 7001}) + "\n")
    (run_dir / "data-plan.json").write_text(json.dumps({
        "datasets": [{"name": "shards", "src": src, "cache": "node", "env_var": "SLURMCTL_DATA_SHARDS", "path": ""}],
        "node_cache_dir": str(cache), "node_cache_budget": budget, "shared_cache_dir": None,
        "verify_on_reuse": True, "options": {src: options}}))
    return run_dir


def _stage_step(run_dir: Path, block_import: str | None = None):
    """The job script's staging step as a process: `python -m slurmctl.runtime.datastage stage RUN_DIR`
    (`block_import`: a module the job's Python lacks, as `import` would find it missing)."""
    import subprocess
    import sys

    # a node name no slurmd here has: the cluster's prolog kills "leftovers" of ended jobs on its node
    env = {**os.environ, "SLURM_JOB_ID": "7001", "SLURMD_NODENAME": "node-x9", "PYTHONPATH": str(REPO)}
    prelude = f"import sys; sys.modules[{block_import!r}] = None; " if block_import else "import sys; "
    code = prelude + "from slurmctl.runtime.datastage import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, "stage", str(run_dir)], capture_output=True, text=True,
                          env=env, timeout=120)


def test_every_staging_failure_is_one_paragraph_recorded_for_status_and_diagnose(s3, tmp_path, monkeypatch):
    from moto import settings as moto_settings

    from slurmctl.observe.run_diagnosis import diagnose_file
    from slurmctl.observe.status import build_status
    from slurmctl.rundir import Run
    from slurmctl.slurm.client import Job

    _, options = s3
    unreachable = {"anon": True, "client_kwargs": {"endpoint_url": "http://127.0.0.1:1"},
                   "config_kwargs": {"retries": {"max_attempts": 1}}}
    cases = [  # name, src, options, budget, module the job's Python lacks, kind, words of the fix
        ("empty", f"s3://{BUCKET}/no-such-prefix", options, 64 * SHARD, None, "empty", "Check `src`"),
        ("nobucket", "s3://no-such-bucket-x/a", options, 64 * SHARD, None, "missing", "Check `src`"),
        ("denied", f"s3://{BUCKET}/shards", options, 64 * SHARD, None, "denied", "grant read access"),
        ("down", f"s3://{BUCKET}/shards", unreachable, 64 * SHARD, None, "unreachable", "tell the operator"),
        ("nogcs", "gs://some-bucket/shards", {}, 64 * SHARD, "gcsfs", "client_missing", "slurmctl[data-gcs]"),
        ("small", f"s3://{BUCKET}/shards", options, 4 * SHARD, None, "budget", "cache: none"),
    ]
    for name, src, opts, budget, lacks, kind, fix_words in cases:
        run_dir = _staging_run(tmp_path / name, name, src, opts, budget)
        if name == "denied":  # the store checks credentials from now on: the test's keys are unknown to it
            monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
        step = _stage_step(run_dir, lacks)
        monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", float("inf"))
        said = step.stderr.strip()
        assert step.returncode == 1 and "Traceback" not in step.stderr and "\n" not in said, (name, step.stderr)
        assert said.startswith("slurmctl data: staging failed on node-x9: dataset shards (") and src in said, said
        assert fix_words in said, (name, said)
        run = Run(run_dir.name, run_dir)
        record = run.stage_records()[0]
        assert record["failed"]["kind"] == kind and record["failed"]["dataset"] == "shards", (name, record)
        # the job script's own line follows the step's, as on the cluster
        (run_dir / "logs" / "7001.out").write_text(step.stderr + "slurmctl: staging the run's datasets failed "
                                                   "(exit 1); the training did not start\n")
        status = build_status(run, Job(job_id=7001, name=name, state="FAILED", exit_code="1:0", source="sacct"))
        assert status.headline.startswith("Staging dataset shards failed on node-x9: "), (name, status.headline)
        assert fix_words in status.action and status.diagnosis["category"] == "data_staging", (name, status)
        diagnosis = diagnose_file(run_dir / "logs" / "7001.out", "FAILED", "1:0")
        assert diagnosis.category == "data_staging" and fix_words in diagnosis.hint, (name, diagnosis)
        assert "shards" in diagnosis.summary and src in diagnosis.evidence[0]


def test_a_dataset_larger_than_the_budget_evicts_nothing(s3, tmp_path):
    _, options = s3
    cache = fresh(tmp_path, budget=5 * SHARD)
    stage_dataset(dataset("other", "other"), cache, "run-a", None, options)
    with pytest.raises(CacheError) as refused:
        stage_dataset(dataset(), cache, "run-b", None, options)  # 6 shards > 5: can never fit
    assert len(cache.entries()) == 1 and not list((cache.dir / "leases").iterdir())  # `other` stays
    assert refused.value.kind == "budget" and "more than the whole cache budget" in str(refused.value)


def test_eviction_takes_nothing_when_evicting_cannot_make_room(s3, tmp_path):
    _, options = s3
    cache = fresh(tmp_path, budget=8 * SHARD)
    stage_dataset(dataset(), cache, "run-a", "4242", options)  # 6 shards, held by the current job 4242
    stage_dataset(dataset("other", "other"), cache, "run-b", None, options)  # 1 shard, held by nobody
    with pytest.raises(CacheError) as refused:
        cache.make_room(3 * SHARD, set(), "4242")  # 7 used + 3 > 8 even with `other` gone
    assert len(cache.entries()) == 7  # the unheld entry was not taken for a download that cannot fit
    assert "nothing was evicted" in str(refused.value)
    assert cache.make_room(2 * SHARD, set(), "4242") == (1, SHARD)  # one that can fit evicts


def _make_views(root: str, objects: list, rounds: int, errors) -> None:
    cache = UserCache(Path(root), 64 * SHARD)
    try:
        cache.open()
        for _ in range(rounds):
            cache.make_view("run-shared", "shards", objects)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        errors.put(f"{type(exc).__name__}: {exc}")


def test_many_processes_make_the_same_view_at_once(s3, tmp_path):
    """The nodes of a job on the shared tier each make the run's view: none fails, the view is whole."""
    import multiprocessing

    _, options = s3
    cache = fresh(tmp_path)
    stage_dataset(dataset(), cache, "run-shared", None, options)
    _, listed, _ = list_objects(f"s3://{BUCKET}/shards", options)
    objects = [obj for _, obj in listed]
    context = multiprocessing.get_context("fork")
    errors = context.Queue()
    workers = [context.Process(target=_make_views, args=(str(cache.root), objects, 25, errors)) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found and all(w.exitcode == 0 for w in workers), found
    view = cache.view_dir("run-shared", "shards")
    assert sorted(p.name for p in view.iterdir()) == [f"part-{i}.bin" for i in range(6)]
    assert (view / "part-4.bin").read_bytes() == bytes([4]) * SHARD
    # an older version's view (a real directory) is replaced by the new kind in place
    old = cache.view_dir("run-old", "shards")
    old.mkdir(parents=True)
    (old / "stale").write_text("x")
    assert sorted(p.name for p in cache.make_view("run-old", "shards", objects).iterdir())[0] == "part-0.bin"


def test_bad_data_entries_and_warm_sources_are_one_clear_error_each(tmp_path):
    from slurmctl.config.models import format_validation_error
    from slurmctl.errors import SpecError
    from slurmctl.submit.warm import warm_spec

    for bad, words in (({"src": "http://x/y"}, "`data.0.src` = 'http://x/y': write the dataset as s3://"),
                       ({"src": "s3://bkt/a", "cache": "nvme"}, "`data.0.cache` = 'nvme': Input should be 'node'"),
                       (5, "`data.0` = 5: write a path (a string) or an object-store dataset")):
        with pytest.raises(ValidationError) as exc:
            RunSpec.model_validate({"name": "x", "entrypoint": "t.py", "partition": "p", "data": [bad]})
        text = format_validation_error(exc.value, "run.yaml")
        assert words in text and "valid string" not in text and "function-after" not in text, text
        assert len(exc.value.errors()) == 1, exc.value.errors()
    site = __import__("slurmctl.config.models", fromlist=["load_site_config"]).load_site_config(
        REPO / "deploy" / "local" / "site.yaml")
    with pytest.raises(SpecError, match="SRC 'http://bad/x' is not an object-store dataset") as exc:
        warm_spec("http://bad/x", "node", "l4-dev", 1, site)
    assert "s3://bucket/prefix" in exc.value.hint and exc.value.exit_code == 2


def test_mount_without_a_container_is_refused_at_submit():
    from slurmctl.errors import SpecError
    from slurmctl.submit.submission import refuse_mount_without_image

    def spec(**extra):
        return RunSpec.model_validate({"name": "x", "entrypoint": "t.py", "partition": "p", **extra,
                                       "data": [{"src": "s3://bkt/a/shards", "mount": "/data/shards"}]})

    with pytest.raises(SpecError, match="has `mount: /data/shards`, but the run has no container") as exc:
        refuse_mount_without_image(spec(), build=False)
    assert "$SLURMCTL_DATA_SHARDS" in exc.value.hint
    refuse_mount_without_image(spec(), build=True)  # `submit --build` makes the container
    refuse_mount_without_image(spec(image="registry.example/x@sha256:" + "0" * 64), build=False)
    with pytest.raises(ValidationError, match="needs a cached dataset"):
        DataSource.model_validate({"src": "s3://bkt/a", "cache": "none", "mount": "/data/a"})


def test_data_ls_names_the_machine_each_tiers_budget_and_what_runs_staged_on_other_nodes(tmp_path):
    """A node cache is node-local: `data ls` says whose machine it lists, gives each tier its own budget,
    and lists what the user's runs staged on the other nodes (their staging records)."""
    import json
    import pwd
    import socket
    import subprocess
    import sys

    import yaml

    from slurmctl.rundir import write_stage_record

    me = pwd.getpwuid(os.geteuid()).pw_name
    site = yaml.safe_load((REPO / "deploy" / "local" / "site.yaml").read_text())
    node_root, shared_root = tmp_path / "node", tmp_path / "shared"
    for root in (node_root, shared_root):
        (root / me / "objects").mkdir(parents=True)
        os.chmod(root / me, 0o700)
    (node_root / me / "objects" / "e1.json").write_text(json.dumps(
        {"url": "s3://bkt/local/a.bin", "size": 1024, "last_used": time.time()}))
    site["runs_root"] = str(tmp_path / "runs")
    site["data"] = {**site["data"], "node_cache_dir": str(node_root), "node_cache_budget": "8G",
                    "shared_cache_dir": str(shared_root), "shared_cache_budget": "2T"}
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    run_dir = tmp_path / "runs" / me / "ds-20261201-abcd"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"name": "ds", "created": time.time()}))
    write_stage_record(run_dir, "41", "h100-2", {"node": "h100-2", "job_id": "41", "time": time.time(), "datasets": [
        {"name": "shards", "src": "s3://bkt/shards", "cache": "node", "objects": 6, "bytes_total": 3 * 2**20}]})
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLURMCTL_SITE_CONFIG": str(tmp_path / "site.yaml"),
           "COLUMNS": "200"}

    def ls(*args):
        done = subprocess.run([sys.executable, "-m", "slurmctl.cli", "data", "ls", *args], capture_output=True,
                              text=True, env=env, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout

    text = ls()
    host = socket.gethostname()
    assert f"(node-local: the cache of {host}, the machine this runs on)" in text, text
    assert "of a 8.0 GiB budget per node (data.node_cache_budget)" in text, text
    assert "of a 2.0 TiB budget for the whole tier (data.shared_cache_budget)" in text, text
    assert "s3://bkt/local" in text and "h100-2" in text and "s3://bkt/shards" in text and "3.0 MiB" in text, text
    assert "run `slurmctl data ls` there" in text
    listing = json.loads(ls("--json"))
    assert listing["host"] == host and [c["budget_bytes"] for c in listing["caches"]] == [8 * 2**30, 2 * 2**40]
    assert listing["staged_by_your_runs"][0]["node"] == "h100-2"


def _usage_of_another_user(root: Path, user: str, size: int) -> None:
    """root's published measure of another user (the prolog's usage/<user>, root-owned when run as root)."""
    usage = root / "usage"
    usage.mkdir(mode=0o755, exist_ok=True)
    (usage / user).write_text(f"{size} 1\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="usage/ counts only root's files")
def test_one_user_over_his_share_never_refuses_another(s3, tmp_path):
    """One user's bytes (a big dataset, or whatever he wrote into his own directory) count against another
    user's room only up to data.user_cache_share of the budget; a run that needs nothing more is never
    refused, however full the cache."""
    _, options = s3
    cache = fresh(tmp_path, budget=8 * SHARD)
    cache.user_share = 0.5
    _usage_of_another_user(cache.root, "bob-flood", 1000 * 8 * SHARD)
    assert cache.others_bytes() == 4 * SHARD
    first = stage_dataset(dataset("other", "other"), cache, "run-a", None, options)
    assert first.bytes_staged == SHARD
    cache.user_share = 1.0  # every user counted in full: the cache is full of bob's bytes...
    assert cache.make_room(0, set(), None) == (0, 0)  # ...but a run already in the cache needs nothing more
    again = stage_dataset(dataset("other", "other"), cache, "run-b", None, options)
    assert again.hits == 1


def test_abandoned_staging_temporaries_are_removed_and_live_ones_kept(s3, tmp_path):
    """A stager cancelled mid-download leaves .staging-<entry>-* behind: the next staging removes those
    whose entry lock nobody holds, counts live ones as the user's own, and never touches a live download."""
    from slurmctl.runtime.datacache import STAGING_PREFIX

    _, options = s3
    cache = fresh(tmp_path, budget=64 * SHARD)
    _, objects, _ = list_objects(f"s3://{BUCKET}/shards", options)
    abandoned = cache.dir / "objects" / f"{STAGING_PREFIX}{objects[0][1].entry_id}-k1ll3d"
    abandoned.write_bytes(b"x" * SHARD)
    live_id = "f" * 40
    live = cache.dir / "objects" / f"{STAGING_PREFIX}{live_id}-inflight"
    live.write_bytes(b"y" * SHARD)
    assert cache.staging_bytes() >= 2 * SHARD
    with cache.locked(live_id):  # another job downloading that entry right now
        stage_dataset(dataset(), cache, "run-a", None, options)
        assert not abandoned.exists() and live.exists()
    assert cache.clean_staging()[0] == 1 and not live.exists()  # its stager ended: abandoned too


def test_a_directory_in_place_of_an_entry_is_removed_and_restaged(s3, tmp_path):
    _, options = s3
    cache = fresh(tmp_path)
    _, objects, _ = list_objects(f"s3://{BUCKET}/shards", options)
    planted = cache.object_path(objects[2][1].entry_id)
    planted.mkdir()
    (planted / "x").write_text("hi")
    result = stage_dataset(dataset(), cache, "run-a", None, options)
    assert result.bytes_staged == 6 * SHARD and planted.is_file()
    assert (Path(result.path) / "part-2.bin").read_bytes() == bytes([2]) * SHARD


@pytest.fixture
def silent_store():
    """An endpoint that accepts connections and never answers (a hung store, a black-holing proxy)."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            with __import__("contextlib").suppress(OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_store_that_never_answers_fails_staging_by_the_deadline_naming_dataset_and_store(silent_store, tmp_path):
    import json
    import subprocess
    import sys

    from slurmctl.config.models import SiteDataConfig
    from slurmctl.observe.run_diagnosis import diagnose_file
    from slurmctl.observe.status import build_status
    from slurmctl.rundir import Run
    from slurmctl.slurm.client import Job

    options = {"key": "k", "secret": "s", **SiteDataConfig(endpoint_url=silent_store).client_options("s3://b/p")}
    run_dir = _staging_run(tmp_path, "hung", f"s3://{BUCKET}/shards", options)
    plan = json.loads((run_dir / "data-plan.json").read_text())
    (run_dir / "data-plan.json").write_text(json.dumps({**plan, "staging_timeout": 6}))
    run = Run(run_dir.name, run_dir)
    (run_dir / "run.yaml").write_text(f"name: hung\nentrypoint: t.py\npartition: p\ndata: [{{src: 's3://{BUCKET}/shards'}}]\n")
    # before the staging step reports at all (srun starting it), the job is not training either
    early = build_status(run, Job(job_id=7001, name="hung", state="RUNNING", nodelist="node-x9"))
    assert early.headline.startswith("Starting: the run's datasets are staged"), early.headline
    started = time.monotonic()
    # a node name no slurmd here has: the cluster's prolog kills "leftovers" of ended jobs on its node
    env = {**os.environ, "SLURM_JOB_ID": "7001", "SLURMD_NODENAME": "node-x9", "PYTHONPATH": str(REPO)}
    step = subprocess.Popen([sys.executable, "-m", "slurmctl.runtime.datastage", "stage", str(run_dir)], env=env,
                            stderr=subprocess.PIPE, text=True)
    while not run.stage_records() and time.monotonic() - started < 5:
        time.sleep(0.1)
    # while it waits on the store, status says the job is staging data, not that the training runs
    live = build_status(run, Job(job_id=7001, name="hung", state="RUNNING", nodelist="node-x9"))
    assert live.headline == ("Staging data before the training starts: dataset shards on node-x9: listing the store's "
                             "objects."), live.headline
    # a job ended under a staging step that never finished (its time limit): the staging is the news
    ended = build_status(run, Job(job_id=7001, name="hung", state="TIMEOUT", exit_code="0:0", source="sacct"))
    assert ended.headline.startswith("The job ended (TIMEOUT) while staging dataset shards on node-x9"), ended.headline
    assert f"(the store at {silent_store})" in ended.headline and "raise `time_limit`" in ended.action
    cancelled = build_status(run, Job(job_id=7001, name="hung", state="CANCELLED", exit_code="0:15", source="sacct"))
    assert cancelled.headline.startswith("The job ended (CANCELLED) while staging") and cancelled.action.startswith(
        "Submit it again: the objects already downloaded stay"), cancelled.action
    (run_dir / "logs" / "7001.out").write_text("slurmstepd: error: *** JOB 7001 CANCELLED DUE TO TIME LIMIT ***\n")
    diagnosis = diagnose_file(run_dir / "logs" / "7001.out", "TIMEOUT", "0:0")
    assert diagnosis.category == "data_staging" and "never started" in diagnosis.summary, diagnosis
    _, stderr = step.communicate(timeout=60)
    took = time.monotonic() - started
    assert step.returncode == 1 and took < 45, (took, stderr)  # the 6 s deadline, on a crowded machine
    said = stderr.strip()
    assert "Traceback" not in said and "\n" not in said and "dataset shards" in said and silent_store in said, said
    assert "data.staging_timeout" in said
    failed = Run(run_dir.name, run_dir).stage_records()[0]["failed"]
    assert failed["kind"] == "timeout" and "staging" not in Run(run_dir.name, run_dir).stage_records()[0]


def test_the_submit_check_of_a_silent_store_says_so_in_seconds(silent_store, tmp_path):
    """submit's data check against a store that accepts and never answers: a warning naming the store after
    a few seconds (the submit goes on: the staging step has its own timeouts), not minutes of retries."""
    from slurmctl.config.models import SiteDataConfig
    from slurmctl.submit.preflight.files import STORE_CHECK_SECONDS, check_data

    spec = RunSpec.model_validate({"name": "x", "entrypoint": "t.py", "partition": "p",
                                   "data": [{"src": f"s3://{BUCKET}/shards"}]})
    site = SiteDataConfig(endpoint_url=silent_store, storage_options={"anon": True})
    started = time.monotonic()
    result = check_data(spec, tmp_path, site)
    took = time.monotonic() - started
    assert took < STORE_CHECK_SECONDS + 5, took
    [finding] = result.findings
    assert (finding.code, finding.level) == ("store-not-answering", "warning")
    assert silent_store in finding.message and "did not answer" in finding.message and "submitting anyway" in (
        finding.message)


def test_warm_of_a_missing_prefix_speaks_of_src_not_run_yaml(s3, tmp_path, monkeypatch):
    from slurmctl.config.models import SiteDataConfig, load_site_config
    from slurmctl.errors import PreflightError, PreflightFailed
    from slurmctl.submit import warm as warm_module
    from slurmctl.submit.preflight import PreflightReport
    from slurmctl.submit.preflight.files import check_data

    _, options = s3
    endpoint = options["client_kwargs"]["endpoint_url"]
    site = load_site_config(REPO / "deploy" / "local" / "site.yaml")
    site = site.model_copy(update={"data": SiteDataConfig(endpoint_url=endpoint, storage_options={
        "key": "unit", "secret": "unit"})})

    def submit_with_the_real_data_check(path, site, client, options):
        report = PreflightReport()
        spec = RunSpec.model_validate(__import__("yaml").safe_load(Path(path).read_text()))
        report.add(check_data(spec, Path(path).parent, site.data))
        raise PreflightFailed(report)

    monkeypatch.setattr(warm_module, "submit", submit_with_the_real_data_check)
    with pytest.raises(PreflightError) as refused:
        warm_module.warm(f"s3://{BUCKET}/no-such-prefix", "l4-dev", 1, site, None, tmp_path)
    said = f"{refused.value.message} {refused.value.hint}"
    assert "does not exist" in said and "Check SRC" in said and refused.value.exit_code == 2
    assert "run.yaml" not in said and "--force" not in said, said


def test_data_ls_prints_a_record_url_as_one_line_of_text(tmp_path):
    import json
    import pwd

    from slurmctl.observe.data import cache_listing

    root = _root_owned_cache(tmp_path)
    me = pwd.getpwuid(os.geteuid()).pw_name
    objects = root / me / "objects"
    objects.mkdir(parents=True, mode=0o700)
    os.chmod(root / me, 0o700)
    (objects / "e1.json").write_text(json.dumps({"url": "s3://b/FAKE\nalice  99  1 GiB\x1b]2;x\x07/obj", "size": 5}))
    [user] = cache_listing(root, SHARD)["users"]
    [ds] = user["datasets"]
    assert "\n" not in ds["src"] and "\x1b" not in ds["src"] and "\x07" not in ds["src"], ds
