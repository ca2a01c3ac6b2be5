#!/usr/bin/env bash
# QOS tiers with preemption, team fair share, and the users' associations (idempotent). Run after
# slurmdbd is up, and again whenever teams or users change:
#   GKE:   kubectl -n slurm exec -i statefulset/slurm-controller -- \
#            env SLURMCTL_USERS="$(cat users.txt)" bash -s < deploy/slurm/accounting.sh
#   local: SLURMCTL_USERS="alice ml-research" deploy/slurm/accounting.sh
# SLURMCTL_USERS: one "<user> <account>" per line (the LDAP user names; account = a team below).
# Associations are enforced (scheduling.conf AccountingStorageEnforce), so a user without one
# cannot submit at all: the script refuses to run without users.
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

# Partitions that take only some QOS: "<partition>:<QOS allowed>:<default QOS>", as partitions.conf's
# AllowQos. A user's association for that partition holds exactly these QOS, so any other QOS is
# refused at submit ("Invalid qos specification"; associations and qos are enforced) and a job sent
# there without --qos gets the default. scheduling.conf's EnforcePartLimits=NO cannot refuse it: it
# must let jobs pend on partitions scaled to zero. h100-ondemand: production only, the one tier
# there, so nothing preempts an on-demand job.
PARTITION_QOS="h100-ondemand:production:production l4-dev:dev,experiments:experiments"

# Users: the associations that let them submit (new ones added, existing ones kept): one for the
# account (every partition) and one per partition of PARTITION_QOS.
while read -r user account; do
  [[ -z $user ]] && continue
  "${SACCTMGR[@]}" add user "$user" Account="$account" DefaultAccount="$account" >/dev/null 2>&1 || true
  for rule in $PARTITION_QOS; do
    IFS=: read -r partition qos default <<< "$rule"
    "${SACCTMGR[@]}" add user "$user" Account="$account" Partition="$partition" >/dev/null 2>&1 || true
    # the default first (the new association inherits the account's QOS, which hold it; sacctmgr
    # refuses a QOS list without the association's current default), then the QOS list
    "${SACCTMGR[@]}" modify user where name="$user" account="$account" partition="$partition" \
      set DefaultQOS="$default" >/dev/null 2>&1 || true
    "${SACCTMGR[@]}" modify user where name="$user" account="$account" partition="$partition" \
      set QOS="$qos" >/dev/null 2>&1 || true
    have=$(sacctmgr --noheader --parsable2 show assoc where user="$user" account="$account" \
             partition="$partition" format=qos,defaultqos)
    if [[ $have != "$qos|$default" ]]; then
      echo "accounting.sh: $user's association in $account for $partition has QOS '$have'," \
           "want '$qos|$default'" >&2
      exit 1
    fi
  done
  if ! sacctmgr --noheader --parsable2 show assoc where user="$user" account="$account" format=user \
       | grep -qx "$user"; then
    echo "accounting.sh: no association for $user in $account after adding it" >&2
    exit 1
  fi
done <<< "$users"
