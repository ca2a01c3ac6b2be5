"""Prices from the site config and cost estimates."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .spec import RunSpec, SiteConfig


@dataclass(frozen=True)
class CostEstimate:
    gpus: int
    hours: float
    gpu_hours: float
    price_per_gpu_hour: float
    max_usd: float
    partition: str

    def to_dict(self) -> dict:
        return asdict(self)

    def sentence(self) -> str:
        return (f"{self.gpus} GPU(s) x {self.hours:.2f} h time limit = {self.gpu_hours:.2f} GPU-hours; "
                f"at most ${self.max_usd:,.2f} on {self.partition} (${self.price_per_gpu_hour:.2f}/GPU-hour) "
                f"if it runs to its limit.")


def estimate(spec: RunSpec, site: SiteConfig) -> CostEstimate:
    """Upper bound: the run uses its whole time limit on the most expensive acceptable partition."""
    priced = [(site.partitions[p].price_per_gpu_hour, p) for p in spec.partitions if p in site.partitions]
    price, partition = max(priced) if priced else (0.0, spec.partitions[0])
    gpus = spec.nodes * spec.gpus_per_node
    hours = spec.time_limit_seconds / 3600
    return CostEstimate(gpus, hours, gpus * hours, price, round(gpus * hours * price, 2), partition)
