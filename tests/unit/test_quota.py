"""Quota numbers for QOS*/Assoc* pending reasons: which sacctmgr field, TRES parsing, usage sums.

The squeue/sacctmgr texts below have the shape the local cluster (Slurm 22.05) printed during
tests/integration/test_quota.py (`squeue -h -O JobID:<sealed separator>,...` and `sacctmgr -n -P show qos ...`).
"""

from slurmctl.observe.explain import parse_limit_family
from slurmctl.observe.quota import parse_tres, quota_for, sacctmgr_field
from slurmctl.slurm.client import Job, SlurmClient

from .fakes import ReplayRunner, squeue_output

QUEUE = squeue_output(*[
    ("16575", "RUNNING", "root", "ml-research", "gpu1", "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=1,gres/gpu:h100=1"),
    ("16576", "PENDING", "root", "ml-research", "gpu1", "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=1"),
    ("16577", "RUNNING", "alice", "ml-research", "gpu1", "cpu=4,node=1,gres/gpu=4"),  # another user: not counted
    ("16578", "RUNNING", "root", "ml-research", "normal", "cpu=2,node=1,gres/gpu=2"),  # another QOS: not counted
])


def test_each_limit_family_maps_to_its_sacctmgr_field():
    cases = {"QOSMaxGRESPerUser": "MaxTRESPU", "QOSMaxGRESPerAccount": "MaxTRESPA", "QOSGrpGRES": "GrpTRES",
             "AssocGrpGRES": "GrpTRES", "QOSMaxGRESPerJob": "MaxTRES", "QOSMaxGRESPerNode": "MaxTRESPerNode",
             "QOSGrpCPUMinutesLimit": "GrpTRESMins", "AssocGrpCPURunMinutesLimit": "GrpTRESRunMins",
             "QOSMaxJobsPerUserLimit": "MaxJobsPU", "QOSMaxSubmitJobPerUserLimit": "MaxSubmitPU",
             "AssocMaxJobsLimit": "MaxJobs", "AssocGrpSubmitJobsLimit": "GrpSubmit", "QOSMinGRES": None,
             "QOSMaxWallDurationPerJobLimit": None}
    assert {r: sacctmgr_field(parse_limit_family(r)) for r in cases} == cases


def test_parse_tres_reads_units():
    assert parse_tres("cpu=4,mem=8G,gres/gpu=1,node=") == {"cpu": 4, "mem": 8192, "gres/gpu": 1}


def test_qos_per_user_gpu_limit_counts_only_my_running_jobs_in_that_qos():
    runner = ReplayRunner({"squeue": QUEUE, "sacctmgr": "gpu1|gres/gpu=1\n"})
    job = Job(16576, "quota-second", "PENDING", reason="QOSMaxGRESPerUser", user="root")
    quota = quota_for(job, SlurmClient(runner))
    assert [c[0] for c in runner.calls] == ["squeue", "sacctmgr"]
    assert "name=gpu1" in runner.calls[1] and "format=Name,MaxTRESPU" in runner.calls[1]
    assert (quota.holder, quota.limit, quota.usage) == ("gpu1", 1, 1)
    assert "1 GPUs" in quota.sentence() and "your running jobs use 1 now" in quota.sentence()


def test_assoc_group_limit_uses_the_account_row_and_everyone_in_it():
    runner = ReplayRunner({"squeue": QUEUE, "sacctmgr": "ml-research||gres/gpu=6\nml-research|root|\n"})
    job = Job(16576, "quota-second", "PENDING", reason="AssocGrpGRES", user="root")
    quota = quota_for(job, SlurmClient(runner))
    assert (quota.holder, quota.field, quota.limit, quota.usage) == ("ml-research", "GrpTRES", 6, 7)


def test_other_reasons_cost_no_slurm_call():
    runner = ReplayRunner({})
    assert quota_for(Job(1, "x", "PENDING", reason="Resources"), SlurmClient(runner)) is None
    assert runner.calls == []


def test_a_job_asking_more_than_the_limit_is_told_it_can_never_start():
    from slurmctl.observe.explain import explain_beyond_limit

    big = ("16580", "PENDING", "root", "ml-research", "gpu1", "cpu=24,node=3,gres/gpu=24")
    queue = QUEUE + squeue_output(big)
    runner = ReplayRunner({"squeue": queue, "sacctmgr": "gpu1|gres/gpu=16\n"})
    quota = quota_for(Job(16580, "big", "PENDING", reason="QOSMaxGRESPerUser", user="root"), SlurmClient(runner))
    assert (quota.limit, quota.request, quota.never_fits) == (16, 24, True)
    expl = explain_beyond_limit(quota.request, quota.limit, quota.unit, f"{quota.field} of QOS {quota.holder}")
    assert expl.kind == "blocked" and "can never start" in expl.headline
    assert "MaxTRESPU of QOS gpu1: 16 GPUs" in expl.headline
    assert "at most 16 GPUs" in expl.action
    # a job that fits the limit alone only waits for room
    small = quota_for(Job(16576, "quota-second", "PENDING", reason="QOSMaxGRESPerUser", user="root"),
                      SlurmClient(ReplayRunner({"squeue": QUEUE, "sacctmgr": "gpu1|gres/gpu=16\n"})))
    assert small.request == 1 and not small.never_fits
