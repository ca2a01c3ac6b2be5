"""Integration tests run against the REAL local cluster (deploy/local/up; scripts/test starts it).

The cluster is shared: tests must tolerate other jobs, use their own run names, and cancel only
the jobs they created.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmctl.submit.spec import load_site_config

REPO = Path(__file__).resolve().parents[2]
SLURMCTL = [sys.executable, "-m", "slurmctl.cli"]


@pytest.fixture(scope="session", autouse=True)
def cluster():
    """Fail (never skip) when the cluster is not up: CI must be red if Slurm is broken."""
    if shutil.which("sinfo") is None:
        pytest.fail("Slurm is not installed; run deploy/local/up (scripts/test does).")
    probe = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.fail(f"the local Slurm cluster is not answering ({probe.stderr.strip()}); run deploy/local/up")
    return load_site_config()


def slurmctl(*args, check=True, env=None, timeout=300) -> subprocess.CompletedProcess:
    """Run the real CLI as a user would."""
    result = subprocess.run([*SLURMCTL, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        raise AssertionError(f"slurmctl {' '.join(map(str, args))} -> {result.returncode}\n"
                             f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


def slurmctl_json(*args, **kwargs):
    args = list(args)
    at = args.index("--") if "--" in args else len(args)  # after `--` everything goes to sbatch
    return json.loads(slurmctl(*args[:at], "--json", *args[at:], **kwargs).stdout)


def wait_for_state(run_id: str, states: set[str], timeout: float = 240, poll: float = 2.0) -> dict:
    """Poll `slurmctl status --json` until the run's state is one of `states`."""
    deadline = time.monotonic() + timeout
    status = {}
    while time.monotonic() < deadline:
        status = slurmctl_json("status", run_id)
        if status["state"] in states:
            return status
        time.sleep(poll)
    raise AssertionError(f"{run_id} did not reach {states} in {timeout} s; last status: {status}")


def write_run(directory: Path, spec: dict, files: dict[str, str] | None = None) -> Path:
    """A run.yaml (from a dict) plus code files in `directory`; returns the run.yaml path."""
    import yaml

    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (directory / name).write_text(text)
    path = directory / "run.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _previous_steps_finished(job_id: int) -> bool:
    """Every step of earlier attempts has an End in accounting (its processes are gone from the node)."""
    out = subprocess.run(["sacct", "-j", str(job_id), "--duplicates", "-n", "-P", "-o", "JobID,End"],
                         capture_output=True, text=True).stdout
    steps = [line.split("|") for line in out.splitlines() if "." in line.split("|")[0]]
    return all(end not in {"Unknown", ""} for _, end in steps)


def start_requeued_now(job_id: int, timeout: float = 120) -> None:
    """Skip the ~120 s BeginTime of a requeued job. Starting it while the previous attempt's step is
    still winding down on the node makes slurmd refuse the launch ("Job credential revoked"), so
    wait for PENDING (BeginTime) AND for every earlier step to have ended."""
    from slurmctl.slurm.client import SlurmClient

    client = SlurmClient()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.jobs([job_id]).get(job_id)
        if job and job.state == "PENDING" and job.reason == "BeginTime" and _previous_steps_finished(job_id):
            client.update_job(job_id, StartTime="now")
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} was not requeued (PENDING BeginTime, steps ended) within {timeout} s")
