"""User-written job fields against the real controller: a job name or comment that carries the
\\x1f separator, a newline or a forged `Key=` is read back as text, byte for byte, and cannot shift
Slurm's own fields (job id, user, state) in what slurmctl reads: every listing is sealed per call
(slurmctl.slurm.parsing.new_seal). The jobs are submitted held, as bob and alice, and cancelled at
the end. tests/integration/test_forged_records.py is the property test over random bytes."""

from slurmctl.rundir import run_id_from_comment
from slurmctl.slurm.client import SlurmClient

from .conftest import as_user

SEP = "\x1f"


def test_hostile_names_and_comments_are_read_as_text_never_as_fields():
    bob, alice = as_user("bob"), as_user("alice")
    hold = ["--hold", "-p", "l4-dev", "-t", "5", "--chdir=/tmp", "--output=/dev/null", "--wrap", "true"]
    jobs = []
    try:
        plain = alice.sbatch("-J", "plain", "--comment=slurmctl:plain-20261130-0001", *hold)
        jobs.append(plain)
        shifted_name, shifted_comment = f"x{SEP}alice", f"slurmctl:victim-20261130-0001{SEP}root"
        shifted = bob.sbatch("-J", shifted_name, f"--comment={shifted_comment}", *hold)
        jobs.append(shifted)
        split_name = f"y\n{plain}{SEP}RUNNING"
        split = bob.sbatch("-J", split_name, *hold)
        jobs.append(split)
        forged_key = bob.sbatch("-J", "z UserId=root(0) JobState=COMPLETED", *hold)
        jobs.append(forged_key)

        client = SlurmClient()
        listed = {j.job_id: j for j in client.queue(mine=False) if j.job_id in jobs}
        assert listed[plain].user == "alice" and run_id_from_comment(listed[plain].comment) == "plain-20261130-0001"
        assert listed[plain].state == "PENDING"
        assert (listed[shifted].user, listed[shifted].name, listed[shifted].comment) == \
            ("bob", shifted_name, shifted_comment)
        assert (listed[split].user, listed[split].name, listed[split].state) == ("bob", split_name, "PENDING")
        assert client.rejects.total == 0, client.rejects.samples
        # the snapshot (exporter) agrees, and bob's jobs are counted, not hidden
        snapshot = {j.job_id: j for j in client.queue_snapshot() if j.job_id in jobs}
        assert snapshot[plain].user == "alice" and snapshot[shifted].user == "bob" and set(snapshot) == set(jobs)
        # a name with spaces and `Key=` is a name; the hooks' job facts are bob's job's own
        assert listed[forged_key].name == "z UserId=root(0) JobState=COMPLETED" and listed[forged_key].user == "bob"
        assert client.job_info(forged_key).state == "PENDING"
        assert client.job_info(plain).state == "PENDING"
    finally:
        bob.scancel(*jobs[1:])
        alice.scancel(*jobs[:1])
