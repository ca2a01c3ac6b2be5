"""GPU-hours lost to each node over a window (the operator's view and the exporter), and each node's
newest health jobs, from accounting:

  failed jobs  attempts (sacct --duplicates) that ended in the window, times their GPUs and elapsed
               time, charged only to a node the evidence points at, by the same rules as draining:
               NODE_FAIL    Slurm lost a node under the attempt: charged to the node(s) of its node
                            list that went down within NODE_FAIL_MATCH_SECONDS of its end (Slurm's
                            own down events; the job's state does not say which node failed), else
                            to all its nodes evenly
               FAILED or REQUEUED with a GPU/NCCL-class diagnosis (blame.GPU_CLASS: the category the
                            job's epilog wrote into the attempt's cost record; a slurmctl run's
                            `end` requeues its failed attempts, so most show as REQUEUED): charged
                            evenly to those of its nodes whose evidence takes it in:
                            - the drain rule took it as evidence (blame.accepted: `suspect` replayed
                              over time, afresh from each passed verification of the node, the 6 h
                              hold on one user's failures after a pass included), or
                            - the node's own fault: it failed one of our checks or a verification
                              (our `[node_problem]` drain other than a suspect drain) or Slurm took
                              it down, and the attempt ran there while the fault was on or ended
                              within FAULT_LEAD_SECONDS before it, after the node's last return.
                            A diagnosis alone is what the job printed: one user's failures charge a
                            node only where they would drain it, and evidence from before a pass
                            never charges a later failure.
  drained      the node's down and drain events (sacctmgr show event) within the window whose cause
               is the node: Slurm's own (not responding, unexpected reboot, a failed kill, hardware
               missing at registration) and our own `[node_problem]` drains; times the node's GPUs.
               An operator's drain, down or fail (maintenance: any reason not ours and not Slurm's)
               and our `[user_problem]` drains are not the node's loss and do not count.

A passed verification, and every health job's outcome, is what our health job wrote into its own
AdminComment (reasons.JobNote, agent.note_in_job), read only from root's jobs: only an administrator
can write that field. A user-code failure (import error, OOM, NaN) never counts: it is the user's
hours, not the node's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from slurmctl.durations import parse_slurm_timestamp
from slurmctl.ops.health import blame, reasons
from slurmctl.ops.health.blame import GPU_CLASS
from slurmctl.slurm.parsing import tres_counts

WINDOW = timedelta(days=7)
# The attempts are read from this far before the window too: the evidence and the passed
# verifications the drain rule would still weigh at the window's first moments (blame.accepted).
EVIDENCE_BEFORE = timedelta(seconds=blame.WINDOW_SECONDS + blame.RESUSPECT_HOLD_SECONDS)
NODE_FAIL_MATCH_SECONDS = 120
# A node's own fault (a failed check, Slurm taking it down) is evidence for the attempts that ran on
# it while the fault was on or ended this long before it began: a fault shows in jobs' failures
# before a check or slurmctld catches it, but not for days.
FAULT_LEAD_SECONDS = 3600
# Only ended attempts count (a charge or a health job's outcome needs its end), selected by their end time:
# a window selected by eligible time left out a health job that failed as it started (a configuration error)
ENDED_STATES = ("CA", "CD", "F", "NF", "OOM", "PR", "RQ", "TO", "DL", "BF")
ATTEMPT_FIELDS = ["JobIDRaw", "State", "NodeList", "ElapsedRaw", "AllocTRES", "Start", "End", "UID", "AdminComment"]
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


@dataclass(frozen=True)
class HealthJob:
    """The newest of a node's health jobs of one kind (the verification job, the active check):
    the outcome it wrote into its own AdminComment (reasons.JobNote)."""
    job_id: int
    moment: str  # active | verify
    action: str  # passed | failed | drained | config_error | ...
    ended: datetime


@dataclass(frozen=True)
class NodeWeek:
    lost: dict[str, GpuHoursLost]
    health_jobs: dict[tuple[str, str], HealthJob]  # (node, moment) -> its newest health job in the window


def node_caused(reason: str) -> bool:
    """A node event whose cause is the node itself: our `[node_problem]` drain, or Slurm's own."""
    ours = reasons.parse(reason)
    if ours is not None:
        return ours.blame == reasons.NODE_PROBLEM
    return reason.startswith(SLURM_NODE_FAULTS)


@dataclass(frozen=True)
class _Attempt:
    hosts: tuple[str, ...]
    began: float
    gpu_hours: float
    failure: blame.Failure
    charged: bool  # ended in the window (earlier ones are evidence only)


def gpu_hours_lost(client, node_gpus: dict[str, int], categories: dict[tuple[int, str], str],
                   end: datetime, window: timedelta = WINDOW) -> dict[str, GpuHoursLost]:
    """{node: GpuHoursLost} for the nodes of `node_gpus` over `window` before `end` (node_week)."""
    return node_week(client, node_gpus, categories, end, window).lost


def node_week(client, node_gpus: dict[str, int], categories: dict[tuple[int, str], str],
              end: datetime, window: timedelta = WINDOW) -> NodeWeek:
    """The nodes of `node_gpus` over `window` before `end`, from one sacctmgr and one sacct call:
    the GPU-hours lost to each, and each one's newest health jobs. `categories`: (job id, start as
    sacct prints it) -> the epilog's diagnosis category (cost records)."""
    start = end - window
    drained: dict[str, float] = {n: 0.0 for n in node_gpus}
    went_down: dict[str, list[datetime]] = {n: [] for n in node_gpus}
    faults: dict[str, list[tuple[float, float]]] = {n: [] for n in node_gpus}  # (began, ended) of node-caused events
    returned: dict[str, list[float]] = {n: [] for n in node_gpus}  # when Slurm's own down events ended
    for node, began, finished, _state, reason in client.node_events(start, end):
        if node not in drained or not node_caused(reason):
            continue
        opened, closed = parse_slurm_timestamp(began) or start, parse_slurm_timestamp(finished) or end
        t0, t1 = max(opened, start), min(closed, end)  # an event still open ends now
        ours = reasons.parse(reason)
        if ours is None:
            went_down[node].append(t0)
            returned[node].append(closed.timestamp())
        if ours is None or ours.check != "suspect":
            faults[node].append((opened.timestamp(), closed.timestamp()))
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
    passes: dict[str, list[float]] = {n: [] for n in node_gpus}
    health_jobs: dict[tuple[str, str], HealthJob] = {}
    for job_id, state, nodelist, elapsed, tres, started, ended, uid, note in (
            r[:9] for r in client.all_attempts(ATTEMPT_FIELDS, start=start - EVIDENCE_BEFORE, end=end,
                                               states=ENDED_STATES)):
        word = state.split()[0] if state.strip() else ""
        finished = parse_slurm_timestamp(ended)
        said = reasons.parse_job_note(note) if uid == "0" else None  # AdminComment: only an admin writes it
        if said is not None and said.node in node_gpus and finished is not None and finished <= end:
            if said.moment == "verify" and said.action == "passed" and word == "COMPLETED":
                passes[said.node].append(finished.timestamp())
            newest = health_jobs.get((said.node, said.moment))
            if finished >= start and (newest is None or (finished, int(job_id)) > (newest.ended, newest.job_id)):
                health_jobs[(said.node, said.moment)] = HealthJob(int(job_id), said.moment, said.action, finished)
        category = categories.get((int(job_id), started), "")
        if word != "NODE_FAIL" and not (word in ("FAILED", "REQUEUED") and category in GPU_CLASS):
            continue
        if finished is None or not finished <= end or not elapsed.isdigit():
            continue
        gpu_hours = tres_counts(tres).get("gres/gpu", 0) * int(elapsed) / 3600
        hosts = client.hostnames(nodelist) if gpu_hours else []
        if word == "NODE_FAIL":
            down = [h for h in hosts if any(abs((t - finished).total_seconds()) <= NODE_FAIL_MATCH_SECONDS
                                            for t in went_down.get(h, ()))]
            if finished >= start:
                charge(down or hosts, gpu_hours)
        elif hosts:
            failure = blame.Failure(int(job_id), category, finished.timestamp(), int(uid) if uid.isdigit() else -1,
                                    tuple(hosts))
            began = parse_slurm_timestamp(started) or finished
            diagnosed.append(_Attempt(tuple(hosts), began.timestamp(), gpu_hours, failure, finished >= start))
    now = end.timestamp()
    blamed: dict[int, list[str]] = {}  # attempt (index in diagnosed) -> the nodes the evidence points at
    for node in node_gpus:
        on_node = [(i, a) for i, a in enumerate(diagnosed) if node in a.hosts]
        accepted = blame.accepted(node, [a.failure for _, a in on_node], passes[node], now)
        returns = sorted(passes[node] + returned[node])
        for i, a in on_node:
            if a.failure in accepted or _fault_covers(a, faults[node], returns):
                blamed.setdefault(i, []).append(node)
    for i, nodes in blamed.items():
        if diagnosed[i].charged:
            charge(nodes, diagnosed[i].gpu_hours)
    return NodeWeek({n: GpuHoursLost(jobs[n], drained[n], counts[n]) for n in node_gpus}, health_jobs)


def _fault_covers(attempt: _Attempt, faults: list[tuple[float, float]], returns: list[float]) -> bool:
    """A node's own fault (it failed a check or a verification of ours, or Slurm took it down) is
    evidence for the attempts that ran on it while the fault was on or ended within
    FAULT_LEAD_SECONDS before it, in the same spell of service (after the node's last return before
    the fault: a passed verification, or the end of an earlier down event). Never for an attempt
    started after the fault ended: that needs evidence of its own (blame.accepted)."""
    for began, closed in faults:
        since = max((r for r in returns if r < began), default=float("-inf"))
        if max(since, began - FAULT_LEAD_SECONDS) < attempt.failure.end_time and attempt.began <= closed:
            return True
    return False
