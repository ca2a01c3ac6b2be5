"""--smoke: the derived spec, the code+config hash, and the pass/fail judgement of a finished run."""

import json
import os

import pytest

from slurmctl.config.models import RunSpec
from slurmctl.rundir import Run
from slurmctl.runtime.checkpoint import CheckpointManager
from slurmctl.submit.smoke import code_config_hash, judge, smoke_passed, smoke_spec

BIG = RunSpec(name="big", entrypoint="train.py", partition="h100-ondemand", nodes=4, gpus_per_node=8, gpu_type="h100",
              time_limit="2d", env={"A": "1"}, model={"params": "7b", "micro_batch": 8})


def test_smoke_spec_is_one_small_gpu_one_step(local_site):
    smoke = smoke_spec(BIG, local_site)
    assert (smoke.partitions, smoke.nodes, smoke.gpus_per_node, smoke.nprocs_per_node) == (["l4-dev"], 1, 1, 1)
    assert smoke.gpu_type is None and smoke.time_limit == "10m" and smoke.model.micro_batch == 1
    assert smoke.env == {"A": "1", "SLURMCTL_SMOKE": "1"} and smoke.name == "big-smoke"


def test_hash_follows_code_and_config_not_placement(tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "cfg.yaml").write_text("lr: 1\n")
    spec = BIG.model_copy(update={"config_files": ["cfg.yaml"]})
    first = code_config_hash(spec, tmp_path)
    assert code_config_hash(spec.model_copy(update={"nodes": 1, "partition": "l4-dev"}), tmp_path) == first
    (tmp_path / "cfg.yaml").write_text("lr: 2\n")
    second = code_config_hash(spec, tmp_path)
    (tmp_path / "train.py").write_text("print(2)\n")
    assert len({first, second, code_config_hash(spec, tmp_path)}) == 3


def finished_run(tmp_path, step=0, ack=True, valid=True) -> Run:
    tmp_path.mkdir(parents=True)
    run = Run("big-smoke-20261129-0001", tmp_path)
    (tmp_path / "run.yaml").write_text(json.dumps(BIG.model_dump(mode="json")))
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": step}) + "\n")
    ck = CheckpointManager(tmp_path / "checkpoints").save(step, lambda d: (d / "state.pt").write_text("x"))
    if not valid:
        (ck.path / ".complete").unlink()
    if ack:
        (tmp_path / "drain.ack").write_text(json.dumps({"step": step, "checkpoint": str(ck.path)}))
    return run


def test_judge_pass_and_each_failure(tmp_path):
    assert judge(finished_run(tmp_path / "ok"), "COMPLETED")[0] is True
    assert judge(finished_run(tmp_path / "f"), "FAILED") == \
        (False, "the job ended failed; its log tail below says why.")
    assert "rt.ack_drain" in judge(finished_run(tmp_path / "n", ack=False), "COMPLETED")[1]
    assert "no valid checkpoint" in judge(finished_run(tmp_path / "v", valid=False), "COMPLETED")[1]


class Accounting:
    """What sacct says about job ids (the gate's only source of truth)."""

    def __init__(self, jobs):
        self.jobs, self.asked = jobs, []

    def history(self, job_ids):
        self.asked.append(sorted(job_ids))
        return [j for j in self.jobs if j.job_id in set(job_ids)]


def _verdict_dir(root, user, verdicts: dict):
    """<root>/<user>/<hash>.<job>.json as the epilog leaves them (root's, closed to writers)."""
    import os

    user_dir = root / user
    user_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    os.chmod(user_dir, 0o755)
    for name, verdict in verdicts.items():
        (user_dir / name).write_text(json.dumps(verdict))
        os.chmod(user_dir / name, 0o644)
    return root


@pytest.mark.skipif(os.geteuid() != 0, reason="verdicts are root's files: the gate trusts nothing else")
def test_smoke_gate_trusts_roots_verdict_and_slurm_accounting_not_files_or_names(local_site, tmp_path):
    from slurmctl.fsutil import append_jsonl
    from slurmctl.rundir import current_user
    from slurmctl.slurm.client import Job

    me = current_user()
    code_hash = "0123456789abcdef"
    run_id = f"big-smoke-{code_hash}-20261130-00aa"
    verdicts = tmp_path / "verdicts"
    site = local_site.model_copy(update={"runs_root": str(tmp_path / "runs"), "smoke_verdicts_dir": str(verdicts)})
    assert smoke_spec(BIG, local_site, code_hash).name == f"big-smoke-{code_hash}"

    def job(**kw):
        return Job(**{"job_id": 41, "name": run_id, "state": "COMPLETED", "partition": "l4-dev", "exit_code": "0:0",
                      "user": me, **kw})

    # The old attack: a COMPLETED job of one's own with the smoke name on the smoke partition, and a
    # planted run dir whose attempts.jsonl names it. Without root's verdict, nothing opens the gate.
    run_dir = tmp_path / "runs" / me / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text("{}")
    append_jsonl(run_dir / "attempts.jsonl", {"event": "submitted", "job_id": 41})
    (run_dir / "smoke.json").write_text(json.dumps({"passed": True}))
    accounting = Accounting([job()])
    assert smoke_passed(site, code_hash, accounting) is None and accounting.asked == []

    verdict = {"job_id": 41, "user": me, "code_hash": code_hash, "partition": "l4-dev", "exit_code": "0:0"}
    _verdict_dir(verdicts, me, {f"{code_hash}.41.json": verdict})
    assert smoke_passed(site, code_hash, Accounting([job(state="CANCELLED")])) is None  # epilog saw 0:0
    assert smoke_passed(site, code_hash, Accounting([job(state="FAILED", exit_code="1:0")])) is None
    assert smoke_passed(site, code_hash, Accounting([job(partition="h100-spot")])) is None
    assert smoke_passed(site, code_hash, Accounting([job(user="mallory")])) is None
    assert smoke_passed(site, "fedcba9876543210", Accounting([job()])) is None  # other code
    accounting = Accounting([job()])
    record = smoke_passed(site, code_hash, accounting)
    assert record["run_id"] == run_id and record["job_id"] == 41 and accounting.asked == [[41]]

    # a verdict naming another user, another job or hash than its file name, or not root's: none
    for forged in ({**verdict, "user": "mallory"}, {**verdict, "job_id": 42}, {**verdict, "partition": "h100-spot"}):
        _verdict_dir(verdicts, me, {f"{code_hash}.41.json": forged})
        assert smoke_passed(site, code_hash, Accounting([job(), job(job_id=42)])) is None
    _verdict_dir(verdicts, me, {f"{code_hash}.41.json": verdict})
    os.chown(verdicts / me / f"{code_hash}.41.json", 1000, -1)
    assert smoke_passed(site, code_hash, Accounting([job()])) is None
    os.chown(verdicts / me / f"{code_hash}.41.json", 0, -1)
    os.chmod(verdicts / me, 0o770)  # a group that can write plants verdicts
    assert smoke_passed(site, code_hash, Accounting([job()])) is None


def test_a_passed_smoke_waits_until_the_gate_sees_it(local_site, tmp_path):
    """Accounting trails the job's end on a loaded controller: `submit --smoke` says passed only with the gate's
    view, so the full submit that follows is not refused; past the wait it says the gate does not see it yet."""
    from slurmctl.rundir import current_user
    from slurmctl.slurm.client import Job
    from slurmctl.submit.smoke import wait_for_gate

    me, code_hash = current_user(), "0123456789abcdef"
    site = local_site.model_copy(update={"smoke_verdicts_dir": str(tmp_path / "verdicts")})
    _verdict_dir(tmp_path / "verdicts", me, {f"{code_hash}.41.json": {
        "job_id": 41, "user": me, "code_hash": code_hash, "partition": "l4-dev", "exit_code": "0:0"}})

    class Lagging(Accounting):
        def history(self, job_ids):  # RUNNING in sacct twice after the job left the queue, then its end
            state = "RUNNING" if len(self.asked) < 2 else "COMPLETED"
            super().history(job_ids)
            return [Job(job_id=41, name="r", state=state, partition="l4-dev", exit_code="0:0", user=me)]

    lagging = Lagging([])
    assert wait_for_gate(site, code_hash, lagging, timeout=5, poll=0.01) and len(lagging.asked) == 3
    assert not wait_for_gate(site, "fedcba9876543210", Accounting([]), timeout=0.05, poll=0.01)


@pytest.mark.skipif(os.geteuid() != 0, reason="the epilog writes root's verdicts as root")
def test_epilog_writes_a_verdict_only_for_a_rendered_smoke_script_that_exited_0(tmp_path):
    from slurmctl.ops.hooks.config import HookConfig
    from slurmctl.ops.hooks.epilog import record_smoke_verdict
    from slurmctl.ops.hooks.prolog import HookResult
    from slurmctl.slurm.records import JobInfo
    from slurmctl.submit.smoke_verdicts import read_verdicts

    code_hash = "0123456789abcdef"
    rendered = ("#!/bin/bash\nexport SLURMCTL_SMOKE=1\n"
                '"$PY" -m slurmctl.runtime.attempt end --exit-code "$rc"\n')

    class Slurm:
        script = rendered

        def batch_script(self, job_id, timeout):
            return self.script

    slurm = Slurm()
    cfg = HookConfig(node="n1", gpu_map_dir=tmp_path, scratch_root=tmp_path, cost_spool=tmp_path / "spool",
                     slurm=slurm, smoke_verdicts_dir=tmp_path / "verdicts")
    env = {"SLURM_JOB_USER": "root", "SLURM_JOB_UID": "0", "SLURM_JOB_GID": "0", "SLURM_JOB_PARTITION": "l4-dev",
           "SLURM_JOB_EXIT_CODE2": "0:0"}
    info = JobInfo(job_id=7, name=f"big-smoke-{code_hash}-20261130-00aa")

    def written(env=env, info=info):
        record_smoke_verdict(cfg, env, info, HookResult())
        found = read_verdicts(str(cfg.smoke_verdicts_dir), "root", code_hash)
        for path in (cfg.smoke_verdicts_dir / "root").glob("*.json"):
            path.unlink()
        return found

    assert written(env={**env, "SLURM_JOB_EXIT_CODE2": "1:0"}) == []
    assert written(info=JobInfo(job_id=7, name="big-20261130-00aa")) == []
    slurm.script = "#!/bin/sh\n# SLURMCTL_SMOKE=1 planted in a comment\nexit 0\n"
    assert written() == []
    slurm.script = rendered
    (verdict,) = written()
    assert verdict["job_id"] == 7 and verdict["partition"] == "l4-dev" and verdict["code_hash"] == code_hash
    user_dir = cfg.smoke_verdicts_dir / "root"
    assert oct(user_dir.stat().st_mode & 0o777) == "0o755" and user_dir.stat().st_uid == 0
