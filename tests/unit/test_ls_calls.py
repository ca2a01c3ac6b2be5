"""`ls` asks Slurm as little as it can: one squeue of the queue, and one sacct of the caller's last days
that answers for its plain jobs and its runs' ended jobs alike."""

from slurmctl.slurm.client import SlurmClient

from .fakes import ReplayRunner


def test_ls_needs_no_sacct_of_its_own_for_runs_whose_jobs_the_recent_sacct_has(tmp_path):
    """`ls` asks accounting once for the caller's last days (its plain jobs); the runs' ended jobs are
    read from that answer, and only a job it does not have costs a `sacct -j`."""
    from slurmctl.observe.listing import CallerJobs
    from slurmctl.observe.status import runs_statuses
    from slurmctl.slurm.client import Job

    from .test_status_observe import _run

    runs = [_run(tmp_path, "a", 101), _run(tmp_path, "b", 102)]
    runner = ReplayRunner({"squeue": ""})
    known = {101: Job(job_id=101, state="COMPLETED", source="sacct"),
             102: Job(job_id=102, state="FAILED", exit_code="1:0", source="sacct")}
    statuses = runs_statuses(runs, SlurmClient(runner), known=lambda: known)
    assert [s.state for s in statuses] == ["COMPLETED", "FAILED"]
    assert [c[0] for c in runner.calls] == ["squeue"]  # the queue alone: no sacct
    runner = ReplayRunner({"squeue": "", "sacct": ""})
    runs_statuses(runs, SlurmClient(runner), known=lambda: {101: known[101]})
    assert [c[0] for c in runner.calls] == ["squeue", "sacct"] and runner.calls[1][-1] == "102"
    assert CallerJobs(SlurmClient(ReplayRunner({"squeue": "", "sacct": ""})), background=False).recent() == {}
