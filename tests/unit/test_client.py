"""Exact argv that SlurmClient runs, and parsing of output captured from the real cluster
(tests/fixtures/slurm_22.05_outputs.json, recorded by tests/fixtures/capture_slurm_outputs.py on
deploy/local, Slurm 22.05.8), replayed by full argv."""

from pathlib import Path

import pytest

from slurmctl.errors import SlurmCommandError, SlurmUnreachable
from slurmctl.rundir import run_id_from_comment
from slurmctl.slurm.client import QUEUE, SEP, SNAPSHOT, SlurmClient
from slurmctl.slurm.parsing import gres_gpus, parse_tres, scontrol_pairs
from slurmctl.slurm.records import tres_gpus

from .fakes import JOBS, ReplayRunner

FAILED, COMPLETED, HELD = JOBS["failed"], JOBS["completed"], JOBS["held"]


def test_submit_argv_puts_extra_args_before_script():
    runner = ReplayRunner({"sbatch": "42\n"})
    job_id = SlurmClient(runner).submit(Path("/runs/r/job.sbatch"), ["--hold", "--qos=high"])
    assert job_id == 42
    assert runner.calls == [["sbatch", "--parsable", "--hold", "--qos=high", "/runs/r/job.sbatch"]]


def test_submit_parses_federated_answer():
    assert SlurmClient(ReplayRunner({"sbatch": "43;cluster-a\n"})).submit(Path("s")) == 43


def test_queue_is_one_batched_call_with_user_written_fields_last():
    runner = ReplayRunner()
    jobs = {j.job_id: j for j in SlurmClient(runner).queue(mine=True)}
    assert runner.calls == [["squeue", "-h", "-o", SEP.join(["%A", "%T", "%r", "%P", "%D", "%N", "%M", "%l", "%V",
                                                             "%S", "%u", "%j", "%k"]), "--me"]]
    held = jobs[HELD]
    assert (held.state, held.reason, held.partition, held.num_nodes, held.user) == \
        ("PENDING", "JobHeldUser", "h100-ondemand", 2, "alice")
    held_run = run_id_from_comment(held.comment)
    assert held_run and held_run.startswith("fixture-") and held.time_limit_seconds == 7 * 86400
    assert held.start_time is None and held.active and held.held


def test_history_argv_and_parse():
    runner = ReplayRunner()
    jobs = {j.job_id: j for j in SlurmClient(runner).history([COMPLETED, FAILED, COMPLETED])}
    argv = runner.calls[0]
    assert argv[:5] == ["sacct", "-n", "-P", "-X", f"--delimiter={SEP}"]
    assert argv[-2:] == ["-j", f"{FAILED},{COMPLETED}"]
    assert jobs[FAILED].state == "FAILED" and jobs[FAILED].exit_code == "1:0" and jobs[FAILED].elapsed_seconds == 2
    assert jobs[COMPLETED].state == "COMPLETED" and jobs[COMPLETED].nodelist == "h100-[2-3]"
    assert not jobs[COMPLETED].active and run_id_from_comment(jobs[COMPLETED].comment).startswith("tiny-lm-")
    assert jobs[COMPLETED].time_limit_seconds == 15 * 60


def test_history_of_nothing_runs_nothing():
    runner = ReplayRunner()
    assert SlurmClient(runner).history([]) == [] and runner.calls == []


def test_replay_refuses_an_argv_that_was_never_captured():
    with pytest.raises(AssertionError, match="no captured output"):
        SlurmClient(ReplayRunner()).history([12345])


def test_jobs_asks_sacct_only_for_jobs_squeue_does_not_know():
    runner = ReplayRunner()
    found = SlurmClient(runner).jobs([HELD, COMPLETED])
    assert [c[0] for c in runner.calls] == ["squeue", "sacct"]
    assert runner.calls[1][-1] == str(COMPLETED)
    assert found[HELD].source == "squeue" and found[COMPLETED].source == "sacct"


def test_nodes_merges_partitions_and_gpus():
    nodes = {n.name: n for n in SlurmClient(ReplayRunner()).nodes()}
    assert nodes["h100-1"].partitions == ["h100-ondemand", "h100-spot"]
    assert (nodes["h100-1"].gpu_type, nodes["h100-1"].gpus) == ("h100", 8)
    assert nodes["l4-1"].partitions == ["l4-dev"] and nodes["l4-1"].gpus == 1


def test_cancel_argv():
    runner = ReplayRunner({})
    SlurmClient(runner).cancel(5, signal="USR1", batch_only=True)
    assert runner.calls == [["scancel", "--signal=USR1", "--batch", "5"]]


@pytest.mark.parametrize("stderr", [
    "squeue: error: Unable to contact slurm controller (connect failure)",
    "sacct: error: Problem talking to the database: Connection refused",
])
def test_unreachable_controller_is_its_own_error(stderr):
    with pytest.raises(SlurmUnreachable):
        SlurmClient(ReplayRunner({}, returncode=1, stderr=stderr)).queue()


def test_refusal_is_a_command_error_with_slurms_words():
    stderr = "sbatch: error: Batch job submission failed: Requested node configuration is not available"
    with pytest.raises(SlurmCommandError, match="Requested node configuration"):
        SlurmClient(ReplayRunner({}, returncode=1, stderr=stderr)).submit(Path("s"))


# --- hostile free text: names and comments are written by users ---------------------------------

def _line(job_id, name, comment, user="alice"):
    return SEP.join([str(job_id), "RUNNING", "None", "h100-ondemand", "1", "h100-1", "1:00", "15:00",
                     "2026-11-30T10:00:00", "2026-11-30T10:00:01", user, name, comment])


def test_a_separator_or_newline_in_a_name_cannot_forge_fields_and_is_counted():
    forged_user = f"x{SEP}slurmctl:victim-20261130-0001"  # would shift the comment
    newline = "evil\n999" + SEP * 12 + "root"  # a second 'line' claiming job 999 of root
    stdout = "\n".join([_line(1, "ok", "slurmctl:ok-20261130-0001"), _line(2, forged_user, ""),
                        _line(3, newline, "")]) + "\n"
    client = SlurmClient(ReplayRunner({"squeue": stdout}))
    jobs = {j.job_id: j for j in client.queue(mine=False)}
    assert set(jobs) == {1} and jobs[1].user == "alice"
    assert run_id_from_comment(jobs[1].comment) == "ok-20261130-0001"
    assert client.rejects.counts == {"queue": 3} and client.rejects.total == 3


def test_a_comment_may_hold_anything_but_a_separator():
    comment = "slurmctl:a b=c [/] é"
    client = SlurmClient(ReplayRunner({"squeue": _line(4, "name with spaces = fine", comment) + "\n"}))
    (job,) = client.queue()
    assert (job.name, job.comment, client.rejects.total) == ("name with spaces = fine", comment, 0)


def test_snapshot_has_the_comment_last_and_counts_gpus_from_tres():
    assert SNAPSHOT.attrs[-1] == "comment" and QUEUE.attrs[-2:] == ("name", "comment")
    line = SEP.join(["5", "RUNNING", "None", "a,b", "2", "cpu=2,gres/gpu=4,gres/gpu:h100=4",
                     "2026-11-30T10:00:00", "N/A", "bob", "slurmctl:r-20261130-0001"]) + SEP
    (job,) = SlurmClient(ReplayRunner({"squeue": line + "\n"})).queue_snapshot()
    assert (job.gpus, job.partitions, job.user) == (4, ["a", "b"], "bob")
    assert run_id_from_comment(job.comment) == "r-20261130-0001"


def test_scontrol_line_with_a_key_written_into_a_name_is_not_trusted():
    real = ("JobId=79 JobName=cap UserId=alice(1001) GroupId=vision(1001) JobState=PENDING "
            "WorkDir=/tmp/a b StdOut=/tmp/slurm-79.out")
    assert scontrol_pairs(real)["WorkDir"] == "/tmp/a b" and scontrol_pairs(real)["UserId"] == "alice(1001)"
    forged = real.replace("JobName=cap", "JobName=cap UserId=root(0)")  # captured from 22.05 as-is
    assert scontrol_pairs(forged) is None
    runner = ReplayRunner({"scontrol": forged + "\n"})
    client = SlurmClient(runner)
    assert client.job_info(79) is None and client.rejects.counts == {"job_info": 1}


@pytest.mark.parametrize("tres, expected", [
    ("billing=4,cpu=4,gres/gpu:h100=4,gres/gpu=4,mem=4000M,node=2", (4, "h100")),
    ("cpu=1,gres/gpu=2", (2, "")), ("cpu=1,gres/gpu:l4=1", (1, "l4")), ("cpu=1,mem=1G", (0, "")), ("", (0, "")),
])
def test_one_tres_parser(tres, expected):
    assert tres_gpus(tres) == expected


@pytest.mark.parametrize("gres, expected", [
    ("gpu:h100:8", (8, "h100")), ("gpu:h100:2(IDX:0-1)", (2, "h100")), ("gpu:h100:0(IDX:N/A)", (0, "h100")),
    ("gpu:8", (8, None)), ("(null)", (0, None)), ("gpu:h100:8(S:0-1),gpu:l4:1", (9, "h100")),
])
def test_one_gres_parser(gres, expected):
    assert gres_gpus(gres) == expected


def test_parse_tres_units():
    assert parse_tres("cpu=4,mem=8G,gres/gpu=1,node=") == {"cpu": 4, "mem": 8192, "gres/gpu": 1}
