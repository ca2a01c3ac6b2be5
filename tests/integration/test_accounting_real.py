"""Cost accounting against the real slurmdbd of the local cluster."""

import json
import subprocess
import time

import pytest

from .conftest import slurmctl, slurmctl_json, start_requeued_now, wait_for_state, write_run

PRICE = {"h100-ondemand": 3.90, "h100-spot": 1.40, "l4-dev": 0.35}


def _sacct_gone_running(job_id: int, attempts: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["sacct", "-X", "--duplicates", "-n", "-P", "-o", "State,End", "-j", str(job_id)],
                             capture_output=True, text=True).stdout.split()
        if len(out) >= attempts and all("Unknown" not in r for r in out):
            return
        time.sleep(1)
    raise AssertionError(f"sacct did not show {attempts} ended attempts of job {job_id}")


def test_a_run_costs_its_gpu_seconds_times_price(tmp_path):
    spec = write_run(tmp_path, {"name": "cost-test", "entrypoint": "nap.py", "partition": "h100-spot",
                                "gpu_type": "h100", "gpus_per_node": 2, "time_limit": "5m"},
                     {"nap.py": "import time; time.sleep(3)\n"})
    run_id = slurmctl_json("submit", spec)["run_id"]
    status = wait_for_state(run_id, {"COMPLETED", "FAILED"}, timeout=120)
    assert status["state"] == "COMPLETED"
    _sacct_gone_running(status["job_id"], 1)
    cost = slurmctl_json("cost", run_id)
    [attempt] = cost["attempts"]
    assert attempt["gpus"] == 2 and attempt["gpu_type"] == "h100" and attempt["elapsed_s"] >= 3
    expected = 2 * attempt["elapsed_s"] / 3600 * PRICE["h100-spot"]
    discount = 0.2 if time.localtime().tm_wday >= 5 or not 7 <= time.localtime().tm_hour < 22 else 0.0
    assert cost["cost_usd"] == pytest.approx(expected * (1 - discount), rel=0.35)  # off-peak 0.3 / weekend 0.2
    assert cost["cost_usd"] <= expected + 1e-9


def test_requeued_run_costs_the_sum_of_its_attempts_and_reports_are_stable(tmp_path):
    spec = write_run(tmp_path, {"name": "requeue-cost", "entrypoint": "nap.py", "partition": "h100-ondemand",
                                "gpus_per_node": 1, "time_limit": "5m"},
                     {"nap.py": "import time; time.sleep(4)\n"})
    submitted = slurmctl_json("submit", spec)
    run_id = submitted["run_id"]
    job_id = submitted["job_id"]
    wait_for_state(run_id, {"RUNNING"}, timeout=180)
    time.sleep(2)
    # slurmctl submits --no-requeue; make it requeueable as the reliability layer does after a checkpoint
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "Requeue=1"], check=True)
    subprocess.run(["scontrol", "requeue", str(job_id)], check=True)
    start_requeued_now(job_id)
    wait_for_state(run_id, {"COMPLETED"}, timeout=120)
    _sacct_gone_running(job_id, 2)
    cost = slurmctl_json("cost", run_id)
    assert len(cost["attempts"]) == 2
    assert cost["cost_usd"] == pytest.approx(sum(a["cost_usd"] for a in cost["attempts"]))
    assert cost["gpu_hours"] == pytest.approx(sum(a["elapsed_s"] for a in cost["attempts"]) / 3600)

    first = json.loads(slurmctl("report", "--since", "1d", "--by", "run", "--format", "json").stdout)
    again = json.loads(slurmctl("report", "--since", first["since"], "--until", first["until"], "--by", "run",
                                "--format", "json").stdout)
    mine = [g for g in first["groups"] if g["group"] == run_id]
    assert mine and mine[0]["attempts"] == 2 and mine[0]["cost_usd"] == pytest.approx(cost["cost_usd"])
    assert first["totals"] == again["totals"]


def test_html_report_is_written_and_never_clobbered(tmp_path):
    target = tmp_path / "report.html"
    slurmctl("report", "--since", "1d", "--format", "html", "--output", target)
    page = target.read_text()
    assert "<svg" in page and "GPU showback" in page
    second = slurmctl("report", "--since", "1d", "--format", "html", "--output", target, check=False)
    assert second.returncode != 0 and target.read_text() == page
