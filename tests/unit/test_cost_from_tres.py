"""Cost comes from what Slurm allocated (its TRES) and the site's prices, for every kind of job: a run, an
adopted script without run.yaml, a plain sbatch job, a CPU-only one. The squeue record below is the
real cluster's answer (the client's full `squeue -O` argv, captured as alice) for a CPU-only job
(`sbatch -p l4-dev -c 2`) and a one-GPU job on h100-spot."""

import json
import time
from datetime import datetime

import pytest

from slurmctl.observe.listing import plain_row_cost
from slurmctl.observe.status import build_status
from slurmctl.ops.accounting import SACCT_FIELDS, parse_sacct_record
from slurmctl.rundir import Run
from slurmctl.slurm.client import QUEUE, SlurmClient
from slurmctl.slurm.owned import PlainJobRow

from .fakes import ReplayRunner, pin_seal, squeue_output

CPU_JOB = ["3311", "RUNNING", "None", "l4-dev", "1", "l4-1", "0:06", "2:00", "2026-12-01T22:01:52",
           "2026-12-01T22:01:52", "cpu=2,mem=2000M,node=1,billing=2", "0", "alice", "cpu-capture", "(null)"]
GPU_JOB = ["3310", "RUNNING", "None", "h100-spot", "1", "h100-3", "0:08", "5:00", "2026-12-01T22:01:13",
           "2026-12-01T22:01:50", "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=1,gres/gpu:h100=1", "0", "alice",
           "swp-real-4-20261201-be94", "slurmctl:swp-real-4-20261201-be94"]


def _jobs(monkeypatch):
    seal = pin_seal(monkeypatch)
    argv = ("squeue", "-h", *QUEUE.format_argv(seal))
    return SlurmClient(ReplayRunner({argv: squeue_output(CPU_JOB, GPU_JOB)})).queue_view({3310, 3311}).jobs


def _adopted_run(tmp_path, job_id: int) -> Run:
    """An adopted script's run dir: no run.yaml, so no spec to price from."""
    path = tmp_path / "script-20261201-abcd"
    path.mkdir()
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": time.time(),
                                               "adopted": {"script": "/home/alice/train.sbatch"}}))
    (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": job_id}) + "\n")
    return Run(path.name, path)


def test_a_cpu_only_adopted_run_is_priced_by_its_allocated_cpus(tmp_path, monkeypatch, local_site):
    job = _jobs(monkeypatch)[3311]
    status = build_status(_adopted_run(tmp_path, 3311), job, site=local_site)
    assert (status.gpus, status.cpus) == (0, 2)
    # l4-dev's price_per_cpu_hour; it ran after 22:00, off-peak (30% off in deploy/local/site.yaml)
    assert status.cost_usd == pytest.approx(2 * 6 / 3600 * 0.03 * 0.7)


def test_a_gpu_job_without_run_yaml_is_priced_by_its_allocated_gpus(tmp_path, monkeypatch, local_site):
    job = _jobs(monkeypatch)[3310]
    status = build_status(_adopted_run(tmp_path, 3310), job, site=local_site)
    assert status.gpus == 1 and status.cost_usd == pytest.approx(8 / 3600 * 1.40 * 0.7)  # h100-spot, off-peak


def test_plain_job_rows_in_ls_are_priced_and_cost_names_cpu_only(local_site):
    row = PlainJobRow("3311", "RUNNING", "l4-dev", 1, "6s", "cpu-capture", gpus=0, cpus=2, elapsed_seconds=3600,
                      started_at=datetime(2026, 12, 1, 12).timestamp())  # a Tuesday noon: list price
    assert plain_row_cost(row, local_site) == pytest.approx(2 * 0.03)
    values = dict.fromkeys(SACCT_FIELDS, "")
    values.update(JobIDRaw="3311", User="alice", Partition="l4-dev", AllocTRES="billing=2,cpu=2,mem=2000M,node=1",
                  NNodes="1", Submit="2026-12-01T12:00:00", Eligible="2026-12-01T12:00:00",
                  Start="2026-12-01T12:00:00", End="2026-12-01T13:00:00", Timelimit="02:00", State="COMPLETED",
                  ExitCode="0:0")
    attempt = parse_sacct_record(list(values.values()), local_site)
    assert attempt.cost_usd == pytest.approx(2 * 0.03) and attempt.shape == "CPU only" and attempt.gpu_type == ""
