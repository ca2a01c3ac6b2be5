"""Live health of a run, in words and numbers: network transport vs the partition's fabric, the
share of step time spent waiting for data, idle allocation, and (once it ended) how much of what
it asked for it used.

Reads what the job writes to ``<run dir>/health/`` (slurmctl.runtime.health) through ``Run``'s capped,
non-blocking readers (pinned to the directory's fd for root); `status` and the exporter share ``read_live``. Standard
library only at import: `status` imports it at call time and stays light.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field

from slurmctl import rundir
from slurmctl.durations import human_duration
from slurmctl.runtime.health import transport_class

# A quarter of every step spent waiting for the next batch is a quarter of the GPUs' time bought for
# nothing; prefetching loaders sit well under 10%. Below MIN_BATCHES the share is noise.
INPUT_BOUND_SHARE = 0.25
MIN_BATCHES = 5
MAX_RANK_FILES = 1024  # read per status (16 ms for 1024 files, measured); more ranks: the first 1024 by name
# Fabrics faster than TCP sockets, and the NCCL transport class each should give (runtime/health.py).
FAST_FABRICS = {"infiniband": "ib", "roce": "ib", "efa": "efa", "tcpx": "tcpx", "tcpxo": "tcpx"}
_FABRIC_NAMES = {"infiniband": "InfiniBand", "roce": "RoCE", "efa": "EFA", "tcpx": "GPUDirect-TCPX",
                 "tcpxo": "GPUDirect-TCPXO", "ethernet": "Ethernet"}
_FABRIC_FIX = {
    "ib": "remove NCCL_IB_DISABLE=1 from run.yaml env and the site's nccl_env, check NCCL_IB_HCA names the "
          "node's HCAs (`ibv_devinfo`), and that a container sees /dev/infiniband and has libibverbs",
    "efa": "put the aws-ofi-nccl plugin in the image (libnccl-net.so on LD_LIBRARY_PATH) with FI_PROVIDER=efa, "
           "and check `fi_info -p efa` on the node",
    "tcpx": "load the GPUDirect-TCPX(O) NCCL net plugin (NCCL_NET_PLUGIN / LD_LIBRARY_PATH) and check that the "
            "node's receive-datapath sidecar runs",
}
TRANSPORT_WORDS = {"socket": "NCCL over TCP sockets", "ib": "NCCL over InfiniBand/RoCE verbs",
                   "efa": "NCCL over EFA (libfabric)", "tcpx": "NCCL over GPUDirect-TCPX",
                   "gloo-tcp": "gloo over TCP", "other": "another transport", "unknown": "unknown"}


@dataclass
class LiveHealth:
    ranks_reporting: int = 0
    world_size: int | None = None
    transports: dict[str, int] = field(default_factory=dict)  # class -> ranks
    networks: dict[str, int] = field(default_factory=dict)  # NCCL's own name ("IB", "Socket") -> ranks
    evidence: str | None = None
    fabric: str | None = None
    fallback: bool = False  # sockets/gloo although the partition has a faster fabric
    input_wait_share: float | None = None  # the worst rank's, over its last window
    input_wait_rank: int | None = None
    input_wait_mean: float | None = None
    input_bound: bool = False
    idle: dict | None = None  # idle.json of this job
    notes: list[str] = field(default_factory=list)  # what status prints, one line each
    suggestions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _rank_files(run: rundir.Run, job_id) -> list[dict]:
    return [r for r in run.health_records(MAX_RANK_FILES) if job_id is None or str(r.get("job_id")) == str(job_id)]


def _share_of(record: dict, whole_run: bool = False) -> tuple[float, int] | None:
    """A rank's share of step time spent waiting for data: over its last window (live), else or with
    `whole_run` over everything it read."""
    data = record.get("data") if isinstance(record.get("data"), dict) else {}
    for part in ((data,) if whole_run else (data.get("window"), data)):
        if isinstance(part, dict) and isinstance(part.get("wait_share"), (int, float)) \
                and int(part.get("batches") or 0) >= MIN_BATCHES:
            return float(part["wait_share"]), int(part["batches"])
    return None


def read_live(run: rundir.Run, job_id, partition: str | None = None, site=None, ranks: bool = True,
              ended: bool = False) -> LiveHealth:
    """What the job's health files say now (only records of `job_id`), judged against the site's
    fabric for `partition`. `ranks=False`: idle.json only. `ended`: an ended job's record: the data wait
    over the whole run and idle.json (its transport is history)."""
    live = LiveHealth()
    records = _rank_files(run, job_id) if ranks or ended else []
    live.ranks_reporting = len(records)
    sizes = [r.get("world_size") for r in records if isinstance(r.get("world_size"), int)]
    live.world_size = max(sizes) if sizes else None
    classes, networks = Counter(), Counter()
    for r in records if not ended else []:
        t = r.get("transport") if isinstance(r.get("transport"), dict) else None
        if t:
            classes[str(t.get("transport") or "unknown")] += 1
            if t.get("network"):
                networks[str(t["network"])] += 1
            live.evidence = live.evidence or (str(t.get("evidence"))[:300] if t.get("evidence") else None)
    live.transports, live.networks = dict(classes), dict(networks)
    if site is not None and partition:
        conf = site.partitions.get(partition.split(",")[0])
        live.fabric = getattr(conf, "fabric", None) if conf is not None else None
    want = FAST_FABRICS.get(live.fabric or "")
    slow = classes.get("socket", 0) + classes.get("gloo-tcp", 0)
    live.fallback = bool(want and slow)
    shares = [(s, r.get("rank")) for r in records if (s := _share_of(r, whole_run=ended)) is not None]
    if shares:
        (worst, _), rank = max(shares, key=lambda item: item[0][0])
        live.input_wait_share, live.input_wait_rank = round(worst, 4), rank
        live.input_wait_mean = round(sum(s for (s, _), _ in shares) / len(shares), 4)
        live.input_bound = worst >= INPUT_BOUND_SHARE
    idle = run.health_idle()
    if idle is not None and (job_id is None or str(idle.get("job_id")) == str(job_id)):
        live.idle = idle
    _words(live, partition, ended)
    return live


def _words(live: LiveHealth, partition: str | None, ended: bool = False) -> None:
    if live.transports:
        parts = []
        for cls, count in sorted(live.transports.items(), key=lambda kv: -kv[1]):
            names = ", ".join(n for n in live.networks if cls != "gloo-tcp" and transport_class(n) == cls)
            parts.append(f"{TRANSPORT_WORDS.get(cls, cls)}{f' ({names})' if names else ''} on {count} rank(s)")
        of = f" of {live.world_size}" if live.world_size and live.world_size != live.ranks_reporting else ""
        live.notes.append(f"Network: {'; '.join(parts)}{of}.")
    if live.fallback:
        fabric = _FABRIC_NAMES.get(live.fabric or "", live.fabric)
        want = FAST_FABRICS[live.fabric]
        if live.transports.get("socket"):
            live.notes.append(f"WARNING: NCCL is using sockets (NET/Socket) on {live.transports['socket']} rank(s) "
                              f"although partition {partition} has {fabric} (site.yaml): collectives run at a "
                              f"fraction of the fabric's bandwidth. Fix: {_FABRIC_FIX[want]}.")
        if live.transports.get("gloo-tcp"):
            live.notes.append(f"WARNING: collectives use gloo over TCP although partition {partition} has {fabric} "
                              "(site.yaml). Fix: init_process_group(backend='nccl') for GPU tensors (gloo for "
                              "CPU-only work is fine).")
    if live.input_wait_share is not None and ended:
        share = f"{100 * live.input_wait_share:.0f}%"
        live.notes.append(f"{'WARNING: input-bound: ' if live.input_bound else ''}Data loading over the run: rank "
                          f"{live.input_wait_rank} spent {share} of its step time waiting for batches (mean over ranks "
                          f"{100 * (live.input_wait_mean or 0):.0f}%)" + (
                              # whether its datasets were cached is the run's to say (status: cache_suggestion)
                              ". Next time: more DataLoader num_workers or a larger prefetch." if live.input_bound
                              else "."))
    elif live.input_wait_share is not None:
        share = f"{100 * live.input_wait_share:.0f}%"
        if live.input_bound:
            live.notes.append(f"WARNING: input-bound: rank {live.input_wait_rank} spends {share} of each step waiting "
                              f"for the next batch (mean over ranks {100 * (live.input_wait_mean or 0):.0f}%). Fix: "
                              "more DataLoader num_workers, pin_memory=True, a larger prefetch_factor, "
                              "persistent_workers=True, or copy the data to node-local disk first.")
            live.suggestions.append("more DataLoader workers / prefetch (input-bound)")
        else:
            live.notes.append(f"Data loading: {share} of step time waiting for batches (rank {live.input_wait_rank}).")
    idle = live.idle or {}
    if idle.get("state") == "idle":
        live.notes.append(f"WARNING: idle allocation: {idle.get('reason')} while holding GPUs "
                          f"{','.join(map(str, idle.get('gpus') or []))} (site idle_action: warn after "
                          f"{human_duration(idle.get('grace_seconds'))}). Fix: cancel it (`slurmctl cancel`) if it "
                          "is not needed; `slurmctl logs` shows what it waits for.")
    elif idle.get("state") == "drain-requested":
        live.notes.append("Idle allocation drained by the site's policy (idle_action: drain): "
                          f"{idle.get('reason') or 'idle'}.")


def tighter_time_limit(used: float, asked: float) -> int | None:
    """The time limit to suggest to a run that used `used` of `asked` seconds: 25% headroom, rounded up
    to 5 minutes under an hour, 15 minutes under six hours, else whole hours. None when the run used
    half or more of what it asked, or when the rounded value would not be below what it asked."""
    if used >= 0.5 * asked:
        return None
    need = used * 1.25
    step = 300 if need <= 3600 else 900 if need <= 6 * 3600 else 3600
    tighter = max(step, math.ceil(need / step) * step)
    return tighter if tighter < asked else None


def _as_time_limit(seconds: int) -> str:
    """Seconds as a run.yaml time_limit: '5m', '90m', '2h', '03:45:00'."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:00"


def efficiency(job, spec=None, live: LiveHealth | None = None) -> list[str]:
    """Finished runs, as jobstats does: time asked vs used, GPUs busy vs held (where measured)."""
    lines = []
    if job is None or job.active or not job.elapsed_seconds or not job.time_limit_seconds:
        return lines
    used, asked = job.elapsed_seconds, job.time_limit_seconds
    tighter = tighter_time_limit(used, asked) if job.state == "COMPLETED" else None
    if tighter is not None:
        lines.append(f"Asked {human_duration(asked)}, used {human_duration(used)}: a tighter limit (time_limit: "
                     f"{_as_time_limit(tighter)} in run.yaml) starts sooner, since the scheduler backfills short "
                     "jobs into gaps.")
    idle = (live.idle if live else None) or {}
    means = idle.get("gpu_utilisation_mean") if isinstance(idle.get("gpu_utilisation_mean"), dict) else {}
    if means:
        busy = sum(1 for v in means.values() if isinstance(v, (int, float)) and v >= 5.0)
        lines.append(f"Used {busy} of {len(means)} GPUs on its first node (mean utilisation "
                     f"{', '.join(f'GPU {g}: {v:g}%' for g, v in sorted(means.items()))})"
                     + ("; ask for fewer GPUs or make every rank use its own." if busy < len(means) else "."))
    return lines


def apply_live_health(status, run: rundir.Run, job, site=None, now: float | None = None,
                      ended_ranks: bool = True) -> None:
    """Add the live-health notes (and the end-of-run efficiency) to a RunStatus. `ended_ranks=False`: an
    ended job's rank records are not read (a row of `ls`: one run dir read less per row)."""
    if status.job_id is None:
        return
    active = job is not None and job.active
    # an ended job's transport is history; its data wait over the whole run and idle record are its summary
    live = read_live(run, status.job_id, status.partition or None, site, ranks=active,
                     ended=not active and ended_ranks)
    notes = list(live.notes)
    if job is not None and not job.active:
        notes += efficiency(job, None, live)
    status.health_notes = notes
    status.live_health = live.to_dict()
    status.suggestions += [s for s in live.suggestions if s not in status.suggestions]
    if active and status.health == "ok":
        if live.fallback:
            status.health = "network fallback: sockets on a faster fabric"
        elif live.input_bound:
            status.health = f"input-bound: {100 * (live.input_wait_share or 0):.0f}% of step time waiting for data"
        elif (live.idle or {}).get("state") in {"idle", "drain-requested"}:
            status.health = f"idle allocation: {(live.idle or {}).get('reason')}"
