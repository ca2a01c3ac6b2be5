"""Exact argv that SlurmClient runs, and parsing of output captured from the real cluster
(tests/fixtures/slurm_22.05_outputs.json, recorded from deploy/local on Slurm 22.05.8)."""

from pathlib import Path

import pytest

from slurmctl.errors import SlurmCommandError, SlurmUnreachable
from slurmctl.slurm.client import SEP, SlurmClient, parse_slurm_duration

from .fakes import ReplayRunner


def test_submit_argv_puts_extra_args_before_script():
    runner = ReplayRunner({"sbatch": "42\n"})
    job_id = SlurmClient(runner).submit(Path("/runs/r/job.sbatch"), ["--hold", "--qos=high"])
    assert job_id == 42
    assert runner.calls == [["sbatch", "--parsable", "--hold", "--qos=high", "/runs/r/job.sbatch"]]


def test_submit_parses_federated_answer():
    assert SlurmClient(ReplayRunner({"sbatch": "43;cluster-a\n"})).submit(Path("s")) == 43


def test_queue_is_one_batched_call():
    runner = ReplayRunner()
    jobs = SlurmClient(runner).queue(mine=True)
    assert runner.calls == [["squeue", "-h", "-o", SEP.join(["%i", "%j", "%T", "%r", "%P", "%D", "%N", "%M", "%l",
                                                             "%V", "%S", "%k", "%u"]), "--me"]]
    held = jobs[0]
    assert (held.state, held.reason, held.partition, held.num_nodes) == ("PENDING", "JobHeldUser", "h100-ondemand", 2)
    assert held.run_id == "fixture-20261129-0001" and held.time_limit_seconds == 7 * 86400
    assert held.start_time is None and held.active


def test_history_argv_and_parse():
    runner = ReplayRunner()
    jobs = {j.job_id: j for j in SlurmClient(runner).history([6, 1, 6])}
    argv = runner.calls[0]
    assert argv[:5] == ["sacct", "-n", "-P", "-X", f"--delimiter={SEP}"] and argv[-2:] == ["-j", "1,6"]
    assert jobs[1].state == "FAILED" and jobs[1].exit_code == "1:0" and jobs[1].elapsed_seconds == 24
    assert jobs[6].state == "COMPLETED" and jobs[6].nodelist == "h100-[1-2]" and not jobs[6].active
    assert jobs[6].run_id == "tiny-lm-20261129-2288"


def test_history_of_nothing_runs_nothing():
    runner = ReplayRunner()
    assert SlurmClient(runner).history([]) == [] and runner.calls == []


def test_jobs_asks_sacct_only_for_jobs_squeue_does_not_know():
    runner = ReplayRunner()
    found = SlurmClient(runner).jobs([7, 6])
    assert [c[0] for c in runner.calls] == ["squeue", "sacct"]
    assert runner.calls[1][-1] == "6"
    assert found[7].source == "squeue" and found[6].source == "sacct"


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


@pytest.mark.parametrize("text, seconds", [("0:00", 0), ("1:02", 62), ("1:02:03", 3723), ("2-00:00:01", 172801),
                                           ("UNLIMITED", None), ("INVALID", None)])
def test_durations(text, seconds):
    assert parse_slurm_duration(text) == seconds
