"""The requeue expediter under proctrack/cgroup, on real daemons: a throwaway one-node Slurm
cluster (throwaway_slurm.py) with ProctrackType=proctrack/cgroup (cgroup v1 freezer, this
machine's), our Epilog (plugins/epilog.py from this checkout) with SLURMCTL_EPILOG_EXPEDITER=1.

alice's run requeues itself once (as `end` does). The process its batch script detached into its
own session dies with the job's cgroup (the expediter of runtime/attempt.py would too); the
expediter the epilog starts as alice, outside the job's cgroup, ends Slurm's BeginTime wait
(cred_expire, 121 s on 22.05): the job runs again within seconds.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.test_node_health import job, wait_for
from tests.integration.throwaway_slurm import ThrowawayCluster

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "cgroup-20261201-c9c9"
SCRIPT = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  python3 -c "import subprocess
p = subprocess.Popen(['sleep', '300'], start_new_session=True)
print('detached', p.pid)"
  grep freezer /proc/self/cgroup
  scontrol requeue "$SLURM_JOB_ID"
  sleep 60
fi
echo "attempt ${SLURM_RESTART_COUNT:-0} done"
"""


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0 or not shutil.which("slurmctld") or not Path("/sys/fs/cgroup/freezer").is_dir():
        pytest.fail("needs root, Slurm and a cgroup v1 freezer hierarchy")
    c = ThrowawayCluster("cgroup")
    try:
        (c.dir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        env = " ".join([f"SLURM_CONF={c.conf}", f"SLURMCTL_LOCAL_DIR={c.dir}/hookstate",
                        f"SLURMCTL_HOOKS_LOG={c.dir}/log/hooks.jsonl", "SLURMCTL_MIN_FREE_SCRATCH_MB=1",
                        "SLURMCTL_MIN_FREE_SHM_MB=1", "SLURMCTL_EPILOG_EXPEDITER=1", "SLURMCTL_DATA_CACHE_DIRS="])
        epilog = c.dir / "epilog.sh"
        epilog.write_text(f"#!/bin/sh\nexport {env}\nexec /usr/bin/python3 {REPO}/plugins/epilog.py\n")
        epilog.chmod(0o755)
        c.write(f"Epilog={epilog}\nSelectType=select/cons_tres\n"
                "PartitionName=main Nodes=ALL Default=YES MaxTime=60 State=UP\n", {"cg1": ""})
        c.conf.write_text(c.conf.read_text().replace("ProctrackType=proctrack/linuxproc",
                                                     "ProctrackType=proctrack/cgroup"))
        c.start()
        c.start_slurm()
        yield c
    finally:
        c.close()


def test_the_epilog_starts_the_expediter_outside_the_jobs_cgroup(cluster):
    c = cluster
    script = c.dir / "jobs" / "requeue-once.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    out = subprocess.run(["runuser", "-u", "alice", "--", "env", f"SLURM_CONF={c.conf}", "PATH=/usr/bin:/bin",
                          "sbatch", "--parsable", "--requeue", f"--comment=slurmctl:{RUN_ID}", "--time=2",
                          f"--output={c.dir}/jobs/%j.out", "--open-mode=append", str(script)],
                         capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip())
    log = c.dir / "jobs" / f"{job_id}.out"
    wait_for("the requeue", lambda: " Restarts=1 " in c.run(["scontrol", "show", "job", "-o", str(job_id)]).stdout,
             60, show=lambda: log.read_text() if log.exists() else "")
    requeued = time.monotonic()
    done = wait_for("attempt 1 done", lambda: job(c, job_id)["state"] == "COMPLETED" and job(c, job_id), 100,
                    show=lambda: c.log("hooks.jsonl")[-2000:] + (log.read_text() if log.exists() else ""))
    waited = time.monotonic() - requeued
    text = log.read_text()
    alice = pwd.getpwnam("alice").pw_uid
    assert "attempt 1 done" in text and f"freezer:/slurm_cg1/uid_{alice}/job_{job_id}/" in text, text
    assert "requeue expediter started as root" in c.log("hooks.jsonl")
    assert waited < 60, (waited, done)  # Slurm's own wait is 121 s
    detached = int(text.split("detached ")[1].split()[0])
    assert not Path(f"/proc/{detached}").exists(), "the batch script's detached process outlived the job's cgroup"
    print(f"requeue to completed again: {waited:.1f} s (Slurm's BeginTime wait alone is 121 s)")
