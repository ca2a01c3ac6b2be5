"""Prolog/epilog really invoked by slurmd on the local cluster, the prolog-failure drain, and 200
concurrent epilogs. Evidence comes from <state>/log/hooks.jsonl and the cost-record spool. The jobs
are alice's; root only does what slurmd and an operator do (run the hooks, plant the test trigger,
resume the node)."""

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

from .conftest import REPO, as_user

STATE = Path(os.environ.get("SLURMCTL_LOCAL_DIR", "/var/lib/slurmctl-local"))
HOOKS_LOG = STATE / "log" / "hooks.jsonl"


ALICE = as_user("alice")


def hook_lines(job_id: int, timeout: float = 40) -> dict:
    """{'prolog': line, 'epilog': line} for the job, waiting for the epilog."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {}
        for line in HOOKS_LOG.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("job_id") == str(job_id):
                found[rec["hook"]] = rec
        if "epilog" in found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"no epilog line for job {job_id} in {HOOKS_LOG} after {timeout} s")


def test_hooks_kill_orphans_clean_shm_and_write_the_cost_record():
    tag = f"plug-{time.strftime('%Y%m%d')}-{uuid.uuid4().hex[:4]}"  # a run id: the record keeps only those
    seconds = f"300.{uuid.uuid4().int % 10**8:08d}"  # a unique command line to find the orphan by
    shm = Path("/dev/shm") / f"{tag}-segment"
    script = (f"echo data > {shm}\n"
              f"(setsid sleep {seconds} </dev/null >/dev/null 2>&1 &)\n"   # double fork: escapes linuxproc
              "sleep 1\nexit 0\n")
    job = ALICE.sbatch("-p", "l4-dev", "--gres=gpu:l4:1", f"--comment=slurmctl:{tag}", "-o", "/dev/null",
                 "--wrap", script)
    try:
        lines = hook_lines(job)
    finally:
        ALICE.scancel(job)
    assert lines["prolog"]["ok"] is True and lines["prolog"]["context"] == "prolog_slurmd"
    assert lines["prolog"]["user"] == "alice"
    assert any(n.startswith("gpu map") for n in lines["prolog"]["notes"])
    epilog = lines["epilog"]
    assert any(n.startswith("killed") and f"(sleep {seconds})" in n for n in epilog["notes"]), epilog
    assert not shm.exists()
    assert subprocess.run(["pgrep", "-f", f"sleep {seconds}"], capture_output=True).returncode == 1
    node = epilog["node"]
    assert not (STATE / "gpu-job-map" / node / lines["prolog"]["gpus"]).exists()
    assert not (STATE / "scratch" / node / str(job)).exists()
    [path] = [n.split(" ", 2)[2] for n in epilog["notes"] if n.startswith("cost record /")]
    assert Path(path).parent == STATE / "cost-records" and Path(path).name.startswith(f"{job}.0.")
    record = json.loads(Path(path).read_text())
    assert record["run_id"] == tag and record["gpu_model"] == "l4" and record["gpu_count"] == 1
    assert record["schema_version"] == 1 and record["exit_code"] == "0:0" and record["start_time"]


def test_failing_prolog_drains_the_node_with_a_readable_reason():
    node, tag = "h100-3", f"plug-fail-{uuid.uuid4().hex[:8]}"
    trigger = STATE / "test-triggers" / "prolog-fail" / f"slurmctl:{tag}"
    trigger.parent.mkdir(parents=True, exist_ok=True)
    trigger.touch()
    job = None
    try:
        job = ALICE.sbatch("-p", "h100-ondemand", "-w", node, "--gres=gpu:h100:1", f"--comment=slurmctl:{tag}",
                     "-o", "/dev/null", "--wrap", "true")
        reason = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "slurmctl prolog" not in reason:
            reason = subprocess.run(["sinfo", "-h", "-R", "-n", node, "-o", "%100E"],
                                    capture_output=True, text=True).stdout.strip()
            time.sleep(0.5)
        assert reason.startswith(f"slurmctl:[node_problem] trigger: test trigger prolog-fail/slurmctl:{tag}"), reason
        state = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T %r"], capture_output=True, text=True).stdout
        assert "held" in state.lower(), state
    finally:
        trigger.unlink(missing_ok=True)
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
        ALICE.scancel(job)
    assert "drain" not in subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], capture_output=True,
                                         text=True).stdout


def test_200_concurrent_epilogs_write_200_records(tmp_path):
    spool = tmp_path / "spool"
    base = {"SLURMCTL_LOCAL_DIR": str(tmp_path), "SLURMCTL_COST_SPOOL": str(spool),
            "SLURMD_NODENAME": "h100-1", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_JOB_USER": "nobody",
            "SLURM_JOB_UID": "65534", "SLURM_JOB_ACCOUNT": "ml-research", "SLURM_JOB_PARTITION": "h100-spot",
            "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_GPUS": "0,1", "SLURM_JOB_EXIT_CODE": "0",
            "SLURM_JOB_EXIT_CODE2": "0:0"}
    procs = []
    for i in range(200):
        env = {**base, "SLURM_JOB_ID": str(9_000_000 + i), "SLURM_JOB_RESTART_COUNT": str(i % 3),
               "SLURM_JOB_COMMENT": f"slurmctl:bulk-{i}-20261130-0abc"}
        procs.append(subprocess.Popen(["/usr/bin/python3", str(REPO / "plugins" / "epilog.py")], env=env))
    assert [p.wait(timeout=120) for p in procs] == [0] * 200
    names = sorted(p.name for p in spool.iterdir())
    assert len(names) == 200 and not [n for n in names if n.startswith(".")]
    records = [json.loads((spool / n).read_text()) for n in names]
    assert {r["run_id"] for r in records} == {f"bulk-{i}-20261130-0abc" for i in range(200)}
