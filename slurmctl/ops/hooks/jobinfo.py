"""What the hooks ask Slurm, through SlurmClient, degrading to None instead of failing.

A hook must never fail because the controller is slow, down or gone: the Epilog would drain the
node ("Epilog error") and a Prolog failure requeues the job held. So every question here answers
None (unknown) when Slurm does not, and the caller skips what needed the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmctl.errors import SlurmctlError

if TYPE_CHECKING:  # annotations only: slurm.records is a fifth of the prolog's own imports
    from slurmctl.slurm.client import SlurmClient
    from slurmctl.slurm.records import JobInfo

TIMEOUT_SECONDS = 5.0  # a hook's whole budget is 150 ms in the normal case; this bounds the bad one


def query_job(slurm: SlurmClient | None, job_id: int) -> JobInfo | None:
    """One `scontrol show job -o` (~5-25 ms); None when Slurm is missing, slow or forgot the job."""
    if slurm is None:
        return None
    try:
        return slurm.job_info(job_id, timeout=TIMEOUT_SECONDS)
    except SlurmctlError:
        return None


def active_job_ids(slurm: SlurmClient | None, node: str) -> set[int] | None:
    """Jobs Slurm still runs on `node` (``scontrol listpids`` is local-only; ask the controller)."""
    if slurm is None:
        return None
    try:
        return slurm.node_job_ids(node, timeout=TIMEOUT_SECONDS)
    except SlurmctlError:
        return None


def node_line(slurm: SlurmClient | None, node: str) -> str | None:
    """`scontrol show node -o <node>` (~10 ms), or None when Slurm is missing, slow or has no such node."""
    if slurm is None:
        return None
    try:
        return slurm.node_line(node, timeout=TIMEOUT_SECONDS)
    except SlurmctlError:
        return None


def drain_node(slurm: SlurmClient | None, node: str, reason: str) -> bool:
    """Drain with OUR reason (Slurm's own would be just 'Prolog error'); False when that failed."""
    if slurm is None:
        return False
    try:
        slurm.drain_node(node, reason[:250], timeout=10.0)
    except SlurmctlError:
        return False
    return True



def batch_script(slurm: SlurmClient | None, job_id: int) -> str | None:
    """The job's stored batch script (~25 ms); None when Slurm is missing, slow or has none."""
    if slurm is None:
        return None
    try:
        return slurm.batch_script(job_id, timeout=TIMEOUT_SECONDS)
    except SlurmctlError:
        return None
