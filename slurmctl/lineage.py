"""Run lineage: a run and every run resumed or forked from it, however deep.

`fork` and `resume --new-run` record the source in the new run's run.json (`parent_run`); the cost
of a training is the cost of its whole family.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class _HasMeta(Protocol):
    run_id: str

    @property
    def meta(self) -> dict: ...


def parent_of(run: _HasMeta) -> str | None:
    meta = run.meta
    return meta.get("parent_run") or meta.get("resumed_from")


def family(runs: Iterable[_HasMeta], run_id: str) -> list:
    """`run_id`'s run first, then its descendants breadth first; each run once, even if run.json files
    form a cycle (run.json is written by users, so a planted cycle must not loop forever)."""
    runs = list(runs)
    found = [r for r in runs if r.run_id == run_id]
    seen, frontier = {run_id}, {run_id}
    while frontier:
        children = [r for r in runs if r.run_id not in seen and parent_of(r) in frontier]
        found += children
        frontier = {r.run_id for r in children}
        seen |= frontier
    return found
