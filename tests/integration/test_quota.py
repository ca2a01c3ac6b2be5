"""On the real cluster: alice's run pending for a real QOS GPU limit shows the limit and the usage.

Needs AccountingStorageEnforce=associations,limits,qos (deploy/local/up sets it). The operator (root)
creates a QOS of the test's own (MaxTRESPerUser=gres/gpu=1), gives alice access to it, and removes
both in `finally`; alice submits and reads the status.
"""

import os
import subprocess

from .conftest import slurmctl, slurmctl_json, wait_for_state, write_run


def sacctmgr(*args: str) -> None:
    subprocess.run(["sacctmgr", "-i", *args], check=True, capture_output=True, text=True, timeout=30)


def test_qos_gpu_limit_shows_limit_and_usage(workdir):
    qos = f"t4quota{os.getpid()}"
    runs = []
    sacctmgr("add", "qos", qos, "MaxTRESPerUser=gres/gpu=1")
    try:
        sacctmgr("modify", "user", "alice", "set", f"qos+={qos}")
        for name, seconds in (("quota-first", 60), ("quota-second", 1)):
            spec = write_run(workdir / name, {"name": name, "entrypoint": "train.py", "partition": "h100-ondemand",
                                               "gpu_type": "h100", "gpus_per_node": 1, "time_limit": "5m"},
                             {"train.py": f"import time\ntime.sleep({seconds})\n"})
            runs.append(slurmctl_json("submit", spec, "--", f"--qos={qos}")["run_id"])
        wait_for_state(runs[0], {"RUNNING"}, timeout=60)
        status = wait_for_state(runs[1], {"PENDING"}, timeout=30)
        for _ in range(20):  # the reason is set by the scheduler's next pass
            if status["reason"] == "QOSMaxGRESPerUser":
                break
            subprocess.run(["sleep", "1"])
            status = slurmctl_json("status", runs[1])
        assert status["reason"] == "QOSMaxGRESPerUser", status
        quota = status["quota"]
        assert (quota["holder"], quota["field"], quota["resource"]) == (qos, "MaxTRESPU", "gres/gpu"), quota
        assert quota["limit"] == 1 and quota["usage"] == 1, quota
        human = slurmctl("status", runs[1]).stdout
        assert "MaxTRESPU" in human and "1 GPUs" in human, human
    finally:
        for run_id in runs:
            slurmctl("cancel", run_id, "--now", check=False)
        subprocess.run(["sacctmgr", "-i", "modify", "user", "alice", "set", f"qos-={qos}"], capture_output=True)
        subprocess.run(["sacctmgr", "-i", "delete", "qos", qos], capture_output=True)


def test_a_job_asking_more_than_the_qos_allows_is_told_it_can_never_start(workdir):
    qos = f"t4never{os.getpid()}"
    run_id = None
    sacctmgr("add", "qos", qos, "MaxTRESPerUser=gres/gpu=1")
    try:
        sacctmgr("modify", "user", "alice", "set", f"qos+={qos}")
        spec = write_run(workdir / "too-big", {"name": "quota-too-big", "entrypoint": "train.py",
                                               "partition": "h100-ondemand", "gpu_type": "h100", "gpus_per_node": 2,
                                               "time_limit": "5m"}, {"train.py": "print('never runs')\n"})
        run_id = slurmctl_json("submit", spec, "--", f"--qos={qos}")["run_id"]
        status = wait_for_state(run_id, {"PENDING"}, timeout=30)
        for _ in range(20):  # the reason is set by the scheduler's next pass
            if status["reason"] == "QOSMaxGRESPerUser":
                break
            subprocess.run(["sleep", "1"])
            status = slurmctl_json("status", run_id)
        assert status["reason"] == "QOSMaxGRESPerUser", status
        assert status["quota"]["limit"] == 1 and status["quota"]["request"] == 2, status["quota"]
        assert status["reason_kind"] == "blocked" and "can never start" in status["why"], status
        human = slurmctl("status", run_id).stdout
        assert "asks for 2 GPUs, more than the limit allows at all (MaxTRESPU of QOS" in human, human
        assert "at most 1 GPUs" in human, human
    finally:
        if run_id:
            slurmctl("cancel", run_id, "--now", check=False)
        subprocess.run(["sacctmgr", "-i", "modify", "user", "alice", "set", f"qos-={qos}"], capture_output=True)
        subprocess.run(["sacctmgr", "-i", "delete", "qos", qos], capture_output=True)
