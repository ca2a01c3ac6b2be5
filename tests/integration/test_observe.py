"""On the real cluster, as alice: a held run's status/queue/ls, and a failed run's diagnosis."""

from .conftest import slurmctl, slurmctl_json, wait_for_state, write_run


def test_held_run_status_queue_and_ls(workdir):
    spec = write_run(workdir, {"name": "observe-held", "entrypoint": "train.py", "partition": "l4-dev",
                                "gpus_per_node": 1, "time_limit": "5m"}, {"train.py": "print('hi')\n"})
    run_id = slurmctl_json("submit", spec, "--", "--hold")["run_id"]
    try:
        status = wait_for_state(run_id, {"PENDING"}, timeout=30)
        assert status["phase"] == "held" and status["reason_kind"] == "hold" and status["gpus"] == 1
        queued = {j["name"]: j for j in slurmctl_json("queue", "-p", "l4-dev", "-t", "PENDING")}
        assert "on hold" in queued[run_id]["why"]
        assert any(r["run_id"] == run_id and r["phase"] == "held" for r in slurmctl_json("ls", "-n", "500"))
        human = slurmctl("status", run_id).stdout
        assert "Phase:" in human and "Why:" in human and "Queue: l4-dev" in human
    finally:
        slurmctl("cancel", run_id, check=False)


def test_failed_run_is_diagnosed(workdir):
    spec = write_run(workdir, {"name": "observe-fail", "entrypoint": "train.py", "partition": "l4-dev",
                                "gpus_per_node": 1, "time_limit": "5m"},
                     {"train.py": "import importlib\nimportlib.import_module(\"definitely_not_installed_pkg\")\n"})
    run_id = slurmctl_json("submit", spec)["run_id"]
    status = wait_for_state(run_id, {"FAILED", "COMPLETED", "CANCELLED"}, timeout=120)
    assert status["state"] == "FAILED" and status["phase"] == "failed"
    assert status["diagnosis"]["category"] == "import_error"
    diagnosed = slurmctl_json("diagnose", run_id)
    assert diagnosed["category"] == "import_error" and any("definitely_not_installed_pkg" in line
                                                           for line in diagnosed["evidence"])


def test_logs_rank_filter_shows_that_global_rank(workdir):
    """2 nodes x 2 processes: torchrun --tee prefixes each line with the global rank; --rank 3 keeps rank 3's."""
    train = ("import os, socket\n"
             "print(f\"hello from rank {os.environ['RANK']} local {os.environ['LOCAL_RANK']}\""
             " f\" on {socket.gethostname()}\","
             " flush=True)\n")
    spec = write_run(workdir, {"name": "observe-ranks", "entrypoint": "train.py", "partition": "h100-ondemand",
                                "gpu_type": "h100", "nodes": 2, "gpus_per_node": 2, "time_limit": "5m"},
                     {"train.py": train})
    run_id = slurmctl_json("submit", spec)["run_id"]
    try:
        assert wait_for_state(run_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=150)["state"] == "COMPLETED"
        every_rank = "\n".join(slurmctl_json("logs", run_id, "--rank", "all", "-n", "0")["lines"])
        for rank in range(4):
            assert f"hello from rank {rank} " in every_rank, every_rank
        rank3 = [line for line in slurmctl_json("logs", run_id, "--rank", "3", "-n", "0")["lines"] if "hello" in line]
        assert rank3 and all(line.startswith("[rank3]:hello from rank 3 local 1 ") for line in rank3), rank3
        assert "hello from rank 0 " not in "\n".join(slurmctl_json("logs", run_id, "--rank", "3", "-n", "0")["lines"])
    finally:
        slurmctl("cancel", run_id, check=False)
