"""Whether a run's object-store datasets came from the node cache: the staging steps' records
(run dir data-stage/stage-<job>-<node>.json, written by slurmctl/runtime/datastage.py) summed per job."""

from __future__ import annotations

import os
import pwd
import re
import stat
from pathlib import Path

from slurmctl import rundir
from slurmctl.durations import human_duration
from slurmctl.fsutil import human_bytes
from slurmctl.rundir.pinned import PinnedDir

MAX_OBJECTS = 10_000_000  # objects of one dataset a record may claim
MAX_BYTES = 2**60  # bytes of one dataset a record may claim (no cache budget is larger)
MAX_SECONDS = 30 * 86400  # one staging step's time a record may claim
MAX_DATASETS = 64  # datasets of one record read


def _number(value, cap: float) -> float | None:
    """A number of a user-written record, or None when it is not one a staging step could have written."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value <= cap else None  # NaN and inf fail both comparisons


def staged_values(ds, budget: int | None = None) -> dict | None:
    """One dataset entry of a staging record (user-written JSON) as numbers a staging step could have
    written: non-negative, finite, hits within the objects, staged bytes within the dataset's size and
    the cache budget; None when any is not. Status and the exporter read only these."""
    if not isinstance(ds, dict):
        return None
    cap = min(budget, MAX_BYTES) if budget else MAX_BYTES
    objects, hits = _number(ds.get("objects", 0), MAX_OBJECTS), _number(ds.get("hits", 0), MAX_OBJECTS)
    rejected = _number(ds.get("rejected", 0), MAX_OBJECTS)
    total, staged = _number(ds.get("bytes_total", 0), cap), _number(ds.get("bytes_staged", 0), cap)
    seconds = _number(ds.get("seconds", 0.0), MAX_SECONDS)
    if None in (objects, hits, rejected, total, staged, seconds) or hits > objects or rejected > objects:
        return None
    if total and staged > total:
        return None
    return {"name": _text(ds.get("name"), 64), "cache": _text(ds.get("cache"), 16), "objects": int(objects),
            "hits": int(hits), "rejected": int(rejected), "bytes_total": int(total), "bytes_staged": int(staged),
            "seconds": seconds}


def record_datasets(record: dict, budget: int | None = None) -> list[dict]:
    """The valid dataset entries of one staging record, each dataset name once."""
    out, names = [], set()
    datasets = record.get("datasets") if isinstance(record.get("datasets"), list) else []
    for ds in datasets[:MAX_DATASETS]:
        values = staged_values(ds, budget)
        if values is not None and values["name"] not in names:
            names.add(values["name"])
            out.append(values)
    return out


def data_summary(run: rundir.Run, job_id: int | None) -> dict | None:
    """Totals of the latest job's staging (every node), or of the newest job that staged anything; with
    `failed`, the staging failures of that job's newest attempt (staging_failures), and `staging`, what
    the nodes still staging have done so far (in_progress)."""
    records = run.stage_records()
    if not records:
        return None
    mine = [r for r in records if str(r.get("job_id")) == str(job_id)] or [
        r for r in records if r.get("job_id") == records[-1].get("job_id")]
    objects = hits = staged = rejected = 0
    seconds = 0.0
    names: set[str] = set()
    tiers: set[str] = set()
    for record in mine:
        for ds in record_datasets(record):
            names.add(ds["name"])
            tiers.add(ds["cache"])
            objects += ds["objects"]
            hits += ds["hits"]
            staged += ds["bytes_staged"]
            rejected += ds["rejected"]
            seconds = max(seconds, ds["seconds"])
    return {"job_id": mine[-1].get("job_id"), "nodes": sorted({_text(r.get("node"), 64) for r in mine}),
            "datasets": sorted(names), "tiers": sorted(tiers), "objects": objects, "hits": hits,
            "hit_rate": round(hits / objects, 4) if objects else None, "bytes_staged": staged,
            "staging_seconds": round(seconds, 3), "rejected": rejected,
            "failed": staging_failures(mine, mine[-1].get("job_id")),
            "staging": in_progress(mine, mine[-1].get("job_id"))}


def in_progress(records: list[dict], job_id) -> list[dict]:
    """The nodes of `job_id` whose staging step has not ended (datastage.py's `staging`: which dataset,
    how far), each field one line of text and each number one a staging step could have written."""
    out = []
    for record in records:
        now = record.get("staging")
        if str(record.get("job_id")) != str(job_id) or not isinstance(now, dict) or record.get("failed"):
            continue
        values = staged_values({"name": now.get("dataset"), "objects": now.get("objects", 0),
                                "hits": now.get("objects_done", 0), "bytes_total": now.get("bytes_total", 0),
                                "bytes_staged": now.get("bytes_staged", 0)})
        if values is None:
            continue
        out.append({"node": _text(record.get("node"), 64), "dataset": values["name"],
                    "src": _text(now.get("src"), 300), "endpoint": _text(now.get("endpoint"), 300),
                    "objects": values["objects"],
                    "objects_done": values["hits"], "bytes_total": values["bytes_total"],
                    "bytes_staged": values["bytes_staged"]})
    return out


def staging_progress(staging: list[dict]) -> str:
    """'dataset shards on h100-1: 3 of 8 objects, 75.0 MiB of 200.0 MiB downloaded' (the first node's)."""
    first = staging[0]
    if not first["objects"]:
        far = "listing the store's objects"
    else:
        far = (f"{first['objects_done']} of {first['objects']} objects checked or downloaded, "
               f"{human_bytes(first['bytes_staged'])} downloaded of {human_bytes(first['bytes_total'])}")
    others = f" (and {len(staging) - 1} more node(s))" if len(staging) > 1 else ""
    return f"dataset {first['dataset'] or '?'} on {first['node']}{others}: {far}"


def staging_headlines(staging: list[dict], ended: bool, state: str = "") -> tuple[str, str]:
    """(headline, what to do) of a job whose staging step has not ended: still at work, or the job ended
    under it (its time limit, a cancel) before the training could start."""
    where = staging_progress(staging)
    if not ended:
        return (f"Staging data before the training starts: {where}.",
                "Nothing to do; the training starts when the data is in the node cache (`slurmctl logs RUN -f`).")
    src = staging[0]["src"] + (f" (the store at {staging[0]['endpoint']})" if staging[0]["endpoint"] else "")
    headline = (f"The job ended ({state or 'Slurm stopped it'}) while staging {where} from {src}; the training never "
                "started.")
    if state in ("TIMEOUT", "DEADLINE"):
        return headline, ("The store may have stopped answering or be too slow from the nodes: retry later, and tell "
                          "the operator if it repeats (site.yaml data.endpoint_url, data.staging_timeout); for a "
                          "dataset too large to stage in the time limit, use `cache: none` or raise `time_limit`.")
    return headline, ("Submit it again: the objects already downloaded stay in the node cache, and the next staging "
                      "removes the half-written ones.")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
FAILURE_FIELDS = ("kind", "dataset", "src", "problem", "fix", "message")


def _text(value, cap: int = 1000) -> str:
    """A field of a user-written record as one line of text (no newline or control character)."""
    return _CONTROL.sub(" ", value if isinstance(value, str) else "")[:cap].strip()


def staging_failures(records: list[dict], job_id, restart_count: int | None = None) -> list[dict]:
    """The staging failures (datastage.py's `failed`) of `job_id`'s attempt `restart_count` (default: the
    newest attempt that left a record), one per node, each field one line of text."""
    of_job = [r for r in records if str(r.get("job_id")) == str(job_id)]
    counts = [r.get("restart_count") for r in of_job if isinstance(r.get("restart_count"), int)]
    if restart_count is None and counts:
        restart_count = max(counts)
    out = []
    for record in of_job:
        failed = record.get("failed")
        if not isinstance(failed, dict) or (restart_count is not None and record.get("restart_count") not in (
                None, restart_count)):
            continue
        out.append({**{k: _text(failed.get(k)) for k in FAILURE_FIELDS}, "node": _text(record.get("node"), 64)})
    return [f for f in out if f["message"]]


def failure_headline(failure: dict) -> str:
    what = f"dataset {failure['dataset']}" if failure["dataset"] else "the run's datasets"
    return (f"Staging {what} failed on {failure['node']}: {failure['problem'] or failure['message']}. The training "
            "did not start.")


def cache_suggestion(datasets, summary: dict | None = None) -> str | None:
    """For an input-bound run: the datasets it reads from the object store every epoch (`cache: none`).
    None when every dataset is cached already (its staging `summary` says so), or none is declared."""
    uncached = [str(d.name) for d in datasets or () if getattr(d, "cache", None) == "none"]
    if summary:
        uncached = [name for name in uncached if name not in summary.get("datasets", ())]
    if not uncached:
        return None
    return (f"cache {', '.join(uncached)} on the nodes (`cache: node` in run.yaml data:): it is read from the "
            "object store every epoch now")


def data_note(summary: dict) -> str:
    if summary.get("failed"):
        nodes = sorted({f["node"] for f in summary["failed"]})
        return f"Data: staging {summary['failed'][0]['dataset'] or 'the datasets'} failed on {', '.join(nodes)}."
    if summary.get("staging") and not summary["datasets"]:
        return f"Data: staging {staging_progress(summary['staging'])}."
    rate = summary["hit_rate"]
    tier = {("shared",): "the shared cache", ("node",): "the node cache"}.get(tuple(summary.get("tiers") or ()),
                                                                            "the caches")
    served = f"{100 * rate:.0f}% of objects from {tier}" if rate is not None else "no objects"
    line = (f"Data: {', '.join(summary['datasets'])}: {served} on {', '.join(summary['nodes'])}; "
            f"{human_bytes(summary['bytes_staged'])} staged, staging took {human_duration(summary['staging_seconds'])}")
    if summary["rejected"]:
        line += f"; {summary['rejected']} bad cache entr{'y' if summary['rejected'] == 1 else 'ies'} re-staged"
    return line + "."


MAX_LISTED_ENTRIES = 100_000  # per user: a bounded walk, whatever a user's directory holds
MAX_LISTED_USERS = 10_000
RECORD_CAP = 64 * 1024  # one entry's record is a few hundred bytes


def cache_listing(root: str | os.PathLike, budget: int, *, all_users: bool = False) -> dict:
    """What a cache directory holds, per user and dataset (the prefix of the objects' URLs): entries,
    bytes, last use. A researcher sees their own directory; root (`--all-users`) every user's. A user's
    directory counts only when it is a real directory owned by the user it is named after, and everything
    in it is read relative to that open directory (PinnedDir: no symlink followed, files of that user
    only, capped reads), as everywhere root reads user files."""
    root = Path(root)
    me = pwd.getpwuid(os.geteuid()).pw_name
    users = []
    try:
        with os.scandir(root) as listing:
            names = sorted(e.name for _, e in zip(range(MAX_LISTED_USERS), listing)
                           if e.is_dir(follow_symlinks=False) and not e.name.startswith(".") and e.name != "usage")
    except OSError:
        names = []
    for user in names if all_users else [n for n in names if n == me]:
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            continue
        datasets: dict[str, dict] = {}
        try:
            with PinnedDir.open(root / user, uid) as cache:
                for name, st in cache.entries("objects", MAX_LISTED_ENTRIES):
                    if not name.endswith(".json") or not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
                        continue
                    _count(datasets, cache.read_json(f"objects/{name}", RECORD_CAP))
        except OSError:  # UnsafeFile too: a symlink, or a directory someone else made under the name
            continue
        users.append({"user": user, "datasets": sorted(datasets.values(), key=lambda d: d["src"]),
                      "bytes": sum(d["bytes"] for d in datasets.values())})
    return {"root": str(root), "budget_bytes": budget, "users": users,
            "bytes": sum(u["bytes"] for u in users)}


def _count(datasets: dict[str, dict], record) -> None:
    """Add one entry's record (user-written JSON: any field may be of any type) to its dataset."""
    if not isinstance(record, dict) or not isinstance(record.get("url"), str):
        return
    size, last_used = record.get("size"), record.get("last_used")
    prefix = _text(record["url"].rsplit("/", 1)[0], 300)  # printed in root's table: one line of text
    ds = datasets.setdefault(prefix, {"src": prefix, "objects": 0, "bytes": 0, "last_used": 0.0})
    ds["objects"] += 1
    ds["bytes"] += size if isinstance(size, int) and size >= 0 else 0
    if isinstance(last_used, int | float) and 0 <= last_used < 1e10:  # a time the CLI can print (not inf, NaN)
        ds["last_used"] = max(ds["last_used"], float(last_used))


def staged_by_runs(runs: list[rundir.Run]) -> list[dict]:
    """What the given runs' staging steps left on each node (their records in the run dirs): per (node, tier,
    dataset), the newest record's objects and bytes, when and by which run. The records say what was
    staged then; eviction may have removed it since."""
    newest: dict[tuple[str, str, str], dict] = {}
    for run in runs:
        for record in run.stage_records():
            when = record.get("time") if isinstance(record.get("time"), int | float) else 0.0
            node = _text(record.get("node"), 64)
            for ds in record.get("datasets") or []:
                if not isinstance(ds, dict) or not isinstance(ds.get("src"), str):
                    continue
                key = (node, _text(ds.get("cache"), 16), _text(ds.get("src"), 300))
                if key not in newest or when >= newest[key]["time"]:
                    objects, size = ds.get("objects"), ds.get("bytes_total")
                    newest[key] = {"node": key[0], "tier": key[1], "src": key[2], "run": run.run_id,
                                   "objects": objects if isinstance(objects, int) and objects >= 0 else 0,
                                   "bytes": size if isinstance(size, int) and size >= 0 else 0,
                                   "time": float(when) if 0 <= when < 1e10 else 0.0}
    return sorted(newest.values(), key=lambda e: (e["node"], e["tier"], e["src"]))
