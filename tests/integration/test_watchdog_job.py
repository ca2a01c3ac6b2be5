"""A real Slurm job (script written here) whose training hangs after step 5: the watchdog sidecar
in the batch script catches it within the window and ends the srun step, so the job fails fast.
The job is alice's; its run directory is a private directory of hers."""

import json
import subprocess
import sys
import time

from .conftest import give

TRAIN = """
import time
from slurmctl.runtime import Runtime
rt = Runtime.from_env()
for step in range(1, 6):
    rt.log(step, loss=1.0 / step)
    time.sleep(0.2)
time.sleep(3600)   # hung after step 5
"""


def test_a_training_that_hangs_after_step_5_is_ended_by_the_watchdog(workdir, alice):
    run_dir = workdir / "wd-hang"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "train.py").write_text(TRAIN)
    script = run_dir / "job.sbatch"
    script.write_text(f"""#!/bin/bash
#SBATCH -p l4-dev
#SBATCH -o {run_dir}/logs/%j.out
#SBATCH -t 5
export SLURMCTL_RUN_DIR={run_dir}
"{sys.executable}" -m slurmctl.runtime.watchdog --check 0.5s --stall 2s --startup 20s --drain-timeout 2s \
  --parent-pid $$ &
srun "{sys.executable}" {run_dir}/train.py
echo "srun exited $?"
""")
    give(run_dir)
    job = alice.sbatch(str(script))
    try:
        deadline = time.monotonic() + 90
        state = ""
        while time.monotonic() < deadline:
            state = subprocess.run(["sacct", "-n", "-X", "-P", "-j", str(job), "-o", "State"],
                                   capture_output=True, text=True).stdout.strip()
            if state and state not in ("PENDING", "RUNNING", "COMPLETING"):
                break
            time.sleep(1)
        log = (run_dir / "logs" / f"{job}.out").read_text()
        watchdog = json.loads((run_dir / "watchdog" / "state.json").read_text())
        heartbeat = json.loads((run_dir / "heartbeat.json").read_text())
        ended = (run_dir / "logs" / f"{job}.out").stat().st_mtime
    finally:
        alice.scancel(job)
    assert "HUNG: no progress in field 'step'" in log and "last value 5" in log, log
    assert watchdog["state"] == "killed" and watchdog["last_value"] == 5
    assert "srun exited" in log and "srun exited 0" not in log
    latency = ended - heartbeat["time"]
    print(f"watchdog: last progress -> step ended {latency:.1f} s (stall 2 s + drain 2 s + KillWait)")
    assert latency < 2 + 2 + 10 + 8
