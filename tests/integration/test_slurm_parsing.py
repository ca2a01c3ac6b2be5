"""User-written job fields against the real controller: a job name or comment that carries the
\\x1f separator, a newline or a forged `Key=` cannot shift Slurm's own fields (job id, user, state)
in what slurmctl reads, and does not blind the listing to everyone else's jobs. The jobs are
submitted held, as bob and alice, and cancelled at the end."""

from slurmctl.slurm.client import SlurmClient

from .conftest import as_user

SEP = "\x1f"


def test_hostile_names_and_comments_are_rejected_and_counted_never_believed():
    bob, alice = as_user("bob"), as_user("alice")
    hold = ["--hold", "-p", "l4-dev", "-t", "5", "--chdir=/tmp", "--output=/dev/null", "--wrap", "true"]
    jobs = []
    try:
        plain = alice.sbatch("-J", "plain", "--comment=slurmctl:plain-20261130-0001", *hold)
        jobs.append(plain)
        shifted = bob.sbatch("-J", f"x{SEP}alice", f"--comment=slurmctl:victim-20261130-0001{SEP}root", *hold)
        jobs.append(shifted)
        split = bob.sbatch("-J", f"y\n{plain}{SEP}RUNNING", *hold)
        jobs.append(split)
        forged_key = bob.sbatch("-J", "z UserId=root(0) JobState=COMPLETED", *hold)
        jobs.append(forged_key)

        client = SlurmClient()
        listed = {j.job_id: j for j in client.queue(mine=False) if j.job_id in jobs}
        # alice's job is read as it is; bob's hostile ones are either refused or read with bob as the user
        assert listed[plain].user == "alice" and listed[plain].run_id == "plain-20261130-0001"
        assert listed[plain].state == "PENDING"
        for job_id in (shifted, split):
            assert job_id not in listed or listed[job_id].user == "bob", listed.get(job_id)
        assert shifted not in listed and split not in listed
        assert client.rejects.counts.get("queue", 0) >= 2
        # the snapshot (exporter) and the accounting view agree
        snapshot = {j.job_id: j for j in client.queue_snapshot() if j.job_id in jobs}
        assert snapshot[plain].user == "alice" and shifted not in snapshot
        # a name with spaces and `Key=` is a name, and scontrol's line with the forged key is not trusted
        assert listed[forged_key].name == "z UserId=root(0) JobState=COMPLETED" and listed[forged_key].user == "bob"
        assert client.job_info(forged_key) is None and client.rejects.counts.get("job_info") == 1
        assert client.job_info(plain).state == "PENDING"
    finally:
        bob.scancel(*jobs[1:])
        alice.scancel(*jobs[:1])
