"""`python -m slurmctl.ops.health periodic|verify|active|check` (as root, on a node).

  periodic  Slurm's HealthCheckProgram (deploy: plugins/healthcheck.py runs it with no PATH):
            checks, then drain / start a verification / nothing. Always exits 0: slurmd only logs a
            failing health program, and our verdict is the drain itself.
  verify    the body of the verification job (agent.verify); exit 1 when the node failed it.
  active    the active check alone (a gloo all-reduce, health/allreduce.py), as a root job an operator
            schedules on idle nodes: a failure drains the node; exit 1 when it failed or could not
            run (a configuration error: nothing drained).
Inside a job, verify and active write their outcome into the job's AdminComment (agent.note_in_job).
  check     the periodic checks, printed; acts on nothing (an operator's look at one node).
The node is $SLURMD_NODENAME (slurmd sets it for the health program and jobs), else the host name.
"""

from __future__ import annotations

import json
import os
import sys
import time

from slurmctl.ops.health import agent
from slurmctl.ops.health.checks import Subject, run_checks
from slurmctl.ops.hooks.config import HookConfig

USAGE = "usage: python -m slurmctl.ops.health periodic|verify|active|check"


def main(argv: list[str]) -> int:
    started = time.monotonic()
    if len(argv) != 1 or argv[0] not in ("periodic", "verify", "active", "check"):
        print(USAGE, file=sys.stderr)
        return 2
    cfg = HookConfig.from_env(os.environ)
    moment = argv[0]
    if moment == "check":
        for finding in run_checks(Subject(cfg, moment="periodic")):
            print(json.dumps(finding.to_dict()))
        return 0
    if cfg.slurm is None:
        print("slurmctl health: no Slurm client tools on this node; nothing done", file=sys.stderr)
        return 0 if moment == "periodic" else 1
    run = {"periodic": agent.periodic, "verify": agent.verify, "active": agent.active}[moment]
    outcome = run(cfg)
    agent.log_outcome(cfg, os.environ, moment, outcome, started)
    if moment in ("verify", "active"):
        agent.note_in_job(cfg, os.environ, moment, outcome)
    return 1 if moment != "periodic" and outcome.action not in ("passed", "none") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
