"""Cost estimate at submit: GPUs x $/GPU-hour (site price table) -> $ per hour and the worst case.

The worst case is the list price for the whole time limit (discounts and early exits only lower
it); the ledger of what attempts actually cost lives elsewhere (accounting).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from slurmctl.config.models import RunSpec, SiteConfig


@dataclass(frozen=True)
class CostEstimate:
    gpus: int
    hours: float
    gpu_hours: float
    price_per_gpu_hour: float
    max_usd: float
    partition: str
    usd_per_hour: float = 0.0
    capacity: str = ""
    preemptible: bool = False
    cpus: int = 0  # a CPU-only run's CPUs (priced by price_per_cpu_hour)
    price_per_cpu_hour: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def sentence(self) -> str:
        spot = ", preemptible" if self.preemptible else ""
        if self.cpus and not self.gpus:
            return (f"{self.cpus} CPU(s) x ${self.price_per_cpu_hour:.3f}/CPU-hour on {self.partition} "
                    f"({self.capacity}{spot}) = ${self.usd_per_hour:,.2f}/hour; worst case ${self.max_usd:,.2f} "
                    f"if it runs its whole {self.hours:.2f} h time limit (no GPUs).")
        return (f"{self.gpus} GPU(s) x ${self.price_per_gpu_hour:.2f}/GPU-hour on {self.partition} "
                f"({self.capacity}{spot}) = ${self.usd_per_hour:,.2f}/hour; worst case ${self.max_usd:,.2f} "
                f"if it runs its whole {self.hours:.2f} h time limit ({self.gpu_hours:.2f} GPU-hours).")

    def needs_confirmation(self, site: SiteConfig) -> bool:
        return site.cost_confirm_threshold is not None and self.max_usd > site.cost_confirm_threshold


def estimate(spec: RunSpec, site: SiteConfig, partition: str | None = None) -> CostEstimate:
    """For `partition`, or (before placement) the most expensive acceptable partition: an upper bound."""
    if partition is None:
        priced = [(site.partitions[p].price_per_gpu_hour, p) for p in spec.partitions if p in site.partitions]
        partition = max(priced)[1] if priced else spec.partitions[0]
    config = site.partitions.get(partition)
    price = config.price_per_gpu_hour if config else 0.0
    gpus = spec.nodes * spec.gpus_per_node
    hours = spec.time_limit_seconds / 3600
    if gpus == 0:  # a CPU-only run: priced by its CPUs (price_per_cpu_hour)
        cpus = spec.nodes * spec.nprocs_per_node * (spec.cpus_per_proc or 1)
        cpu_price = config.price_per_cpu_hour if config else 0.0
        return CostEstimate(0, hours, 0.0, 0.0, round(cpus * hours * cpu_price, 2), partition,
                            usd_per_hour=round(cpus * cpu_price, 2), capacity=config.capacity if config else "unknown",
                            preemptible=bool(config and config.preemptible), cpus=cpus, price_per_cpu_hour=cpu_price)
    return CostEstimate(gpus, hours, gpus * hours, price, round(gpus * hours * price, 2), partition,
                        usd_per_hour=round(gpus * price, 2), capacity=config.capacity if config else "unknown",
                        preemptible=bool(config and config.preemptible))
