"""What an allocation costs: GPUs x allocated time x the partition's $/GPU-hour, with optional
off-peak and weekend discounts (billing is by allocation, not utilisation: an idle GPU you hold
costs the same as a busy one).

The time-of-day split walks segment boundaries (midnight, off-peak start/end), not hours, so a
week-long attempt costs a handful of iterations.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta

from pydantic import BaseModel, ConfigDict, Field


class Discounts(BaseModel):
    """Fractions off the list price; the largest applicable discount wins (they do not stack)."""

    model_config = ConfigDict(extra="forbid")
    offpeak: float = Field(0.0, ge=0, lt=1, description="fraction off between offpeak_start and offpeak_end")
    offpeak_start: time = time(22, 0)
    offpeak_end: time = time(7, 0)
    weekend: float = Field(0.0, ge=0, lt=1, description="fraction off on Saturday and Sunday")


def _is_offpeak(t: time, d: Discounts) -> bool:
    if d.offpeak_start <= d.offpeak_end:
        return d.offpeak_start <= t < d.offpeak_end
    return t >= d.offpeak_start or t < d.offpeak_end


def _next_boundary(at: datetime, d: Discounts) -> datetime:
    day = at.date()
    candidates = [datetime.combine(day, d.offpeak_start), datetime.combine(day, d.offpeak_end),
                  datetime.combine(day + timedelta(days=1), time(0))]
    return min(c for c in candidates if c > at)


def allocation_cost(gpus: int, start: datetime, end: datetime, price_per_gpu_hour: float,
                    discounts: Discounts | None = None) -> float:
    """Dollars for `gpus` GPUs held from start to end (naive local times, as sacct prints them)."""
    if end <= start or gpus <= 0 or price_per_gpu_hour <= 0:
        return 0.0
    if discounts is None or (discounts.offpeak == 0 and discounts.weekend == 0):
        return gpus * (end - start).total_seconds() / 3600 * price_per_gpu_hour
    total, at = 0.0, start
    while at < end:
        nxt = min(_next_boundary(at, discounts), end)
        off = max(discounts.offpeak if _is_offpeak(at.time(), discounts) else 0.0,
                  discounts.weekend if at.weekday() >= 5 else 0.0)
        total += (nxt - at).total_seconds() / 3600 * price_per_gpu_hour * (1 - off)
        at = nxt
    return gpus * total
