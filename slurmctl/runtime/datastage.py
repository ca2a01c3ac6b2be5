"""Stage a run's object-store datasets into the node cache before the training starts (run.yaml
`data: [{src: ...}]`).

The job script runs `python -m slurmctl.runtime.datastage stage RUN_DIR` as one srun task per node,
before the training step. It lists the dataset's objects, and for each object reuses the node's
cached copy (after checking it) or downloads it, then exposes the dataset at a stable per-run path
(the job script exports it as $SLURMCTL_DATA_<NAME>). Later attempts, later runs and the other
elements of a sweep on the node find the same entries. What it did on each node is recorded in the
run dir (rundir.write_stage_record).

The cache store it fills (layout, checks, leases, eviction) is slurmctl/runtime/datacache.py.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmctl import rundir
from slurmctl.fsutil import read_json
from slurmctl.runtime.datacache import CacheError, UserCache, list_objects

DOWNLOAD_THREADS = 4


@dataclass
class StageStats:
    name: str
    src: str
    cache: str
    objects: int = 0
    hits: int = 0
    misses: int = 0
    rejected: int = 0  # entries found corrupt, planted or altered: removed and staged again
    skipped_keys: int = 0
    bytes_total: int = 0
    bytes_staged: int = 0
    evicted: int = 0
    bytes_evicted: int = 0
    seconds: float = 0.0
    verify_seconds: float = 0.0
    path: str = ""

    @property
    def hit_rate(self) -> float:
        return self.hits / self.objects if self.objects else 1.0



def stage_dataset(dataset: dict, cache: UserCache, run_id: str, job_id: str | None, options: dict) -> StageStats:
    stats = StageStats(name=dataset["name"], src=dataset["src"], cache=dataset["cache"])
    started = time.monotonic()
    fs, objects, stats.skipped_keys = list_objects(dataset["src"], options)
    if not objects:
        raise CacheError(f"{dataset['src']} holds no objects (dataset {dataset['name']}); check `data:` in run.yaml")
    stats.objects = len(objects)
    stats.bytes_total = sum(obj.size for _, obj in objects)
    ids = [obj.entry_id for _, obj in objects]
    if job_id:
        cache.hold(job_id, ids)  # before any eviction below: a concurrent stager must not take these

    def one(item) -> tuple[str, int, float]:
        remote, obj = item
        with cache.locked(obj.entry_id):
            t0 = time.monotonic()
            state = cache.check(obj)
            verify = time.monotonic() - t0
            if state:
                return "hit", 0, verify
            cache.store(obj, fs, remote)
            return ("rejected" if state is False else "miss"), obj.size, verify

    missing = [item for item in objects if not cache.object_path(item[1].entry_id).exists()]
    stats.evicted, stats.bytes_evicted = cache.make_room(sum(obj.size for _, obj in missing), set(ids), job_id)
    with ThreadPoolExecutor(DOWNLOAD_THREADS) as pool:
        for outcome, staged, verify in pool.map(one, objects):
            stats.verify_seconds += verify
            stats.bytes_staged += staged
            if outcome == "hit":
                stats.hits += 1
            else:
                stats.misses += 1
                stats.rejected += outcome == "rejected"
    stats.path = str(cache.make_view(run_id, dataset["name"], [obj for _, obj in objects]))
    stats.seconds = round(time.monotonic() - started, 3)
    stats.verify_seconds = round(stats.verify_seconds, 3)
    return stats


def cache_root(plan: dict, policy: str) -> tuple[Path, int]:
    if policy == "shared":
        return Path(plan["shared_cache_dir"]), int(plan.get("shared_cache_budget") or plan["node_cache_budget"])
    return Path(plan["node_cache_dir"]), int(plan["node_cache_budget"])


def stage_run(run_dir: Path) -> dict:
    """Stage every cached dataset of the run's plan on this node; record what happened in the run dir."""
    plan = read_json(Path(run_dir) / rundir.DATA_PLAN)
    if not isinstance(plan, dict):
        raise CacheError(f"{Path(run_dir) / rundir.DATA_PLAN} is missing or unreadable; submit the run again")
    run_id = Path(run_dir).name
    job_id = os.environ.get("SLURM_JOB_ID")
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    record = {"node": node, "job_id": job_id, "restart_count": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
              "time": time.time(), "datasets": []}
    for dataset in plan.get("datasets", []):
        if dataset["cache"] == "none":
            continue
        root, budget = cache_root(plan, dataset["cache"])
        cache = UserCache(root, budget, verify=bool(plan.get("verify_on_reuse", True))).open()
        stats = stage_dataset(dataset, cache, run_id, job_id, plan.get("options", {}).get(dataset["src"], {}))
        record["datasets"].append({**asdict(stats), "hit_rate": round(stats.hit_rate, 4)})
    rundir.write_stage_record(run_dir, job_id, node, record)
    return record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "stage":
        print("usage: python -m slurmctl.runtime.datastage stage RUN_DIR", file=sys.stderr)
        return 2
    try:
        record = stage_run(Path(argv[1]))
    except CacheError as exc:
        print(f"slurmctl data: {exc}.", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"slurmctl data: staging failed: {exc}.", file=sys.stderr)
        return 1
    for ds in record["datasets"]:
        print(f"slurmctl data: {ds['name']} on {record['node']}: {ds['objects']} objects, {ds['hits']} from cache, "
              f"{ds['bytes_staged']} bytes staged in {ds['seconds']:.1f} s ({ds['rejected']} bad entries "
              f"re-staged) -> {ds['path']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
