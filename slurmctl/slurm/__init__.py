"""The one way slurmctl talks to Slurm: SlurmClient over an injected runner."""

from slurmctl.slurm.client import Job, NodeInfo, SlurmClient
from slurmctl.slurm.runner import CommandResult, LocalRunner

__all__ = ["CommandResult", "Job", "LocalRunner", "NodeInfo", "SlurmClient"]
