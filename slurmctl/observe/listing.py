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
from slurmctl.slurm.client import Job, QueueSnapshot, SlurmClient
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
            with_queued_runs: bool = True, known: Callable[[], dict[int, Job]] | None = None
            ) -> tuple[list[Run], list[RunStatus]]:
    """The runs to list (`runs`, plus the queued ones unless `with_queued_runs` is False) and their
    statuses; from the run dirs alone, marked UNREACHABLE, when squeue does not answer in time.
    `known`: the caller's recent jobs from accounting (CallerJobs.recent), asked before a sacct."""
    snapshot = None
    if with_queued_runs:
        try:
            runs, snapshot = with_queued(registry, client, runs)
        except SlurmUnreachable:  # no second wait for the same outage
            return runs, unreachable_statuses(runs, site=site)
    return runs, runs_statuses(runs, client, site=site, queue=snapshot, known=known)


def my_plain_jobs_listing(client: SlurmClient, uid: int | None = None, limit: int | None = None,
                          site=None) -> list:
    """The caller's plain sbatch jobs (no runs): queued and running (one squeue --me), then those that
    ended in the last RECENT_DAYS, newest first, at most `limit` (as many as the runs shown) and never
    more than RECENT_LIMIT (one sacct); none when Slurm does not answer within the read budget."""
    return CallerJobs(client, uid, background=False).plain_rows(limit, site)


class CallerJobs:
    """The caller's own jobs, asked for as `ls` starts, in a thread while the runs are read: queued and
    running (one squeue --me) and those of the last RECENT_DAYS in accounting (one sacct with the fields
    status reads). They are the plain sbatch jobs listed beside the runs, and the ended jobs of the runs
    themselves (status then needs no sacct of its own for those: a sacct costs ~0.1-0.2 s, more than the
    rest of `ls`). A local runner is copied, so the thread's read budget (answer_within) is its own; any
    other runner (SSH: one connection) is asked when the answer is wanted, in the caller's thread."""

    def __init__(self, client: SlurmClient, uid: int | None = None, *, background: bool = True):
        self._client, self._uid, self._answer = client, uid, None
        self._thread = None
        if background and isinstance(client.runner, LocalRunner):
            import copy  # why: only ls lists these
            import threading

            self._client = SlurmClient(copy.copy(client.runner))
            self._thread = threading.Thread(target=self._ask, name="caller-jobs", daemon=True)
            self._thread.start()

    def _ask(self) -> None:
        from slurmctl.slurm.owned import my_plain_jobs, my_recent_jobs  # why: only ls and the runs page

        try:
            with answer_within(getattr(self._client, "runner", None), QUERY_SECONDS):
                active = my_plain_jobs(self._client, COMMENT_PREFIX, self._uid)
                recent = my_recent_jobs(self._client, self._uid)
            self._answer = (active, recent)
        except SlurmUnreachable:
            self._answer = ([], None)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self._answer = exc

    def _wait(self) -> tuple[list, list[Job] | None]:
        if self._thread is not None:
            self._thread.join()
        elif self._answer is None:
            self._ask()
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer

    def recent(self) -> dict[int, Job]:
        """job id -> the caller's job as accounting has it (jobs of the last RECENT_DAYS); {} when Slurm
        did not answer in time."""
        return {j.job_id: j for j in self._wait()[1] or []}

    def plain_rows(self, limit: int | None, site=None) -> list:
        """The plain sbatch jobs: queued and running, then ended (newest first, at most `limit`, never
        more than RECENT_LIMIT), each priced; none when Slurm did not answer in time."""
        from slurmctl.slurm.owned import RECENT_LIMIT, my_ended_plain_jobs  # why: as in _ask

        active, recent = self._wait()
        if recent is None:
            return []
        shown = {row.job_id.split("_")[0] for row in active}
        ended = my_ended_plain_jobs(self._client, COMMENT_PREFIX, self._uid,
                                    limit=min(limit or RECENT_LIMIT, RECENT_LIMIT), recent=recent)
        rows = active + [row for row in ended if row.job_id not in shown]
        for row in rows:
            row.cost_usd = plain_row_cost(row, site)
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
