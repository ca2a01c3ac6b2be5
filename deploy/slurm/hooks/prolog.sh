#!/bin/sh
# slurmctl's Prolog on GKE: the Slinky chart puts this file in its prologScripts ConfigMap and the operator
# writes the Prolog= line (RUNBOOK step 8). slurmd runs it as root with NO PATH and no job environment
# beyond SLURM_*; it runs plugins/prolog.py from the slurmd image (deploy/images/slurmd).
# Never fails closed for our own reasons (a failing prolog drains the node): no slurmctl in the image,
# no python3, or an unreadable settings file -> exit 0. Only the hook's deliberate verdict (the
# prolog's failed health check, exit 1) reaches slurmd.
home=${SLURMCTL_HOME:-/opt/slurmctl}
hook=$home/plugins/prolog.py
[ -r "$hook" ] && [ -x /usr/bin/python3 ] || exit 0
# Settings (SLURMCTL_COST_SPOOL, ...): the slurmctl-hooks ConfigMap of deploy/chart, mounted read-only.
# Sourced only if it parses: a shell error in a sourced file would end this script non-zero.
settings=${SLURMCTL_HOOKS_ENV:-/etc/slurmctl/hooks/hooks.env}
if [ -r "$settings" ] && (set -a; . "$settings") >/dev/null 2>&1; then
  set -a; . "$settings"; set +a
fi
exec /usr/bin/python3 "$hook"
