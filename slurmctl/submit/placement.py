"""Earliest-start placement: ask Slurm (`sbatch --test-only`) when the run would start on each
acceptable partition, pick the earliest, ties (starts within TIE_SECONDS) to the cheaper.

A partition of an autoscaled pool (site.yaml `max_nodes`) may have no node, or fewer than the job
needs, until the pool scales up for the pending job: Slurm's estimate there is "Requested node
configuration is not available". That is no refusal: the job pends, the pool scales up for it (KEDA
counts it), and the start is unknown. Such a partition is chosen only when none can give a start."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from slurmctl.config.models import RunSpec, SiteConfig
from slurmctl.errors import NoPlacement
from slurmctl.slurm.client import SlurmClient
from slurmctl.submit.cost import estimate

TIE_SECONDS = 60  # Slurm's estimates move by the scheduler interval; closer starts are a tie
# sbatch --test-only's answer when the partition's nodes present cannot hold the job (none at all, or
# too few or too small): ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE
NO_NODES_YET = "Requested node configuration is not available"


@dataclass
class PlacementOption:
    partition: str
    ok: bool
    start_time: datetime | None
    usd_per_hour: float
    preemptible: bool
    nodes: str = ""
    message: str = ""
    waits_for_scale_up: bool = False  # an autoscaled pool without the nodes yet: pends, start unknown

    def to_dict(self) -> dict:
        return {"partition": self.partition, "ok": self.ok, "usd_per_hour": self.usd_per_hour,
                "start_time": self.start_time.isoformat() if self.start_time else None,
                "preemptible": self.preemptible, "nodes": self.nodes, "message": self.message,
                "waits_for_scale_up": self.waits_for_scale_up}


@dataclass
class Placement:
    chosen: str
    reason: str
    options: list[PlacementOption]

    def to_dict(self) -> dict:
        return {"chosen": self.chosen, "reason": self.reason, "options": [o.to_dict() for o in self.options]}


def place(spec: RunSpec, site: SiteConfig, client: SlurmClient, script_for: Callable[[str], str]) -> Placement:
    """`script_for(partition)` renders the job script for one partition; nothing is submitted.

    Its #SBATCH lines go to `sbatch --test-only` as options, so no file has to exist where sbatch
    runs (a remote login node) and the estimate is for exactly what would be submitted."""
    options = []
    for partition in spec.partitions:
        answer = client.test_only(None, sbatch_directives(script_for(partition)))
        config = site.partitions.get(partition)
        # the cost estimate's price (a CPU-only run at its CPUs' price), as the dry run's cost line says
        option = PlacementOption(
            partition, answer.ok, answer.start_time, estimate(spec, site, partition).usd_per_hour,
            bool(config and config.preemptible), answer.nodes, answer.message)
        if not answer.ok and config and config.max_nodes and NO_NODES_YET in answer.message:
            option.ok, option.start_time, option.waits_for_scale_up = True, None, True
            option.message = (f"no node in {partition} can hold it yet: the job pends until the pool "
                              f"scales up (up to {config.max_nodes} nodes, a few minutes per new VM)")
        options.append(option)
    return Placement(*choose(options), options)


def sbatch_directives(script: str) -> list[str]:
    """The options of a script's #SBATCH lines (sbatch stops reading them at the first command)."""
    directives = []
    for line in script.splitlines()[1:]:
        if line.startswith("#SBATCH "):
            directives.append(line.removeprefix("#SBATCH ").strip())
        elif line.strip() and not line.startswith("#"):
            break
    return directives


def choose(options: list[PlacementOption]) -> tuple[str, str]:
    """(partition, why): earliest start; starts within TIE_SECONDS are a tie, won by the cheaper."""
    startable = [o for o in options if o.ok and o.start_time is not None]
    scaling = [o for o in options if o.ok and o.waits_for_scale_up]
    if not startable and scaling:
        best = min(scaling, key=lambda o: o.usd_per_hour)
        return best.partition, "pends until its pool scales up; start unknown" + (
            "; no partition could give a start, the cheapest of those that scale up" if len(options) > 1 else "")
    if not startable and all("temporarily unavailable" in o.message for o in options):
        raise NoPlacement("Slurm is not accepting new jobs right now (sbatch: Resource temporarily unavailable; "
                          "the controller is busy or at MaxJobCount).",
                          "Retry in a minute; if it persists, tell your admin.", code="slurm-busy")
    if not startable:
        raise NoPlacement("Slurm cannot run this job on any acceptable partition: "
                          + "; ".join(f"{o.partition}: {o.message}" for o in options) + ".",
                          "Ask for fewer GPUs or nodes, or list another partition in run.yaml.")
    if len(options) == 1:
        return startable[0].partition, "the only acceptable partition"
    earliest = min(o.start_time for o in startable)
    tied = [o for o in startable if (o.start_time - earliest).total_seconds() <= TIE_SECONDS]
    best = min(tied, key=lambda o: o.usd_per_hour)  # min() keeps the first listed on equal price
    if len(tied) == 1:
        return best.partition, "earliest start"
    return best.partition, "earliest start (tie), cheaper"
