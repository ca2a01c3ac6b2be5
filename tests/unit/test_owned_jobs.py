"""Whose Slurm job it is: decided on the uid Slurm records, with the argv each source is asked."""

import pytest

from slurmctl.errors import RunNotFound, RunNotOwned
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.owned import my_plain_jobs, owned_job, owned_job_id
from tests.unit.fakes import ReplayRunner

SQUEUE = ("squeue", "-h", "-j", "45", "-o", "%A\x1f%U")
SCONTROL = ("scontrol", "show", "job", "-o", "45")
SACCT = ("sacct", "-n", "-P", "-X", "-a", "--duplicates", "--delimiter=\x1f", "-j", "45", "-o", "JobIDRaw,UID,Submit")
# captured from the local cluster (Slurm 22.05.8), cut to the fields that matter here
SCONTROL_LINE = ("JobId=45 JobName=wrap UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A Priority=1 "
                 "JobState=FAILED Reason=NonZeroExitCode Dependency=(null)\n")


def test_queued_job_owner_from_squeue():
    runner = ReplayRunner({SQUEUE: "45\x1f1001\n"})
    assert owned_job_id(SlurmClient(runner), 45, uid=1001) == 45
    with pytest.raises(RunNotOwned):
        owned_job_id(SlurmClient(ReplayRunner({SQUEUE: "45\x1f1001\n"})), 45, uid=1002)


def test_ended_job_owner_from_the_controller_before_accounting():
    runner = ReplayRunner({SQUEUE: "", SCONTROL: SCONTROL_LINE, SACCT: "45\x1f1002\x1f2026-11-30T10:00:00\n"})
    assert owned_job_id(SlurmClient(runner), 45, uid=1001) == 45
    assert list(SACCT) not in runner.calls


def test_a_job_name_that_forges_a_second_user_id_is_refused():
    forged = SCONTROL_LINE.replace("JobName=wrap", "JobName=x UserId=bob(1002)")
    runner = ReplayRunner({SQUEUE: "", SCONTROL: forged.replace("alice(1001)", "bob(1002)", 0)})
    with pytest.raises((RunNotOwned, RunNotFound)):
        owned_job_id(SlurmClient(runner), 45, uid=1002)


def test_accounting_after_an_id_reset_takes_the_newest_job_of_that_id():
    rows = "45\x1f1002\x1f2026-11-30T10:00:00\n45\x1f1001\x1f2026-12-01T14:48:12\n"
    runner = ReplayRunner({SQUEUE: "", SCONTROL: "", SACCT: rows})
    assert owned_job_id(SlurmClient(runner), 45, uid=1001) == 45
    with pytest.raises(RunNotFound):
        owned_job_id(SlurmClient(ReplayRunner({SQUEUE: "", SCONTROL: "", SACCT: ""})), 45, uid=1001)


def test_plain_jobs_skip_runs_other_uids_and_continuation_lines():
    argv = ("squeue", "-h", "-r", "--me", "-o", "\x1f".join(["%i", "%U", "%T", "%P", "%D", "%M", "%k", "%j"]))
    out = ("50\x1f1001\x1fRUNNING\x1fl4-dev\x1f1\x1f0:05\x1f(null)\x1fmy job\n"
           "51\x1f1001\x1fPENDING\x1fl4-dev\x1f1\x1f0:00\x1fslurmctl:run-20261201-abcd\x1frun-20261201-abcd\n"
           "52\x1f1001\x1fPENDING\x1fl4-dev\x1f1\x1f0:00\x1f(null)\x1fname with\n"
           "53\x1f1002\x1fRUNNING\x1fl4-dev\x1f1\x1f0:00\x1f(null)\x1fforged line\n"
           "60_2\x1f1001\x1fPENDING\x1fh100-spot\x1f2\x1f0:00\x1f(null)\x1farr\n")
    rows = my_plain_jobs(SlurmClient(ReplayRunner({argv: out})), uid=1001)
    assert [(r.job_id, r.name) for r in rows] == [("50", "my job"), ("52", "name with"), ("60_2", "arr")]


def test_owned_job_record_from_the_controller():
    line = ("JobId=45 JobName=plain oom UserId=alice(1001) GroupId=alice(1001) JobState=FAILED Reason=NonZeroExitCode "
            "ExitCode=1:0 RunTime=00:00:01 TimeLimit=00:05:00 SubmitTime=2026-12-01T14:48:12 "
            "StartTime=2026-12-01T14:48:12 EndTime=2026-12-01T14:48:13 Partition=l4-dev NodeList=l4-1 NumNodes=1 "
            "TRES=cpu=1,mem=1000M,node=1,billing=1 Comment=(null)\n")
    job = owned_job(SlurmClient(ReplayRunner({SQUEUE: "", SCONTROL: line})), 45, uid=1001)
    assert (job.name, job.state, job.exit_code, job.elapsed_seconds, job.time_limit_seconds, job.nodelist,
            job.comment, job.source) == ("plain oom", "FAILED", "1:0", 1, 300, "l4-1", "", "scontrol")


def test_owned_job_record_from_accounting_is_the_callers_newest():
    argv = ("sacct", "-n", "-P", "-X", "--duplicates", "--delimiter=\x1f", "-j", "45", "-o",
            "JobIDRaw,UID,Submit,Start,End,State,Reason,Partition,NNodes,NodeList,ElapsedRaw,TimelimitRaw,ExitCode,"
            "AllocTRES,Comment,JobName")
    old = ("45\x1f1002\x1f2026-11-30T10:00:00\x1f\x1f\x1fCOMPLETED\x1fNone\x1fh100\x1f1\x1fh100-1\x1f9\x1f5\x1f0:0"
           "\x1f\x1f\x1fallocation")
    new = ("45\x1f1001\x1f2026-12-01T14:48:12\x1f2026-12-01T14:48:12\x1f2026-12-01T14:48:13\x1fFAILED\x1fNone\x1f"
           "l4-dev\x1f1\x1fl4-1\x1f1\x1f5\x1f1:0\x1fcpu=1\x1f\x1fplain\x1foom")
    owners = "45\x1f1002\x1f2026-11-30T10:00:00\n45\x1f1001\x1f2026-12-01T14:48:12\n"
    runner = ReplayRunner({SQUEUE: "", SCONTROL: "", SACCT: owners, argv: f"{old}\n{new}\n"})
    job = owned_job(SlurmClient(runner), 45, uid=1001)
    assert (job.name, job.state, job.time_limit_seconds, job.source) == ("plain\x1foom", "FAILED", 300, "sacct")
