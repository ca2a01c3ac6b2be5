"""Object-store datasets on the real cluster, against the local S3 store (deploy/local/s3-up) named in
site.yaml `data:`: a 4-element sweep on one node stages the data once; alice's cache is hers alone
(bob can neither read it nor reuse it); an entry alice's later run finds corrupted is re-staged and
never read; status and `data ls` show it.

Each test loads shards under a prefix of its own (deploy/local/s3_shards.py: deterministic bytes), so
the node cache starts cold for it, and the training checks every byte it reads against them."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from .conftest import as_user, wait_for_state, write_run

REPO = Path(__file__).resolve().parents[2]
SHARDS, SHARD_BYTES = 6, 256 * 1024

TRAIN_PY = '''"""Reads every file of $SLURMCTL_DATA_SHARDS and checks it against the store's synthetic shard."""
import random
from slurmctl.runtime import Runtime
from slurmctl.runtime.datacache import open_dataset
rt = Runtime.from_env()
dataset = open_dataset("shards")
good = 0
for step, name in enumerate(rt.data(dataset.files, prefetch=2)):
    index = int(name.rsplit("-", 1)[1].split(".")[0])
    with dataset.open(name) as fh:
        body = fh.read()
    assert body == random.Random(index).randbytes(len(body)), name
    good += 1
    rt.log(step, files=good)
print(f"verified {good} files from {dataset.location}", flush=True)
'''


@pytest.fixture(scope="module")
def store(cluster):
    if not cluster.data.endpoint_url:
        pytest.fail("site.yaml names no object store (data.endpoint_url); run deploy/local/up (it starts s3-up)")
    return cluster.data


def load_shards(store) -> str:
    prefix = f"it-{uuid.uuid4().hex[:8]}"
    subprocess.run([sys.executable, str(REPO / "deploy" / "local" / "s3_shards.py"), "--endpoint",
                    store.endpoint_url, "--bucket", "slurmctl-datasets", "--prefix", prefix, "--shards", str(SHARDS),
                    "--shard-mb", str(SHARD_BYTES / 2**20)], check=True, capture_output=True, timeout=120)
    return f"s3://slurmctl-datasets/{prefix}"


def spec(name: str, src: str) -> dict:
    return {"name": name, "entrypoint": "train.py", "partition": "h100-ondemand", "gpus_per_node": 0,
            "time_limit": "10m", "data": [{"src": src, "cache": "node", "name": "shards"}]}


def stage_of(run_dir: Path) -> list[dict]:
    return [ds for p in sorted((run_dir / "data-stage").glob("stage-*.json"))
            for ds in json.loads(p.read_text())["datasets"]]


def log_of(run_dir: Path) -> str:
    return "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))


def submit_and_finish(user, workdir: Path, name: str, src: str) -> Path:
    path = write_run(workdir / name, spec(name, src), {"train.py": TRAIN_PY})
    out = user.slurmctl_json("submit", path, "--", "--nodelist=h100-2")
    wait_for_state(out["run_id"], {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=300, user=user.name)
    run_dir = Path(out["run_dir"])
    assert f"verified {SHARDS} files" in log_of(run_dir), log_of(run_dir)[-3000:]
    return run_dir


def test_a_four_element_sweep_on_one_node_stages_the_data_once(store, workdir):
    src = load_shards(store)
    path = write_run(workdir / "sweep", {**spec("data-sweep", src), "args": ["--seed", "0"]},
                     {"train.py": TRAIN_PY})
    alice = as_user("alice")
    sweep = alice.slurmctl_json("sweep", path, "--grid", "seed=1,2,3,4", "--max-parallel", "4",
                                "--", "--nodelist=h100-2")
    root = Path(sweep["sweep_dir"]).parent
    dirs = [root / e["run_id"] for e in sweep["elements"]]
    for element in sweep["elements"]:
        wait_for_state(element["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=400)
    stages = [stage_of(d) for d in dirs]
    assert all(len(s) == 1 for s in stages), stages
    assert sum(s[0]["bytes_staged"] for s in stages) == SHARDS * SHARD_BYTES  # one download per object
    assert sum(s[0]["hits"] for s in stages) == 3 * SHARDS
    for d in dirs:
        assert f"verified {SHARDS} files" in log_of(d), log_of(d)[-3000:]


def test_bob_can_neither_read_nor_reuse_alices_cache(store, workdir, user_dir):
    src = load_shards(store)
    alice, bob = as_user("alice"), as_user("bob")
    run_dir = submit_and_finish(alice, workdir, "data-alice", src)
    view = Path(stage_of(run_dir)[0]["path"])
    cache_user_dir = view.parents[2]
    assert cache_user_dir.name == "alice" and oct(cache_user_dir.stat().st_mode & 0o777) == "0o700"
    for attempt in (["ls", str(cache_user_dir)], ["cat", str(next(view.iterdir()))],
                    ["touch", str(cache_user_dir / "objects" / "planted")]):
        result = bob.run(attempt)
        assert result.returncode != 0 and "Permission denied" in result.stderr, (attempt, result)
    bob_run = submit_and_finish(bob, user_dir("bob"), "data-bob", src)
    bob_stage = stage_of(bob_run)[0]
    assert (bob_stage["hits"], bob_stage["bytes_staged"]) == (0, SHARDS * SHARD_BYTES)  # his own copy
    assert Path(bob_stage["path"]).parents[2].name == "bob"
    listing = json.loads(bob.slurmctl("data", "ls", "--json").stdout)
    assert {u["user"] for tier in listing["caches"] for u in tier["users"]} == {"bob"}
    # the node this run staged on (bob's other runs on the shared cluster may have staged elsewhere)
    assert {e["node"] for e in listing["staged_by_your_runs"] if e["run"] == bob_run.name} == {"h100-2"}


def test_a_corrupted_entry_is_restaged_and_never_read(store, workdir):
    src = load_shards(store)
    alice = as_user("alice")
    first = submit_and_finish(alice, workdir, "data-first", src)
    view = Path(stage_of(first)[0]["path"])
    victim = (view / "shard-00003.bin").resolve()
    # Alice damages her own entry (same size): what a bad disk or a stray write would do.
    alice.run(["sh", "-c", f"chmod u+w {victim} && printf X | dd of={victim} bs=1 seek=10 conv=notrunc"],
              check=True)
    second = submit_and_finish(alice, workdir, "data-second", src)  # its training verifies every byte
    stage = stage_of(second)[0]
    assert (stage["hits"], stage["rejected"], stage["bytes_staged"]) == (SHARDS - 1, 1, SHARD_BYTES), stage
    status = alice.slurmctl("status", second.name).stdout
    assert "1 bad cache entry re-staged" in status and "83% of objects from the node cache" in status, status
    assert "Data loading over the run: rank 0 spent" in status, status  # the ended run's data wait


@pytest.fixture
def small_cache():
    """A site.yaml copy (readable by the users) whose node cache is a fresh 1777 dir of 1.5 datasets."""
    base = Path(tempfile.mkdtemp(prefix="slurmctl-evict-", dir="/tmp"))
    os.chmod(base, 0o755)
    cache = base / "cache"
    cache.mkdir()
    os.chmod(cache, 0o1777)
    site = yaml.safe_load(Path(os.environ.get("SLURMCTL_SITE_CONFIG", "/etc/slurmctl/site.yaml")).read_text())
    budget = SHARDS * SHARD_BYTES * 3 // 2
    site["data"] = {**site["data"], "node_cache_dir": str(cache), "node_cache_budget": str(budget)}
    (base / "site.yaml").write_text(yaml.safe_dump(site))
    os.chmod(base / "site.yaml", 0o644)
    yield cache, budget, {"SLURMCTL_SITE_CONFIG": str(base / "site.yaml")}
    shutil.rmtree(base, ignore_errors=True)


def test_eviction_keeps_the_budget_and_never_takes_a_running_jobs_data(store, workdir, small_cache):
    """While alice's first job runs (holding dataset A), a second dataset does not fit the budget and its
    job stops at staging with the budget in its log; once the first job has ended, the same run evicts
    A's entries and stages."""
    cache, budget, env = small_cache
    alice = as_user("alice")
    first_src, second_src = load_shards(store), load_shards(store)
    holder = write_run(workdir / "holder", spec("data-holder", first_src),
                       {"train.py": TRAIN_PY + "import time\ntime.sleep(45)\n"})
    held = alice.slurmctl_json("submit", holder, "--", "--nodelist=h100-2", env=env)
    held_dir = Path(held["run_dir"])
    deadline = time.monotonic() + 240
    while not list((held_dir / "data-stage").glob("stage-*.json")):
        assert time.monotonic() < deadline, log_of(held_dir)[-3000:]
        time.sleep(2)
    second = write_run(workdir / "second", spec("data-second-ds", second_src), {"train.py": TRAIN_PY})
    refused = alice.slurmctl_json("submit", second, "--", "--nodelist=h100-2", env=env)
    state = wait_for_state(refused["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=300)
    refused_log = log_of(Path(refused["run_dir"]))
    assert state["state"] == "FAILED" and "budget" in refused_log and "verified" not in refused_log, refused_log[-3000:]
    assert "nothing was evicted" in refused_log and "Traceback" not in refused_log, refused_log[-3000:]
    assert len(list((cache / "alice" / "objects").glob("*.json"))) == SHARDS  # the running job's data untouched
    # status and diagnose say it in words: the dataset, the cause, what to do
    status = alice.slurmctl_json("status", refused["run_id"], env=env)
    assert status["headline"].startswith("Staging dataset shards failed on h100-2: the dataset needs"), status
    assert "cache: none" in status["action"] and status["diagnosis"]["category"] == "data_staging", status
    diagnosis = alice.slurmctl_json("diagnose", refused["run_id"], env=env)
    assert diagnosis["category"] == "data_staging" and "data.node_cache_budget" in diagnosis["hint"], diagnosis
    wait_for_state(held["run_id"], {"COMPLETED", "FAILED"}, timeout=300)
    again = alice.slurmctl_json("submit", second, "--", "--nodelist=h100-2", env=env)
    wait_for_state(again["run_id"], {"COMPLETED", "FAILED"}, timeout=300)
    stage = stage_of(Path(again["run_dir"]))[0]
    assert stage["evicted"] >= SHARDS // 2 and stage["bytes_staged"] == SHARDS * SHARD_BYTES, stage
    used = sum(p.stat().st_size for p in (cache / "alice" / "objects").iterdir() if not p.name.endswith(".json"))
    assert used <= budget


@pytest.fixture
def legacy_cache():
    """A site.yaml copy whose node cache is what older versions made, 1777 (every user could make names in
    it), with room for 2 datasets."""
    base = Path(tempfile.mkdtemp(prefix="slurmctl-squat-", dir="/tmp"))
    os.chmod(base, 0o755)
    cache = base / "cache"
    cache.mkdir()
    os.chmod(cache, 0o1777)
    site = yaml.safe_load(Path(os.environ.get("SLURMCTL_SITE_CONFIG", "/etc/slurmctl/site.yaml")).read_text())
    site["data"] = {**site["data"], "node_cache_dir": str(cache), "node_cache_budget": str(2 * SHARDS * SHARD_BYTES)}
    (base / "site.yaml").write_text(yaml.safe_dump(site))
    os.chmod(base / "site.yaml", 0o644)
    yield cache, {"SLURMCTL_SITE_CONFIG": str(base / "site.yaml")}
    shutil.rmtree(base, ignore_errors=True)


def test_bob_can_neither_take_carols_cache_name_nor_poison_alices_budget(store, workdir, user_dir, legacy_cache):
    """bob squats carol's cache directory, publishes a huge usage of his own, hard-links one file under many
    names and fills his own directory past the whole budget; the prolog's root step
    (slurmctl/ops/hooks/datacache.py, run here as root on this cache: the cluster's prolog reads the
    cluster's site.yaml, not this copy) renames the squat aside, tightens the root and measures usage
    itself; carol's and alice's jobs then stage on the real cluster, and bob can plant nothing more."""
    from slurmctl.ops.hooks.datacache import prepare_caches

    cache, env = legacy_cache
    alice, bob, carol = as_user("alice"), as_user("bob"), as_user("carol")
    # his own entries: 1 MiB of data and a sparse file that claims 1 TiB; then a squat and a self-report
    bob.run(["sh", "-c", f"mkdir -m700 {cache}/bob {cache}/bob/objects {cache}/carol {cache}/usage && "
                         f"head -c 1048576 /dev/zero > {cache}/bob/objects/a && "
                         f"truncate -s 1T {cache}/bob/objects/b && "
                         f"chmod 1777 {cache}/usage && echo 999999999999999 > {cache}/usage/bob"], check=True)
    notes = [n for user in (alice, carol)  # what the prolog does at each of their jobs' start
             for n in prepare_caches([cache], user.uid, user.gid, user.name)]
    assert any("renamed to .squatted-carol-" in n for n in notes), notes
    assert oct(cache.stat().st_mode & 0o7777) == "0o755" and cache.stat().st_uid == 0
    assert (os.lstat(cache / "carol").st_uid, oct(os.lstat(cache / "carol").st_mode & 0o777)) == (carol.uid, "0o700")
    usage = cache / "usage"
    assert usage.stat().st_uid == 0 and oct(usage.stat().st_mode & 0o7777) == "0o755"
    # root's measure of what bob's files hold on disk: the 1 MiB, not the sparse terabyte, his own claim or
    # 40 more names of the same file (hard links)
    bob.run(["sh", "-c", f"for i in $(seq 40); do ln {cache}/bob/objects/a {cache}/bob/objects/a-$i; done"],
            check=True)
    prepare_caches([cache], alice.uid, alice.gid, alice.name)
    assert 2**20 <= int((usage / "bob").read_text().split()[0]) < 2 * 2**20 and (usage / "bob").stat().st_uid == 0
    # real bytes beyond the whole budget: bob counts against the others only up to his share of it
    bob.run(["sh", "-c", f"head -c {3 * SHARDS * SHARD_BYTES} /dev/urandom > {cache}/bob/objects/c"], check=True)
    prepare_caches([cache], alice.uid, alice.gid, alice.name)
    assert int((usage / "bob").read_text().split()[0]) > 2 * SHARDS * SHARD_BYTES
    # and a download a cancelled job of alice's left half-written: her next staging removes it
    abandoned = cache / "alice" / "objects" / f".staging-{'a' * 40}-cancelled"
    alice.run(["sh", "-c", f"mkdir -p -m700 {abandoned.parent} && head -c 1048576 /dev/zero > {abandoned}"],
              check=True)
    for attempt in (["mkdir", f"{cache}/dave"], ["sh", "-c", f"echo 999999999999999 > {usage}/bob"],
                    ["rm", "-f", f"{usage}/alice"]):
        result = bob.run(attempt)
        assert result.returncode != 0 and "Permission denied" in result.stderr, (attempt, result)
    src = load_shards(store)
    for user in (alice, carol):
        path = write_run(workdir / f"squat-{user.name}" if user is alice else user_dir("carol") / "squat",
                         spec(f"data-{user.name}-own", src), {"train.py": TRAIN_PY})
        out = user.slurmctl_json("submit", path, "--", "--nodelist=h100-2", env=env)
        wait_for_state(out["run_id"], {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=300, user=user.name)
        run_dir = Path(out["run_dir"])
        assert f"verified {SHARDS} files" in log_of(run_dir), log_of(run_dir)[-3000:]
        stage = stage_of(run_dir)[0]
        assert Path(stage["path"]).parents[2] == cache / user.name and stage["bytes_staged"] == SHARDS * SHARD_BYTES
        assert stage["evicted"] == 0, stage  # bob's claimed 999999999999999 bytes counted for nothing
    assert not abandoned.exists()
