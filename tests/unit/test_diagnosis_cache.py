"""status and ls read a failed run's diagnosis back from the run dir while nothing it came from changed."""

import sys

from slurmctl.observe import run_diagnosis
from slurmctl.observe.status import build_status
from slurmctl.rundir import DIAGNOSIS_CACHE
from slurmctl.slurm.client import Job

from .test_status_observe import _run

LOG = "step 1 loss 2.0\nTraceback (most recent call last):\n  File \"train.py\", line 3, in <module>\nKeyError: 'lr'\n"


def test_the_cached_diagnosis_is_read_back_until_the_log_changes(tmp_path, monkeypatch):
    run = _run(tmp_path, "r", 7)
    (run.path / "logs" / "7.out").write_text(LOG)
    failed = Job(job_id=7, name="r", state="FAILED", exit_code="1:0", source="sacct")
    first = build_status(run, failed).diagnosis
    assert (run.path / DIAGNOSIS_CACHE).is_file() and "KeyError" in first["error_line"]
    calls = []
    real = run_diagnosis.diagnose_file
    monkeypatch.setattr(run_diagnosis, "diagnose_file", lambda *a, **k: calls.append(a) or real(*a, **k))
    again = build_status(run, failed)
    assert again.diagnosis == first and calls == []  # read back, not diagnosed again
    assert "KeyError" in again.why, again.why
    with (run.path / "logs" / "7.out").open("a") as f:
        f.write("Traceback (most recent call last):\nValueError: another\n")
    assert build_status(run, failed).diagnosis is not None and len(calls) == 1  # the log changed
    assert build_status(run, Job(job_id=7, name="r", state="TIMEOUT", exit_code="0:0", source="sacct")).diagnosis
    assert len(calls) == 2  # so did Slurm's word


def test_a_cached_diagnosis_is_read_without_importing_the_diagnosis_rules(tmp_path):
    """Whole process: `ls` of failed runs whose diagnosis is cached never compiles the rules."""
    import json
    import subprocess

    run = _run(tmp_path, "r", 7)
    (run.path / "logs" / "7.out").write_text(LOG)
    failed = Job(job_id=7, name="r", state="FAILED", exit_code="1:0", source="sacct")
    build_status(run, failed)  # diagnosed once, cached
    probe = ("import json, sys\nfrom slurmctl.observe.status import build_status\nfrom slurmctl.rundir import Run\n"
             "from slurmctl.slurm.client import Job\n"
             f"s = build_status(Run('r', __import__('pathlib').Path({str(run.path)!r})), "
             "Job(job_id=7, name='r', state='FAILED', exit_code='1:0', source='sacct'))\n"
             "print(json.dumps([s.why, 'slurmctl.observe.diagnose' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    why, imported = json.loads(out)
    assert "KeyError" in why and not imported
