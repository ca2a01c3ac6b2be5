"""GPU-hours lost to each node over a window (the operator's view and the exporter), from accounting:

  failed jobs  attempts (sacct --duplicates) that ended in the window, times their GPUs and elapsed
               time, charged only to a node the evidence points at, by the same rules as blame:
               NODE_FAIL    Slurm lost a node under the attempt: charged to the node(s) of its node
                            list that went down within NODE_FAIL_MATCH_SECONDS of its end (Slurm's
                            own down events; the job's state does not say which node failed), else
                            to all its nodes evenly
               FAILED or REQUEUED with a GPU/NCCL-class diagnosis (blame.GPU_CLASS: the category the
                            job's epilog wrote into the attempt's cost record; a slurmctl run's
                            `end` requeues its failed attempts, so most show as REQUEUED): charged
                            evenly to those of its nodes that are suspects. A node is a suspect
                            when blame.common_factor holds over the window's GPU/NCCL-class attempts
                            that ran on it (two or more jobs, this node their only common node, two
                            or more users or one user's jobs on different node sets), or when it
                            failed one of our health checks or a verification (our `[node_problem]`
                            drain other than a suspect drain), or went down (Slurm's own down event,
                            a NODE_FAIL). A diagnosis alone is what the job printed: one user's
                            failures on the same nodes never charge a node.
  drained      the node's down and drain events (sacctmgr show event) within the window whose cause
               is the node: Slurm's own (not responding, unexpected reboot, a failed kill, hardware
               missing at registration) and our own `[node_problem]` drains; times the node's GPUs.
               An operator's drain, down or fail (maintenance: any reason not ours and not Slurm's)
               and our `[user_problem]` drains are not the node's loss and do not count.

A user-code failure (import error, OOM, NaN) never counts: it is the user's hours, not the node's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from slurmctl.durations import parse_slurm_timestamp
from slurmctl.ops.health import blame, reasons
from slurmctl.ops.health.blame import GPU_CLASS
from slurmctl.slurm.parsing import tres_counts

WINDOW = timedelta(days=7)
NODE_FAIL_MATCH_SECONDS = 120
ATTEMPT_FIELDS = ["JobIDRaw", "State", "NodeList", "ElapsedRaw", "AllocTRES", "Start", "End", "UID"]
# The reasons slurmctld itself gives a node it takes out of service for a fault of the node.
SLURM_NODE_FAULTS = ("Not responding", "Node unexpectedly rebooted", "Kill task failed", "NO NETWORK ADDRESS FOUND",
                     "Low RealMemory", "Low CPUs", "Low socket*core*thread count", "Low TmpDisk",
                     "gres/gpu count reported lower than configured", "Node silently failed and came back")


@dataclass(frozen=True)
class GpuHoursLost:
    failed_jobs: float = 0.0  # GPU-hours of attempts that died of the node
    drained: float = 0.0  # GPU-hours the node spent down or drained for its own problems
    jobs: int = 0  # how many such attempts

    @property
    def total(self) -> float:
        return self.failed_jobs + self.drained

    def to_dict(self) -> dict:
        return {**asdict(self), "total": round(self.total, 3),
                "failed_jobs": round(self.failed_jobs, 3), "drained": round(self.drained, 3)}


def node_caused(reason: str) -> bool:
    """A node event whose cause is the node itself: our `[node_problem]` drain, or Slurm's own."""
    ours = reasons.parse(reason)
    if ours is not None:
        return ours.blame == reasons.NODE_PROBLEM
    return reason.startswith(SLURM_NODE_FAULTS)


@dataclass(frozen=True)
class _Attempt:
    job_id: int
    uid: int
    hosts: tuple[str, ...]
    gpu_hours: float
    category: str
    finished: datetime


def gpu_hours_lost(client, node_gpus: dict[str, int], categories: dict[tuple[int, str], str],
                   end: datetime, window: timedelta = WINDOW) -> dict[str, GpuHoursLost]:
    """{node: GpuHoursLost} for the nodes of `node_gpus` over `window` before `end`. `categories`:
    (job id, start as sacct prints it) -> the epilog's diagnosis category (cost records)."""
    start = end - window
    drained: dict[str, float] = {n: 0.0 for n in node_gpus}
    went_down: dict[str, list[datetime]] = {n: [] for n in node_gpus}
    failed_check: set[str] = set()  # nodes that failed a check or a verification of ours
    for node, began, finished, _state, reason in client.node_events(start, end):
        if node not in drained or not node_caused(reason):
            continue
        t0 = max(parse_slurm_timestamp(began) or start, start)
        t1 = min(parse_slurm_timestamp(finished) or end, end)  # an event still open ends now
        ours = reasons.parse(reason)
        if ours is None:
            went_down[node].append(t0)
        elif ours.check != "suspect":
            failed_check.add(node)
        if t1 > t0:
            drained[node] += (t1 - t0).total_seconds() / 3600 * node_gpus[node]
    jobs: dict[str, float] = {n: 0.0 for n in node_gpus}
    counts: dict[str, int] = {n: 0 for n in node_gpus}

    def charge(hosts: list[str], gpu_hours: float) -> None:
        for host in hosts:
            if host in jobs:
                jobs[host] += gpu_hours / len(hosts)
                counts[host] += 1

    diagnosed: list[_Attempt] = []
    for job_id, state, nodelist, elapsed, tres, started, ended, uid in (
            r[:8] for r in client.all_attempts(ATTEMPT_FIELDS, start=start, end=end)):
        word = state.split()[0] if state.strip() else ""
        category = categories.get((int(job_id), started), "")
        if word != "NODE_FAIL" and not (word in ("FAILED", "REQUEUED") and category in GPU_CLASS):
            continue
        finished = parse_slurm_timestamp(ended)
        if finished is None or not start <= finished <= end or not elapsed.isdigit():
            continue
        gpu_hours = tres_counts(tres).get("gres/gpu", 0) * int(elapsed) / 3600
        hosts = client.hostnames(nodelist) if gpu_hours else []
        if word == "NODE_FAIL":
            down = [h for h in hosts if any(abs((t - finished).total_seconds()) <= NODE_FAIL_MATCH_SECONDS
                                            for t in went_down.get(h, ()))]
            charge(down or hosts, gpu_hours)
        elif hosts:
            diagnosed.append(_Attempt(int(job_id), int(uid) if uid.isdigit() else -1, tuple(hosts), gpu_hours,
                                      category, finished))
    suspects = {n for n in node_gpus if went_down[n] or n in failed_check or _common_factor(n, diagnosed)}
    for attempt in diagnosed:
        charge([h for h in attempt.hosts if h in suspects], attempt.gpu_hours)
    return {n: GpuHoursLost(jobs[n], drained[n], counts[n]) for n in node_gpus}


def _common_factor(node: str, attempts: list[_Attempt]) -> bool:
    found: dict[int, blame.Failure] = {}
    for a in attempts:
        if node in a.hosts:
            found.setdefault(a.job_id, blame.Failure(a.job_id, a.category, a.finished.timestamp(), a.uid, a.hosts))
    return blame.common_factor(node, found, "this week").suspect
