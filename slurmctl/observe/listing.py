"""The caller's runs as `ls` and the web's runs page list them: the newest run dirs plus every run
with a job in the queue, however old, with their statuses from one squeue (and at most one sacct);
and beside them the caller's plain sbatch jobs, queued, running or ended in the last days."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timedelta

from slurmctl.config.pricing import allocated_cost
from slurmctl.errors import RunNotFound, RunNotOwned, SlurmUnreachable
from slurmctl.observe.status import QUERY_SECONDS, RunStatus, runs_statuses, unreachable_statuses
from slurmctl.observe.sweep import queued_sweep_runs
from slurmctl.rundir import COMMENT_PREFIX, Run, RunRegistry, run_id_from_comment
from slurmctl.slurm.client import QueueSnapshot, SlurmClient
from slurmctl.slurm.runner import LocalRunner, answer_within


def with_queued(registry: RunRegistry, client: SlurmClient, runs: list[Run]) -> tuple[list[Run], QueueSnapshot | None]:
    """`runs` plus every run of the caller with a job in the queue (one squeue), oldest first, and
    the queue that squeue saw (to pass on to ``runs_statuses``); SlurmUnreachable when Slurm does
    not answer within the read budget."""
    shown = {r.run_id for r in runs}
    runs = list(runs)
    with answer_within(getattr(client, "runner", None), QUERY_SECONDS):
        queued, snapshot = client.my_job_comments(containing=COMMENT_PREFIX)
    for job in queued:
        run_id = run_id_from_comment(job.comment)
        if run_id and run_id not in shown and (elements := queued_sweep_runs(registry, run_id)) is not None:
            runs += [r for r in elements if r.run_id not in shown]  # a sweep's tasks that have not started
            shown.update([run_id, *(r.run_id for r in elements)])
            continue
        # only an existing run dir is looked up: a bare id never falls back to a scan of every run
        if run_id and run_id not in shown and os.path.lexists(registry.path_of(run_id)):
            try:
                runs.append(registry.get(run_id))
            except (RunNotFound, RunNotOwned):
                continue  # not a run of the caller's (the comment is user-written text)
            shown.add(run_id)
    return sorted(runs, key=lambda r: (r.meta.get("created") or 0, r.run_id)), snapshot


def my_runs(registry: RunRegistry, client: SlurmClient, runs: list[Run], site=None,
            with_queued_runs: bool = True) -> tuple[list[Run], list[RunStatus]]:
    """The runs to list (`runs`, plus the queued ones unless `with_queued_runs` is False) and their
    statuses; from the run dirs alone, marked UNREACHABLE, when squeue does not answer in time."""
    snapshot = None
    if with_queued_runs:
        try:
            runs, snapshot = with_queued(registry, client, runs)
        except SlurmUnreachable:  # no second wait for the same outage
            return runs, unreachable_statuses(runs, site=site)
    return runs, runs_statuses(runs, client, site=site, queue=snapshot)


def my_plain_jobs_listing(client: SlurmClient, uid: int | None = None, limit: int | None = None,
                          site=None) -> list:
    """The caller's plain sbatch jobs (no runs): queued and running (one squeue --me), then those that
    ended in the last RECENT_DAYS, newest first, at most `limit` (as many as the runs shown) and never
    more than RECENT_LIMIT (one sacct); none when Slurm does not answer within the read budget."""
    from slurmctl.slurm.owned import (  # why: only ls and the runs page list them
        RECENT_LIMIT,
        my_ended_plain_jobs,
        my_plain_jobs,
    )

    try:
        with answer_within(getattr(client, "runner", None), QUERY_SECONDS):
            active = my_plain_jobs(client, COMMENT_PREFIX, uid)
            shown = {row.job_id.split("_")[0] for row in active}
            ended = my_ended_plain_jobs(client, COMMENT_PREFIX, uid, limit=min(limit or RECENT_LIMIT, RECENT_LIMIT))
            ended = [row for row in ended if row.job_id not in shown]
    except SlurmUnreachable:
        return []
    rows = active + ended
    for row in rows:
        row.cost_usd = plain_row_cost(row, site)
    return rows


def my_plain_jobs_started(client: SlurmClient, uid: int | None = None, limit: int | None = None,
                          site=None) -> Callable[[], list]:
    """``my_plain_jobs_listing`` started now, in a thread: its squeue and sacct wait on Slurm while the
    caller reads its runs' statuses (a sacct costs ~0.2 s, more than the rest of `ls`). The returned
    function waits for it and gives its rows (or raises what it raised). A local runner is copied:
    each thread's read budget (answer_within) is its own. Any other runner (SSH: one connection)
    is asked when the rows are wanted, in the caller's thread."""
    if not isinstance(client.runner, LocalRunner):
        return lambda: my_plain_jobs_listing(client, uid, limit, site)
    import copy  # why: only ls and the runs page list plain jobs
    import threading

    own = SlurmClient(copy.copy(client.runner))
    box: dict = {}

    def work() -> None:
        try:
            box["rows"] = my_plain_jobs_listing(own, uid, limit, site)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=work, name="plain-jobs", daemon=True)
    thread.start()

    def rows() -> list:
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["rows"]

    return rows


def plain_row_cost(row, site) -> float | None:
    """A plain job's cost so far: what Slurm allocated (its TRES) for as long as it held it, at the
    site's prices (the same rule as the ledger: slurmctl.config.pricing.allocated_cost)."""
    part = next((site.partitions[p] for p in row.partition.split(",") if p in site.partitions), None) \
        if site is not None else None
    if part is None or not row.elapsed_seconds or row.started_at is None:
        return None
    start = datetime.fromtimestamp(row.started_at)
    return allocated_cost(row.gpus, row.cpus, start, start + timedelta(seconds=row.elapsed_seconds), part,
                          site.accounting.discounts)
