"""The run directory has one owner, on the real local cluster, as real users.

* A run with a custom RELATIVE `checkpoint.dir` (alice) shows its checkpoints in `status`, `cost`,
  the exporter (read by the operator) and after `resume`: every reader uses run.json's recorded
  absolute `checkpoint_dir`.
* Runs belong to their owner: bob plants a "newest" run named `demo` (the old attack on a shared,
  world-writable runs root); alice's `resume demo` and every other lookup never reach it, and alice
  cannot read bob's run directory, logs or checkpoints.
"""

import json
import os
import stat
import time
import uuid
from pathlib import Path

from slurmctl.config.models import load_site_config

from .conftest import give, slurmctl, slurmctl_json, wait_for_state, write_run

TRAIN = '''\
import os
import time
from pathlib import Path

from slurmctl.runtime import Runtime

rt = Runtime.from_env()
ck = rt.checkpoints.latest()
start = ck.step + 1 if ck else 0
for step in range(start, start + 4):
    rt.log(step, loss=1.0 / (step + 1))
    time.sleep(0.2)
rt.checkpoints.save(step, lambda d: (d / "state.txt").write_text(str(step)))
release = Path(os.environ["RELEASE_FILE"])
deadline = time.time() + 120
while not release.exists() and time.time() < deadline:  # the test looks at the running job meanwhile
    time.sleep(0.5)
'''


def spec(name: str, release: Path, **extra) -> dict:
    return {"name": name, "entrypoint": "train.py", "partition": ["l4-dev", "h100-ondemand"], "gpus_per_node": 1,
            "time_limit": "5m", "max_restarts": 0, "env": {"RELEASE_FILE": str(release)}, **extra}


def poll(what, check, timeout: float = 180, every: float = 2.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = what()
        if check(last):
            return last
        time.sleep(every)
    raise AssertionError(f"condition not met in {timeout} s; last: {last}")


def exporter_value(name: str, run_id: str) -> float | None:
    text = slurmctl("exporter", "--once", user="root").stdout
    labels = f'{{run="{run_id}",user="alice"}}'  # series carry the user: identity is (user, run id)
    prefix = f"{name}{labels} "
    return next((float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix)), None)


def test_relative_checkpoint_dir_is_seen_by_status_cost_exporter_and_resume(alice, user_dir):
    work = user_dir("alice")
    release = work / "release"
    run_yaml = write_run(work, spec("ckdir", release, checkpoint={"dir": "ckpts/custom", "interval_steps": 2}),
                         {"train.py": TRAIN})
    submitted = slurmctl_json("submit", run_yaml, "--yes", user="alice")
    run_id, run_dir, job_id = submitted["run_id"], Path(submitted["run_dir"]), submitted["job_id"]
    custom = work / "ckpts" / "custom"
    try:
        assert run_dir.parent == alice.runs_root
        meta = json.loads((run_dir / "run.json").read_text())
        assert meta["checkpoint_dir"] == str(custom)  # resolved once at submit, absolute

        # while the job runs: status (alice) and the exporter (operator) see the checkpoint at step 3
        status = poll(lambda: slurmctl_json("status", run_id, user="alice"),
                      lambda s: s["latest_checkpoint_step"] == 3 and s["state"] == "RUNNING")
        assert "No valid checkpoint yet." not in status["details"]
        assert poll(lambda: exporter_value("slurmctl_run_checkpoint_step", run_id), lambda v: v == 3.0) == 3.0
        assert (custom / "checkpoint-3" / ".complete").is_file()
        assert not any((run_dir / "checkpoints").iterdir())  # nothing in the default place

        release.touch()
        give(release)
        wait_for_state(run_id, {"COMPLETED"}, user="alice")

        # cost: its checkpoint facts come from the epilog's record (root's spool), which read the run
        # through rundir as alice: the same recorded dir, so the attempt's last checkpoint is step 3
        spool = load_site_config().cost_records_dir
        records = poll(lambda: [json.loads(p.read_text()) for p in Path(spool).glob(f"{job_id}.*.json")],
                       lambda r: bool(r), timeout=60)
        assert records[-1]["last_checkpoint_step"] == 3 and records[-1]["run_id"] == run_id
        cost = slurmctl_json("cost", run_id, user="alice")
        assert [a["job_id"] for a in cost["attempts"]] == [job_id]

        # resume continues from the custom dir's checkpoint and writes the next one there
        resumed = slurmctl_json("resume", run_id, user="alice")
        assert resumed["from_step"] == 3 and resumed["run_id"] == run_id
        job_id = resumed["job_id"]
        final = wait_for_state(run_id, {"COMPLETED"}, user="alice")
        assert final["latest_checkpoint_step"] == 7 and final["job_id"] == resumed["job_id"]
        starts = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
        assert [e["resume_step"] for e in starts if e["event"] == "start"] == [None, 3]
        assert sorted(p.name for p in custom.iterdir() if p.name.startswith("checkpoint-")) == \
            ["checkpoint-3", "checkpoint-7"]

        # everything the job and the CLI wrote is the owner's only
        for path, mode in ((run_dir, 0o700), (run_dir / "run.json", 0o600), (run_dir / "job.sbatch", 0o600),
                           (run_dir / "logs" / f"{job_id}.out", 0o600), (custom / "checkpoint-7", 0o700),
                           (custom / "checkpoint-7" / "state.txt", 0o600)):
            st = os.lstat(path)
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (alice.uid, mode), (path, oct(st.st_mode))
    finally:
        release.touch()
        alice.scancel(job_id)


def plant(owner, runs_root: Path, marker: Path) -> Path:
    """bob's planted run: named `demo`, "created" in 2099, a job script that would leave `marker`."""
    planted = runs_root / "demo-20991231-0bad"
    (planted / "logs").mkdir(parents=True)
    (planted / "checkpoints" / "checkpoint-9").mkdir(parents=True)
    (planted / "checkpoints" / "checkpoint-9" / ".complete").write_text("{}")
    (planted / "logs" / "1.out").write_text("bob's secret log line\n")
    (planted / "run.json").write_text(json.dumps({"run_id": planted.name, "name": "demo", "created": 4102444800}))
    (planted / "run.yaml").write_text("name: demo\nentrypoint: train.py\npartition: l4-dev\n")
    (planted / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": 1}) + "\n")
    (planted / "job.sbatch").write_text(f"#!/bin/bash\n#SBATCH --partition=l4-dev\ntouch {marker}\n")
    give(planted, (owner.uid, owner.gid))
    return planted


def test_planted_run_of_another_user_is_never_reached(alice, bob, user_dir):
    marker = Path("/tmp") / f"slurmctl-planted-{uuid.uuid4().hex[:8]}"
    planted = plant(bob, bob.runs_root, marker)
    try:
        for argv in (["resume", "demo"], ["status", "demo"], ["logs", "demo"], ["cost", "demo"],
                     ["cancel", "demo"], ["fork", "demo", "mine"], ["diagnose", "demo"]):
            result = slurmctl(*argv, user="alice", check=False)
            assert result.returncode == 5 and "run-not-found" in result.stderr, (argv, result.stderr)
            assert "Traceback" not in result.stderr and "0bad" not in result.stdout + result.stderr
        for argv in (["resume", str(planted)], ["status", str(planted)], ["logs", str(planted)]):
            result = slurmctl(*argv, user="alice", check=False)
            assert result.returncode == 5 and "run-not-yours" in result.stderr, (argv, result.stderr)
            assert "Traceback" not in result.stderr
        time.sleep(2)
        assert not marker.exists()
        names = alice.squeue("-h", "-u", "alice", "-o", "%j").split()  # other tests' jobs may be there
        assert planted.name not in names and not any(n.startswith("mine-") for n in names)  # nothing submitted
        # the files themselves: alice cannot list bob's runs, read his log or his checkpoints
        for argv in (["ls", str(bob.runs_root)], ["cat", str(planted / "logs" / "1.out")],
                     ["ls", str(planted / "checkpoints")], ["cat", str(planted / "run.json")]):
            result = alice.run(argv)
            assert result.returncode != 0 and "Permission denied" in result.stderr, (argv, result.stderr)
        # bob still finds his own run; the operator sees both users' runs, read-only
        assert slurmctl_json("status", "demo", user="bob")["run_id"] == planted.name
        listing = slurmctl_json("ls", "--all-users", "-n", "1000", user="root")
        assert {"user": "bob", "run_id": planted.name} in [{"user": r["user"], "run_id": r["run_id"]} for r in listing]
        denied = slurmctl("ls", "--all-users", user="alice", check=False)
        assert denied.returncode == 5 and "operator" in denied.stderr
    finally:
        marker.unlink(missing_ok=True)
        import shutil
        shutil.rmtree(planted, ignore_errors=True)


def test_a_real_run_is_private_to_its_owner(alice, bob, user_dir):
    work = user_dir("bob")
    release = work / "release"
    release.touch()
    give(release)
    run_yaml = write_run(work, spec("private", release), {"train.py": TRAIN})
    submitted = slurmctl_json("submit", run_yaml, "--yes", user="bob")
    run_id, run_dir = submitted["run_id"], Path(submitted["run_dir"])
    try:
        wait_for_state(run_id, {"COMPLETED"}, user="bob")
        log = run_dir / "logs" / f"{submitted['job_id']}.out"
        assert stat.S_IMODE(os.lstat(log).st_mode) == 0o600 and os.lstat(log).st_uid == bob.uid
        for argv in (["cat", str(log)], ["ls", str(run_dir / "checkpoints")]):
            result = alice.run(argv)
            assert result.returncode != 0 and "Permission denied" in result.stderr
        result = slurmctl("logs", str(run_dir), user="alice", check=False)
        assert result.returncode == 5 and "run-not-yours" in result.stderr
        result = slurmctl("status", run_id, user="alice", check=False)
        assert result.returncode == 5 and "run-not-found" in result.stderr
    finally:
        bob.scancel(submitted["job_id"])


def test_smoke_gate_cannot_be_forged_with_files(alice, user_dir):
    """The gate asks Slurm accounting: a forged verdict file, or a fake smoke run dir that points at
    a real COMPLETED job of the wrong name and partition, does not open it."""
    import yaml

    work = user_dir("alice")
    release = work / "release"
    release.touch()
    give(release)
    site = yaml.safe_load(Path("/etc/slurmctl/site.yaml").read_text())
    (work / "site.yaml").write_text(yaml.safe_dump({**site, "require_smoke": True}))
    give(work / "site.yaml")
    env = {"SLURMCTL_SITE_CONFIG": str(work / "site.yaml")}
    run_yaml = write_run(work, spec("gated", release, partition="h100-ondemand"), {"train.py": TRAIN})
    gated = slurmctl("submit", run_yaml, "--dry-run", "--json", user="alice", env=env, check=False)
    assert gated.returncode == 2 and "smoke-required" in gated.stdout + gated.stderr
    # a real, COMPLETED job of alice's: not a smoke job (wrong name, wrong partition)
    plain = write_run(work / "plain", spec("plain", release, partition="h100-ondemand"), {"train.py": TRAIN})
    done = slurmctl_json("submit", plain, "--yes", user="alice")
    wait_for_state(done["run_id"], {"COMPLETED"}, user="alice")
    code_hash = slurmctl_json("submit", run_yaml, "--dry-run", "--force", user="alice", env=env)["code_hash"]
    forged = alice.runs_root / f"gated-smoke-{code_hash}-20261130-f0f0"
    forged.mkdir(mode=0o700)
    (forged / "run.json").write_text(json.dumps({"name": f"gated-smoke-{code_hash}", "smoke": True,
                                                 "code_hash": code_hash, "passed": True}))
    (forged / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": done["job_id"]}) + "\n")
    (forged / "smoke.json").write_text(json.dumps({"passed": True, "run_id": forged.name}))
    give(forged, (alice.uid, alice.gid))
    try:
        again = slurmctl("submit", run_yaml, "--dry-run", "--json", user="alice", env=env, check=False)
        assert again.returncode == 2 and "smoke-required" in again.stdout + again.stderr
    finally:
        import shutil
        shutil.rmtree(forged, ignore_errors=True)
