"""The operator's view of nodes (`slurmctl nodes`): state, who drained each and why, which check
failed, whether a verification is running, and the suspect score where this machine can read it.

Read-only: sinfo for the nodes, scontrol for the reservations, and for the GPU-hours lost to each
node this week (health/lost.py) one sacct call and one sacctmgr call. The suspect score
comes from a node's own failure spool (health/blame.py), which lives on that node: it is shown
where the spool is readable from here (on the node itself, or the local dev cluster's shared state
dir), else taken from a suspect drain's reason, else unknown (None).
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from slurmctl.errors import SlurmctlError
from slurmctl.ops.health import blame, reasons
from slurmctl.ops.health.agent import VERIFY_PREFIX
from slurmctl.ops.health.lost import GpuHoursLost, gpu_hours_lost
from slurmctl.ops.hooks.records import read_records
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.parsing import gres_gpus

_SUSPECT_COUNT = re.compile(r"\A(\d+) jobs of \d+ user\(s\) on \d+ node set\(s\) with GPU/NCCL-class failures")


@dataclass(frozen=True)
class NodeView:
    node: str
    state: str
    drained: bool
    drained_by: str  # "slurmctl", the user who set someone else's reason, or "" when not drained
    blame: str  # node_problem | user_problem | "" (not ours)
    check: str  # the failed check of our drain, "" otherwise
    reason: str
    reason_user: str
    since: str
    verifying: bool
    suspect_score: int | None
    gpus: int
    gpu_hours_lost: GpuHoursLost | None  # this week; None when accounting did not answer

    def to_dict(self) -> dict:
        out = asdict(self)
        out["gpu_hours_lost"] = self.gpu_hours_lost.to_dict() if self.gpu_hours_lost is not None else None
        return out


def failure_spool(state_dir: Path | None, node: str) -> Path | None:
    return state_dir / "health-failures" / node if state_dir is not None else None


def diagnosed_categories(cost_spool: Path | None) -> dict[tuple[int, str], str]:
    """(job id, start as sacct prints it) -> the diagnosis category the epilog wrote into the
    attempt's cost record (empty where the spool is not readable from here: it is root's)."""
    found = {}
    for record in read_records(cost_spool) if cost_spool is not None else []:
        if record.failure_category and record.start_time:
            start = datetime.fromtimestamp(record.start_time).isoformat(timespec="seconds")
            found[(record.job_id, start)] = record.failure_category
    return found


def node_views(client: SlurmClient, only: str | None = None, state_dir: Path | None = None,
               now: float | None = None, cost_spool: Path | None = None) -> list[NodeView]:
    rows = client.node_health_rows(only)
    gpus = {row.name: gres_gpus(row.gres)[0] for row in rows}
    try:
        lost: dict[str, GpuHoursLost] = gpu_hours_lost(
            client, gpus, diagnosed_categories(cost_spool),
            datetime.fromtimestamp(now) if now is not None else datetime.now().replace(microsecond=0))
    except SlurmctlError:
        lost = {}  # slurmdbd not answering: the rest of the view still stands
    verifying = {name.removeprefix(VERIFY_PREFIX) for name in client.reservation_names()
                 if name.startswith(VERIFY_PREFIX)}
    views = []
    for row in sorted(rows, key=lambda r: r.name):
        ours = reasons.parse(row.reason) if row.reason else None
        score: int | None = None
        spool = failure_spool(state_dir, row.name)
        if spool is not None and spool.is_dir():
            score = blame.score(blame.read(spool), now if now is not None else time.time())
        elif ours is not None and ours.check == "suspect" and (m := _SUSPECT_COUNT.match(ours.detail)):
            score = int(m[1])
        drained_by = ("slurmctl" if ours else (row.reason_user.split("(")[0] or "unknown")) if row.drained else ""
        views.append(NodeView(
            node=row.name, state=row.state, drained=row.drained, drained_by=drained_by,
            blame=ours.blame if ours else "", check=ours.check if ours else "",
            reason=ours.detail if ours else row.reason, reason_user=row.reason_user, since=row.reason_time,
            verifying=row.name in verifying, suspect_score=score, gpus=gpus[row.name],
            gpu_hours_lost=lost.get(row.name)))
    return views
