"""Stage a run's object-store datasets into the node cache before the training starts (run.yaml
`data: [{src: ...}]`).

The job script runs `python -m slurmctl.runtime.datastage stage RUN_DIR` as one srun task per node,
before the training step. It lists the dataset's objects, and for each object reuses the node's
cached copy (after checking it) or downloads it, then exposes the dataset at a stable per-run path
(the job script exports it as $SLURMCTL_DATA_<NAME>). Later attempts, later runs and the other
elements of a sweep on the node find the same entries. What it did on each node is recorded in the
run dir (rundir.write_stage_record); so is a failure (`failed`: kind, dataset, problem, fix), which it
also prints as one paragraph before exiting 1, for status and diagnose (observe/data.py) to read.

The cache store it fills (layout, checks, leases, eviction) is slurmctl/runtime/datacache.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmctl import rundir
from slurmctl.durations import human_duration
from slurmctl.fsutil import human_bytes, read_json
from slurmctl.runtime.datacache import CacheError, UserCache, list_objects

DOWNLOAD_THREADS = 4
PROGRESS_SECONDS = 5.0  # how often the run's record says how far staging got


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



def stage_dataset(dataset: dict, cache: UserCache, run_id: str, job_id: str | None, options: dict,
                  progress=None) -> StageStats:
    """Stage one dataset into `cache`; `progress(stats)` is called as objects arrive (the run's record)."""
    stats = StageStats(name=dataset["name"], src=dataset["src"], cache=dataset["cache"])
    started = time.monotonic()
    cache.clean_staging()  # what a cancelled or preempted stager of this user left half-written
    if progress:
        progress(stats)
    fs, objects, stats.skipped_keys = list_objects(dataset["src"], options)
    if not objects:
        raise CacheError("the store lists no objects under this prefix", kind="empty",
                         fix="Check `src` in run.yaml `data:` (bucket and prefix, e.g. with `aws s3 ls` or "
                             "`gcloud storage ls`)")
    stats.objects = len(objects)
    stats.bytes_total = sum(obj.size for _, obj in objects)
    if progress:
        progress(stats)  # listed: how much there is to check or download
    if stats.bytes_total > cache.budget:  # decided from the listing, before anything is held or evicted
        raise CacheError(f"the dataset holds {human_bytes(stats.bytes_total)} in {stats.objects} objects, more than "
                         f"the whole cache budget of {human_bytes(cache.budget)} ({cache.budget_setting}): it can "
                         "never fit, so nothing was evicted", kind="budget",
                         fix=f"Use `cache: none` for it (the training reads the store), a smaller prefix, or ask the "
                             f"operator for a larger {cache.budget_setting}")
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
    pool = ThreadPoolExecutor(DOWNLOAD_THREADS)
    try:
        for outcome, staged, verify in pool.map(one, objects):
            stats.verify_seconds += verify
            stats.bytes_staged += staged
            if outcome == "hit":
                stats.hits += 1
            else:
                stats.misses += 1
                stats.rejected += outcome == "rejected"
            if progress:
                progress(stats)
    finally:
        # a failure must not wait for downloads still in flight (a store that stopped answering)
        pool.shutdown(wait=False, cancel_futures=True)
    stats.path = str(cache.make_view(run_id, dataset["name"], [obj for _, obj in objects]))
    stats.seconds = round(time.monotonic() - started, 3)
    stats.verify_seconds = round(stats.verify_seconds, 3)
    return stats


def cache_root(plan: dict, policy: str) -> tuple[Path, int, str]:
    """(directory, budget in bytes, the site.yaml key of that budget) of a cache tier."""
    if policy == "shared":
        budget = plan.get("shared_cache_budget") or plan["node_cache_budget"]
        return Path(plan["shared_cache_dir"]), int(budget), "data.shared_cache_budget"
    return Path(plan["node_cache_dir"]), int(plan["node_cache_budget"]), "data.node_cache_budget"


# Why a dataset could not be staged, by the exception that stopped it: (kind, what happened, what to do).
# The object-store clients (botocore, aiohttp, google-auth) are imported only by fsspec, so their errors
# are known here by class name.
_UNREACHABLE = {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                "ClientConnectorError", "ServerTimeoutError", "ClientOSError", "TransportError",
                "ConnectionError", "ConnectionRefusedError", "TimeoutError"}
_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError", "RefreshError"}


def explain_failure(exc: BaseException, dataset: dict, plan: dict) -> dict:
    """One staging failure as the run's record keeps it: kind, the dataset, what happened, what to do."""
    src, name = dataset.get("src", "?"), dataset.get("name", "?")
    names = {cls.__name__ for cls in type(exc).__mro__}
    endpoint = (plan.get("options", {}).get(src, {}).get("client_kwargs") or {}).get("endpoint_url")
    where = f"the object store at {endpoint} (site.yaml data.endpoint_url)" if endpoint else (
        "Google Cloud Storage" if src.startswith("gs://") else "the object store")
    if isinstance(exc, CacheError):
        kind, problem, fix = exc.kind, str(exc), exc.fix
    elif isinstance(exc, StagingTimeout):
        kind, problem = "timeout", f"{where} did not finish serving it within {exc} (site.yaml data.staging_timeout)"
        fix = ("Retry later; if it repeats, tell the operator: the store is not answering or too slow from the "
               "nodes (check data.endpoint_url), or data.staging_timeout is too short for a dataset this large")
    elif isinstance(exc, ImportError):
        client, extra = ("gcsfs", "data-gcs") if src.startswith("gs://") else ("s3fs", "data")
        kind = "client_missing"
        problem = (f"the job's Python ({sys.executable}) has no {client}, the client for {src.split('://')[0]}:// "
                   f"object stores ({exc})")
        fix = (f"Install it where the job runs: `pip install 'slurmctl[{extra}]'` in that environment, or set "
               "`python:`/`image:` in run.yaml to one that has it")
    elif names & _NO_CREDENTIALS:
        kind, problem = "denied", f"the node has no credentials for {where} ({type(exc).__name__}: {exc})"
        fix = ("Ask the operator to give the nodes an identity that may read the bucket (workload identity, "
               "an instance role), or to set storage_options {anon: true} in site.yaml for a public bucket")
    elif isinstance(exc, PermissionError):
        kind, problem = "denied", f"{where} refused access ({exc})"
        fix = ("Ask the bucket's owner to grant read access to the nodes' identity, or check `src` names the "
               "bucket you meant")
    elif isinstance(exc, FileNotFoundError):
        kind, problem = "missing", f"{where} has no such bucket or object ({exc})"
        fix = "Check `src` in run.yaml `data:` (bucket and prefix), e.g. with `aws s3 ls` or `gcloud storage ls`"
    elif names & _UNREACHABLE or isinstance(exc, ConnectionError | TimeoutError):
        kind, problem = "unreachable", f"{where} did not answer from this node ({type(exc).__name__}: {exc})"
        fix = ("Retry later; if it lasts, tell the operator: the store is down, or the nodes cannot reach it "
               "(network policy, firewall, or a wrong data.endpoint_url in site.yaml)")
    elif isinstance(exc, OSError):
        kind, problem = "io", f"reading the store or writing the cache failed ({exc})"
        fix = "Run the job again; if it repeats on this node, tell the operator the node's name"
    else:
        kind, problem = "unexpected", f"staging failed unexpectedly ({type(exc).__name__}: {exc})"
        fix = ("Run the job again; if it repeats, tell the platform team: the run dir's data-stage/ record "
               "holds the details")
    message = f"dataset {name} ({src}): {problem.rstrip('.')}." + (f" {fix}." if fix else "")
    return {"kind": kind, "dataset": name, "src": src, "problem": problem.rstrip("."), "fix": fix,
            "message": message}


class StagingTimeout(Exception):
    """The staging step ran past site.yaml data.staging_timeout."""


class StagingFailed(Exception):
    """A dataset of the run could not be staged on this node; `failure` is what the run's record keeps."""

    def __init__(self, failure: dict, node: str):
        super().__init__(failure["message"])
        self.failure, self.node = failure, node


def stage_run(run_dir: Path) -> dict:
    """Stage every cached dataset of the run's plan on this node; record what happened in the run dir,
    a failure too (`failed`: what status and diagnose read). Raises StagingFailed after recording one."""
    plan = read_json(Path(run_dir) / rundir.DATA_PLAN)
    run_id = Path(run_dir).name
    job_id = os.environ.get("SLURM_JOB_ID")
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    record = {"node": node, "job_id": job_id, "restart_count": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
              "time": time.time(), "datasets": []}
    if not isinstance(plan, dict):
        problem = f"{Path(run_dir) / rundir.DATA_PLAN} is missing or unreadable"
        record["failed"] = {"kind": "plan", "dataset": "", "src": "", "problem": problem, "fix": "Submit the run again",
                            "message": f"{problem}. Submit the run again."}
        with contextlib.suppress(OSError):
            rundir.write_stage_record(run_dir, job_id, node, record)
        raise StagingFailed(record["failed"], node)
    current: dict = {"dataset": {}}
    lock = threading.Lock()  # one writer of the record at a time: progress, the deadline, the end
    ended = threading.Event()
    last_write = [0.0]

    def progress(stats: StageStats) -> None:
        """While staging: which dataset, how far (status says the job is staging, not training)."""
        now = time.monotonic()
        done = stats.hits + stats.misses
        if now - last_write[0] < PROGRESS_SECONDS and 0 < done < stats.objects:
            return
        last_write[0] = now
        with lock:
            if ended.is_set():
                return
            options = plan.get("options", {}).get(stats.src, {})
            record["staging"] = {"dataset": stats.name, "src": stats.src, "objects": stats.objects,
                                 "endpoint": (options.get("client_kwargs") or {}).get("endpoint_url"),
                                 "objects_done": done, "bytes_total": stats.bytes_total,
                                 "bytes_staged": stats.bytes_staged, "time": time.time()}
            with contextlib.suppress(OSError):
                rundir.write_stage_record(run_dir, job_id, node, record)

    def fail(exc: BaseException) -> StagingFailed:
        with lock:
            ended.set()
            failure = explain_failure(exc, current["dataset"], plan)
            if failure["kind"] == "unexpected":
                failure["detail"] = traceback.format_exc()[-4000:]  # kept in the record, not printed
            record.pop("staging", None)
            record["failed"] = failure
            with contextlib.suppress(OSError):
                rundir.write_stage_record(run_dir, job_id, node, record)
        return StagingFailed(failure, node)

    deadline = float(plan.get("staging_timeout") or 0)

    def overdue() -> None:
        # a request that hangs can be stopped by no exception: record why, say it, end the process
        if ended.is_set():
            return
        error = fail(StagingTimeout(human_duration(deadline)))
        print(f"slurmctl data: staging failed on {node}: {error.failure['message']}", file=sys.stderr, flush=True)
        os._exit(1)

    timer = threading.Timer(deadline, overdue) if deadline > 0 else None
    if timer:
        timer.daemon = True
        timer.start()
    try:
        for dataset in plan.get("datasets", []):
            if dataset["cache"] == "none":
                continue
            current["dataset"] = dataset
            root, budget, setting = cache_root(plan, dataset["cache"])
            cache = UserCache(root, budget, verify=bool(plan.get("verify_on_reuse", True)),
                              budget_setting=setting, user_share=float(plan.get("user_cache_share") or 1.0)).open()
            stats = stage_dataset(dataset, cache, run_id, job_id, plan.get("options", {}).get(dataset["src"], {}),
                                  progress)
            record["datasets"].append({**asdict(stats), "hit_rate": round(stats.hit_rate, 4)})
    except Exception as exc:  # noqa: BLE001 - every cause becomes one paragraph in the log and the record
        raise fail(exc) from None
    finally:
        if timer:
            timer.cancel()
    with lock:
        if ended.is_set():  # the deadline fired as the last object arrived: its record stands
            raise StagingFailed(record["failed"], node)
        ended.set()
        record.pop("staging", None)
        rundir.write_stage_record(run_dir, job_id, node, record)
    return record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "stage":
        print("usage: python -m slurmctl.runtime.datastage stage RUN_DIR", file=sys.stderr)
        return 2
    try:
        record = stage_run(Path(argv[1]))
    except StagingFailed as exc:
        print(f"slurmctl data: staging failed on {exc.node}: {exc.failure['message']}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # the run dir itself could not be written
        print(f"slurmctl data: the staging record could not be written to {argv[1]} ({exc.strerror or exc}); "
              "check the run directory's filesystem and permissions, then run the job again.", file=sys.stderr)
        return 1
    for ds in record["datasets"]:
        print(f"slurmctl data: {ds['name']} on {record['node']}: {ds['objects']} objects, {ds['hits']} from cache, "
              f"{ds['bytes_staged']} bytes staged in {ds['seconds']:.1f} s ({ds['rejected']} bad entries "
              f"re-staged) -> {ds['path']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
