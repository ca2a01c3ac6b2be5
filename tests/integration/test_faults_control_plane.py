"""Control-plane outages on the real cluster, while alice's runs train:

* slurmctld restarted mid-run (SIGTERM: it saves its state and exits; then started again the way
  deploy/local/up starts it): while it is down `status` answers from the run directory (exit 3,
  "Slurm unreachable since"); once it is back the job is still running, its training never paused,
  and status recovers.
* slurmdbd down: `submit` works and the job trains and ends; slurmctld queues the accounting
  records, and once slurmdbd is back sacct shows the job as completed: nothing lost.

These disturb the shared cluster: each daemon is down for at most ~60 s (asserted), and is ALWAYS
started again in a finally, exactly as deploy/local/up starts it.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from .conftest import slurmctl, slurmctl_json, wait_ended_in_sacct
from .test_reliability import submit, wait_for_event

OUTAGE_LIMIT = 60.0  # seconds a daemon may be down


def _config(key: str) -> str:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    return next(line.split("=", 1)[1].strip() for line in out.splitlines() if line.split("=")[0].strip() == key)


def _pid(pid_file: Path, comm: str) -> int | None:
    try:
        pid = int(pid_file.read_text().split()[0])
        return pid if Path(f"/proc/{pid}/comm").read_text().strip() == comm else None
    except (OSError, ValueError, IndexError):
        return None


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]:
        assert time.monotonic() < deadline, f"{pid} did not stop"
        time.sleep(0.1)


def _start(daemon: str, log_dir: Path, ready) -> None:
    """`<daemon> </dev/null >>LOG/<daemon>.out 2>&1` as deploy/local/up runs it (it daemonizes), then
    wait until it answers."""
    with (log_dir / f"{daemon}.out").open("a") as log:
        subprocess.run([daemon], stdin=subprocess.DEVNULL, stdout=log, stderr=log, check=True, timeout=60,
                       env={**os.environ, "SLURM_CONF": SLURM_CONF})
    deadline = time.monotonic() + 30
    while not ready():
        assert time.monotonic() < deadline, f"{daemon} did not answer 30 s after its start"
        time.sleep(0.2)


def _ctld_up() -> bool:
    return "is UP" in subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10).stdout


def _dbd_up() -> bool:
    return subprocess.run(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"], capture_output=True,
                          timeout=10).returncode == 0


SLURM_CONF = _config("SLURM_CONF")
RUN_DIR = Path(_config("SlurmctldPidFile")).parent  # deploy/local/up's pid files live together
LOG_DIR = Path(_config("SlurmctldLogFile")).parent


def _beat(run_dir: str) -> dict:
    return json.loads((Path(run_dir) / "heartbeat.json").read_text())


def test_slurmctld_restarted_mid_run_the_job_survives_and_status_recovers(workdir):
    run = submit(workdir, "faults-ctld", ["--steps", "3000", "--sleep", "0.1"], checkpoint={"interval_steps": 20})
    ctld_file = Path(_config("SlurmctldPidFile"))
    try:
        wait_for_event(run["run_dir"], "start", 1, timeout=120)
        time.sleep(3)
        pid = _pid(ctld_file, "slurmctld")
        assert pid, "slurmctld pid"
        down_at = time.monotonic()
        try:
            _stop(pid)
            step_down = _beat(run["run_dir"])["step"]
            began = time.monotonic()
            while_down = slurmctl("status", run["run_id"], "--json", check=False)
            answered = time.monotonic() - began
            time.sleep(3)
        finally:
            if _pid(ctld_file, "slurmctld") is None:
                _start("slurmctld", LOG_DIR, _ctld_up)
        outage = time.monotonic() - down_at
        print(f"slurmctld down {outage:.1f} s; status answered in {answered:.2f} s while it was down")
        assert outage < OUTAGE_LIMIT
        assert while_down.returncode == 3, (while_down.returncode, while_down.stderr)
        shown = json.loads(while_down.stdout)
        assert shown["headline"].startswith("Slurm unreachable since") and shown["last_step"] is not None, shown
        assert answered < 5.0
        deadline = time.monotonic() + 60
        while True:
            again = slurmctl("status", run["run_id"], "--json", check=False)
            if again.returncode == 0 and json.loads(again.stdout)["state"] == "RUNNING":
                break
            assert time.monotonic() < deadline, again.stdout + again.stderr
            time.sleep(1)
        recovered = json.loads(again.stdout)
        assert recovered["slurm_unreachable_since"] is None and recovered["job_id"] == run["job_id"], recovered
        assert recovered["last_step"] > step_down  # the training went on through the outage
        assert [e["event"] for e in json.loads(json.dumps(_events(run)))] == ["submitted", "start"]
    finally:
        slurmctl("cancel", run["run_id"], "--now", check=False)


def _events(run: dict) -> list[dict]:
    lines = (Path(run["run_dir"]) / "attempts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_slurmdbd_down_submit_and_training_go_on_and_accounting_catches_up(workdir):
    dbd_file = RUN_DIR / "slurmdbd.pid"
    pid = _pid(dbd_file, "slurmdbd")
    assert pid, f"no slurmdbd in {dbd_file}"
    down_at = time.monotonic()
    run = None
    try:
        _stop(pid)
        run = submit(workdir, "faults-dbd", ["--steps", "40", "--sleep", "0.1"], checkpoint={"interval_steps": 10})
        (end,) = wait_for_event(run["run_dir"], "end", 1, timeout=OUTAGE_LIMIT - 10)
        assert end["outcome"] == "completed" and end["last_step"] == 39, end
        assert not _dbd_up()  # all of it happened while slurmdbd was down
    finally:
        if _pid(dbd_file, "slurmdbd") is None:
            _start("slurmdbd", LOG_DIR, _dbd_up)
    outage = time.monotonic() - down_at
    print(f"slurmdbd down {outage:.1f} s")
    assert outage < OUTAGE_LIMIT + 15  # the limit, plus slurmdbd's own start
    # slurmctld kept the job's records and sends them now that slurmdbd is back
    wait_ended_in_sacct({run["job_id"]: run["run_id"]}, timeout=90)
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "State,ExitCode", "-j", str(run["job_id"])],
                         capture_output=True, text=True, timeout=30).stdout.split()
    assert out == ["COMPLETED|0:0"], out
    assert slurmctl_json("status", run["run_id"])["state"] == "COMPLETED"
