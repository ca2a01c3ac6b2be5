#!/usr/bin/python3
"""Slurm HealthCheckProgram (slurmd, as root, NO PATH, every HealthCheckInterval seconds, on nodes
in any state): thin entry point into `slurmctl.ops.health periodic`.

Always exits 0: slurmd only logs a failing health program, and the verdict is the drain the
program sets itself (reason `slurmctl:[node_problem] <check>: ...`), or the verification it starts.
Runs with any python3 >= 3.11 (standard library only): the repo root is put on sys.path.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    try:
        from slurmctl.ops.health.__main__ import main as health_main

        health_main(["periodic"])
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - our bug is no verdict on the node
        print(f"slurmctl health: internal error, nothing done: {exc!r}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
