#!/usr/bin/env python3
"""Slurm Epilog (slurmd, as root, NO PATH): thin entry point into slurmctl.ops.hooks.epilog.

Kills the job's orphans, cleans /dev/shm and scratch, removes the GPU map and writes the
per-attempt cost record. Always exits 0: a failing epilog drains the node ("Epilog error"), and
nothing here is worth a node (a missing or broken slurmctl, a bug, a failing log: logged, exit 0).
Runs with any python3 >= 3.11 (standard library only).
"""
import os
import sys
import time

STARTED = time.monotonic()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _no_log(env, hook, started, **extra) -> None:
    """Used when even the hooks log cannot be imported (the package is missing or broken)."""


def _log_quietly(log_hook, env, **fields) -> None:
    try:
        log_hook(env, "epilog", STARTED, **fields)
    except Exception as exc:  # noqa: BLE001 - a full or missing log dir is no reason to drain
        print(f"slurmctl epilog: could not write the hooks log: {exc!r}", file=sys.stderr)


def main() -> int:
    env = os.environ
    log_hook = _no_log
    try:  # every slurmctl import inside: a missing or broken package must not fail the hook
        from slurmctl.ops.hooks.epilog import run_epilog
        from slurmctl.ops.hooks.hooklog import log_hook

        result = run_epilog(env).to_dict()
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        _log_quietly(log_hook, env, ok=False, bug=f"{type(exc).__name__}: {exc}")
        print(f"slurmctl epilog: internal error: {exc!r}", file=sys.stderr)
        return 0
    _log_quietly(log_hook, env, **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
