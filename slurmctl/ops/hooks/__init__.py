"""Node-side Slurm hooks (Prolog / Epilog): health checks, cleanup, GPU->job mapping, cost records.

Entry points are ``plugins/prolog.py`` and ``plugins/epilog.py`` (thin; they run as root with no
PATH, via an absolute interpreter path in slurm.conf). Everything here is standard library only:
the hooks run for every job on every node and must stay well under 150 ms.

Modules:
  config    HookConfig: directories and thresholds, from the hook's environment
  jobinfo   what the hooks ask Slurm (job info, jobs on this node, drain), through SlurmClient
            (slurmctl.slurm: standard library too); None/False instead of failing
  procs     /proc scanning: which processes belong to which Slurm job, and killing them
  records   CostRecord (schema version 1): the per-attempt record the epilog writes atomically
  prolog    run_prolog(env): health checks, scratch dir, GPU map
  epilog    run_epilog(env): kill orphans, clean /dev/shm and scratch, GPU map, cost record
"""
