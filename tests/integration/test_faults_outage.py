"""A hung controller on the real cluster: slurmctld is stopped (SIGSTOP, not killed) for a few
seconds while alice's run trains; `slurmctl status` and `ls` must answer within 5 s from the run
directory, say "Slurm unreachable since ...", exit 3 (slurm-unreachable), and recover once the
controller runs again. Before, both waited 10.4 s for squeue and printed only "Slurm did not answer".

The controller is stopped for at most ~6 s (the two commands run side by side) and ALWAYS continued
in a finally: other tests on the shared cluster see a slow controller, never a dead one.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from .conftest import SLURMCTL, as_user, slurmctl, slurmctl_json
from .test_reliability import submit, wait_for_event

SLURMCTLD_STOP_LIMIT = 10.0  # seconds; the finally continues it whatever happened


def _slurmctld_pid() -> int:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    pid_file = next(line.split("=", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("SlurmctldPidFile"))
    pid = int(Path(pid_file).read_text().split()[0])
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "slurmctld", pid
    return pid


def test_hung_controller_status_and_ls_answer_from_the_run_dir_within_5_s(workdir):
    run = submit(workdir, "faults-outage", ["--steps", "3000", "--sleep", "0.1"], checkpoint={"interval_steps": 20})
    alice = as_user("alice")
    try:
        wait_for_event(run["run_dir"], "start", 1, timeout=120)
        deadline = time.monotonic() + 60
        while not (Path(run["run_dir"]) / "checkpoints" / "latest").exists():
            assert time.monotonic() < deadline, "no checkpoint within 60 s"
            time.sleep(0.5)
        pid = _slurmctld_pid()
        commands = {"status": ["status", run["run_id"], "--json"], "ls": ["ls"]}
        results, took = {}, {}
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            procs = {name: (time.monotonic(), subprocess.Popen(
                alice.argv([*SLURMCTL, *argv]),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(alice.home)))
                for name, argv in commands.items()}
            for name, (began, proc) in procs.items():
                left = max(0.5, SLURMCTLD_STOP_LIMIT - (time.monotonic() - stopped))
                try:
                    out, err = proc.communicate(timeout=left)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, err = proc.communicate()
                results[name] = (proc.returncode, out, err)
                took[name] = time.monotonic() - began
        finally:
            os.kill(pid, signal.SIGCONT)
        print(f"controller stopped {time.monotonic() - stopped:.1f} s; status took {took['status']:.2f} s, "
              f"ls {took['ls']:.2f} s")
        code, out, err = results["status"]
        assert code == 3, (code, out, err)
        shown = json.loads(out)
        assert shown["state"] == "UNREACHABLE" and shown["headline"].startswith("Slurm unreachable since"), shown
        assert shown["phase"] == "training" and shown["last_step"] is not None, shown
        assert shown["latest_checkpoint_step"] is not None and shown["heartbeat_age_seconds"] < 30, shown
        code, out, err = results["ls"]
        assert code == 3 and run["run_id"] in out and "Slurm unreachable since" in err, (code, out, err)
        assert took["status"] < 5.0 and took["ls"] < 5.0, took
        # the controller runs again: the job survived and status recovers (the outage is forgotten)
        deadline = time.monotonic() + 60
        while True:
            again = slurmctl("status", run["run_id"], "--json", check=False)
            if again.returncode == 0:
                break
            assert time.monotonic() < deadline, again.stderr
            time.sleep(1)
        recovered = json.loads(again.stdout)
        assert recovered["state"] == "RUNNING" and recovered["slurm_unreachable_since"] is None, recovered
    finally:
        if slurmctl_json("status", run["run_id"], check=False)["state"] in {"RUNNING", "PENDING"}:
            slurmctl("cancel", run["run_id"], "--now", check=False)
