"""The root side on the real cluster, attacked by a real second user: slurmd's prolog/epilog and the
root cleanup sweep against files and job names that bob (or alice) planted.

Jobs are submitted as the cluster's users (runuser), never as root; each test cancels its own jobs
and removes its own run directories. Cleanup runs as root, as from cron, restricted to the test's
own run ids so it never touches anyone else's jobs."""

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

from slurmctl.config.models import load_site_config
from slurmctl.ops import cleanup
from slurmctl.slurm.client import QUEUE, SEP, SlurmClient

from .test_plugins import STATE, hook_lines

RUNS = Path(load_site_config().runs_root).expanduser()
SPOOL = STATE / "cost-records"
PY = "/usr/bin/python3"


def as_user(user: str, *argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user, "--", *argv], capture_output=True, text=True, check=check,
                          timeout=60, **kw)


def py_as(user: str, code: str, *args: str) -> str:
    return as_user(user, PY, "-c", code, *args).stdout


def sbatch_as(user: str, *args: str) -> int:
    out = as_user(user, "sbatch", "--parsable", "--chdir=/tmp", *args)
    return int(out.stdout.strip().split(";")[0])


def run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d')}-{uuid.uuid4().hex[:4]}"


MAKE_RUN = """
import json, os, sys
run, rid = sys.argv[1], sys.argv[2]
os.makedirs(os.path.join(run, "logs"), exist_ok=True)
os.makedirs(os.path.join(run, "checkpoints"), exist_ok=True)
with open(os.path.join(run, "run.json"), "w") as fh:
    json.dump({"run_id": rid, "name": rid.rsplit("-", 2)[0]}, fh)
"""


def make_run(user: str, rid: str) -> Path:
    run = RUNS / user / rid
    py_as(user, MAKE_RUN, str(run), rid)
    return run


def remove_run(user: str, run: Path) -> None:
    as_user(user, "rm", "-rf", str(run), check=False)


def test_epilog_survives_fifos_and_dev_zero_in_bobs_run_dir_and_writes_a_root_only_record():
    """Before: the epilog read <run>/job.sbatch as root to find the checkpoint dir; a FIFO there hung
    the node's epilog (the job stuck COMPLETING). Now root never opens the run's files."""
    rid = run_id("fifo")
    run = make_run("bob", rid)
    py_as("bob", "import os, sys; r = sys.argv[1]\n"
                 "os.mkfifo(r + '/job.sbatch'); os.mkfifo(r + '/drain.request')\n"
                 "os.symlink('/dev/zero', r + '/drain.ack')\n"
                 "os.makedirs(r + '/checkpoints/checkpoint-4'); os.mkfifo(r + '/checkpoints/checkpoint-4/.complete')\n"
                 "os.makedirs(r + '/checkpoints/checkpoint-2')\n"
                 "open(r + '/checkpoints/checkpoint-2/.complete', 'w').write('{\"time\": 5.0}')\n",
          str(run))
    job = sbatch_as("bob", "-p", "l4-dev", "--gres=gpu:l4:1", f"--comment=slurmctl:{rid}",
                    "-o", f"{run}/logs/%j.out", "--wrap", "true")
    try:
        lines = hook_lines(job, timeout=60)
    finally:
        subprocess.run(["scancel", str(job)], capture_output=True)
        remove_run("bob", run)
    epilog = lines["epilog"]
    assert "bug" not in epilog, epilog
    assert epilog["ms"] < 3000, epilog
    [path] = [n.split(" ", 2)[2] for n in epilog["notes"] if n.startswith("cost record /")]
    record = json.loads(Path(path).read_text())
    assert (record["job_id"], record["run_id"], record["user"]) == (job, rid, "bob")
    assert record["drain_requested"] is True and record["last_checkpoint_step"] == 2
    assert Path(path).name == f"{job}.0.{int(record['start_time'])}.json"
    st = os.stat(SPOOL)
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o700) and os.stat(path).st_mode & 0o777 == 0o600
    assert as_user("bob", "ls", str(SPOOL), check=False).returncode != 0  # records are root's


def test_prolog_gives_bob_a_fresh_private_scratch_dir():
    out = Path(f"/tmp/root-side-{uuid.uuid4().hex[:8]}.out")
    job = sbatch_as("bob", "-p", "l4-dev", "--gres=gpu:l4:1", "-o", str(out), "--wrap",
                    f"stat -c '%U %a %F' {STATE}/scratch/$SLURMD_NODENAME/$SLURM_JOB_ID")
    try:
        lines = hook_lines(job, timeout=60)
        assert out.read_text().split("\n")[0] == "bob 700 directory"
    finally:
        subprocess.run(["scancel", str(job)], capture_output=True)
        out.unlink(missing_ok=True)
    assert any(n.startswith("scratch /") for n in lines["prolog"]["notes"]), lines["prolog"]
    assert not (STATE / "scratch" / lines["epilog"]["node"] / str(job)).exists()


def test_forged_job_name_does_not_make_root_cleanup_cancel_alices_job():
    """bob names his job so that squeue prints a line for alice's held job, claiming a run whose
    directory is gone. Before: root's cleanup cancelled alice's job. Now it asks Slurm about that
    job id, sees alice's real run, and leaves it."""
    alice_rid, gone = run_id("alice-held"), run_id("gone")
    alice_run = make_run("alice", alice_rid)
    alice_job = sbatch_as("alice", "--hold", "-p", "l4-dev", f"--job-name={alice_rid}",
                          f"--comment=slurmctl:{alice_rid}", "-o", "/dev/null", "--wrap", "true")
    values = {"job_id": str(alice_job), "state": "PENDING", "reason": "JobHeldUser", "partition": "l4-dev",
              "num_nodes": "1", "elapsed_seconds": "0:00", "time_limit_seconds": "1:00:00", "submit_time": "N/A",
              "start_time": "N/A", "user": "alice", "name": "x"}
    forged = SEP.join(values.get(attr, "") for attr in QUEUE.attrs if attr != "comment")  # bob's comment ends it
    bob_job = sbatch_as("bob", "--hold", "-p", "l4-dev", f"--job-name=b\n{forged}", f"--comment=slurmctl:{gone}",
                        "-o", "/dev/null", "--wrap", "true")
    try:
        client = SlurmClient()
        # With today's squeue format the forged line reaches the listing; a parser that puts the name
        # last would stop it there already, and the confirmation below must hold either way.
        orphans = cleanup.find_orphans(load_site_config(), client, only_run=gone)
        cleanup.release(orphans, client)
        assert [o for o in orphans if o.job_id == alice_job] == []
        state = subprocess.run(["squeue", "-h", "-j", str(alice_job), "-o", "%T"], capture_output=True, text=True)
        assert state.stdout.strip() == "PENDING"
    finally:
        subprocess.run(["scancel", str(alice_job), str(bob_job)], capture_output=True)
        remove_run("alice", alice_run)


def test_root_cleanup_releases_a_dead_held_job_only_after_confirming_it():
    """The sweep still does its job: alice's held job of a run that ended without a checkpoint."""
    rid = run_id("dead")
    run = make_run("alice", rid)
    py_as("alice",
          "import json, sys; open(sys.argv[1], 'w').write(json.dumps({'event': 'end', 'exit_code': 1}) + '\\n')",
          str(run / "attempts.jsonl"))
    job = sbatch_as("alice", "--hold", "-p", "l4-dev", f"--job-name={rid}", f"--comment=slurmctl:{rid}",
                    "-o", "/dev/null", "--wrap", "true")
    try:
        client = SlurmClient()
        orphans = cleanup.find_orphans(load_site_config(), client, only_run=rid)
        assert [(o.kind, o.job_id, o.user) for o in orphans] == [("held-job", job, "alice")]
        cleanup.release(orphans, client)
        assert orphans[0].released, orphans[0]
        state = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T"], capture_output=True, text=True)
        assert state.stdout.strip() in ("", "CANCELLED")
    finally:
        subprocess.run(["scancel", str(job)], capture_output=True)
        remove_run("alice", run)


def test_symlinked_run_dir_does_not_make_root_cleanup_delete_alices_drain_request():
    """bob links a run id in his runs directory to alice's run. Before (runs in one 1777 root):
    `cleanup --apply` followed the link and deleted alice's live drain.request."""
    alice_rid, evil = run_id("alice-live"), run_id("evil")
    alice_run = make_run("alice", alice_rid)
    py_as("alice", "import sys; open(sys.argv[1], 'w').write('{}')", str(alice_run / "drain.request"))
    as_user("bob", "ln", "-s", str(alice_run), str(RUNS / "bob" / evil))
    try:
        client = SlurmClient()
        for only in (evil, alice_rid):
            orphans = cleanup.find_orphans(load_site_config(), client, only_run=only)
            cleanup.release([o for o in orphans if o.user == "bob"], client)
            assert [o for o in orphans if o.user == "bob"] == []
        assert as_user("alice", "test", "-f", str(alice_run / "drain.request"), check=False).returncode == 0
    finally:
        as_user("bob", "rm", "-f", str(RUNS / "bob" / evil), check=False)
        remove_run("alice", alice_run)


def test_root_cleanup_ends_alices_expired_dev_allocation_and_not_bobs_plain_job():
    """dev TTL (1 s here): alice's `slurmctl dev`-style allocation is ended; bob's job in the same
    dev partition, not made by slurmctl, is not root's to end."""
    site = load_site_config().model_copy(update={"dev_allocation_ttl": "1s"})
    dev_job = sbatch_as("alice", "-p", "l4-dev", "--comment=slurmctl-dev:alice", "-o", "/dev/null",
                        "--wrap", "sleep 120")
    plain_job = sbatch_as("bob", "-p", "l4-dev", "-o", "/dev/null", "--wrap", "sleep 120")
    try:
        client = SlurmClient()
        deadline = time.monotonic() + 90
        mine: list = []
        while time.monotonic() < deadline and not mine:
            time.sleep(1)
            running = {j.job_id for j in client.queue(mine=False) if j.state == "RUNNING"}
            if {dev_job, plain_job} <= running:  # both run (one GPU each); wait past the TTL
                mine = [o for o in cleanup.find_orphans(site, client) if o.job_id in (dev_job, plain_job)]
        assert [(o.kind, o.job_id, o.user) for o in mine] == [("dev-ttl", dev_job, "alice")]
        cleanup.release(mine, client)  # only this test's jobs: the sweep saw the whole cluster
        assert mine[0].released, mine[0]
        time.sleep(1)
        assert client.confirm_job(plain_job) is not None and client.confirm_job(plain_job).state == "RUNNING"
    finally:
        subprocess.run(["scancel", str(dev_job), str(plain_job)], capture_output=True)
