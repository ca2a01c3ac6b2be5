#!/usr/bin/env python3
"""Slurm Prolog (slurmd, as root, NO PATH): thin entry point into slurmctl.ops.hooks.prolog.

Exit 0: node healthy, scratch dir and GPU map written. Exit 1: a health check failed; the node is
drained with "slurmctl prolog: <reason>" (sinfo -R) and Slurm requeues the job held. A bug in our
code exits 0 (logged): it must not take every node of the fleet down.
Runs with any python3 >= 3.11 (standard library only): the repo root is put on sys.path.
"""
import os
import sys
import time

STARTED = time.monotonic()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _no_log(env, hook, started, **extra) -> None:
    """Used when even the hooks log cannot be imported (the package is missing or broken)."""


def main() -> int:
    env = os.environ
    log_hook = _no_log
    try:  # every slurmctl import inside: a missing or broken package must not fail the hook
        from slurmctl.ops.hooks.config import HookConfig
        from slurmctl.ops.hooks.hooklog import log_hook
        from slurmctl.ops.hooks.prolog import drain_node, run_prolog

        cfg = HookConfig.from_env(env)
        result = run_prolog(env, cfg)
    except Exception as exc:  # noqa: BLE001
        log_hook(env, "prolog", STARTED, ok=True, bug=f"{type(exc).__name__}: {exc}")
        print(f"slurmctl prolog: internal error, node NOT drained: {exc!r}", file=sys.stderr)
        return 0
    drained = drain_node(cfg, result.reason) if not result.ok else None
    log_hook(env, "prolog", STARTED, drained=drained, **result.to_dict())
    if not result.ok:
        print(f"slurmctl prolog: {result.reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
