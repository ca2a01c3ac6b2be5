"""Exact argv that SlurmClient runs, and parsing of output captured from the real cluster
(tests/fixtures/slurm_22.05_outputs.json, recorded by tests/fixtures/capture_slurm_outputs.py on
deploy/local, Slurm 22.05.8), replayed by full argv."""

from pathlib import Path

import pytest

from slurmctl.errors import ForgedSlurmOutput, SlurmCommandError, SlurmUnreachable
from slurmctl.rundir import run_id_from_comment
from slurmctl.slurm import client as client_module
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.parsing import field_separator, gres_gpus, new_seal, parse_tres, record_end
from slurmctl.slurm.records import tres_gpus

from .fakes import JOBS, TEST_SEAL, ReplayRunner, sacct_output, squeue_output

FAILED, COMPLETED, HELD = JOBS["failed"], JOBS["completed"], JOBS["held"]
FS, END = field_separator(TEST_SEAL), record_end(TEST_SEAL)


def test_submit_argv_puts_extra_args_before_script():
    runner = ReplayRunner({"sbatch": "42\n"})
    job_id = SlurmClient(runner).submit(Path("/runs/r/job.sbatch"), ["--hold", "--qos=high"])
    assert job_id == 42
    assert runner.calls == [["sbatch", "--parsable", "--hold", "--qos=high", "/runs/r/job.sbatch"]]


def test_submit_parses_federated_answer():
    assert SlurmClient(ReplayRunner({"sbatch": "43;cluster-a\n"})).submit(Path("s")) == 43


def test_queue_is_one_batched_sealed_call():
    runner = ReplayRunner()
    jobs = {j.job_id: j for j in SlurmClient(runner).queue(mine=True)}
    names = ["JobID", "State", "Reason", "Partition", "NumNodes", "NodeList", "TimeUsed", "TimeLimit", "SubmitTime",
             "StartTime", "tres-alloc", "RestartCnt", "UserName", "Name", "Comment"]
    assert runner.calls == [["squeue", "-h", "-O", ",".join(f"{n}:{FS}" for n in names[:-1]) + f",{names[-1]}:{END}",
                             "--me"]]
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
    assert argv[:5] == ["sacct", "-n", "-P", "-X", f"--delimiter={FS}"]
    assert argv[6].endswith(",JobIDRaw")  # closes each record
    assert argv[-2:] == ["-j", f"{FAILED},{COMPLETED}"]
    assert jobs[FAILED].state == "FAILED" and jobs[FAILED].exit_code == "1:0" and jobs[FAILED].elapsed_seconds in (2, 3)
    assert jobs[COMPLETED].state == "COMPLETED" and jobs[COMPLETED].nodelist.startswith("h100-[")
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


# --- hostile free text: names, comments, paths are written by users -----------------------------

def _fields(job_id, name, comment, user="alice", state="RUNNING"):
    return [str(job_id), state, "None", "h100-ondemand", "1", "h100-1", "1:00", "15:00",
            "2026-11-30T10:00:00", "2026-11-30T10:00:01", "cpu=2,mem=2000M,node=1", "0", user, name, comment]


def _forged_lines(victim):
    """Everything a user could write without the seal: old-style lines, our marks, a wrong seal."""
    record = _fields(victim, "x", "slurmctl:victim-20261130-0001", user="root", state="COMPLETED")
    return [
        "y\n" + "\x1f".join(record),  # a whole unsealed line
        "z" + field_separator("0" * 16).join(record) + record_end("0" * 16) + "\n",  # a guessed seal
        "\x1f\x1e\n\x1f" * 3 + "alice",  # the bare marks
    ]


def test_no_name_or_comment_without_the_seal_can_forge_a_field_or_a_record():
    names = _forged_lines(1)
    stdout = squeue_output(_fields(1, "ok", "slurmctl:ok-20261130-0001"),
                           *(_fields(10 + i, name, name, user="bob") for i, name in enumerate(names)))
    client = SlurmClient(ReplayRunner({"squeue": stdout}))
    jobs = {j.job_id: j for j in client.queue(mine=False)}
    assert set(jobs) == {1, 10, 11, 12} and client.rejects.total == 0
    assert (jobs[1].user, jobs[1].state) == ("alice", "RUNNING")
    assert run_id_from_comment(jobs[1].comment) == "ok-20261130-0001"
    assert [(jobs[10 + i].user, jobs[10 + i].name) for i in range(3)] == [("bob", n) for n in names]


def test_a_record_forged_with_the_seal_is_a_job_listed_twice_and_refused():
    stdout = squeue_output(_fields(1, "ok", ""), _fields(2, "bob's", "")) + squeue_output(
        _fields(1, "forged", "", user="root", state="COMPLETED"))
    client = SlurmClient(ReplayRunner({"squeue": stdout}))
    with pytest.raises(ForgedSlurmOutput, match="listed job 1 twice"):
        client.queue(mine=False)
    with pytest.raises(ForgedSlurmOutput):
        client.queue_view([1])
    assert client.rejects.counts["queue:duplicate"] == 2


def test_every_call_has_its_own_secret_seal(monkeypatch):
    monkeypatch.setattr(client_module, "new_seal", new_seal)
    runner = ReplayRunner({"squeue": ""})
    client = SlurmClient(runner)
    client.queue(mine=False)
    client.queue(mine=False)
    first, second = runner.calls[0][3], runner.calls[1][3]
    assert first != second and len(first.split("\x1f")[1].split(",")[0]) == 16


def test_sacct_records_are_closed_by_their_own_id_so_a_newline_in_a_comment_is_text():
    comment = "slurmctl:r-20261130-0001\n99\x1fFAILED"
    fields = [str(7), "COMPLETED", "None", "h100-ondemand", "1", "h100-1", "60", "15:00", "2026-11-30T10:00:00",
              "2026-11-30T10:00:01", "2026-11-30T10:01:01", "0:0", "cpu=2,mem=2000M,node=1", "alice", "n\nm", comment]
    client = SlurmClient(ReplayRunner({"sacct": sacct_output(fields, [str(8), *fields[1:]])}))
    jobs = {j.job_id: j for j in client.history([7, 8])}
    assert set(jobs) == {7, 8} and jobs[7].comment == comment and jobs[7].name == "n\nm"
    assert client.rejects.total == 0


def test_a_job_resized_after_a_node_loss_is_its_current_record_and_a_second_live_one_is_still_refused():
    # sacct on the local cluster after the owner's shrink (scontrol update NodeList=) and requeue:
    # the earlier allocation stays listed, in state RESIZING, before the job's current record
    def fields(state, nodes, start, end):
        return ["7", state, "None", "h100-ondemand", "2", nodes, "60", "1:00:00", "2026-12-02T02:42:38",
                start, end, "0:0", "cpu=4,mem=4000M,node=2", "alice", "goodput-faults", "slurmctl:g-20261202-0f5f"]

    resized = fields("RESIZING", "h100-[1,3]", "2026-12-02T02:54:13", "2026-12-02T03:00:28")
    current = fields("COMPLETED", "h100-[1-2]", "2026-12-02T03:00:43", "Unknown")
    client = SlurmClient(ReplayRunner({"sacct": sacct_output(resized, current)}))
    (job,) = client.history([7])
    assert (job.state, job.nodelist, client.rejects.total) == ("COMPLETED", "h100-[1-2]", 0)
    # 22.05 may also keep a second record of a resized job that was cancelled (seen: RESIZING, then
    # "CANCELLED by 1002" and "CANCELLED" under one id): the one that started last stands for it
    cancelled = fields("CANCELLED", "h100-[1-2]", "2026-12-02T03:01:10", "Unknown")
    (job,) = SlurmClient(ReplayRunner({"sacct": sacct_output(resized, current, cancelled)})).history([7])
    assert job.state == "CANCELLED"
    forged = fields("FAILED", "h100-1", "2026-12-02T03:00:43", "2026-12-02T03:01:00")
    with pytest.raises(ForgedSlurmOutput, match="listed job 7 twice"):  # never resized: a second record is forged
        SlurmClient(ReplayRunner({"sacct": sacct_output(current, forged)})).history([7])


def test_a_comment_may_hold_anything():
    comment = "slurmctl:a b=c [/] é \x1f\n"
    client = SlurmClient(ReplayRunner({"squeue": squeue_output(_fields(4, "name with spaces = fine", comment))}))
    (job,) = client.queue()
    assert (job.name, job.comment, client.rejects.total) == ("name with spaces = fine", comment, 0)


def test_snapshot_counts_gpus_from_tres():
    fields = ["5", "RUNNING", "None", "a,b", "2", "cpu=2,gres/gpu=4,gres/gpu:h100=4",
              "2026-11-30T10:00:00", "N/A", "1-00:00:00", "bob", "burst", "afterok:4(unfulfilled)", "N/A", "N/A",
              "slurmctl:r-20261130-0001"]
    (job,) = SlurmClient(ReplayRunner({"squeue": squeue_output(fields)})).queue_snapshot()
    assert (job.gpus, job.partitions, job.user, job.time_limit_seconds) == (4, ["a", "b"], "bob", 86400)
    assert (job.qos, job.dependency) == ("burst", "afterok:4(unfulfilled)")
    assert run_id_from_comment(job.comment) == "r-20261130-0001"


def test_job_info_is_a_sealed_squeue_record_not_scontrol():
    fields = ["79", "COMPLETING", "15", "1", "2026-11-30T10:00:00", "2026-11-30T10:05:00", "h100-1", "h100-1",
              "cpu=2,gres/gpu:h100=2,gres/gpu=2", "/tmp/o UserId=root(0)\nJobId=79 JobState=COMPLETED", "/tmp/a b",
              "x\nJobId=79 JobState=COMPLETED"]
    runner = ReplayRunner({"squeue": squeue_output(fields)})
    info = SlurmClient(runner).job_info(79)
    assert runner.calls[0][:6] == ["squeue", "-h", "-t", "all", "-j", "79"]
    assert (info.state, info.exit_code, info.restarts, info.gpu_count, info.gpu_model) == \
        ("COMPLETING", "0:15", 1, 2, "h100")
    assert info.std_out == fields[9] and info.work_dir == "/tmp/a b" and info.start_time is not None
    assert info.name == fields[11]


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
