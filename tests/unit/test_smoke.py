"""--smoke: the derived spec, the code+config hash, and the pass/fail judgement of a finished run."""

import json

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


def test_smoke_gate_trusts_slurm_accounting_not_files(local_site, tmp_path):
    import os

    from slurmctl.fsutil import append_jsonl
    from slurmctl.rundir import RunRegistry, current_user
    from slurmctl.slurm.client import Job

    site = local_site.model_copy(update={"runs_root": str(tmp_path)})
    registry = RunRegistry(tmp_path)
    code_hash = "0123456789abcdef"
    run_id = f"big-smoke-{code_hash}-20261130-00aa"
    assert smoke_spec(BIG, local_site, code_hash).name == f"big-smoke-{code_hash}"
    assert smoke_passed(site, code_hash, Accounting([]), registry) is None  # no runs at all
    run_dir = tmp_path / current_user() / run_id
    run_dir.mkdir(parents=True)
    os.chmod(tmp_path / current_user(), 0o700)
    (run_dir / "run.json").write_text("{}")
    append_jsonl(run_dir / "attempts.jsonl", {"event": "submitted", "job_id": 41})
    # a forged verdict file, as the old gate read it, counts for nothing
    (run_dir / "smoke.json").write_text(json.dumps({"passed": True}))
    me = current_user()

    def job(**kw):
        return Job(**{"job_id": 41, "name": run_id, "state": "COMPLETED", "partition": "l4-dev", "exit_code": "0:0",
                      "user": me, **kw})

    assert smoke_passed(site, code_hash, Accounting([job(state="FAILED", exit_code="1:0")]), registry) is None
    assert smoke_passed(site, code_hash, Accounting([job(partition="h100-spot")]), registry) is None
    assert smoke_passed(site, code_hash, Accounting([job(user="mallory")]), registry) is None
    assert smoke_passed(site, code_hash, Accounting([job(name="other-20261130-00aa")]), registry) is None
    assert smoke_passed(site, "fedcba9876543210", Accounting([job()]), registry) is None  # other code
    accounting = Accounting([job()])
    record = smoke_passed(site, code_hash, accounting, registry)
    assert record["run_id"] == run_id and record["job_id"] == 41 and accounting.asked == [[41]]
