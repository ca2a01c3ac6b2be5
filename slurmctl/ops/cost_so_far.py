"""A run's cost so far over every attempt (a requeue's, a resume's, an array's tasks), as `slurmctl
cost` prices them (ops.accounting.run_attempts: sacct --duplicates): the figure `ls`, `status` and the
web's runs page show, and `ls`'s early read of it in a thread while the statuses are read."""

from __future__ import annotations

import copy
import threading
from datetime import datetime
from typing import TYPE_CHECKING

from slurmctl.ops.accounting import Attempt, run_attempts
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.runner import LocalRunner

if TYPE_CHECKING:
    from slurmctl.config.models import SiteConfig


def price_every_attempt(site: SiteConfig, client: SlurmClient, runs: list, statuses: list,
                        read: tuple[list[Attempt], set[int]] | None = None) -> None:
    """Each listed run's cost so far (its status's `cost_usd`) over all its attempts, as `slurmctl cost`
    counts them, where it has several (a requeue's, a resume's, an array's tasks): one sacct for every
    such run listed, none when there is none. Also while the newest attempt has not started (a
    requeued job waiting, or cancelled while it waited): the ones before it were paid for. `read`:
    attempts already read and the job ids they were asked for (`ls` asks early, in a thread); only
    jobs not asked cost a sacct here. `ls`, `status` and the web's runs page all show this figure."""
    several = [(run, s) for run, s in zip(runs, statuses, strict=True)
               if s.job_id is not None and (s.requeues or len(run.priced_job_ids()) > 1)]
    if not several:
        return
    wanted = sorted({j for run, _ in several for j in run.priced_job_ids()})
    attempts, asked = read if read is not None else ([], set())
    missing = [j for j in wanted if j not in asked]
    if missing:
        attempts = [*attempts, *run_attempts(site, client, missing)]
    for run, s in several:
        ids = set(run.priced_job_ids())
        s.cost_usd = attempts_cost([a for a in attempts if a.job_id in ids], s.job_id, s.attempt_started, s.cost_usd)


def cost_so_far(site: SiteConfig, client: SlurmClient, job_ids: list[int], current_job_id: int | None,
                current_start: datetime | None, current_cost: float | None) -> float | None:
    """What a run or a job cost so far over EVERY attempt (a requeue's and a resume's too): the ended
    attempts as `slurmctl cost` prices them (run_attempts: sacct --duplicates), plus the newest attempt
    (job `current_job_id`, started `current_start`, priced `current_cost`) while accounting does not
    list it yet (it lists an attempt once it ended). None when nothing was priced."""
    return attempts_cost(run_attempts(site, client, job_ids), current_job_id, current_start, current_cost)


def attempts_cost(attempts: list[Attempt], current_job_id: int | None, current_start: datetime | None,
                  current_cost: float | None) -> float | None:
    """cost_so_far from the ended attempts already read (one job's, one run's)."""
    started = current_start.isoformat(timespec="seconds") if current_start else None
    listed = any(a.job_id == current_job_id and a.start[:19] == started for a in attempts)
    total = sum(a.cost_usd for a in attempts)
    if current_cost is not None and not listed:
        total += current_cost
    return total if attempts or current_cost is not None else None


class AttemptsAskedEarly:
    """`ls`'s sacct of every attempt of the runs whose records already show several (a requeue, a
    resume, an array's tasks), asked in a thread while their statuses are read: it costs as much as
    the rest of `ls`. A copy of a local runner (its own read budget); any other runner is not raced."""

    def __init__(self, site: SiteConfig, client: SlurmClient, runs: list):
        self._ids = sorted({j for run in runs if _shows_several(run) for j in run.priced_job_ids()})
        self._answer: list | BaseException = []
        self._thread = None
        if self._ids and isinstance(client.runner, LocalRunner):
            copied = SlurmClient(copy.copy(client.runner))
            self._thread = threading.Thread(target=self._ask, args=(site, copied), name="attempts", daemon=True)
            self._thread.start()

    def _ask(self, site, client) -> None:
        try:
            self._answer = run_attempts(site, client, self._ids)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self._answer = exc

    def result(self) -> tuple[list, set[int]]:
        """(the attempts read, the job ids asked); nothing asked when no thread ran."""
        if self._thread is None:
            return [], set()
        self._thread.join()
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer, set(self._ids)


def _shows_several(run) -> bool:
    """The run's own records show more than one attempt: several jobs, or a start after a requeue."""
    return len(run.priced_job_ids()) > 1 or any(
        e.get("event") == "start" and isinstance(e.get("restart_count"), int) and e["restart_count"] > 0
        for e in run.events())
