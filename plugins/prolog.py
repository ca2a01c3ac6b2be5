#!/usr/bin/env python3
"""Slurm Prolog (slurmd, as root, NO PATH): thin entry point into slurmctl.ops.hooks.prolog.

Exit 0: node healthy, scratch dir and GPU map written. Exit 1: a health check failed; the node is
drained with "slurmctl prolog: <reason>" (sinfo -R) and Slurm requeues the job held. Anything else
that goes wrong in our code (a missing or broken slurmctl, a bug, a failing log or drain call)
logs and exits 0: a failing prolog drains the node, and our own fault must not take every node of
the fleet down. Runs with any python3 >= 3.11 (standard library only): the repo root is put on sys.path.
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
        log_hook(env, "prolog", STARTED, **fields)
    except Exception as exc:  # noqa: BLE001 - a full or missing log dir is no reason to drain
        print(f"slurmctl prolog: could not write the hooks log: {exc!r}", file=sys.stderr)


def main() -> int:
    env = os.environ
    log_hook = _no_log
    try:  # every slurmctl import inside: a missing or broken package must not fail the hook
        from slurmctl.ops.hooks.config import HookConfig
        from slurmctl.ops.hooks.hooklog import log_hook
        from slurmctl.ops.hooks.prolog import drain_node, run_prolog

        cfg = HookConfig.from_env(env)
        result = run_prolog(env, cfg)
        verdict = result.to_dict()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - our bug, not the node's health
        _log_quietly(log_hook, env, ok=True, bug=f"{type(exc).__name__}: {exc}")
        print(f"slurmctl prolog: internal error, node NOT drained: {exc!r}", file=sys.stderr)
        return 0
    if result.ok:
        _log_quietly(log_hook, env, **verdict)
        return 0
    # The deliberate deny: the health check failed. Exit 1 even if draining or logging it fails
    # (Slurm drains the node itself on a failing prolog; our scontrol call only adds the reason).
    try:
        drained = drain_node(cfg, result.reason)
    except Exception as exc:  # noqa: BLE001
        drained = None
        print(f"slurmctl prolog: could not set the drain reason: {exc!r}", file=sys.stderr)
    _log_quietly(log_hook, env, drained=drained, **verdict)
    print(f"slurmctl prolog: {result.reason}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
