"""A plain sbatch job's output and error files, and whether it succeeded, from output captured on the
local cluster (tests/fixtures/slurm/capture_plain_job.py, FULL argv): a task still waiting has no file,
an ended job the controller forgot keeps the files its script named, and a step that failed inside a
job Slurm recorded COMPLETED is a failure."""

import json
import os
import pwd
from pathlib import Path

from slurmctl.errors import RunNotFound
from slurmctl.observe.plain_job import PlainJob, plain_job_diagnosis, plain_job_status, resolve
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.records import Job
from tests.unit.fakes import ReplayRunner, pin_seal

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"
ME, MY_UID = pwd.getpwuid(os.geteuid()).pw_name, os.geteuid()


class NoRuns:
    uid = MY_UID

    def get(self, ref):
        raise RunNotFound(f"no run {ref!r}", "")


def _replay(name: str, monkeypatch, moves: dict[str, str] | None = None):
    """The captured calls as this process's (its uid and user name for the captured user's), with
    paths moved (`moves`); returns (client, captured)."""
    captured = json.loads((FIXTURES / name).read_text())
    seal, uid, user = captured["seal"], captured["uid"], captured["user"]
    pin_seal(monkeypatch, seal)
    outputs = {}
    for call in captured["calls"]:
        out = call["stdout"].replace(f"{seal}{user}\x1f", f"{seal}{ME}\x1f")
        out = out.replace(f"{seal}{uid}\x1f", f"{seal}{MY_UID}\x1f")
        out = out.replace(f"\x1f{uid}\n", f"\x1f{MY_UID}\n")  # squeue -o '%A\x1f%U': the owner
        for old, new in (moves or {}).items():
            out = out.replace(old, new)
        outputs[tuple(call["argv"])] = out
    return SlurmClient(ReplayRunner(outputs)), captured


def test_a_pending_array_task_has_no_output_file_yet_and_nothing_to_diagnose(monkeypatch):
    client, _ = _replay("pending_array_task.json", monkeypatch)
    plain = resolve("5152_2", NoRuns(), client)
    assert isinstance(plain, PlainJob) and plain.log_path is None and plain.err_path is None
    assert "has not started yet" in plain.missing
    status = plain_job_status(plain)
    assert status.phase == "queued" and status.log_path is None
    assert "4294967294" not in json.dumps(status.to_dict())  # Slurm's NO_VAL, never a file name
    found = plain_job_diagnosis(plain)
    assert found.category == "not_started" and "PENDING (JobArrayTaskLimit)" in found.evidence[0]


def test_an_array_task_just_ended_is_named_with_the_arrays_id_and_its_index(monkeypatch):
    client, _ = _replay("array_task_just_ended.json", monkeypatch)
    for ref in ("5153", "5152_0"):  # its own id, and Slurm's name of the task (squeue, sacct)
        plain = resolve(ref, NoRuns(), client)
        assert plain.job_id == 5153 and str(plain.log_path) == "/tmp/h24obs-h24obs-arr-5152_0.out"
        assert plain.err_path is None and not plain.failed_steps  # --error not given: one file


def test_an_ended_task_the_controller_forgot_keeps_its_scripts_files_and_its_failed_step(monkeypatch, tmp_path):
    """sbatch ddp.sbatch (#SBATCH --output/--error), srun ... & + bare wait: COMPLETED 0:0, step .0 FAILED 1:0."""
    work = "/home/alice/check24r/lab"
    client, captured = _replay("ended_array_task_failed_step.json", monkeypatch, {work: str(tmp_path)})
    for path, text in captured["files"].items():
        (tmp_path / Path(path).relative_to(work)).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / Path(path).relative_to(work)).write_text(text)
    plain = resolve("5079_0", NoRuns(), client)
    assert plain.log_path == tmp_path / "logs/lab-ddp_5079_0.out"  # not Slurm's default slurm-5079_0.out
    assert plain.err_path == tmp_path / "logs/lab-ddp_5079_0.err" and not plain.missing
    assert [(s.step, s.state, s.exit_code) for s in plain.failed_steps] == [("5080.0", "FAILED", "1:0")]
    status = plain_job_status(plain)
    assert status.phase == "failed" and "step 5080.0 failed" in status.headline
    assert status.diagnosis["category"] == "rendezvous_failure"  # the traceback is in the --error file only
    found = plain_job_diagnosis(plain)
    assert found.category == "rendezvous_failure" and found.evidence[0] == "step 5080.0: FAILED, exit code 1:0"
    assert "EADDRINUSE" in " ".join(found.evidence)


def _forgotten(submit_line: str, work_dir: Path, array_ref: str = "77") -> Job:
    return Job(job_id=77, state="FAILED", name="j", user="alice", nodelist="l4-1", array_ref=array_ref,
               work_dir=str(work_dir), submit_line=submit_line, source="sacct")


def test_the_command_lines_output_wins_over_the_script_and_patterns_are_filled(tmp_path):
    from slurmctl.observe.plain_job import _files_from_submit_line

    (tmp_path / "s.sh").write_text("#!/bin/bash\n#SBATCH -o from-script-%j.out\n#SBATCH --error=e-%x-%u.err\necho\n")
    files = _files_from_submit_line(77, _forgotten("sbatch -p l4-dev --output=cli-%N-%j.out s.sh arg", tmp_path))
    assert files.out == tmp_path / "cli-l4-1-77.out" and files.err == tmp_path / "e-j-alice.err"
    files = _files_from_submit_line(77, _forgotten("sbatch -J x --wrap true", tmp_path, "70_3"))
    assert files.out == tmp_path / "slurm-70_3.out" and not files.missing  # --wrap: Slurm's default, for an array
    files = _files_from_submit_line(77, _forgotten("sbatch s.sh", tmp_path))
    assert files.out == tmp_path / "from-script-77.out"


def test_when_the_files_cannot_be_known_it_is_said(tmp_path):
    from slurmctl.observe.plain_job import _files_from_submit_line

    gone = _files_from_submit_line(77, _forgotten("sbatch gone.sh", tmp_path))
    assert "can no longer be read" in gone.missing and gone.out == tmp_path / "slurm-77.out"
    moved = _files_from_submit_line(77, _forgotten("sbatch -D /elsewhere s.sh", tmp_path))
    assert "--chdir" in moved.missing
    nothing = _files_from_submit_line(77, _forgotten("", tmp_path))
    assert nothing.out is None and "no sbatch command line" in nothing.missing


def test_an_ended_task_the_controller_forgot_keeps_the_output_its_command_line_named(monkeypatch):
    """`sbatch ... -o /tmp/h24obs-%x-%A_%a.out --wrap '...'`: SubmitLine names the file (no script)."""
    client, _ = _replay("ended_wrapped_task_output_on_command_line.json", monkeypatch)
    plain = resolve("5152_0", NoRuns(), client)
    assert plain.job.source == "sacct" and str(plain.log_path) == "/tmp/h24obs-h24obs-arr-5152_0.out"
    assert plain.err_path is None and not plain.missing and not plain.failed_steps


def test_cost_of_a_plain_arrays_id_prices_every_task_and_a_task_alone_itself(monkeypatch, local_site):
    """`slurmctl cost 5079` (the array's id) is its four tasks, each a job of its own; `cost 5079_3` (the
    task that kept the array's id) is that task alone."""
    from slurmctl.ops.accounting import run_attempts
    from slurmctl.slurm.owned import array_task_ids

    client, _ = _replay("plain_array_cost.json", monkeypatch)
    whole, task = resolve("5079", NoRuns(), client), resolve("5079_3", NoRuns(), client)
    assert whole.job_id == task.job_id == 5079 and whole.whole_array and not task.whole_array
    ids = array_task_ids(client, whole.job_id)
    assert ids == [5080, 5081, 5082, 5079]
    assert round(sum(a.cost_usd for a in run_attempts(local_site, client, ids)), 2) == 0.17


def test_an_ended_plain_jobs_advice_is_for_a_plain_job_not_a_run():
    """A cancelled or timed-out sbatch job has no run.yaml, no `slurmctl submit` and no checkpoint of ours."""
    for state in ("CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL"):
        status = plain_job_status(PlainJob(5820, Job(5820, state=state, source="sacct"), None))
        assert "sbatch" in status.action or "Submit it again" in status.action, status.action
        assert "run.yaml" not in status.action and "slurmctl submit" not in status.action, status.action
