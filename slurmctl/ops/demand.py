"""The KEDA scale-up demand: which pending jobs more nodes of an autoscaled pool would start, each
with the partition it counts for (deploy/chart scaledobjects.yaml scales each pool on this count,
through the exporter's gauge). A job counts only when nodes are what it waits for: a pending reason
that more nodes cure and no dependency left, since a hold, a start time or a limit would leave the
new node idle; a partition that would ever take it (its QOS, MaxTime, MaxNodes, and a node of the
pool big enough in GPUs, GPU model, CPUs and memory), since Slurm reports PartitionConfig on a pool
scaled to zero before it looks at any of these and such a job would scale the pool up and then pend
again; and room left under its QOS limits, counting the running jobs and the ones counted before
it, since a job over MaxTRESPerUser or GrpTRES waits however many nodes there are. A job sent to
several partitions counts once, for the cheapest one that can hold it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from slurmctl.config.models import SiteConfig
from slurmctl.slurm.client import PartitionInfo, QueueEntry
from slurmctl.slurm.parsing import gres_gpus, parse_tres
from slurmctl.slurm.records import PartitionPolicy, QosLimits, tres_gpus

if TYPE_CHECKING:  # only a type here: the exporter builds the snapshot and imports this module
    from slurmctl.ops.exporter import Snapshot

# Pending reasons of a job that starts once its partition has the nodes for it: the node demand an
# autoscaled pool scales up on (deploy/chart scaledobjects.yaml) counts only these. On a pool scaled
# to zero, or smaller than the job, Slurm says PartitionConfig or PartitionNodeLimit (the nodes
# present cannot hold it: no CPUs, too few nodes). Every other reason is not cured by more nodes: a
# hold, a dependency or start time, a QOS or association limit or an invalid one, a time limit or a
# QOS the partition does not take (Slurm then reports its own sentence, not a reason name).
_WAITING_FOR_NODES_REASONS = {"", "None", "Resources", "Priority", "PartitionConfig", "PartitionNodeLimit"}

# On a multi-partition job Slurm reports the reason of the last partition it tried: a partition that
# refuses the QOS hides that another listed one would take the job once it has a node.
_QOS_REFUSED_HERE = "Job's QOS not permitted to use this partition"


def _pool_can_hold(job: QueueEntry, partition: str, site: SiteConfig, partitions: dict[str, PartitionInfo],
                   policies: dict[str, PartitionPolicy]) -> bool:
    """Whether `partition`, grown to its pool's size, would ever start the job: a QOS it admits, a time
    limit within its MaxTime, nodes up to its MaxNodes and the pool's max_nodes, and per node no more
    GPUs, CPUs or memory than the pool's node has, and its GPU model if the job names one."""
    policy = policies.get(partition)
    nodes = max(job.num_nodes, 1)
    if policy and (not policy.admits(job.qos) or (policy.max_nodes is not None and nodes > policy.max_nodes)):
        return False
    limit = partitions.get(partition)
    if limit and limit.max_time_seconds is not None and (job.time_limit_seconds or 0) > limit.max_time_seconds:
        return False
    pool = site.partitions.get(partition)
    if pool is None or pool.max_nodes is None:
        return True  # a fixed partition: no pool to compare with
    gpus, model = tres_gpus(job.tres)
    model = model or gres_gpus(job.tres_per_node.replace("gres:", "").replace("gres/", ""))[1]
    asked = parse_tres(job.tres)
    return (nodes <= pool.max_nodes and -(-gpus // nodes) <= pool.gpus_per_node
            and (not model or model == pool.gpu_type)
            and (pool.cpus_per_node is None or asked.get("cpu", 0) / nodes <= pool.cpus_per_node)
            and (pool.mem_per_node_mb is None or asked.get("mem", 0) / nodes <= pool.mem_per_node_mb))


def demand_partition(job: QueueEntry, site: SiteConfig, partitions: dict[str, PartitionInfo],
                     policies: dict[str, PartitionPolicy] | None = None) -> str | None:
    """The partition whose pool more nodes would start this pending job in, by itself; None when no
    node would: a reason more nodes cure, no dependency left, and a partition that can hold it
    (_pool_can_hold). A 20-node job on an 8-node pool, `-c 256` on a 208-vCPU node or an L4 job on
    an H100 pool never runs: it asks for no node. On a partition with no node Slurm says
    PartitionConfig before it looks at the QOS, the time limit, the dependency or the node shape: such
    a job would scale the pool up, then pend there with its real reason, again and again. A job sent
    to several partitions counts for the cheapest one (site price per GPU-hour) that can hold it.
    The QOS's own limits need the queue around the job: see node_demand."""
    if job.state != "PENDING" or not job.partitions or job.dependency:
        return None
    several = len(job.partitions) > 1
    if not (job.reason in _WAITING_FOR_NODES_REASONS or job.reason.startswith("ReqNodeNotAvail")
            or (several and job.reason.startswith(_QOS_REFUSED_HERE))):
        return None
    able = [p for p in job.partitions if _pool_can_hold(job, p, site, partitions, policies or {})]
    if not able:
        return None
    unpriced = float("inf")
    return min(able, key=lambda p: site.partitions[p].price_per_gpu_hour if p in site.partitions else unpriced)


_HOLDING_STATES = {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"}


class QosUsage:
    """GPUs, nodes and jobs held per QOS and per (QOS, user): what Slurm compares with GrpTRES,
    MaxTRESPerUser and MaxJobsPerUser. A job counts under its own QOS and its partition's QOS."""

    def __init__(self, qos: dict[str, QosLimits], policies: dict[str, PartitionPolicy]):
        self.qos, self.policies = qos, policies
        self.group: dict[str, Counter[str]] = defaultdict(Counter)
        self.user: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)

    def _names(self, job: QueueEntry, partition: str | None = None) -> list[str]:
        """The job's QOS and the QOS of its partition (the one it runs in, or is counted for)."""
        partition = partition or (job.partitions[0] if job.partitions else "")
        policy = self.policies.get(partition)
        return [name for name in dict.fromkeys([job.qos, policy.qos if policy else ""]) if name]

    @staticmethod
    def _tres(job: QueueEntry) -> Counter[str]:
        return Counter({"gres/gpu": job.gpus, "node": max(job.num_nodes, 1), "jobs": 1})

    def add(self, job: QueueEntry, partition: str | None = None) -> None:
        for name in self._names(job, partition):
            self.group[name] += self._tres(job)
            self.user[(name, job.user)] += self._tres(job)

    def fits(self, job: QueueEntry, partition: str | None = None) -> bool:
        """Whether the job is within every limit of its QOS and its partition's QOS, with what the
        jobs already counted hold. A QOS not in the table (sacctmgr not answering) limits nothing:
        counting a job too many costs a node for a while, missing one leaves a job waiting for good."""
        want = self._tres(job)
        for name in self._names(job, partition):
            limits = self.qos.get(name)
            if limits is None:
                continue
            if limits.max_wall_seconds is not None and (job.time_limit_seconds or 0) > limits.max_wall_seconds:
                return False
            if limits.jobs_per_user is not None and self.user[(name, job.user)]["jobs"] + 1 > limits.jobs_per_user:
                return False
            for caps, held in ((limits.per_job, Counter()), (limits.per_user, self.user[(name, job.user)]),
                               (limits.group, self.group[name])):
                if any(key in caps and held[key] + want[key] > caps[key] for key in ("gres/gpu", "node")):
                    return False
        return True


def node_demand(snap: Snapshot, site: SiteConfig) -> list[tuple[QueueEntry, str]]:
    """The pending jobs more nodes would start, each with the partition it counts for
    (demand_partition), in squeue's order (priority within a partition), each only while its QOS
    limits leave room for it: the user's running jobs plus the ones counted before it, against
    MaxTRESPerUser, MaxJobsPerUser, GrpTRES and the per-job MaxTRES. A pending array counts each of
    its tasks (at most its throttle, and no more than the pool has nodes: each task needs one)."""
    usage = QosUsage(snap.qos, snap.policies)
    for job in snap.jobs:
        if job.state in _HOLDING_STATES:
            usage.add(job)
    counted = []
    for job in snap.jobs:
        partition = demand_partition(job, site, snap.partitions, snap.policies)
        if partition is None:
            continue
        pool = site.partitions.get(partition)
        tasks = job.pending_tasks
        if pool is not None and pool.max_nodes is not None:
            tasks = min(tasks, pool.max_nodes)
        for _task in range(tasks):
            if not usage.fits(job, partition):
                break
            usage.add(job, partition)
            counted.append((job, partition))
    return counted
