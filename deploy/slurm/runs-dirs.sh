#!/usr/bin/env bash
# The runs root and one private run directory per user, on a fresh share (idempotent; run with
# accounting.sh whenever users change):
#   GKE:   kubectl -n slurm exec -i deploy/slurm-login-login -- \
#            env SLURMCTL_USERS="$(cat users.txt)" bash -s < deploy/slurm/runs-dirs.sh
#          (deploy/RUNBOOK.md step 9: the login pod mounts the share and resolves the LDAP users)
# The runs root (site.yaml runs_root) is root's, 0755: users cannot make each other's directories;
# each user's is theirs, 0700 (slurmctl checks both before it writes a run). An existing user
# directory is left as it is. deploy/local/up makes the same for the local cluster.
set -euo pipefail
SITE=${SLURMCTL_SITE:-/etc/slurmctl/site.yaml}
users=${SLURMCTL_USERS:-}
if [[ -z ${users//[[:space:]]/} ]]; then
  echo "runs-dirs.sh: SLURMCTL_USERS is empty. Give one '<user> <account>' line per user (users.txt)." >&2
  exit 2
fi
runs_root=$(sed -n 's/^runs_root:[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$SITE")
if [[ ! $runs_root =~ ^/[A-Za-z0-9._/-]+$ ]]; then
  echo "runs-dirs.sh: no absolute runs_root in $SITE ('$runs_root'): set runs_root there." >&2
  exit 2
fi
# validate every line (and that every user resolves) before creating anything
while read -r user _account; do
  [[ -z $user ]] && continue
  if [[ ! $user =~ ^[a-z_][a-z0-9_.-]{0,31}$ ]] || ! id -u -- "$user" >/dev/null 2>&1; then
    echo "runs-dirs.sh: '$user' is not a user this pod knows (LDAP/SSSD): fix users.txt or the directory." >&2
    exit 2
  fi
done <<< "$users"
install -d -m 0755 -o root -g root -- "$runs_root"
while read -r user _account; do
  [[ -z $user ]] && continue
  dir=$runs_root/$user
  if [[ ! -e $dir && ! -L $dir ]]; then
    install -d -m 0700 -o "$user" -g "$(id -gn -- "$user")" -- "$dir"
  fi
  echo "runs-dirs.sh: $dir: $(stat -c '%U %a' -- "$dir")"
done <<< "$users"
