"""A run cancelled while it waited to start again after a requeue reads `cancelled`, as status says, not
what ended the attempt before it (a preemption): replayed from alice's adopted HF Trainer run on the
local cluster (preempted twice, then `slurmctl cancel` while pending)."""

import json
from pathlib import Path

from slurmctl.observe.diagnose import Diagnosis
from slurmctl.observe.run_diagnosis import cancelled_before_start, in_run_words
from slurmctl.slurm.client import SlurmClient
from tests.unit.fakes import ReplayRunner, pin_seal

CAPTURED = json.loads((Path(__file__).parent.parent / "fixtures" / "slurm" /
                       "requeued_run_cancelled_while_waiting.json").read_text())


def test_a_cancel_while_waiting_after_a_preemption_is_the_cause(monkeypatch):
    pin_seal(monkeypatch, CAPTURED["seal"])
    client = SlurmClient(ReplayRunner({tuple(c["argv"]): c["stdout"] for c in CAPTURED["calls"]}))
    job = client.jobs([5074])[5074]
    assert cancelled_before_start(job)  # accounting: CANCELLED by 1001, Start None
    # what the log of the newest attempt that ran says (attempt 2: preempted), as diagnose_file reads it
    read = Diagnosis("preempted", "The scheduler or cloud took the nodes back (preemption).",
                     ["*** JOB 5074 ON h100-1 CANCELLED AT 2026-12-02T02:12:38 DUE TO PREEMPTION ***"], "",
                     source="slurm", attempt={"number": 1, "run_attempt": 2, "of": 2, "job_id": "5074"})
    found = in_run_words(read, CAPTURED["events"], 5074, cancelled_waiting=cancelled_before_start(job))
    assert found.category == "cancelled"
    assert found.summary.startswith("You cancelled it (`slurmctl cancel`) while it waited to start again as "
                                    "attempt 3, after attempt 2 was preempted")


def test_a_preemption_that_ended_a_run_is_still_the_cause():
    from datetime import datetime

    from slurmctl.slurm.records import Job

    ran = Job(5074, state="PREEMPTED", start_time=datetime(2026, 12, 2, 2, 11, 54))
    read = Diagnosis("preempted", "preempted", [], "", source="slurm")
    assert not cancelled_before_start(ran)
    assert in_run_words(read, CAPTURED["events"], 5074, cancelled_waiting=False).category == "preempted"
