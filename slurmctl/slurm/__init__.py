"""The one way slurmctl talks to Slurm: SlurmClient over an injected runner."""

from .client import Job, NodeInfo, SlurmClient
from .runner import CommandResult, LocalRunner

__all__ = ["CommandResult", "Job", "LocalRunner", "NodeInfo", "SlurmClient"]
