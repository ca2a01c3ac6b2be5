"""One tracked run across every restart, on the real cluster, as alice, against a real MLflow server
(deploy/local/mlflow-up on a port of the test's own) and W&B's offline run files.

A run that crashes once (restarted inside its allocation from its checkpoint) and is requeued twice
(as an operator would, `scontrol requeue`; the requeued job is started at once) is ONE MLflow run
holding every attempt's steps: `loss` once per step, the steps re-run after the crash under
`loss/resumed-attempt-2`, `slurmctl/attempt` 1..4. The same run with W&B is one run id in every
offline run file, with the same labelling on W&B's own step axis. A sweep of 4 is 4 MLflow runs
under one parent run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from slurmctl.config.locate import find_site_config

from .conftest import REPO, slurmctl_json, start_requeued_now, write_run
from .tracking_services import (
    ENDED,
    credentials_name,
    login_of,
    mlflow_state,
    start_mlflow,
    stop_mlflow,
    wait_job_state,
    wandb_runs,
)

TRAIN_PY = '''"""Counts steps with slurmctl's runtime: crashes once at --crash-at (first time only), drains."""
import argparse, json, os, sys, time
from pathlib import Path
from slurmctl.runtime import Runtime

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=24)
p.add_argument("--sleep", type=float, default=0.3)
p.add_argument("--crash-at", type=int, nargs="*", default=[])
a = p.parse_args()
rt = Runtime.from_env()
ck = rt.checkpoints.latest()
save = lambda s: rt.checkpoints.save(s, lambda d: (d / "state.json").write_text(json.dumps({"step": s})))
for step in range(ck.step + 1 if ck else 0, a.steps):
    time.sleep(a.sleep)
    rt.log(step, loss=1.0 / (step + 1) + float(os.environ.get("SEED", "0")))
    marker = rt.run_dir / f"crashed-at-{step}"
    if step in a.crash_at and not marker.exists():
        marker.write_text("")
        print(f"crashing at step {step}", flush=True)
        sys.exit(3)
    if rt.should_stop():
        rt.ack_drain(step, save(step).path)
        sys.exit(0)
    if (step + 1) % rt.checkpoint_interval == 0:
        save(step)
save(a.steps - 1)
'''


@pytest.fixture(scope="module")
def tracking_site():
    """A copy of the cluster's site.yaml naming a fresh MLflow server; (site path, MLflow URI)."""
    state = mlflow_state("mlflow")
    uri = start_mlflow(state)
    folder = Path(f"/tmp/slurmctl-tracking-site-{os.getpid()}")
    folder.mkdir(mode=0o755, exist_ok=True)
    site = yaml.safe_load(find_site_config().read_text())
    site["tracking"] = {"mlflow_uri": uri, "mlflow_credentials": "~/" + credentials_name(state)}
    path = folder / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    path.chmod(0o644)
    os.environ.update(login_of(state, "alice"))  # the test reads alice's runs through MLflow's client as alice
    yield path, uri
    for key in login_of(state, "alice"):
        os.environ.pop(key, None)
    stop_mlflow(state)
    shutil.rmtree(folder, ignore_errors=True)


def as_alice_env(site_path: Path, **extra) -> dict:
    """alice's environment for these runs: the test site and this checkout's code (jobs inherit both)."""
    return {"SLURMCTL_SITE_CONFIG": str(site_path), "PYTHONPATH": str(REPO), **extra}


def events(run_dir: str, kind: str) -> list[dict]:
    lines = Path(run_dir, "attempts.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def last_step(run_dir: str) -> int:
    try:
        return json.loads(Path(run_dir, "heartbeat.json").read_text())["step"]
    except (OSError, ValueError, KeyError):
        return -1


def wait_until(check, what: str, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def requeue_at(run: dict, step: int, starts_before: int) -> None:
    """Operator: requeue the running job once its training passed `step`, then start it at once."""
    wait_until(lambda: len(events(run["run_dir"], "start")) == starts_before and last_step(run["run_dir"]) >= step,
               f"step {step} of attempt {starts_before}")
    subprocess.run(["scontrol", "requeue", str(run["job_id"])], check=True, capture_output=True, timeout=30)
    start_requeued_now(run["job_id"])


def crash_restart_requeue_twice(workdir: Path, site_path: Path, name: str, tracking: dict, env: dict) -> dict:
    spec = {"name": name, "entrypoint": "train.py", "args": ["--crash-at", "7"], "partition": "h100-ondemand",
            "gpus_per_node": 1, "time_limit": "10m", "checkpoint": {"interval_steps": 5}, "tracking": tracking,
            "env": env}
    path = write_run(workdir / name, spec, {"train.py": TRAIN_PY})
    run = slurmctl_json("submit", path, env=as_alice_env(site_path))
    wait_until(lambda: events(run["run_dir"], "step-restart"), "the in-allocation restart after the crash")
    requeue_at(run, 11, 1)
    requeue_at(run, 17, 2)
    assert wait_job_state(run["job_id"], ENDED, timeout=240) == "COMPLETED"
    assert [s["restart_count"] for s in events(run["run_dir"], "start")] == [0, 1, 2]
    assert len(events(run["run_dir"], "step-restart")) == 1
    return run


def test_requeued_twice_restarted_once_is_one_mlflow_run(workdir, tracking_site):
    from mlflow.tracking import MlflowClient

    site_path, uri = tracking_site
    run = crash_restart_requeue_twice(workdir, site_path, "trk-mlflow", {"backend": "mlflow", "project": "trk"}, {})
    meta = json.loads(Path(run["run_dir"], "run.json").read_text())
    tracked = meta["tracking"]
    assert tracked["backend"] == "mlflow" and tracked["url"].startswith(uri)
    script = Path(run["run_dir"], "job.sbatch").read_text()
    assert f"export MLFLOW_RUN_ID={tracked['run_id']}" in script and f"export MLFLOW_TRACKING_URI={uri}" in script
    # alice's MLflow password reached the server (the run has every attempt's metrics, below) but none of
    # the script, the run's files and logs, or what Slurm keeps about the job
    password = os.environ["MLFLOW_TRACKING_PASSWORD"].encode()
    kept = [p for p in Path(run["run_dir"]).rglob("*") if p.is_file() and password in p.read_bytes()]
    assert kept == [], kept
    for argv in (["scontrol", "show", "job", "-dd", str(run["job_id"])],
                 ["sacct", "-j", str(run["job_id"]), "-P", "-o", "ALL"]):
        assert password not in subprocess.run(argv, capture_output=True, timeout=60).stdout, argv

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("trk")
    found = client.search_runs([experiment.experiment_id], f"tags.`slurmctl.run_id` = '{run['run_id']}'")
    assert [r.info.run_id for r in found] == [tracked["run_id"]], "every attempt must continue ONE MLflow run"
    mlflow_run = found[0]
    loss = client.get_metric_history(tracked["run_id"], "loss")
    assert sorted(m.step for m in loss) == list(range(24)), "each step once under `loss`, no zigzag"
    resumed = client.get_metric_history(tracked["run_id"], "loss/resumed-attempt-2")
    assert sorted(m.step for m in resumed) == [5, 6, 7], "the steps re-run after the crash, marked"
    attempts = client.get_metric_history(tracked["run_id"], "slurmctl/attempt")
    assert sorted(m.value for m in attempts) == [1, 2, 3, 4]
    assert mlflow_run.data.tags["slurmctl.attempt"] == "4"
    assert mlflow_run.info.status == "FINISHED", "the job's end marks the MLflow run"
    assert mlflow_run.data.tags["slurmctl.attempt.2.highest_step_before"] == "7"
    print(f"MLflow run {tracked['run_id']}: {len(loss)} loss points, resumed {[m.step for m in resumed]}, "
          f"attempts {sorted(m.value for m in attempts)}")


def test_requeued_twice_restarted_once_is_one_wandb_run(workdir, tracking_site):
    """Two crashes, each requeued by the job itself (Slurm requeues, restarts in the allocation turned
    off). W&B's writer (wandb-core) dies at once on the SIGTERM Slurm sends a step at a preemption or
    `scontrol requeue` and loses what it had not written yet, so the requeues here come from failures,
    where the training ends by itself (the limitation is in the README's tracking section); the
    in-allocation restart is the MLflow test's (the labelling does not depend on the backend)."""
    site_path, _ = tracking_site
    spec = {"name": "trk-wandb", "entrypoint": "train.py", "args": ["--crash-at", "7", "12"],
            "partition": "h100-ondemand", "gpus_per_node": 1, "time_limit": "10m",
            "checkpoint": {"interval_steps": 5}, "tracking": {"backend": "wandb", "project": "trk"},
            "env": {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "SLURMCTL_RESTART_IN_ALLOCATION": "0"}}
    path = write_run(workdir / "trk-wandb", spec, {"train.py": TRAIN_PY})
    run = slurmctl_json("submit", path, env=as_alice_env(site_path))
    for count in (1, 2):  # each crash: `end` requeues from the newest checkpoint
        wait_until(lambda count=count: len([e for e in events(run["run_dir"], "end") if e["action"] == "requeue"])
                   >= count, f"requeue {count}", timeout=240)
        start_requeued_now(run["job_id"])
    assert wait_job_state(run["job_id"], ENDED, timeout=240) == "COMPLETED"
    launches = len(events(run["run_dir"], "start")) + len(events(run["run_dir"], "step-restart"))
    offline = wandb_runs(Path(run["run_dir"]))
    assert len(offline) == launches, [o["file"] for o in offline]  # one offline run directory per launch
    assert {o["run_id"] for o in offline} == {run["run_id"]}, "every attempt continues ONE W&B run id"
    rows = [row for o in offline for row in o["history"]]
    fresh = [row["slurmctl/step"] for row in rows if "loss" in row]
    assert fresh == list(range(24)), "W&B's own axis slurmctl/step: each step once under `loss`, in order"
    resumed = sorted((k, row["slurmctl/step"]) for row in rows for k in row if k.startswith("loss/resumed"))
    assert resumed == [("loss/resumed-attempt-2", 5), ("loss/resumed-attempt-2", 6), ("loss/resumed-attempt-2", 7),
                       ("loss/resumed-attempt-3", 10), ("loss/resumed-attempt-3", 11), ("loss/resumed-attempt-3", 12)]
    assert sorted(row["slurmctl/attempt"] for row in rows if "slurmctl/attempt" in row) == \
        list(range(1, launches + 1))
    print(f"W&B: {launches} launches, one run id, resumed {resumed}")


def test_sweep_of_four_is_four_mlflow_runs_under_one_parent(workdir, tracking_site):
    from mlflow.tracking import MlflowClient

    site_path, uri = tracking_site
    spec = write_run(workdir / "sweep", {
        "name": "trk-swp", "entrypoint": "train.py", "args": ["--steps", "3", "--sleep", "0.1"],
        "partition": "h100-ondemand", "gpus_per_node": 1, "time_limit": "5m", "env": {"SEED": "0"},
        "tracking": {"backend": "mlflow", "project": "trk-sweeps"}}, {"train.py": TRAIN_PY})
    sweep = slurmctl_json("sweep", spec, "--grid", "SEED=1,2,3,4", env=as_alice_env(site_path))
    run_ids = [e["run_id"] for e in sweep["elements"]]
    root = Path(sweep["sweep_dir"]).parent
    for run_id in run_ids:  # every element's own end: the training finished
        wait_until(lambda run_id=run_id: Path(root, run_id, "attempts.jsonl").exists()
                   and [e["outcome"] for e in events(str(root / run_id), "end")] == ["completed"],
                   f"element {run_id} to finish", timeout=300)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("trk-sweeps")
    (parent,) = client.search_runs([experiment.experiment_id], f"tags.`slurmctl.run_id` = '{sweep['sweep_id']}'")
    children = client.search_runs([experiment.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(c.data.tags["slurmctl.run_id"] for c in children) == sorted(run_ids)
    for child in children:
        assert sorted(m.step for m in client.get_metric_history(child.info.run_id, "loss")) == [0, 1, 2]


WANDB_TRAIN_PY = '''import time
from slurmctl.runtime import Runtime
rt = Runtime.from_env()
for step in range(100000):
    rt.log(step, loss=1.0 / (step + 1))
    if rt.should_stop():
        break
    time.sleep(0.1)
'''


def test_a_killed_batch_script_ends_its_mlflow_run_as_failed(workdir, tracking_site):
    """`scancel --batch --signal=KILL`: the job script never ends its MLflow run. Root's epilog step (this
    checkout's, run as the epilog would with the facts Slurm gives for the real job: the cluster's hooks
    run the deployed checkout) has a process of alice's end it as FAILED with alice's own login."""
    from mlflow.tracking import MlflowClient

    from slurmctl.ops.hooks import epilog, jobinfo, run_records
    from slurmctl.ops.hooks.config import HookConfig
    from slurmctl.ops.hooks.prolog import HookResult

    from .conftest import as_user

    site_path, uri = tracking_site
    spec = {"name": "trk-killed", "entrypoint": "train.py", "args": ["--steps", "600"], "partition": "h100-ondemand",
            "gpus_per_node": 1, "time_limit": "10m", "checkpoint": {"interval_steps": 5},
            "tracking": {"backend": "mlflow", "project": "trk-killed"}}
    run = slurmctl_json("submit", write_run(workdir / "trk-killed", spec, {"train.py": TRAIN_PY}),
                        env=as_alice_env(site_path))
    tracked = json.loads(Path(run["run_dir"], "run.json").read_text())["tracking"]
    wait_until(lambda: last_step(run["run_dir"]) >= 2, "the first steps")
    alice = as_user("alice")
    alice.run(["scancel", "--batch", "--signal=KILL", str(run["job_id"])], check=True, timeout=60)
    assert wait_job_state(run["job_id"], ENDED, timeout=120) == "FAILED"
    client = MlflowClient(uri)
    assert client.get_run(tracked["run_id"]).info.status == "RUNNING"  # what bob's check found: forever
    exit_code = subprocess.run(["sacct", "-j", str(run["job_id"]), "-X", "-n", "-P", "-o", "ExitCode"],
                               capture_output=True, text=True, timeout=60).stdout.split()[0]
    cfg = HookConfig.from_env({"SLURMCTL_LOCAL_DIR": os.environ.get("SLURMCTL_LOCAL_DIR", "/var/lib/slurmctl-local")})
    info = jobinfo.query_job(cfg.slurm, run["job_id"])
    cfg.node = info.batch_host
    env = {"SLURM_JOB_ID": str(run["job_id"]), "SLURM_JOB_UID": str(alice.uid), "SLURM_JOB_GID": str(alice.gid),
           "SLURM_JOB_USER": "alice", "SLURM_JOB_COMMENT": f"slurmctl:{run['run_id']}",
           "SLURM_JOB_RESTART_COUNT": "0", "SLURM_JOB_EXIT_CODE2": exit_code, "SLURMD_NODENAME": info.batch_host,
           "SLURMCTL_SITE_CONFIG": str(site_path)}
    result, now = HookResult(), time.time()
    run_records.record_killed_attempt(cfg, env, info, epilog.build_record(cfg, env, info, now, result), now, result)
    wait_until(lambda: client.get_run(tracked["run_id"]).info.status != "RUNNING", "the MLflow run's end", 120)
    ended = client.get_run(tracked["run_id"]).info
    assert ended.status == "FAILED" and ended.end_time, ended


def test_a_sigterm_without_a_drain_loses_only_w_and_bs_last_second(workdir):
    """What Slurm does at `scontrol requeue` or at the end of a preemption's grace time: SIGTERM to every
    process of the step at once, W&B's writer (wandb-core) included, which dies on it. Steps logged
    more than WANDB_FLUSH_SECONDS + a margin before are in the offline run file (with W&B's default
    15 s flush interval all of them were lost)."""
    from .conftest import User

    alice = User("alice")
    run_dir = workdir / "run"
    run_dir.mkdir()
    (workdir / "train.py").write_text(WANDB_TRAIN_PY)
    env = {"PYTHONPATH": str(REPO), "SLURMCTL_RUN_DIR": str(run_dir), "SLURMCTL_TRACKING": "wandb",
           "WANDB_RUN_ID": "sigterm-test", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    os.chown(run_dir, alice.uid, alice.gid)
    os.chown(workdir / "train.py", alice.uid, alice.gid)
    trainer = subprocess.Popen(alice.argv([os.sys.executable, str(workdir / "train.py")], env), cwd=workdir,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: last_step(str(run_dir)) >= 30, "30 steps logged", timeout=120)
        (python,) = subprocess.run(["pgrep", "-u", "alice", "-f", str(workdir / "train.py")], capture_output=True,
                                   text=True).stdout.split()
        # this trainer's own writer only: wandb-core is started with --pid <its python>
        core = subprocess.run(["pgrep", "-u", "alice", "-f", f"wandb-core.* --pid {python}( |$)"],
                              capture_output=True, text=True).stdout.split()
        assert len(core) == 1, core
        time.sleep(2.5)
        safe = last_step(str(run_dir)) - 25  # logged >= 2.5 s before the signal
        for pid in [*core, python]:
            subprocess.run(["kill", "-TERM", pid], check=False)
        trainer.wait(timeout=120)
    finally:
        trainer.kill()
    (offline,) = wandb_runs(run_dir)
    steps = {row["slurmctl/step"] for row in offline["history"]}
    assert set(range(safe + 1)) <= steps, f"lost steps: {sorted(set(range(safe + 1)) - steps)[:20]}"
    print(f"W&B after SIGTERM: {len(steps)} steps in the run file, every step up to {safe} (2.5 s before)")
