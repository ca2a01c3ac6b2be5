"""Prometheus exporter: cluster queue/GPU state, per-run progress, and the exporter's own health.

Slurm is asked at most once per interval, however often Prometheus scrapes: ``SnapshotCache``
keeps ONE snapshot (one ``squeue``, two ``sinfo`` and one ``scontrol show partition`` call, no
``--json``; the QOS limits from ``sacctmgr`` every QOS_REFRESH_SECONDS) and rebuilds it only when it
is older than the interval; scrapes in between read the cached one.

Runs come from the run directories of the jobs in that snapshot (slurmctl.ops.run_sample reads
them, with the rules that keep run labels bounded and no comment naming a path); their live health
(transport per rank, data wait, idle policy) from the same run dirs through slurmctl.observe.health.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import make_wsgi_app
from prometheus_client.registry import Collector

from slurmctl.config.models import SiteConfig
from slurmctl.errors import SlurmctlError
from slurmctl.observe.data import record_datasets
from slurmctl.observe.explain import REASONS
from slurmctl.observe.health import LiveHealth, read_live
from slurmctl.ops.demand import node_demand
from slurmctl.ops.health import reasons as health_reasons
from slurmctl.ops.health.lost import GpuHoursLost, HealthJob, node_week
from slurmctl.ops.health.view import diagnosed_categories
from slurmctl.ops.http_limits import SOCKET_TIMEOUT_SECONDS, BoundedThreadingMixIn, DeadlineHandlerMixIn
from slurmctl.ops.run_sample import RunSample, owner_uid, read_run, run_of_job
from slurmctl.rundir import Run, run_id_from_comment
from slurmctl.slurm.client import NodeUsage, PartitionInfo, QueueEntry, SlurmClient
from slurmctl.slurm.records import PartitionPolicy, QosLimits
from slurmctl.slurm.runner import CommandResult, LocalRunner, Runner

# QOS limits change when an operator runs accounting.sh, not between scrapes: sacctmgr (slurmdbd) is
# asked at most this often, and its last answer kept while it does not answer.
QOS_REFRESH_SECONDS = 300.0
# GPU-hours lost per node over the last week and each node's newest health jobs (health/lost.py: one
# sacct over 7 days of attempts and one sacctmgr): a weekly figure moves slowly, and the sacct call is
# the snapshot's heaviest; a health job's configuration error shows within this long.
LOST_REFRESH_SECONDS = 600.0
QUEUE_WAIT_BUCKETS = (60, 300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 24 * 3600, 72 * 3600)
# Usable node states; anything else (down, drained, draining, fail, maint, inval, '*' = not
# responding) makes the node's free GPUs count as down.
_UP_STATES = {"idle", "mixed", "allocated", "completing", "planned", "reserved"}
_NOT_STARTING_REASONS = {"JobHeldUser", "JobHeldAdmin", "BeginTime", "Dependency", "DependencyNeverSatisfied"}


class CountingRunner:
    """Wraps a runner to count Slurm commands and their failures (exported as counters)."""

    def __init__(self, inner: Runner | None = None):
        self.inner = inner or LocalRunner()
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        self.calls[argv[0]] += 1
        try:
            result = self.inner.run(argv, timeout=timeout)
        except SlurmctlError:
            self.errors[argv[0]] += 1
            raise
        if result.returncode != 0:
            self.errors[argv[0]] += 1
        return result


@dataclass
class Snapshot:
    taken_at: float
    duration_seconds: float
    slurm_up: bool
    error: str = ""
    jobs: list[QueueEntry] = field(default_factory=list)
    nodes: list[NodeUsage] = field(default_factory=list)
    partitions: dict[str, PartitionInfo] = field(default_factory=dict)  # MaxTime and availability
    policies: dict[str, PartitionPolicy] = field(default_factory=dict)  # AllowQos, partition QOS, MaxNodes
    qos: dict[str, QosLimits] = field(default_factory=dict)  # each QOS's limits (cached: see QOS_REFRESH_SECONDS)
    runs: list[RunSample] = field(default_factory=list)
    health: dict[tuple[str, str], LiveHealth] = field(default_factory=dict)  # (user, run id) -> live health
    gpu_hours_lost: dict[str, GpuHoursLost] = field(default_factory=dict)  # node -> this week (LOST_REFRESH_SECONDS)
    health_jobs: dict[tuple[str, str], HealthJob] = field(default_factory=dict)  # (node, moment) -> newest, ditto


def node_state(state: str) -> str:
    """'idle*', 'mixed-', 'down~' -> 'idle', 'mixed', 'down' (the flag characters dropped)."""
    return re.sub(r"[^a-z_]+$", "", state.lower()) or "unknown"


def node_usable(state: str) -> bool:
    return node_state(state) in _UP_STATES and not state.endswith("*")


def drain_cause(reason: str, state: str) -> str:
    """Bounded label for why a node is out: checks (our health checks), prolog, epilog,
    not_responding, or admin."""
    if health_reasons.is_ours(reason):
        return "checks"
    text = reason.lower()
    if "prolog" in text:
        return "prolog"
    if "epilog" in text:
        return "epilog"
    if state.endswith("*") or "not responding" in text:
        return "not_responding"
    return "admin"


def reason_label(reason: str) -> str:
    if reason.startswith("ReqNodeNotAvail"):
        return "ReqNodeNotAvail"
    return reason if reason in REASONS else ("none" if not reason else "other")


class SnapshotCache:
    """One Slurm snapshot per interval, shared by every scrape (thread-safe)."""

    def __init__(self, client: SlurmClient, site: SiteConfig, interval: float = 15.0, clock=time.monotonic):
        self.client, self.site, self.interval, self.clock = client, site, interval, clock
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._taken_mono = float("-inf")
        # partition -> cumulative queue-wait histogram: [count per bucket..., total count, sum]
        self.waits: dict[str, list[float]] = defaultdict(lambda: [0.0] * (len(QUEUE_WAIT_BUCKETS) + 2))
        # Every site partition's series exists from the first scrape, at zero: Prometheus's rate()
        # cannot see the increase of a series whose first sample already holds the first job.
        for partition in site.partitions:
            self.waits[partition]
        self._seen_started: set[int] = set()
        self.run_read_errors = 0
        # The active runs' jobs as the last good snapshot saw them: while Slurm does not answer, their
        # run dirs are still read, so the run series (step, heartbeat, checkpoint) stay current.
        self._last_run_jobs: list[tuple[Run, QueueEntry]] = []
        # node -> [cache hits, objects looked up, bytes staged, staging seconds] of the staging records (run
        # dir data-stage/) of the jobs running now: recomputed at every snapshot, so a gauge (it falls when a
        # job ends); no process keeps a history a restart or `--once` would lose.
        self.data_by_node: dict[str, list[float]] = {}
        self._qos: dict[str, QosLimits] = {}
        self._qos_mono = float("-inf")
        self._lost: dict[str, GpuHoursLost] = {}
        self._health_jobs: dict[tuple[str, str], HealthJob] = {}
        self._lost_mono = float("-inf")

    def get(self) -> Snapshot:
        with self._lock:
            if self._snapshot is None or self.clock() - self._taken_mono >= self.interval:
                self._taken_mono = self.clock()  # also on failure: a down Slurm is not asked more often
                self._snapshot = self._take()
            return self._snapshot

    def _take(self) -> Snapshot:
        started, now = time.perf_counter(), time.time()
        try:
            jobs = self.client.queue_snapshot()
            nodes = self.client.node_usage()
            partitions = self.client.partitions()
            policies = self.client.partition_policies()
        except SlurmctlError as exc:
            runs, health = self._read_runs(self._last_run_jobs, now)
            return Snapshot(now, time.perf_counter() - started, slurm_up=False, error=exc.message,
                            runs=runs, health=health)
        self._observe_waits(jobs)
        newest: dict[tuple[str, str], QueueEntry] = {}
        for job in jobs:
            run_id = run_id_from_comment(job.comment)
            key = (job.user, run_id or "")
            if run_id and (key not in newest or job.job_id > newest[key].job_id):
                newest[key] = job
        run_jobs = []
        for _key, job in sorted(newest.items()):
            run = run_of_job(self.site, job)
            if run is not None:
                run_jobs.append((run, job))
        self._last_run_jobs = run_jobs
        runs, health = self._read_runs(run_jobs, now)
        self._read_staging(run_jobs, {node.name for node in nodes})
        return Snapshot(now, time.perf_counter() - started, True, jobs=jobs, nodes=nodes, partitions=partitions,
                        policies=policies, qos=self._qos_table(), runs=runs, health=health,
                        gpu_hours_lost=self._lost_table(nodes), health_jobs=self._health_jobs)

    def _lost_table(self, nodes: list[NodeUsage]) -> dict[str, GpuHoursLost]:
        """The week's GPU-hours lost per node; refreshes the nodes' newest health jobs with them."""
        if self.clock() - self._lost_mono >= LOST_REFRESH_SECONDS:
            self._lost_mono = self.clock()

            gpus: dict[str, int] = {}
            for node in nodes:
                gpus[node.name] = max(gpus.get(node.name, 0), node.gpus)
            spool = Path(self.site.cost_records_dir) if self.site.cost_records_dir else None
            try:
                week = node_week(self.client, gpus, diagnosed_categories(spool), datetime.now().replace(microsecond=0))
                self._lost, self._health_jobs = week.lost, week.health_jobs
            except SlurmctlError:
                pass  # slurmdbd down: the last figures until it answers
        return self._lost

    def _qos_table(self) -> dict[str, QosLimits]:
        if self.clock() - self._qos_mono >= QOS_REFRESH_SECONDS:
            self._qos_mono = self.clock()
            try:
                self._qos = self.client.qos_table()
            except SlurmctlError:
                pass  # slurmdbd down: the last table (or none: no QOS limit is applied) until it answers
        return self._qos

    def _read_runs(self, run_jobs: list[tuple[Run, QueueEntry]],
                   now: float) -> tuple[list[RunSample], dict[tuple[str, str], LiveHealth]]:
        runs, health = [], {}
        for run, job in run_jobs:
            try:
                read = read_active_run(run, job, self.site, now)
            except FileNotFoundError:
                continue  # a job whose comment names a run that has no directory: no run, no error
            except OSError:
                self.run_read_errors += 1
                continue
            if read is not None:
                runs.append(read[0])
                health[(job.user, run.run_id)] = read[1]
        return runs, health

    def _cache_budget(self) -> int | None:
        """The largest budget of the site's cache tiers: no dataset a job staged holds more."""
        data = getattr(self.site, "data", None)
        return max(data.node_cache_bytes, data.shared_cache_bytes) if data is not None else None

    def _read_staging(self, run_jobs: list[tuple[Run, QueueEntry]], node_names: set[str]) -> None:
        """Sum the staging records of the running jobs per node. The record is the job's own file, read through
        its run dir pinned to the job's user (no symlink, that user's files only): only a node Slurm lists
        counts as a label, and only the job's own id."""
        by_node: dict[str, list[float]] = {}
        for run, job in run_jobs:
            uid = owner_uid(job.user)
            if uid is None:
                continue
            for record in replace(run, pinned=None, owner=uid).stage_records():
                node = str(record.get("node"))
                if node not in node_names or str(record.get("job_id")) != str(job.job_id):
                    continue
                totals = by_node.setdefault(node, [0, 0, 0, 0.0])
                # a user-written record: only values a staging step could have written, each dataset once,
                # its bytes within the cache budget
                for ds in record_datasets(record, self._cache_budget()):
                    for i, key in enumerate(("hits", "objects", "bytes_staged", "seconds")):
                        totals[i] += ds[key]
        self.data_by_node = by_node

    def _observe_waits(self, jobs: list[QueueEntry]) -> None:
        """Queue wait (start - submit) of each job once, the first snapshot that sees it started."""
        live = set()
        for job in jobs:
            live.add(job.job_id)
            if job.start_time and job.submit_time and job.state != "PENDING" and job.job_id not in self._seen_started:
                self._seen_started.add(job.job_id)
                partition = job.partitions[0] if job.partitions else ""
                wait = max(0.0, (job.start_time - job.submit_time).total_seconds())
                counts = self.waits[partition]
                for i, bound in enumerate(QUEUE_WAIT_BUCKETS):
                    counts[i] += wait <= bound
                counts[-2] += 1
                counts[-1] += wait
        self._seen_started &= live


def read_active_run(run: Run, job: QueueEntry, site: SiteConfig, now: float) -> tuple[RunSample, LiveHealth] | None:
    """What the exporter publishes of one active run: its sample and live health, both read through
    ONE open of the run dir (pinned to the job user's uid: every file relative to that fd). None for
    a job whose user is no known login name; an OSError when the directory is not that user's."""
    uid = owner_uid(job.user)
    if uid is None:
        return None
    with run.pinned_as(uid) as pinned:
        sample = read_run(pinned, job, site, now)
        return sample, read_live(pinned, job.job_id, sample.partition, site)


def _gauge(name: str, doc: str, labels: list[str], values: dict[tuple, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


def cluster_metrics(snap: Snapshot, site: SiteConfig) -> Iterator:
    jobs_by_state: Counter[tuple] = Counter()
    pending_by_reason: Counter[tuple] = Counter()
    oldest_pending: dict[tuple, float] = {}
    for job in snap.jobs:
        partition = job.partitions[0] if job.partitions else ""
        jobs_by_state[(partition, job.state)] += 1
        if job.state == "PENDING":
            pending_by_reason[(partition, reason_label(job.reason))] += 1
            if job.submit_time:
                wait = snap.taken_at - job.submit_time.timestamp()
                oldest_pending[(partition,)] = max(oldest_pending.get((partition,), 0.0), wait)
    yield _gauge("slurmctl_jobs", "Active jobs by (first) partition and state.", ["partition", "state"], jobs_by_state)
    yield _gauge("slurmctl_jobs_pending", "Pending jobs by partition and reason (reasons outside the known "
                 "set are 'other').", ["partition", "reason"], pending_by_reason)
    yield _gauge("slurmctl_job_pending_oldest_seconds", "How long the oldest pending job has waited.",
                 ["partition"], oldest_pending)
    waiting: dict[tuple, float] = {(p,): 0.0 for p in site.partitions}
    biggest: dict[tuple, float] = {(p,): 0.0 for p in site.partitions}
    for job, partition in node_demand(snap, site):
        key = (partition,)
        waiting[key] = waiting.get(key, 0.0) + 1
        biggest[key] = max(biggest.get(key, 0.0), float(max(job.num_nodes, 1)))
    yield _gauge("slurmctl_jobs_waiting_for_nodes", "Pending jobs (array tasks) that more nodes in a partition "
                 "would start, a job sent to several under the cheapest that can hold it (the autoscaler's "
                 "demand; no hold, dependency, limit, or shape the pool cannot reach).", ["partition"], waiting)
    yield _gauge("slurmctl_job_waiting_for_nodes_max_nodes", "Node count of the biggest job waiting for nodes.",
                 ["partition"], biggest)

    gpus: dict[tuple, float] = defaultdict(float)
    cluster_gpus: dict[tuple, float] = defaultdict(float)  # each node once (nodes sit in several partitions)
    nodes: Counter[tuple] = Counter()
    drained: dict[tuple, float] = {}
    check_failed: dict[tuple, float] = {}
    counted: set[str] = set()
    for node in snap.nodes:
        gpu_type = node.gpu_type or "none"
        usable = node_usable(node.state)
        gpus[(node.partition, gpu_type, "allocated")] += node.gpus_used
        gpus[(node.partition, gpu_type, "idle" if usable else "down")] += max(0, node.gpus - node.gpus_used)
        gpus.setdefault((node.partition, gpu_type, "idle" if not usable else "down"), 0.0)
        nodes[(node.partition, node_state(node.state))] += 1
        if not usable:
            drained[(node.name, drain_cause(node.reason, node.state))] = 1
        ours = health_reasons.parse(node.reason) if "drain" in node.state.lower() else None
        if ours is not None:  # the check name is from our fixed set (reasons.py's pattern): a bounded label
            check_failed[(node.name, ours.check)] = 1
        if node.name not in counted:
            counted.add(node.name)
            cluster_gpus[(gpu_type, "allocated")] += node.gpus_used
            cluster_gpus[(gpu_type, "idle" if usable else "down")] += max(0, node.gpus - node.gpus_used)
    yield _gauge("slurmctl_gpus", "GPUs by partition, GPU model and state (allocated, idle, down).",
                 ["partition", "gpu_type", "state"], gpus)
    yield _gauge("slurmctl_cluster_gpus", "GPUs of the whole cluster by GPU model and state (each node once).",
                 ["gpu_type", "state"], cluster_gpus)
    yield _gauge("slurmctl_nodes", "Nodes by partition and state.", ["partition", "state"], nodes)
    yield _gauge("slurmctl_node_unavailable_info", "1 for each node that is down, drained or draining, "
                 "with the cause (checks, prolog, epilog, not_responding, admin).", ["node", "cause"], drained)
    yield _gauge("slurmctl_node_health_check_failed", "1 for each node our health checks drained, by the check "
                 "that failed (suspect: blamed from diagnosed failures; verify: failed its verification job).",
                 ["node", "check"], check_failed)
    lost: dict[tuple, float] = {}
    for name, hours in snap.gpu_hours_lost.items():
        lost[(name, "failed_jobs")] = round(hours.failed_jobs, 4)
        lost[(name, "drained")] = round(hours.drained, 4)
    yield _gauge("slurmctl_node_gpu_hours_lost", "GPU-hours lost to each node over the last 7 days: attempts that "
                 "died of it (NODE_FAIL, or FAILED with a GPU/NCCL-class diagnosis) and time it was down or drained "
                 "for its own problems (docs/node-health.md).", ["node", "cause"], lost)
    config_error = {key: int(job.action == "config_error") for key, job in snap.health_jobs.items()}
    yield _gauge("slurmctl_node_health_config_error", "1 when the newest health job of this kind on the node "
                 "(moment: active = the scheduled all-reduce check, verify = the verification job) this week could "
                 "not measure for the site's configuration (e.g. SLURMCTL_HEALTH_TORCH_PYTHON missing or without "
                 "torch): nothing was drained and nothing measured; 0 when it ran.", ["node", "moment"], config_error)
    yield _gauge("slurmctl_pending_capacity_elsewhere_oldest_seconds",
                 "Oldest wait of a pending job while another of its acceptable partitions has room for it.",
                 ["partition"], _capacity_elsewhere(snap))
    burn: dict[tuple, float] = defaultdict(float)
    for job in snap.jobs:
        if job.state == "RUNNING" and job.partitions and job.partitions[0] in site.partitions:
            burn[(job.partitions[0],)] += job.gpus * site.partitions[job.partitions[0]].price_per_gpu_hour
    yield _gauge("slurmctl_cost_burn_dollars_per_hour", "GPU cost of running jobs now ($/h, site prices).",
                 ["partition"], burn)


def _capacity_elsewhere(snap: Snapshot) -> dict[tuple, float]:
    free_per_node: dict[str, list[int]] = defaultdict(list)
    for node in snap.nodes:
        if node_usable(node.state):
            free_per_node[node.partition].append(node.gpus - node.gpus_used)
    acceptable = {r.job_id: r.acceptable_partitions for r in snap.runs}
    oldest: dict[tuple, float] = {}
    for job in snap.jobs:
        if job.state != "PENDING" or job.reason in _NOT_STARTING_REASONS or not job.partitions or not job.submit_time:
            continue
        per_node = -(-job.gpus // max(job.num_nodes, 1))
        others = [p for p in acceptable.get(job.job_id, job.partitions) if p != job.partitions[0]]
        if any(sum(1 for free in free_per_node[p] if free >= per_node) >= max(job.num_nodes, 1) for p in others):
            key = (job.partitions[0],)
            oldest[key] = max(oldest.get(key, 0.0), snap.taken_at - job.submit_time.timestamp())
    return oldest


_RUN_GAUGES = [
    ("slurmctl_run_step", "step", "Last step the run reported."),
    ("slurmctl_run_last_step_timestamp_seconds", "last_step_time", "When the run last reported a step."),
    ("slurmctl_run_attempt_start_timestamp_seconds", "attempt_start", "When the running attempt started."),
    ("slurmctl_run_loss", "loss", "Training loss of the last step."),
    ("slurmctl_run_step_seconds", "step_seconds", "Mean step time over the newest steps."),
    ("slurmctl_run_samples_per_second", "samples_per_second", "Training throughput."),
    ("slurmctl_run_checkpoint_step", "checkpoint_step", "Step of the newest valid checkpoint."),
    ("slurmctl_run_checkpoint_last_timestamp_seconds", "checkpoint_time",
     "When the newest valid checkpoint completed."),
    ("slurmctl_run_checkpoint_age_seconds", "checkpoint_age_seconds",
     "Seconds of work not yet in a checkpoint (since the newest checkpoint or the attempt start)."),
    ("slurmctl_run_checkpoint_interval_seconds", "checkpoint_interval_seconds",
     "Expected seconds between checkpoints (interval_steps x step time)."),
    ("slurmctl_run_checkpoint_save_seconds", "checkpoint_save_seconds", "Duration of the newest checkpoint save."),
    ("slurmctl_run_checkpoint_save_in_progress_seconds", "checkpoint_save_in_progress_seconds",
     "How long the checkpoint save in progress has run (0: none)."),
    ("slurmctl_run_starts", "starts", "Attempts started: the first, then one per Slurm requeue or resubmission."),
    ("slurmctl_run_watchdog_interventions", "watchdog_interventions", "Times the progress watchdog acted."),
    ("slurmctl_run_drain_requested", "drain_requested", "1 while a drain (save and stop) is requested."),
    ("slurmctl_run_drain_requested_timestamp_seconds", "drain_requested_time", "When the drain was requested."),
    ("slurmctl_run_drain_acknowledged", "drain_acknowledged", "1 once the training acknowledged the drain."),
    ("slurmctl_run_cost_burn_dollars_per_hour", "burn_dollars_per_hour", "GPU cost of the run now ($/h)."),
    ("slurmctl_run_gpus", "gpus", "GPUs the run's job holds or asks for."),
]


# Bounded transport label values (slurmctl.runtime.health.transport_class, plus gloo and unknown).
TRANSPORTS = ("socket", "ib", "efa", "tcpx", "gloo-tcp", "other", "unknown")


def health_metrics(snap: Snapshot) -> Iterator:
    """Live health per active run: transport per rank, fallback to sockets on a fast fabric, data
    wait, the idle policy's verdict and the GPUs' utilisation where the job measured it."""
    ranks = GaugeMetricFamily("slurmctl_run_network_ranks", "Ranks of the run per network transport their "
                              "collectives use (socket, ib, efa, tcpx, gloo-tcp, other, unknown).",
                              labels=["user", "run", "transport"])
    fallback = GaugeMetricFamily("slurmctl_run_network_fallback", "1 when ranks use TCP sockets (NCCL NET/Socket "
                                 "or gloo) although the partition has a faster fabric (site.yaml).",
                                 labels=["user", "run"])
    wait = GaugeMetricFamily("slurmctl_run_input_wait_ratio", "Share of step time the slowest rank waited for "
                             "the next batch (rt.data), over its last health interval.", labels=["user", "run"])
    idle = GaugeMetricFamily("slurmctl_run_idle", "1 when the job's idle policy finds the allocation idle "
                             "(no step, or every GPU under 5% busy, for the site's idle_grace).",
                             labels=["user", "run"])
    util = GaugeMetricFamily("slurmctl_run_gpu_utilisation_percent", "Busiest GPU of the job's first node at the "
                             "watchdog's last check (nvidia-smi).", labels=["user", "run"])
    for (user, run_id), live in sorted(snap.health.items()):
        key = [user, run_id]
        for transport, count in sorted(live.transports.items()):
            ranks.add_metric([*key, transport if transport in TRANSPORTS else "other"], count)
        if live.transports:
            fallback.add_metric(key, int(live.fallback))
        if live.input_wait_share is not None:
            wait.add_metric(key, live.input_wait_share)
        if live.idle:
            idle.add_metric(key, int(live.idle.get("state") in {"idle", "drain-requested"}))
            sample = live.idle.get("gpu_utilisation")
            if isinstance(sample, dict) and sample:
                util.add_metric(key, max(float(v) for v in sample.values()))
    yield from (ranks, fallback, wait, idle, util)


def data_metrics(by_node: dict[str, list[float]]) -> Iterator:
    """The node data cache per node, for the jobs running there now: objects looked up and found valid,
    bytes staged and staging time of their datasets. Gauges: a job that ends leaves the sums."""
    families = [GaugeMetricFamily(name, doc, labels=["node"]) for name, doc in (
        ("slurmctl_data_cache_hits", "Dataset objects the staging steps of the jobs running on the node found "
         "valid in its cache."),
        ("slurmctl_data_cache_lookups", "Dataset objects the staging steps of the jobs running on the node looked "
         "up in its cache."),
        ("slurmctl_data_staged_bytes", "Bytes the staging steps of the jobs running on the node downloaded from "
         "the object store into its cache."),
        ("slurmctl_data_staging_seconds", "Seconds the staging steps of the jobs running on the node took "
         "(listing, checking, downloading)."))]
    for node, totals in sorted(by_node.items()):
        for family, value in zip(families, totals):
            family.add_metric([node], value)
    yield from families


def run_metrics(snap: Snapshot) -> Iterator:
    info = GaugeMetricFamily("slurmctl_run_info", "1 per active run: its job, partition, user and state.",
                             labels=["run", "job_id", "partition", "user", "state"])
    for run in snap.runs:
        info.add_metric([run.run_id, str(run.job_id), run.partition, run.user, run.state], 1)
    yield info
    for name, attr, doc in _RUN_GAUGES:
        # a run is (user, run id): two users may hold the same run id, never one series
        family = GaugeMetricFamily(name, doc, labels=["user", "run"])
        for run in snap.runs:
            value = getattr(run, attr)
            if value is not None:
                family.add_metric([run.user, run.run_id], float(value))
        yield family


class SlurmctlCollector(Collector):
    def __init__(self, cache: SnapshotCache, runner: CountingRunner):
        self.cache, self.runner = cache, runner
        self._last_collect_seconds = 0.0

    def collect(self) -> Iterator:
        started = time.perf_counter()
        snap = self.cache.get()
        yield GaugeMetricFamily("slurmctl_slurm_up", "1 if the last Slurm snapshot succeeded.",
                                value=int(snap.slurm_up))
        yield GaugeMetricFamily("slurmctl_exporter_snapshot_duration_seconds",
                                "Time to take the last Slurm snapshot (squeue + sinfo + run files).",
                                value=snap.duration_seconds)
        yield GaugeMetricFamily("slurmctl_exporter_snapshot_timestamp_seconds", "When the snapshot was taken.",
                                value=snap.taken_at)
        yield GaugeMetricFamily("slurmctl_exporter_collect_duration_seconds",
                                "Time the previous scrape spent collecting.", value=self._last_collect_seconds)
        calls = CounterMetricFamily("slurmctl_slurm_commands", "Slurm commands run.", labels=["command"])
        errors = CounterMetricFamily("slurmctl_slurm_command_errors", "Slurm commands that failed.", labels=["command"])
        for command in sorted(set(self.runner.calls) | {"squeue", "sinfo"}):
            calls.add_metric([command], self.runner.calls[command])
            errors.add_metric([command], self.runner.errors[command])
        yield calls
        yield errors
        yield CounterMetricFamily("slurmctl_exporter_run_read_errors", "Run directories that could not be read.",
                                  value=self.cache.run_read_errors)
        unparsed = CounterMetricFamily("slurmctl_slurm_unparsed_lines",
                                       "Lines of Slurm output skipped because they did not parse (e.g. a job name "
                                       "holding a separator or a newline).", labels=["query"])
        for query in sorted({"queue_snapshot", "node_usage", *self.cache.client.rejects.counts}):
            unparsed.add_metric([query], self.cache.client.rejects.counts.get(query, 0))
        yield unparsed
        waits = HistogramMetricFamily("slurmctl_queue_wait_seconds", "Queue wait (start - submit) of started jobs.",
                                      labels=["partition"])
        for partition, counts in sorted(self.cache.waits.items()):
            buckets = [(str(b), counts[i]) for i, b in enumerate(QUEUE_WAIT_BUCKETS)]
            waits.add_metric([partition], buckets + [("+Inf", counts[-2])], sum_value=counts[-1])
        yield waits
        if snap.slurm_up:  # no cluster series from a failed snapshot: stale data is not news
            yield from cluster_metrics(snap, self.cache.site)
        # Run series come from the run dirs, read now; during an outage for the runs Slurm last listed
        # (their state label is the last one Slurm gave).
        yield from run_metrics(snap)
        yield from health_metrics(snap)
        yield from data_metrics(self.cache.data_by_node)
        self._last_collect_seconds = time.perf_counter() - started


def build(site: SiteConfig, interval: float = 15.0, runner: Runner | None = None):
    """(registry, collector) ready to serve; the registry holds only slurmctl's metrics."""
    from prometheus_client import CollectorRegistry

    counting = CountingRunner(runner)
    collector = SlurmctlCollector(SnapshotCache(SlurmClient(counting), site, interval), counting)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry, collector


def make_server(registry, port: int, address: str = "127.0.0.1"):
    """The /metrics server, bound and ready (port 0: any free port), with the connection limits of
    slurmctl.ops.http_limits: every user of the node can connect to it, and each connection costs a
    thread, so a request must arrive whole within the deadline and one user gets only a share."""
    class Server(BoundedThreadingMixIn, WSGIServer):
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

    class Handler(DeadlineHandlerMixIn, WSGIRequestHandler):
        disarm_after_headers = True  # GET /metrics has no body
        timeout = SOCKET_TIMEOUT_SECONDS

        def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's signature
            pass  # a scrape every few seconds is no news

    server = Server((address, port), Handler)
    server.set_app(make_wsgi_app(registry))
    return server


def serve(site: SiteConfig, port: int, interval: float, address: str = "127.0.0.1") -> None:
    """Serve /metrics until interrupted; on loopback unless another address is given (no auth here)."""
    registry, _ = build(site, interval)
    server = make_server(registry, port, address)
    try:
        server.serve_forever()
    finally:
        server.server_close()
