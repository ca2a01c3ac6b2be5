"""On the real cluster: jobs submitted with plain `sbatch` (no run) are seen by id, as alice; another
user's job id is refused by every command."""

import os
import time

from .conftest import as_user, slurmctl, slurmctl_json

PLAIN_SCRIPT = """#!/bin/bash
#SBATCH -p l4-dev
#SBATCH -t 5
#SBATCH -J plain-oom
echo "step 1 loss 2.5"
sleep 2  # held for a moment: something to price
echo "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
exit 1
"""


def _wait_ended(user, job_id: int, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = user.run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State"]).stdout.strip()
        # and the controller is done with it too (its epilog can keep it COMPLETING after accounting's end)
        live = user.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"], check=False).stdout.strip()
        if state and state.split()[0] not in {"PENDING", "RUNNING", "COMPLETING", "REQUEUED"} \
                and live != "COMPLETING":
            return state.split()[0]
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not end within {timeout} s")


def test_plain_sbatch_job_by_id_and_another_users_refused(workdir, alice, bob):
    script = workdir / "job.sh"
    script.write_text(PLAIN_SCRIPT)
    os.chown(script, alice.uid, alice.gid)
    failed = alice.sbatch(f"--chdir={workdir}", str(script))
    held = alice.sbatch("--hold", "-p", "l4-dev", "-J", "plain-held", "-o", "/dev/null", "--wrap", "true")
    bobs = bob.sbatch("--hold", "-p", "l4-dev", "-J", "bobs-job", "-o", "/dev/null", "--wrap", "true")
    try:
        assert _wait_ended(alice, failed) == "FAILED"
        status = slurmctl_json("status", str(failed))
        assert status["kind"] == "sbatch" and status["phase"] == "failed" and status["name"] == "plain-oom"
        assert status["log_path"] == str(workdir / f"slurm-{failed}.out")
        assert status["diagnosis"]["category"] == "cuda_oom"
        assert "plain sbatch job" in slurmctl("status", str(failed)).stdout
        assert "CUDA out of memory" in slurmctl("logs", str(failed)).stdout
        # its advice names commands that work for a plain job: no per-rank logs of ours
        said = slurmctl("status", str(failed)).stdout + slurmctl("diagnose", str(failed)).stdout
        assert "--rank" not in said and "logs RUN" not in said, said
        ranked = slurmctl("logs", str(failed), "--rank", "1")
        assert "CUDA out of memory" in ranked.stdout and "--rank does not apply" in ranked.stderr
        assert slurmctl_json("diagnose", str(failed))["category"] == "cuda_oom"
        # a CPU-only job is priced by its allocated CPUs (TRES) at the partition's CPU price, everywhere
        assert status["cpus"] >= 1 and status["gpus"] == 0 and status["cost_usd"] > 0, status
        cost = slurmctl_json("cost", str(failed))
        assert cost["kind"] == "sbatch" and [a["job_id"] for a in cost["attempts"]] == [failed]
        assert cost["cost_usd"] > 0 and "CPU only" in slurmctl("cost", str(failed)).stdout
        assert "0xl4" not in slurmctl("cost", str(failed)).stdout
        assert "failed" in slurmctl("explain", str(failed)).stdout

        listed = [r for r in slurmctl_json("ls") if r.get("kind") == "sbatch"]
        assert [r["job_id"] for r in listed if r["name"] == "plain-held"] == [str(held)]
        # an ended plain job stays listed (accounting of the last days), once
        assert [r["state"] for r in listed if r["job_id"] == str(failed)] == ["FAILED"]
        assert [r["cost_usd"] > 0 for r in listed if r["job_id"] == str(failed)] == [True]
        assert not any(r["name"] == "bobs-job" for r in listed)
        human = slurmctl("ls").stdout
        assert "plain-held (sbatch)" in human and "bobs-job" not in human

        for command in ("status", "logs", "diagnose", "cost", "cancel", "explain"):
            refused = slurmctl(command, str(bobs), check=False)
            assert refused.returncode == 5, (command, refused.stdout, refused.stderr)
            assert "not yours" in refused.stderr, (command, refused.stderr)
        assert "bobs-job" in bob.squeue("-h", "-j", str(bobs), "-o", "%j")  # untouched

        cancelled = slurmctl_json("cancel", str(held))
        assert cancelled["verified"] and cancelled["final_state"] == "CANCELLED"
    finally:
        alice.scancel(held)
        as_user("bob").scancel(bobs)


STEP_FAILS_SCRIPT = """#!/bin/bash
#SBATCH -p l4-dev
#SBATCH -t 2
#SBATCH -J plain-steps
#SBATCH --array=0-1%1
#SBATCH --output=out/%x-%A_%a.out
#SBATCH --error=out/%x-%A_%a.err
echo "task $SLURM_ARRAY_TASK_ID starting"
srun -n1 bash -c 'echo "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2; exit 3' &
wait  # the common bug: a bare wait exits 0, so Slurm records the job COMPLETED 0:0
"""


def test_a_waiting_array_task_has_no_file_and_a_failed_step_is_no_success(workdir, alice):
    script, out = workdir / "steps.sh", workdir / "out"
    script.write_text(STEP_FAILS_SCRIPT)
    out.mkdir()
    for path in (script, out):
        os.chown(path, alice.uid, alice.gid)
    array = alice.sbatch(f"--chdir={workdir}", str(script))
    try:
        waiting = slurmctl_json("status", f"{array}_1")  # behind the %1 throttle: not started
        assert waiting["phase"] == "queued" and waiting["log_path"] is None, waiting
        assert slurmctl_json("diagnose", f"{array}_1")["category"] == "not_started"
        assert _wait_ended(alice, f"{array}_0") == "COMPLETED"
        status = slurmctl_json("status", f"{array}_0")
        assert status["phase"] == "failed" and ".0 failed" in status["headline"], status
        assert status["log_path"] == str(out / f"plain-steps-{array}_0.out")
        assert status["error_path"] == str(out / f"plain-steps-{array}_0.err")
        assert status["diagnosis"]["category"] == "cuda_oom"  # read from the --error file
        assert "CUDA out of memory" in slurmctl("logs", f"{array}_0").stdout
    finally:
        alice.scancel(array)
