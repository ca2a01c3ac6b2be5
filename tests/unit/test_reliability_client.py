"""argv of the Slurm calls the reliability code makes (requeue, update, release, time left)."""


def test_requeue_update_release_argv():
    from slurmctl.slurm.client import SlurmClient
    from tests.unit.fakes import ReplayRunner

    runner = ReplayRunner(outputs={"squeue": "1:30\n"})
    client = SlurmClient(runner)
    client.update_job(42, Requeue=1, StartTime="now")
    client.requeue(42)
    client.release(42)
    assert client.time_left_seconds(42) == 90
    assert runner.calls == [["scontrol", "update", "JobId=42", "Requeue=1", "StartTime=now"],
                            ["scontrol", "requeue", "42"], ["scontrol", "release", "42"],
                            ["squeue", "-h", "-j", "42", "-o", "%L"]]
