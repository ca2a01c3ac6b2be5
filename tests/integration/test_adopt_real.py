"""`slurmctl adopt` on the real cluster, as alice, with lab-style sbatch scripts written for these tests:
what adopt reads equals Slurm's own reading (`sbatch -v --test-only`), every directive is listed, a
hostile script never reaches a shell, and an adopted script runs as written with status, logs and cost."""

import json
import os
import re
import time
import uuid
from pathlib import Path

import pytest

from .conftest import slurmctl, slurmctl_json

MULTI_NODE = """#!/bin/bash
#SBATCH --job-name=lab-ddp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:h100:2
#SBATCH --cpus-per-task=2
#SBATCH --time=00:30:00
#SBATCH --partition=h100-spot
#SBATCH --signal=B:USR1@60
#SBATCH --requeue
#SBATCH --mail-type=END,FAIL
#SBATCH --output=slurm-%x-%j.out   # the lab's habit
module purge
module load cuda/12.1 nccl
source ~/miniconda3/etc/profile.d/conda.sh
conda activate torch
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=29500
trap 'echo caught USR1; touch $HOME/stop' USR1
srun torchrun --nnodes=$SLURM_JOB_NUM_NODES --nproc-per-node=2 --rdzv-backend=c10d \\
  --rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT train.py --epochs 3
"""

ARRAY = """#!/bin/bash
#SBATCH -J sweep-lr
#SBATCH -a 0-9%2
#SBATCH -n 2
#SBATCH -c 1
#SBATCH --mem=2G
#SBATCH --gpus-per-node=l4:1
#SBATCH -t 20
#SBATCH -p l4-dev
#SBATCH --dependency=afterok:{dep}
#SBATCH --no-requeue
source .venv/bin/activate
LR=$(python -c "print([1e-3, 3e-4][$SLURM_ARRAY_TASK_ID % 2])")
python -m torch.distributed.run --nproc_per_node=1 train.py --lr $LR
accelerate launch --num_processes 1 finetune.py
deepspeed --num_gpus 1 ds_train.py
"""

HOSTILE = """#!/bin/bash
#SBATCH -J '$(touch {marker}-name)'
#SBATCH -p l4-dev
#SBATCH -t 2
#SBATCH --comment="`touch {marker}-comment`"
echo body ran
"""


def _write(directory, name: str, text: str, owner) -> str:
    path = directory / name
    path.write_text(text)
    os.chown(path, owner.uid, owner.gid)
    return str(path)


def _slurm_reading(user, script: str, *args: str) -> dict:
    out = user.run(["sbatch", "-v", "--test-only", *args, script], cwd=Path(script).parent)
    options = {}
    for line in (out.stderr + out.stdout).splitlines():
        m = re.match(r"sbatch: (\S+)\s+: (.*)$", line)
        if m and m.group(1) not in {"test-only", "verbose"}:
            options[m.group(1)] = m.group(2).strip()
    estimate = re.search(r"using (\d+) processors on nodes (\S+) in partition (\S+)", out.stderr + out.stdout)
    return {"options": options, "estimate": estimate.groups() if estimate else None}


def _check_against_slurm(plan: dict, slurm: dict, script_lines: int) -> None:
    assert plan["differences"] == [], plan["differences"]
    assert plan["slurm_original"]["options"] == slurm["options"]
    processors, nodelist, partition = slurm["estimate"]
    assert plan["slurm_original"]["partition"] == partition and plan["slurm_original"]["nodelist"] == nodelist
    shape = plan["shape"]
    assert shape["partition"] == slurm["options"]["partition"] == partition
    assert shape["time_seconds"] and shape["time"] is not None
    # every #SBATCH line is listed, with what happens to it; none is dropped
    assert len([d for d in plan["directives"] if d["where"].startswith("line")]) == script_lines
    assert all(d["status"] for d in plan["directives"])


def test_multi_node_torchrun_script_reads_as_slurm_reads_it(workdir, alice):
    script = _write(workdir, "ddp.sbatch", MULTI_NODE, alice)
    plan = slurmctl_json("adopt", "--dry-run", script, cwd=workdir)
    slurm = _slurm_reading(alice, script)
    _check_against_slurm(plan, slurm, 11)
    shape = plan["shape"]
    assert (shape["nodes"], shape["ntasks_per_node"], shape["gres"], shape["gpu_type"]) == ("2", "1", "gpu:h100:2",
                                                                                            "h100")
    assert shape["time_seconds"] == 1800 and shape["signal"] == "B:USR1@60" and shape["requeue"] is True
    assert int(slurm["estimate"][0]) == 2 * 1 * 2  # processors: nodes x tasks per node x cpus per task
    assert plan["cost"]["gpus"] == 4 and plan["cost"]["max_usd"] == pytest.approx(4 * 0.5 * 1.40)
    statuses = {d["option"]: d["status"] for d in plan["directives"]}
    assert statuses["mail-type"] == "passed through unchanged"
    assert statuses["output"].startswith("set by slurmctl") and statuses["job-name"].startswith("set by slurmctl")
    launch = plan["body"]["launches"][-1]
    assert launch["launchers"][:2] == ["srun", "torchrun"] and launch["program"] == "train.py"
    assert [e["kind"] for e in plan["body"]["environment"]] == ["module", "module", "conda", "conda", "export",
                                                                 "export"]
    assert plan["body"]["traps"] and any("passed on to the original script" in n for n in plan["notes"])
    # the original's batch-shell signal reaches the original script's own trap
    assert "drain-signal; kill -USR1 \"$body_pid\"" in plan["wrapper"]


def test_singleton_dependency_still_waits_for_the_users_job_of_that_name(workdir, alice):
    name = f"nightly-{uuid.uuid4().hex[:6]}"
    script = _write(workdir, "nightly.sbatch", f"#!/bin/bash\n#SBATCH -J {name}\n#SBATCH -p l4-dev\n#SBATCH -t 3\n"
                    "#SBATCH --dependency=singleton\n#SBATCH --open-mode=append\nsleep 60\n", alice)
    first = alice.sbatch("-o", "/dev/null", script)  # the lab's own job of that name, plain sbatch
    adopted = None
    try:
        plan = slurmctl_json("adopt", "--yes", script, cwd=workdir)
        adopted = plan["job_id"]
        assert plan["differences"] == [] and plan["wrapper_differences"] == []  # open-mode append is Slurm's 'a'
        assert {d["option"]: d["status"] for d in plan["directives"]}["job-name"].startswith("kept")
        row = alice.squeue("-h", "-j", str(adopted), "-o", "%j|%r|%k").strip()
        assert row == f"{name}|Dependency|slurmctl:{plan['run_id']}", row
        assert slurmctl_json("status", plan["run_id"])["job_id"] == adopted
    finally:
        alice.scancel(first, adopted)


# saves at steps 0 and 10 only: a save of its own between the cancel's request and the signal (seconds apart on a
# loaded controller) would read as an answer to the signal
DEAF = """import os, time, torch
os.makedirs("out", exist_ok=True)
for it in range(100000):
    if it in (0, 10):
        torch.save({"iter_num": it, "model": torch.zeros(2)}, "out/ckpt.tmp")
        os.replace("out/ckpt.tmp", "out/ckpt.pt")
    print(f"iter {it}: loss 1.0", flush=True)
    time.sleep(0.2)
"""


def test_cancel_of_a_program_that_dies_on_its_drain_signal_reads_cancelled(workdir, alice):
    _write(workdir, "deaf.py", DEAF, alice)
    script = _write(workdir, "deaf.sbatch", "#!/bin/bash\n#SBATCH -p l4-dev\n#SBATCH -t 5\n#SBATCH -n 1\n"
                    "srun python deaf.py\n", alice)
    # told that it saves on USR1, which it does not trap: the signal kills it
    plan = slurmctl_json("adopt", "--yes", "--framework", "pytorch", "--signal", "USR1", "--checkpoint-dir", "out",
                         script, cwd=workdir)
    run_id = plan["run_id"]
    try:
        deadline = time.monotonic() + 120
        while (slurmctl_json("status", run_id).get("latest_checkpoint_step") or 0) < 10:
            assert time.monotonic() < deadline
            time.sleep(2)
        result = alice.slurmctl("cancel", run_id, "--json", check=False)
        cancelled = json.loads(result.stdout)
        assert cancelled["final_state"] == "CANCELLED" and cancelled["drain"] == "unacknowledged", cancelled
        assert "ckpt.pt" in cancelled["note"] and result.returncode == 1  # work since that checkpoint is lost
        status = slurmctl_json("status", run_id)
        assert status["phase"] == "cancelled" and status["diagnosis"] is None, status
        assert "ckpt.pt" in status["headline"] and status["latest_checkpoint_step"] >= 10
        ends = [json.loads(line) for line in (Path(plan["run_dir"]) / "attempts.jsonl").read_text().splitlines()]
        assert [e["outcome"] for e in ends if e["event"] == "end"] == ["cancelled"]
        assert slurmctl_json("resume", run_id)["from_step"] == status["latest_checkpoint_step"]
    finally:
        slurmctl("cancel", run_id, "--now", check=False)


SELF_REQUEUE = """#!/bin/bash
#SBATCH -p l4-dev
#SBATCH -t 5
#SBATCH -n 1
#SBATCH --requeue
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  python -c 'import torch; torch.save({"iter_num": 5, "model": torch.zeros(2)}, "ckpt.pt"); print("iter 5")'
  scontrol requeue "$SLURM_JOB_ID"   # what Lightning does after its own save on SIGUSR1
  sleep 60
fi
sleep 300
"""


def test_a_job_that_requeued_itself_and_was_cancelled_while_waiting_reads_cancelled(workdir, alice):
    script = _write(workdir, "selfq.sbatch", SELF_REQUEUE, alice)
    plan = slurmctl_json("adopt", "--yes", "--framework", "pytorch", script, cwd=workdir)
    run_id, job_id = plan["run_id"], plan["job_id"]
    try:
        deadline = time.monotonic() + 120
        while alice.squeue("-h", "-j", str(job_id), "-o", "%T").strip() != "PENDING" or \
                not (Path(plan["run_dir"]) / "attempts.jsonl").read_text().count('"start"'):
            assert time.monotonic() < deadline, "the job never requeued itself"
            time.sleep(1)
        # its own requeue is recorded as this attempt's end (the wrapper's SIGTERM trap), and status says
        # it waits to start again
        waiting = slurmctl_json("status", run_id)
        assert waiting["phase"].startswith("requeued") and waiting["requeues"] == 1, waiting
        assert "requeued by the job itself" in waiting["history"][0], waiting["history"]
        assert not waiting["history"][-1].endswith("running"), waiting["history"]
        assert slurmctl_json("cancel", run_id)["final_state"] == "CANCELLED"
        deadline = time.monotonic() + 150  # MinJobAge: then only accounting knows the job
        while alice.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"]).stdout.strip():
            assert time.monotonic() < deadline
            time.sleep(3)
        accounting = alice.run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State"]).stdout.split()
        status = slurmctl_json("status", run_id)
        assert status["phase"] == "cancelled", (accounting, status)
        assert status["latest_checkpoint_step"] == 5 and "ckpt.pt" in status["headline"], status
        print(f"accounting says {accounting}; status says {status['phase']}")
    finally:
        slurmctl("cancel", run_id, "--now", check=False)


UNIVERSITY_REQUEUE = """#!/bin/bash
#SBATCH -p l4-dev
#SBATCH -t 10
#SBATCH -n 1
#SBATCH --requeue
#SBATCH --signal=B:USR1@60
requeue_job() {
  echo "caught USR1: requeueing $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
}
trap requeue_job USR1
srun python saves_on_usr1.py &
wait
"""

SAVES_ON_USR1 = """import os, signal, time
import argparse, torch
stop = False
def on_usr1(*_):
    global stop
    stop = True
signal.signal(signal.SIGUSR1, on_usr1)
os.makedirs("out", exist_ok=True)
start = torch.load("out/ckpt.pt")["iter_num"] + 1 if os.path.exists("out/ckpt.pt") else 0
for it in range(start, 100000):
    if it % 200 == 0 or stop:
        torch.save({"iter_num": it, "model": torch.zeros(2)}, "out/ckpt.tmp")
        os.replace("out/ckpt.tmp", "out/ckpt.pt")
        if stop:
            print(f"saved at iter {it} on USR1", flush=True)
            break
    print(f"iter {it}: loss 1.0", flush=True)
    time.sleep(0.05)
"""


def test_cancel_never_requeues_a_script_whose_usr1_trap_requeues(workdir, alice):
    _write(workdir, "saves_on_usr1.py", SAVES_ON_USR1, alice)
    script = _write(workdir, "univ.sbatch", UNIVERSITY_REQUEUE, alice)
    plan = slurmctl_json("adopt", "--yes", "--framework", "pytorch", "--checkpoint-dir", "out", script, cwd=workdir)
    run_id, job_id = plan["run_id"], plan["job_id"]
    assert plan["resilience"]["signal_to"] == "steps", plan["resilience"]
    told = " ".join(plan["notes"])
    assert "srun tasks, not the batch shell" in told and "Requeue=0" in told, told
    try:
        deadline = time.monotonic() + 120
        while (slurmctl_json("status", run_id).get("latest_checkpoint_step") or -1) < 0:
            assert time.monotonic() < deadline
            time.sleep(2)
        began = time.monotonic()
        cancelled = slurmctl_json("cancel", run_id)
        took = time.monotonic() - began
        print(f"cancel of a self-requeueing script: {took:.1f} s, {cancelled}")
        assert cancelled["final_state"] == "CANCELLED" and cancelled["drain"] == "acknowledged", cancelled
        assert cancelled["ack_step"] % 200 != 0 and took < 60, cancelled  # the save on USR1, not a periodic one
        events = [json.loads(line) for line in (Path(plan["run_dir"]) / "attempts.jsonl").read_text().splitlines()]
        assert [e["event"] for e in events].count("start") == 1, events  # never requeued: one attempt only
        logs = "".join(p.read_text(errors="replace") for p in (Path(plan["run_dir"]) / "logs").glob("*.out"))
        assert "saved at iter" in logs and "requeueing" not in logs, logs[-2000:]
        shown = alice.run(["scontrol", "show", "job", str(job_id)]).stdout  # the controller keeps it MinJobAge
        # Slurm's end is CANCELLED when the scancel lands first, COMPLETED when the program, having saved on the
        # signal, exits before it (an idle machine): the cancel says which; never requeued either way
        ended = "COMPLETED" if cancelled.get("slurm_state") == "COMPLETED" else "CANCELLED"
        assert f"JobState={ended}" in shown and "Restarts=0" in shown, (cancelled, shown)
    finally:
        slurmctl("cancel", run_id, "--now", check=False)


def test_dry_run_detects_imports_as_python_reads_them_and_says_when_it_found_none(workdir, alice):
    _write(workdir, "nano.py", "import argparse, os, time, torch\nprint('iter 1')\n", alice)
    _write(workdir, "plain.py", "import numpy as np\nprint('hello')\n", alice)
    for program, framework in (("nano.py", "pytorch"), ("plain.py", None)):
        script = _write(workdir, f"{program}.sbatch", f"#!/bin/bash\n#SBATCH -p l4-dev\n#SBATCH -t 5\n"
                        f"srun python {program}\n", alice)
        plan = slurmctl_json("adopt", "--dry-run", script, cwd=workdir)
        told = " ".join(plan["notes"])
        if framework:
            assert plan["resilience"]["framework"] == framework and "detected" in plan["resilience"]["how"], plan
        else:
            assert plan["resilience"] is None and "resilience: NONE" in told and "--framework" in told, told
            assert "cancel --now" in told and "resume" in told, told
        shown = slurmctl("adopt", "--dry-run", script, cwd=workdir).stderr  # the plan; stdout is the job
        assert ("resilience: NONE" in shown) == (framework is None), shown


def test_array_with_throttle_dependency_and_launchers(workdir, alice):
    dep = alice.sbatch("--hold", "-p", "l4-dev", "-o", "/dev/null", "-J", "adopt-dep", "--wrap", "true")
    try:
        script = _write(workdir, "sweep.sbatch", ARRAY.format(dep=dep), alice)
        plan = slurmctl_json("adopt", "--dry-run", script, "--", "--time=15", cwd=workdir)
        slurm = _slurm_reading(alice, script, "--time=15")
        _check_against_slurm(plan, slurm, 10)
        shape = plan["shape"]
        assert (shape["array"], shape["array_tasks"], shape["array_throttle"]) == ("0-9%2", 10, 2)
        assert shape["time_seconds"] == 15 * 60  # the command line wins, as for sbatch
        assert shape["dependency"] == f"afterok:{dep}" and shape["requeue"] is False
        assert (shape["ntasks"], shape["gpus_per_node"], shape["mem"]) == ("2", "l4:1", "2G")
        assert [d["where"] for d in plan["directives"]][-1] == "command line"
        launchers = [launch["launchers"] for launch in plan["body"]["launches"]]
        assert ["torchrun", "python"] in launchers and ["accelerate"] in launchers and ["deepspeed"] in launchers
        assert plan["body"]["environment"][0]["kind"] == "venv"
        assert plan["cost"]["array_tasks"] == 10
        assert any("srun" in n for n in plan["notes"])  # started without srun: said
    finally:
        alice.scancel(dep)


def test_hostile_script_never_reaches_a_shell_and_runs_as_written(workdir, alice):
    marker = workdir / "pwned"
    script = _write(workdir, "hostile.sbatch", HOSTILE.format(marker=marker), alice)
    plan = slurmctl_json("adopt", "--dry-run", script, cwd=workdir)
    assert plan["differences"] == []
    result = slurmctl_json("adopt", "--yes", script, cwd=workdir)
    run_id, job_id = result["run_id"], result["job_id"]
    assert result["wrapper_differences"] == []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status = slurmctl_json("status", run_id)
        if status["state"] in {"COMPLETED", "FAILED", "CANCELLED"}:
            break
        time.sleep(2)
    assert status["state"] == "COMPLETED" and status["job_id"] == job_id, status
    assert "body ran" in slurmctl("logs", run_id).stdout
    assert slurmctl_json("status", str(job_id))["run_id"] == run_id  # the job id finds the run
    assert [a["job_id"] for a in slurmctl_json("cost", run_id)["attempts"]] == [job_id]
    assert not list(workdir.glob("pwned*"))
    # accounting lags behind the controller: its record of the job may take a moment to carry the name
    for _ in range(30):
        names = alice.run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "JobName,Comment"]).stdout
        if names.strip() == f"{run_id}|slurmctl:{run_id}":
            break
        time.sleep(1)
    assert names.strip() == f"{run_id}|slurmctl:{run_id}"


def test_control_characters_and_bad_lines_are_refused(workdir, alice):
    script = _write(workdir, "bad.sbatch", "#!/bin/bash\n#SBATCH -J ok\r#SBATCH --wrap=x\x1b]0;t\x07\necho\n",
                    alice)
    refused = slurmctl("adopt", "--dry-run", script, check=False, cwd=workdir)
    assert refused.returncode == 2 and "control character" in refused.stderr and "Traceback" not in refused.stderr
    no_shebang = _write(workdir, "plain.txt", "echo hi\n", alice)
    refused = slurmctl("adopt", "--dry-run", no_shebang, check=False, cwd=workdir)
    assert refused.returncode == 2 and "#!" in refused.stderr


def test_cancel_of_a_program_that_cannot_save_says_so_at_once(workdir, alice):
    script = _write(workdir, "sleeper.sbatch", "#!/bin/bash\n#SBATCH -p l4-dev\n#SBATCH -t 5\n"
                    "for i in $(seq 1 300); do echo \"step $i\"; sleep 1; done\n", alice)
    run = slurmctl_json("adopt", "--yes", script, cwd=workdir)
    try:
        deadline = time.monotonic() + 60
        while slurmctl_json("status", run["run_id"])["state"] != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(1)
        time.sleep(2)  # a second or two held: something to price
        running = slurmctl_json("status", run["run_id"])
        assert running["phase"] == "training"  # no heartbeat expected of it
        # priced from what Slurm allocated (CPUs, no GPU) at l4-dev's CPU price, though it has no run.yaml
        assert running["cpus"] >= 1 and running["gpus"] == 0 and running["cost_usd"] > 0, running
        assert [r["cost_usd"] for r in slurmctl_json("ls") if r.get("run_id") == run["run_id"]][0] > 0
        text = slurmctl("status", run["run_id"]).stdout
        assert "CPU(s), no GPU" in text and "cost so far " in text and "0xl4" not in text, text
        began = time.monotonic()
        refused = slurmctl("cancel", run["run_id"], check=False)
        took = time.monotonic() - began
        print(f"cancel of an adopted program with no save signal answered in {took:.2f} s")
        assert refused.returncode == 1 and "cannot be asked to save" in refused.stderr and "--now" in refused.stderr
        assert took < 10
        stopped = slurmctl_json("cancel", run["run_id"], "--now")
        assert stopped["drain"] == "skipped" and stopped["final_state"] == "CANCELLED"
    finally:
        slurmctl("cancel", run["run_id"], "--now", check=False)


def test_convert_writes_run_yaml_job_script_and_a_line_by_line_mapping(workdir, alice):
    script = _write(workdir, "ddp.sbatch", MULTI_NODE, alice)
    _write(workdir, "train.py", "print('training')\n", alice)
    out = workdir / "converted"
    written = slurmctl_json("adopt", script, "--convert", str(out), cwd=workdir)
    spec = written["spec"]
    assert (spec["entrypoint"], spec["nodes"], spec["gpus_per_node"], spec["gpu_type"], spec["partition"],
            spec["time_limit"], spec["args"], spec["env"]) == ("train.py", 2, 2, "h100", "h100-spot", "00:30:00",
                                                               ["--epochs", "3"], {"MASTER_PORT": "29500"})
    mapped = "\n".join(written["mapping"])
    for number in (*range(2, 13), 13, 14, 15, 16, 17, 18, 19, 20):  # every #SBATCH line and body command
        assert f"line {number}:" in mapped, number
    assert written["sbatch_args"] == ["--mail-type=END,FAIL"] and written["submit"].endswith("-- --mail-type=END,FAIL")
    assert [line for line in (out / "MAPPING.txt").read_text().splitlines() if line.startswith("line ")] == \
        written["mapping"]
    job = (out / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in job and "#SBATCH --gres=gpu:h100:2" in job and "train.py --epochs 3" in job
    dry = slurmctl_json("submit", written["run_yaml"], "--dry-run", "--", "--mail-type=END,FAIL", cwd=workdir)
    assert dry["dry_run"] and "#SBATCH --nodes=2" in dry["script"]
    refused = slurmctl("adopt", script, "--convert", str(out), check=False, cwd=workdir)
    assert refused.returncode == 2 and "never overwrites" in refused.stderr


def test_smoke_judges_a_program_by_its_own_success_signal(workdir, alice):
    good = _write(workdir, "good.sbatch", "#!/bin/bash\n#SBATCH -p l4-dev\n#SBATCH -t 30\n"
                  "for i in $(seq 1 600); do echo \"step $i loss 0.5\"; sleep 1; done\n", alice)
    began = time.monotonic()
    passed = slurmctl_json("adopt", "--yes", "--smoke", "2", good, "--framework", "none", cwd=workdir)
    took = time.monotonic() - began
    print(f"adopt --smoke of a stepping program: verdict after {took:.1f} s")
    assert passed["smoke"]["passed"] and "steps advanced" in passed["smoke"]["why"], passed["smoke"]
    assert passed["shape"]["time_seconds"] == 120 and took < 90  # --smoke's limit wins; stopped once seen
    bad = _write(workdir, "bad.sbatch", "#!/bin/bash\n#SBATCH -p l4-dev\n#SBATCH -t 5\n"
                 "python3 -c 'import definitely_not_installed_pkg'\n", alice)
    failed = slurmctl("adopt", "--yes", "--smoke", "2", "--json", bad, check=False, cwd=workdir)
    verdict = json.loads(failed.stdout)["smoke"]
    assert failed.returncode == 1 and not verdict["passed"] and verdict["diagnosis"]["category"] == "import_error"
