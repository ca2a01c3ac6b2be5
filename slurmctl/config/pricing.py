"""What an allocation costs: GPUs x allocated time x the partition's $/GPU-hour, with optional
off-peak and weekend discounts (billing is by allocation, not utilisation: an idle GPU you hold
costs the same as a busy one).

The time-of-day split walks segment boundaries (midnight, off-peak start/end), not hours, so a
week-long attempt costs a handful of iterations.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time
from functools import lru_cache


@dataclass(frozen=True)
class Discounts:
    """Fractions off the list price; the largest applicable discount wins (they do not stack).

    A stdlib dataclass, not a pydantic model: status and ls price runs without importing pydantic.
    site.yaml's ``accounting.discounts`` is still validated by pydantic (SiteConfig's field of this
    type): it checks the types and the keys, __post_init__ the ranges."""

    __pydantic_config__ = {"extra": "forbid"}  # an unknown key in site.yaml is an error

    offpeak: float = 0.0  # fraction off between offpeak_start and offpeak_end
    offpeak_start: time = time(22, 0)
    offpeak_end: time = time(7, 0)
    weekend: float = 0.0  # fraction off on Saturday and Sunday

    def __post_init__(self) -> None:
        for name in ("offpeak", "weekend"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ValueError(f"{name} must be a fraction from 0 up to (not including) 1, e.g. 0.25 for "
                                 f"25% off; got {value!r}")


def _seconds(t: time) -> int:
    return t.hour * 3600 + t.minute * 60 + t.second


@lru_cache(maxsize=16)
def _day_boundaries(offpeak_start: time, offpeak_end: time) -> tuple[int, int, tuple[int, ...]]:
    """Seconds of the day where the price can change (midnight included as 86400)."""
    start, end = _seconds(offpeak_start), _seconds(offpeak_end)
    return start, end, tuple(sorted({start, end, 86400} - {0}))


def _fraction_off(discounts: Discounts, off_start: int, off_end: int, second_of_day: float, weekday: int) -> float:
    """The discount at that second of that weekday: the larger of off-peak and weekend (no stacking)."""
    offpeak = (second_of_day >= off_start or second_of_day < off_end) if off_start > off_end else \
        off_start <= second_of_day < off_end
    return max(discounts.offpeak if offpeak else 0.0, discounts.weekend if weekday >= 5 else 0.0)


def price_at(price_per_hour: float, when: datetime, discounts: Discounts | None = None) -> float:
    """The $/hour that allocation_cost charges for an hour held at `when` (naive local time): the list
    price less the discount that applies then (an estimate says it beside the list price)."""
    if discounts is None or (discounts.offpeak == 0 and discounts.weekend == 0):
        return price_per_hour
    off_start, off_end, _ = _day_boundaries(discounts.offpeak_start, discounts.offpeak_end)
    second_of_day = _seconds(when.time()) + when.microsecond / 1e6
    return price_per_hour * (1 - _fraction_off(discounts, off_start, off_end, second_of_day, when.weekday()))


def allocation_cost(gpus: int, start: datetime, end: datetime, price_per_gpu_hour: float,
                    discounts: Discounts | None = None) -> float:
    """Dollars for `gpus` GPUs held from start to end (naive local times, as sacct prints them).

    Walks seconds-of-day from one price boundary (off-peak start/end, midnight) to the next: a
    report prices a million attempts, so no datetime objects are built in the loop."""
    if end <= start or gpus <= 0 or price_per_gpu_hour <= 0:
        return 0.0
    remaining = (end - start).total_seconds()
    if discounts is None or (discounts.offpeak == 0 and discounts.weekend == 0):
        return gpus * remaining / 3600 * price_per_gpu_hour
    off_start, off_end, bounds = _day_boundaries(discounts.offpeak_start, discounts.offpeak_end)
    second_of_day = _seconds(start.time()) + start.microsecond / 1e6
    weekday = start.weekday()
    weighted = 0.0
    while remaining > 0:
        boundary = next(b for b in bounds if b > second_of_day)
        span = min(boundary - second_of_day, remaining)
        weighted += span * (1 - _fraction_off(discounts, off_start, off_end, second_of_day, weekday))
        remaining -= span
        second_of_day = boundary
        if second_of_day >= 86400:
            second_of_day, weekday = 0.0, (weekday + 1) % 7
    return gpus * weighted / 3600 * price_per_gpu_hour


def allocated_cost(gpus: int, cpus: int, start: datetime, end: datetime, partition,
                   discounts: Discounts | None = None) -> float:
    """Dollars for what Slurm allocated (its TRES) on `partition` (site.yaml's entry: its
    price_per_gpu_hour and price_per_cpu_hour; None for a partition the site does not price) from start
    to end: the GPUs at the GPU price, and a job without GPUs by its CPUs at the CPU price. The one
    price rule for the ledger, `cost`, `status` and `ls`, whatever submitted the job."""
    if partition is None:
        return 0.0
    if gpus:
        return allocation_cost(gpus, start, end, partition.price_per_gpu_hour, discounts)
    return allocation_cost(cpus, start, end, getattr(partition, "price_per_cpu_hour", 0.0), discounts)
