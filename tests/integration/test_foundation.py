"""The walking skeleton on the real cluster, as alice: init -> submit -> srun torchrun -> status/logs/cancel."""

import json
from pathlib import Path

import yaml

from .conftest import REPO, slurmctl, slurmctl_json, wait_for_state, write_run


def test_example_trains_world_size_4_across_2_nodes():
    submitted = slurmctl_json("submit", REPO / "examples" / "tiny-lm" / "run.yaml")
    run_id, run_dir = submitted["run_id"], Path(submitted["run_dir"])
    status = wait_for_state(run_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"})
    log = slurmctl("logs", run_id, "-n", "0").stdout
    assert status["state"] == "COMPLETED", log
    result = json.loads((run_dir / "result.json").read_text())
    assert result["world_size"] == 4
    assert result["after"]["eval_loss"] < result["before"]["eval_loss"] / 5
    assert result["after"]["eval_accuracy"] > 0.5 > result["before"]["eval_accuracy"]
    assert status["nodes"] == "h100-[1-2]" or "," in status["nodes"] or "-[" in status["nodes"]
    assert "world size 4" in log and "attempt 1 of job" in log
    events = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events[:3]] == ["submitted", "start", "end"]
    # One attempt normally; a rare gloo abort at process teardown (after training) is requeued by the
    # reliability layer and the next attempt resumes from the final checkpoint: still one logical run.
    assert events[-1]["event"] == "end" and events[-1]["outcome"] == "completed"
    assert len([e for e in events if e["event"] == "start"]) <= 2
    assert status["latest_checkpoint_step"] == 599 and status["last_step"] == 599
    human = slurmctl("status", run_id).stdout
    assert "Finished successfully" in human and "What to do" in human
    # the frozen spec and script live in the run dir; the script carries the contract lines
    script = (run_dir / "job.sbatch").read_text()
    assert f"#SBATCH --comment=slurmctl:{run_id}" in script and "#SBATCH --no-requeue" in script
    assert yaml.safe_load((run_dir / "run.yaml").read_text())["workdir"] == str(REPO / "examples" / "tiny-lm")
    listed = {r["run_id"]: r for r in slurmctl_json("ls", "-n", "200")}
    assert listed[run_id]["state"] == "COMPLETED"


def test_held_job_is_explained_in_plain_words_and_cancel_is_verified(workdir):
    spec = write_run(workdir, {"name": "held-test", "entrypoint": "train.py", "partition": "l4-dev",
                                "gpus_per_node": 1, "time_limit": "5m"}, {"train.py": "print('hi')\n"})
    run_id = slurmctl_json("submit", spec, "--", "--hold")["run_id"]
    status = wait_for_state(run_id, {"PENDING"}, timeout=30)
    assert status["reason"] == "JobHeldUser"
    assert "on hold" in status["headline"] and "scontrol release" in status["action"]
    human = slurmctl("status", run_id).stdout
    assert "on hold" in human and "What to do" in human
    cancelled = slurmctl_json("cancel", run_id)
    assert cancelled["verified"] and cancelled["final_state"] == "CANCELLED"
    assert slurmctl_json("status", run_id)["state"] == "CANCELLED"


def test_hostile_arguments_never_execute(workdir):
    marker = workdir / "pwned"
    hostile = [f"$(touch {marker})", f"`touch {marker}`", "it's \"quoted\"", "two  spaces * and a glob",
               f"; touch {marker}"]
    echo = ("import json, os, sys\n"
            "if os.environ['RANK'] == '0':\n"
            "    open(os.environ['SLURMCTL_RUN_DIR'] + '/argv.json', 'w').write(json.dumps(sys.argv[1:]))\n")
    spec = write_run(workdir / "code", {"name": "quote-test", "entrypoint": "echo_args.py", "args": hostile,
                                         "partition": "l4-dev", "gpus_per_node": 1, "time_limit": "5m",
                                         "env": {"EVIL": f"$(touch {marker})"}}, {"echo_args.py": echo})
    submitted = slurmctl_json("submit", spec)
    status = wait_for_state(submitted["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=120)
    assert status["state"] == "COMPLETED", slurmctl("logs", submitted["run_id"]).stdout
    assert json.loads((Path(submitted["run_dir"]) / "argv.json").read_text()) == hostile
    assert not marker.exists()


def test_logs_are_readable_through_the_cli(workdir):
    spec = write_run(workdir, {"name": "logs-test", "entrypoint": "hello.py", "partition": "l4-dev",
                                "gpus_per_node": 1, "time_limit": "5m"},
                     {"hello.py": "import os\nprint('hello from rank', os.environ['RANK'], flush=True)\n"})
    run_id = slurmctl_json("submit", spec)["run_id"]
    followed = slurmctl("logs", run_id, "-f", timeout=120)
    assert "hello from rank 0" in followed.stdout and "completed" in followed.stderr
    assert "hello from rank 0" in slurmctl("logs", run_id).stdout


def test_init_writes_a_run_that_submits(workdir):
    slurmctl("init", "fresh-run", "--dir", workdir / "fresh")
    spec = yaml.safe_load((workdir / "fresh" / "run.yaml").read_text())
    assert spec["partition"] == "l4-dev" and spec["entrypoint"] == "train.py"
    dry = slurmctl_json("submit", workdir / "fresh" / "run.yaml", "--dry-run")
    assert dry["job_id"] is None and "#SBATCH --partition=l4-dev" in dry["script"]
    assert not Path(dry["run_dir"]).exists()
    again = slurmctl("init", "fresh-run", "--dir", workdir / "fresh", check=False)
    assert again.returncode != 0 and "never overwrites" in again.stderr
