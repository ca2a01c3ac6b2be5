"""slurmctl: the front door of an ML training cluster on Slurm."""

__version__ = "0.1.0"
