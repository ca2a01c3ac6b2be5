#!/usr/bin/env bash
# QOS quotas, team fair share and per-user limits (idempotent). Run once after slurmdbd is up:
#   GKE:   kubectl -n slurm exec statefulset/slurm-controller -- bash -s < deploy/slurm/accounting.sh
#   local: deploy/slurm/accounting.sh
# GPU totals follow the node pools' max sizes (deploy/gke/variables.tf: 6+8+6 H100 nodes x 8).
set -euo pipefail
H100_GPUS=${H100_GPUS:-160}
SACCTMGR=(sacctmgr --immediate)

pct() { echo $(( H100_GPUS * $1 / 100 )); }

# QOS: 60/30/10 of the H100s for production/experiments/burst (GrpTRES caps the whole QOS).
"${SACCTMGR[@]}" add qos production experiments burst >/dev/null 2>&1 || true
"${SACCTMGR[@]}" modify qos production set Priority=100 GrpTRES=gres/gpu:h100="$(pct 60)" \
  MaxTRESPerUser=gres/gpu=64
"${SACCTMGR[@]}" modify qos experiments set Priority=50 GrpTRES=gres/gpu:h100="$(pct 30)" \
  MaxTRESPerUser=gres/gpu=32 MaxJobsPerUser=8
# burst soaks up idle capacity (preemption itself is by partition: scheduling.conf)
"${SACCTMGR[@]}" modify qos burst set Priority=10 GrpTRES=gres/gpu:h100="$(pct 10)" \
  MaxTRESPerUser=gres/gpu=16
# dev sessions: one small L4 allocation per user
"${SACCTMGR[@]}" add qos dev >/dev/null 2>&1 || true
"${SACCTMGR[@]}" modify qos dev set Priority=20 MaxTRESPerUser=gres/gpu=1 MaxJobsPerUser=1 MaxWall=04:00:00

# Teams share by Fairshare; big jobs (> 64 GPUs) are limited per user via the QOS above.
for team in ml-research:40 ml-platform:20 ml-applied:40; do
  name=${team%%:*} share=${team##*:}
  "${SACCTMGR[@]}" add account "$name" Description="$name" Organization=ml >/dev/null 2>&1 || true
  "${SACCTMGR[@]}" modify account "$name" set Fairshare="$share" \
    QOS=production,experiments,burst,dev DefaultQOS=experiments
done
