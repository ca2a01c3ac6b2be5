"""Node health: checks at three moments, drains that say who and why, verify before undrain, blame.

Standard library only: the prolog and Slurm's HealthCheckProgram run it as root under the system
python3, on every node.

Modules:
  reasons   the drain-reason format `slurmctl:[node_problem] <check>: <detail>`; whose drain it is
  checks    the checks themselves (space, leftovers, clock, slurmd's view, GPUs) and the fault stub
  agent     what one node does with its findings: drain, start a verification, return to service
  blame     suspects from diagnosed failures: the same node in GPU/NCCL-class failures of several jobs
  __main__  `python -m slurmctl.ops.health periodic|verify|check` (HealthCheckProgram, the verify job)
"""
