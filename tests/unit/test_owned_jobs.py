"""Whose Slurm job it is: decided on the uid Slurm records, with the argv each source is asked; the
records that carry a job name or comment are sealed, so a name cannot forge another job's record."""

import json
import os
import pwd
from pathlib import Path

import pytest

from slurmctl.errors import ForgedSlurmOutput, RunNotFound, RunNotOwned
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.owned import OWNED_HISTORY, OWNED_NOW, PLAIN, my_plain_jobs, owned_job, owned_job_id
from tests.unit.fakes import TEST_SEAL, ReplayRunner, sacct_output, squeue_output

SQUEUE = ("squeue", "-h", "-t", "all", "-j", "45", "-o", "%A\x1f%U")
SACCT = ("sacct", "-n", "-P", "-X", "-a", "--duplicates", "--delimiter=\x1f", "-j", "45", "-o", "JobIDRaw,UID,Submit")
NOW = ("squeue", "-h", "-t", "all", "-j", "45", *OWNED_NOW.format_argv(TEST_SEAL))
HISTORY = ("sacct", "-n", "-P", "-X", "-a", "--duplicates", *OWNED_HISTORY.format_argv(TEST_SEAL), "-j", "45")
FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"
ME = pwd.getpwuid(os.geteuid()).pw_name


def test_queued_or_recently_ended_job_owner_from_the_controller():
    runner = ReplayRunner({SQUEUE: "45\x1f1001\n"})
    assert owned_job_id(SlurmClient(runner), 45, uid=1001) == 45
    assert list(SACCT) not in runner.calls
    with pytest.raises(RunNotOwned):
        owned_job_id(SlurmClient(ReplayRunner({SQUEUE: "45\x1f1001\n"})), 45, uid=1002)


def test_accounting_after_an_id_reset_takes_the_newest_job_of_that_id():
    rows = "45\x1f1002\x1f2026-11-30T10:00:00\n45\x1f1001\x1f2026-12-01T14:48:12\n"
    runner = ReplayRunner({SQUEUE: "", SACCT: rows})
    assert owned_job_id(SlurmClient(runner), 45, uid=1001) == 45
    with pytest.raises(RunNotFound):
        owned_job_id(SlurmClient(ReplayRunner({SQUEUE: "", SACCT: ""})), 45, uid=1001)


def test_plain_jobs_skip_runs_and_other_users_and_a_forged_record_stays_inside_its_name():
    argv = ("squeue", "-h", "-r", "--me", *PLAIN.format_argv(TEST_SEAL))
    forged_name = "x\n" + "\x1f".join(["99", "RUNNING", "l4-dev", "1", "0:00", ME, "", "N/A", "forged", "(null)"])
    two_h100 = "cpu=4,mem=8000M,node=2,billing=4,gres/gpu=4,gres/gpu:h100=4"  # squeue -O tres-alloc, 2 x 2 h100
    out = squeue_output(["50", "RUNNING", "h100-ondemand", "2", "0:05", ME, two_h100, "N/A", "my job", "(null)"],
                        ["51", "PENDING", "l4-dev", "1", "0:00", ME, "", "N/A", "run-20261201-abcd",
                         "slurmctl:run-20261201-abcd"],
                        ["53", "RUNNING", "l4-dev", "1", "0:00", "someone-else", "", "N/A", "theirs", "(null)"],
                        ["54", "PENDING", "l4-dev", "1", "0:00", ME, "", "N/A", forged_name, "(null)"])
    rows = my_plain_jobs(SlurmClient(ReplayRunner({argv: out})), "slurmctl:", uid=os.geteuid())
    assert [(r.job_id, r.name, r.gpus) for r in rows] == [("50", "my job", 4), ("54", forged_name, 0)]


def test_a_throttled_array_with_pending_tasks_lists_each_task_once_named_as_squeue_names_it():
    # captured: `squeue -r` prints the array's id (4341) for every pending task; ArrayTaskID tells them apart
    captured = json.loads((FIXTURES / "array_throttled_pending_squeue.json").read_text())
    call = captured["plain_jobs_r"]
    argv = ("squeue", "-h", "-r", "--me", *PLAIN.format_argv(captured["seal"]))
    assert tuple(a for a in call["argv"] if a not in ("-n", "a24b-arrcap")) == argv
    out = call["stdout"].replace(f"\x1f{captured['seal']}{captured['user']}\x1f", f"\x1f{captured['seal']}{ME}\x1f")
    rows = my_plain_jobs(SlurmClient(ReplayRunner({argv: out})), "slurmctl:", uid=os.geteuid())
    assert [(r.job_id, r.state) for r in rows] == [
        ("4341_2", "PENDING"), ("4341_3", "PENDING"), ("4341_4", "PENDING"), ("4341_5", "PENDING"),
        ("4344", "RUNNING"), ("4345", "RUNNING")]


def test_the_same_array_task_listed_twice_is_still_refused():
    captured = json.loads((FIXTURES / "array_throttled_pending_squeue.json").read_text())
    argv = ("squeue", "-h", "-r", "--me", *PLAIN.format_argv(captured["seal"]))
    out = captured["plain_jobs_r"]["stdout"]
    first = out.split("\n")[0] + "\n"
    with pytest.raises(ForgedSlurmOutput, match="listed job 4341 twice"):
        my_plain_jobs(SlurmClient(ReplayRunner({argv: out + first})), "slurmctl:", uid=os.geteuid())


def test_owned_job_record_from_the_controller():
    fields = ["45", "FAILED", "NonZeroExitCode", "l4-dev", "1", "l4-1", "0:01", "5:00", "2026-12-01T14:48:12",
              "2026-12-01T14:48:12", "2026-12-01T14:48:13", "256", ME, "cpu=1,mem=1000M,node=1", "0", "45", "l4-1",
              "plain oom", "(null)", "/home/x/slurm-45.out", "/home/x/slurm-45.out", "/home/x"]
    runner = ReplayRunner({SQUEUE: f"45\x1f{os.geteuid()}\n", NOW: squeue_output(fields)})
    job = owned_job(SlurmClient(runner), 45, uid=os.geteuid())
    assert (job.name, job.state, job.exit_code, job.elapsed_seconds, job.time_limit_seconds, job.nodelist,
            job.comment, job.source) == ("plain oom", "FAILED", "1:0", 1, 300, "l4-1", "", "squeue")
    assert (job.std_out, job.work_dir) == ("/home/x/slurm-45.out", "/home/x") and len(runner.calls) == 2


def test_owned_job_record_from_accounting_is_the_callers_newest():
    old = ["45", "COMPLETED", "None", "h100", "1", "h100-1", "9", "5", "2026-11-30T10:00:00", "", "", "0:0",
           "someone-else", "9999", "", "45", "allocation", "", "/home/someone", "salloc"]
    new = ["45", "FAILED", "None", "l4-dev", "1", "l4-1", "1", "5", "2026-12-01T14:48:12", "2026-12-01T14:48:12",
           "2026-12-01T14:48:13", "1:0", ME, str(os.geteuid()), "cpu=1", "45", "plain\x1foom", "", "/home/x",
           "sbatch oom.sh"]
    runner = ReplayRunner({SQUEUE: "", HISTORY: sacct_output(old, new)})
    job = owned_job(SlurmClient(runner), 45, uid=os.geteuid())
    assert (job.name, job.state, job.time_limit_seconds, job.source) == ("plain\x1foom", "FAILED", 300, "sacct")
    assert job.submit_line == "sbatch oom.sh"
    assert len(runner.calls) == 2  # the controller's owner (none), then one sacct: the record and whose it is
    with pytest.raises(RunNotOwned):  # the newest job of that id is another user's
        owned_job(SlurmClient(ReplayRunner({SQUEUE: "", HISTORY: sacct_output(new, [*old[:8], "2026-12-02T10:00:00",
                                                                                     *old[9:]])})), 45,
                  uid=os.geteuid())
    with pytest.raises(RunNotFound):
        owned_job(SlurmClient(ReplayRunner({SQUEUE: "", HISTORY: ""})), 45, uid=os.geteuid())


def test_output_patterns_are_filled_as_slurm_fills_them():
    from slurmctl.observe.plain_job import _expand
    from slurmctl.slurm.records import Job

    task = Job(job_id=4353, state="RUNNING", name="arr", user="alice", array_ref="4352_0", batch_host="l4-1")
    assert _expand("a-%A_%a-%j-%x-%u-%N-%t-%3a.out", 4353, task) == "a-4352_0-4353-arr-alice-l4-1-0-000.out"
    assert _expand("slurm-%j.out", 4353, task) == "slurm-4353.out"
    plain = Job(job_id=45, state="RUNNING", name="x", nodelist="h100-[1-2]")
    assert _expand("o-%A_%a-%N.out", 45, plain) == "o-45_4294967294-h100-1.out"


def test_a_resized_job_listed_once_per_size_by_sacct_is_slurms_own_repeat_not_a_forgery():
    """Captured on the local cluster (22.05): a 2-node job that lost a node under --no-kill; `sacct -X`
    lists its RESIZING record and a second one under the same id. `ls` must not refuse the caller's
    whole listing for it; the record that started last stands for the job."""
    from slurmctl.slurm.owned import RECENT, my_recent_jobs

    argv = ("sacct", "-n", "-P", "-X", "-S", "now-7days", *RECENT.format_argv(TEST_SEAL))

    def record(state, start, end, nodes, nodelist, elapsed):
        return ["5109", state, "None", "h100-spot", nodes, nodelist, elapsed, "10:00", "2026-12-02T02:17:40",
                start, end, "0:0", "cpu=4,mem=8000M,node=2,billing=4,gres/gpu=4", ME,
                "faults-nodeloss-20261202-f406", "slurmctl:faults-nodeloss-20261202-f406"]
    resized = record("RESIZING", "2026-12-02T02:17:43", "2026-12-02T02:18:29", "2", "h100-[1-2]", "46")
    after = record("CANCELLED", "2026-12-02T02:18:31", "Unknown", "1", "None assigned", "478")
    jobs = my_recent_jobs(SlurmClient(ReplayRunner({argv: sacct_output(resized, after)})), uid=os.geteuid())
    assert [(j.job_id, j.state, j.num_nodes) for j in jobs] == [(5109, "CANCELLED", 1)]
    with pytest.raises(ForgedSlurmOutput, match="listed job 5109 twice"):  # the same id twice, no resize: refused
        my_recent_jobs(SlurmClient(ReplayRunner({argv: sacct_output(after, after)})), uid=os.geteuid())
