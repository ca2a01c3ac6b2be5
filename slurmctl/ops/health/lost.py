"""GPU-hours lost to each node over a window (the operator's view and the exporter), from accounting:

  failed jobs  every attempt (sacct --duplicates) that ended in the window on the node either
               NODE_FAIL (Slurm lost the node under it) or FAILED with a GPU/NCCL-class diagnosis
               (blame.GPU_CLASS: the category the job's epilog wrote into its cost record), times
               its elapsed time. A NODE_FAIL attempt is charged to the node(s) of its node list that
               went down within NODE_FAIL_MATCH_SECONDS of its end (sacctmgr's events; the job's
               state does not say which node failed), else to all its nodes evenly; a FAILED one to
               all its nodes evenly (its diagnosis names no node).
  drained      the node's down and drain events (sacctmgr show event) within the window whose cause
               is the node: Slurm's DOWN (not responding, node failure) and our own
               `[node_problem]` drains; times the node's GPUs. An operator's drain (maintenance) and
               our `[user_problem]` drains are not the node's loss and do not count.

A user-code failure (import error, OOM, NaN) never counts: it is the user's hours, not the node's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from slurmctl.durations import parse_slurm_timestamp
from slurmctl.ops.health import reasons
from slurmctl.ops.health.blame import GPU_CLASS
from slurmctl.slurm.parsing import tres_counts

WINDOW = timedelta(days=7)
NODE_FAIL_MATCH_SECONDS = 120
ATTEMPT_FIELDS = ["JobIDRaw", "State", "NodeList", "ElapsedRaw", "AllocTRES", "Start", "End"]


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


def node_caused(state: str, reason: str) -> bool:
    """A node event whose cause is the node itself."""
    ours = reasons.parse(reason)
    if ours is not None:
        return ours.blame == reasons.NODE_PROBLEM
    return state.upper().startswith(("DOWN", "FAIL"))


def gpu_hours_lost(client, node_gpus: dict[str, int], categories: dict[tuple[int, str], str],
                   end: datetime, window: timedelta = WINDOW) -> dict[str, GpuHoursLost]:
    """{node: GpuHoursLost} for the nodes of `node_gpus` over `window` before `end`. `categories`:
    (job id, start as sacct prints it) -> the epilog's diagnosis category (cost records)."""
    start = end - window
    drained: dict[str, float] = {n: 0.0 for n in node_gpus}
    went_down: dict[str, list[datetime]] = {n: [] for n in node_gpus}
    for node, began, finished, state, reason in client.node_events(start, end):
        if node not in drained or not node_caused(state, reason):
            continue
        t0 = max(parse_slurm_timestamp(began) or start, start)
        t1 = min(parse_slurm_timestamp(finished) or end, end)  # an event still open ends now
        went_down[node].append(t0)
        if t1 > t0:
            drained[node] += (t1 - t0).total_seconds() / 3600 * node_gpus[node]
    jobs: dict[str, float] = {n: 0.0 for n in node_gpus}
    counts: dict[str, int] = {n: 0 for n in node_gpus}
    for job_id, state, nodelist, elapsed, tres, started, ended in (
            r[:7] for r in client.all_attempts(ATTEMPT_FIELDS, start=start, end=end)):
        word = state.split()[0] if state.strip() else ""
        if word != "NODE_FAIL" and not (word == "FAILED" and categories.get((int(job_id), started)) in GPU_CLASS):
            continue
        finished = parse_slurm_timestamp(ended)
        if finished is None or not start <= finished <= end or not elapsed.isdigit():
            continue
        gpu_hours = tres_counts(tres).get("gres/gpu", 0) * int(elapsed) / 3600
        hosts = client.hostnames(nodelist) if gpu_hours else []
        if word == "NODE_FAIL":
            down = [h for h in hosts if any(abs((t - finished).total_seconds()) <= NODE_FAIL_MATCH_SECONDS
                                            for t in went_down.get(h, ()))]
            hosts = down or hosts
        for host in hosts:
            if host in jobs:
                jobs[host] += gpu_hours / len(hosts)
                counts[host] += 1
    return {n: GpuHoursLost(jobs[n], drained[n], counts[n]) for n in node_gpus}
