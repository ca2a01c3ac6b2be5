#!/usr/bin/env bash
# QOS tiers with preemption, team fair share, and the users' associations (idempotent). Run after
# slurmdbd is up, and again whenever teams or users change:
#   GKE:   kubectl -n slurm exec -i statefulset/slurm-controller -c reconfigure -- \
#            env SLURMCTL_USERS="$(cat users.txt)" bash -s < deploy/slurm/accounting.sh
#          (deploy/RUNBOOK.md step 9: the `reconfigure` container, slurmctld's may be crash-looping)
#   local: SLURMCTL_USERS="alice ml-research" deploy/slurm/accounting.sh
# SLURMCTL_USERS: one "<user> <account>" per line (the LDAP user names; account = a team below).
# Associations are enforced (scheduling.conf AccountingStorageEnforce), so a user without one
# cannot submit at all: the script refuses to run without users. A user in several teams is not
# supported here (one line, one account per user).
# GPU totals follow the node pools' max sizes (deploy/gke/variables.tf: 6+8+6 H100 nodes x 8).
set -euo pipefail
H100_GPUS=${H100_GPUS:-160}
# seconds between the drain signal and the requeue of a preempted job (PreemptType=preempt/qos takes
# the preempted job's QOS GraceTime; the partitions' GraceTime is not read)
GRACE_TIME=${GRACE_TIME:-120}
SACCTMGR=(sacctmgr --immediate)
TEAMS="ml-research:40 ml-platform:20 ml-applied:40"
ACCOUNTS=$(for team in $TEAMS; do printf '%s ' "${team%%:*}"; done)

users=${SLURMCTL_USERS:-}
if [[ -z ${users//[[:space:]]/} ]]; then
  echo "accounting.sh: SLURMCTL_USERS is empty. Give one '<user> <account>' line per user" \
       "(accounts: ${ACCOUNTS% }); without an association nobody can submit." >&2
  exit 2
fi
# validate every line before changing anything: names only, a known team
while read -r user account extra; do
  [[ -z $user ]] && continue
  if [[ -n ${extra:-} || ! $user =~ ^[a-z_][a-z0-9_.-]{0,31}$ || " $ACCOUNTS" != *" $account "* ]]; then
    echo "accounting.sh: bad SLURMCTL_USERS line '$user $account${extra:+ $extra}': want '<user> <account>'" \
         "with a POSIX user name and one of: ${ACCOUNTS% }" >&2
    exit 2
  fi
done <<< "$users"

pct() { echo $(( H100_GPUS * $1 / 100 )); }

# QOS: 60/30/10 of the H100s for production/experiments/burst (GrpTRES caps the whole QOS).
# Preemption (PreemptType=preempt/qos): a higher tier requeues a lower tier's job on the same
# nodes after GraceTime (the drain signal, PreemptParameters=send_user_signal, saves a checkpoint).
# preempt/qos reads only the QOS (its Preempt= list, PreemptMode and GraceTime): a partition's
# PreemptMode=OFF is ignored. So a partition that must never preempt admits no two QOS of which one
# preempts the other (partitions.conf AllowQos; checked by the deploy tests and on real daemons).
"${SACCTMGR[@]}" add qos production experiments burst dev >/dev/null 2>&1 || true
"${SACCTMGR[@]}" modify qos burst set Priority=10 GrpTRES=gres/gpu="$(pct 10)" \
  MaxTRESPerUser=gres/gpu=16 PreemptMode=REQUEUE GraceTime="$GRACE_TIME"
"${SACCTMGR[@]}" modify qos experiments set Priority=50 GrpTRES=gres/gpu="$(pct 30)" \
  MaxTRESPerUser=gres/gpu=32 MaxJobsPerUser=8 Preempt=burst PreemptMode=REQUEUE GraceTime="$GRACE_TIME"
"${SACCTMGR[@]}" modify qos production set Priority=100 GrpTRES=gres/gpu="$(pct 60)" \
  MaxTRESPerUser=gres/gpu=64 Preempt=experiments,burst PreemptMode=REQUEUE GraceTime="$GRACE_TIME"
# dev sessions: one small L4 allocation per user; the partition QOS of l4-dev (partitions.conf)
"${SACCTMGR[@]}" modify qos dev set Priority=20 MaxTRESPerUser=gres/gpu=1 MaxJobsPerUser=1 MaxWall=04:00:00

# Teams share by Fairshare; big jobs (> 64 GPUs) are limited per user via the QOS above.
for team in $TEAMS; do
  name=${team%%:*} share=${team##*:}
  "${SACCTMGR[@]}" add account "$name" Description="$name" Organization=ml >/dev/null 2>&1 || true
  "${SACCTMGR[@]}" modify account "$name" set Fairshare="$share" \
    QOS=production,experiments,burst,dev DefaultQOS=experiments
done

# Users: ONE association each, in their team's account, for every partition: a user's fair share
# and usage live in one place, and a job may name several partitions (`-p h100-spot,h100-flex`, or
# `-p h100-ondemand,h100-spot`: Slurm refuses any multi-partition job of a user who has an
# association bound to a partition). Which QOS a partition takes is the partition's own AllowQos
# (partitions.conf): a job under another QOS is accepted and pends there with reason QOSNotAllowed
# ("Job's QOS not permitted to use this partition") and never starts, so nothing preempts an
# on-demand job; slurmctl sends the partition's QOS (site.yaml `qos`), plain sbatch users pass
# `--qos=production` on h100-ondemand. New users are added, existing ones kept; an association bound
# to a partition (what this script made before) is removed, so that re-running it moves users over.
while read -r user account; do
  [[ -z $user ]] && continue
  "${SACCTMGR[@]}" add user "$user" Account="$account" DefaultAccount="$account" >/dev/null 2>&1 || true
  sacctmgr --noheader --parsable2 show assoc where user="$user" format=account,partition |
    while IFS='|' read -r bound_account partition; do
      [[ -n $partition ]] || continue
      "${SACCTMGR[@]}" delete user where name="$user" account="$bound_account" partition="$partition" >/dev/null
    done
  have=$(sacctmgr --noheader --parsable2 show assoc where user="$user" format=account,partition)
  if [[ $have != "$account|" ]]; then
    echo "accounting.sh: $user's associations are '${have//$'\n'/, }', want one in $account for every" \
         "partition ('$account|')" >&2
    exit 1
  fi
done <<< "$users"
