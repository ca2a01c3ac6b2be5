"""Cost accounting against the real slurmdbd of the local cluster: alice runs and costs her jobs,
root (the operator) runs the showback reports."""

import json
import subprocess
import time

import pytest

from .conftest import as_user, slurmctl, slurmctl_json, start_requeued_now, wait_for_state, write_run

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


def test_a_run_costs_its_gpu_seconds_times_price(workdir):
    spec = write_run(workdir, {"name": "cost-test", "entrypoint": "nap.py", "partition": "h100-spot",
                                "gpu_type": "h100", "gpus_per_node": 2, "time_limit": "5m"},
                     {"nap.py": "import time; time.sleep(3)\n"})
    run_id = slurmctl_json("submit", spec)["run_id"]
    status = wait_for_state(run_id, {"COMPLETED", "FAILED"}, timeout=120)
    assert status["state"] == "COMPLETED"
    _sacct_gone_running(status["job_id"], 1)
    cost = slurmctl_json("cost", run_id)
    [attempt] = cost["attempts"]
    assert attempt["gpus"] == 2 and attempt["gpu_type"] == "h100" and attempt["elapsed_s"] >= 3
    list_price = 2 * attempt["elapsed_s"] / 3600 * PRICE["h100-spot"]
    expected = _discounted_cost(2, attempt["start"], attempt["end"], PRICE["h100-spot"], _site_discounts())
    assert cost["cost_usd"] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert cost["cost_usd"] <= list_price + 1e-12


def _site_discounts() -> dict:
    """The discounts the cluster under test really has (its installed site.yaml), not a copy."""
    import yaml

    from slurmctl.config.locate import find_site_config

    discounts = yaml.safe_load(find_site_config().read_text())["accounting"]["discounts"]
    assert discounts["offpeak"] > 0 and discounts["weekend"] > 0  # the local site prices both
    return discounts


def _discounted_cost(gpus: int, start: str, end: str, price: float, discounts: dict) -> float:
    """Second by second, independently of slurmctl's boundary walk: off-peak and weekend discounts
    do not stack, the larger one wins."""
    from datetime import datetime, timedelta

    def minutes(hhmm: str) -> int:
        hours, mins = str(hhmm).split(":")[:2]
        return int(hours) * 60 + int(mins)

    off_start, off_end = minutes(discounts["offpeak_start"]), minutes(discounts["offpeak_end"])
    at, stop, total = datetime.fromisoformat(start), datetime.fromisoformat(end), 0.0
    while at < stop:
        minute = at.hour * 60 + at.minute
        offpeak = (minute >= off_start or minute < off_end) if off_start > off_end else off_start <= minute < off_end
        off = max(discounts["offpeak"] if offpeak else 0.0, discounts["weekend"] if at.weekday() >= 5 else 0.0)
        total += gpus / 3600 * price * (1 - off)
        at += timedelta(seconds=1)
    return total


def test_requeued_run_costs_the_sum_of_its_attempts_and_reports_are_stable(workdir):
    spec = write_run(workdir, {"name": "requeue-cost", "entrypoint": "nap.py", "partition": "h100-ondemand",
                                "gpus_per_node": 1, "time_limit": "5m"},
                     {"nap.py": "import time; time.sleep(4)\n"})
    submitted = slurmctl_json("submit", spec)
    run_id = submitted["run_id"]
    job_id = submitted["job_id"]
    wait_for_state(run_id, {"RUNNING"}, timeout=180)
    time.sleep(2)
    # slurmctl submits --no-requeue; make it requeueable as the reliability layer does after a
    # checkpoint (inside the job, as its owner), then requeue it as its owner may
    alice = as_user("alice")
    alice.run(["scontrol", "update", f"JobId={job_id}", "Requeue=1"], check=True)
    alice.run(["scontrol", "requeue", str(job_id)], check=True)
    start_requeued_now(job_id)
    wait_for_state(run_id, {"COMPLETED"}, timeout=120)
    _sacct_gone_running(job_id, 2)
    cost = slurmctl_json("cost", run_id)
    assert len(cost["attempts"]) == 2
    assert cost["cost_usd"] == pytest.approx(sum(a["cost_usd"] for a in cost["attempts"]))
    assert cost["gpu_hours"] == pytest.approx(sum(a["elapsed_s"] for a in cost["attempts"]) / 3600)

    first = json.loads(slurmctl("report", "--since", "1d", "--by", "run", "--format", "json", user="root").stdout)
    again = json.loads(slurmctl("report", "--since", first["since"], "--until", first["until"], "--by", "run",
                                "--format", "json", user="root").stdout)
    mine = [g for g in first["groups"] if g["group"] == f"alice/{run_id}"]  # runs are grouped by (user, run id)
    assert mine and mine[0]["attempts"] == 2 and mine[0]["cost_usd"] == pytest.approx(cost["cost_usd"])
    assert first["totals"] == again["totals"]


def test_html_report_is_written_and_never_clobbered(tmp_path):
    target = tmp_path / "report.html"  # the operator's report: root's own directory
    slurmctl("report", "--since", "1d", "--format", "html", "--output", target, user="root")
    page = target.read_text()
    assert "<svg" in page and "GPU showback" in page
    second = slurmctl("report", "--since", "1d", "--format", "html", "--output", target, check=False, user="root")
    assert second.returncode != 0 and target.read_text() == page
