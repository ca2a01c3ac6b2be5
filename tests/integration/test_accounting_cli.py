"""`slurmctl accounting ingest` and `accounting showback` (the operator's cron commands) against the real
cluster's sacct: alice and bob (account vision) and carol (account nlp) run GPU jobs; root ingests them
into a ledger of its own and writes the showback files, whose totals are checked against the ledger."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from slurmctl.config.locate import find_site_config

from .conftest import ROOT, wait_ended_in_sacct
from .test_accounting_real import PRICE, _discounted_cost, _site_discounts

JOBS = {"alice": 1, "bob": 2, "carol": 1}  # user -> GPUs


@pytest.fixture(scope="module")
def three_users_jobs(alice, bob, carol) -> dict:
    tag = uuid.uuid4().hex[:6]
    users = {"alice": alice, "bob": bob, "carol": carol}
    jobs: dict[str, int] = {}
    names: dict[str, str] = {}
    try:
        for name, gpus in JOBS.items():
            run_id = names[name] = f"acct-cli-{tag}-{name}-{time.strftime('%Y%m%d')}-{tag[:4]}"  # a real run id
            jobs[name] = users[name].sbatch("-p", "h100-ondemand", f"--gres=gpu:h100:{gpus}", "-t", "2",
                                            "-J", run_id, f"--comment=slurmctl:{run_id}", "-o", "/dev/null",
                                            "--wrap", "sleep 3")
        wait_ended_in_sacct({job_id: names[name] for name, job_id in jobs.items()})
        assert _states(jobs) == {"COMPLETED"}
    finally:
        for name, job_id in jobs.items():
            users[name].scancel(job_id)  # a no-op once completed; stops them if the wait failed
    return {"tag": tag, "jobs": jobs, "users": users}


@pytest.fixture
def operator_site(tmp_path) -> dict:
    """The installed site config with a ledger and reports directory of this test's own: the shared
    ledger of the cluster is never written by a test."""
    site = yaml.safe_load(find_site_config().read_text())
    site["accounting"]["ledger_path"] = str(tmp_path / "ledger.sqlite")
    site["accounting"]["reports_dir"] = str(tmp_path / "reports")
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    return {"SLURMCTL_SITE_CONFIG": str(tmp_path / "site.yaml"), "ledger": tmp_path / "ledger.sqlite"}


def _states(jobs: dict[str, int]) -> set[str]:
    out = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-o", "State", "-j", ",".join(map(str, jobs.values()))],
                         capture_output=True, text=True).stdout
    return set(out.split())


def _ledger_rows(ledger: Path, tag: str) -> dict[str, dict]:
    db = sqlite3.connect(ledger)
    db.row_factory = sqlite3.Row
    rows = db.execute("SELECT * FROM attempts WHERE run_id LIKE ?", (f"acct-cli-{tag}-%",)).fetchall()
    db.close()
    return {row["user"]: dict(row) for row in rows}


def _sql_totals(ledger: Path, key: str, since: str, until: str) -> dict[str, tuple[int, float, float]]:
    """Independent sums over the ledger, with the report's window rule (overlapping the window)."""
    db = sqlite3.connect(ledger)
    rows = db.execute(f"SELECT {key}, COUNT(*), SUM(gpu_hours), SUM(cost_usd) FROM attempts "
                      "WHERE end >= ? AND start < ? GROUP BY 1", (since, until)).fetchall()
    db.close()
    return {row[0] or "(none)": (row[1], row[2], row[3]) for row in rows}


def test_ingest_prices_every_users_jobs_and_is_idempotent(three_users_jobs, operator_site):
    env = {"SLURMCTL_SITE_CONFIG": operator_site["SLURMCTL_SITE_CONFIG"]}
    since = (datetime.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    first = ROOT.slurmctl_json("accounting", "ingest", "--since", since, env=env)
    assert first["attempts"] >= 3 and first["window_start"].startswith(since)
    rows = _ledger_rows(operator_site["ledger"], three_users_jobs["tag"])
    assert set(rows) == set(JOBS)
    discounts = _site_discounts()
    for name, row in rows.items():
        account = three_users_jobs["users"][name].account
        assert (row["job_id"], row["account"], row["partition"], row["gpus"], row["gpu_type"], row["state"]) == \
            (three_users_jobs["jobs"][name], account, "h100-ondemand", JOBS[name], "h100", "COMPLETED")
        assert 3 <= row["elapsed_s"] <= 60
        assert row["gpu_hours"] == pytest.approx(JOBS[name] * row["elapsed_s"] / 3600, rel=1e-9)
        assert row["cost_usd"] == pytest.approx(
            _discounted_cost(JOBS[name], row["start"], row["end"], PRICE["h100-ondemand"], discounts), rel=1e-9)

    # Re-reading the same window replaces rows with equal rows: ours are unchanged and not doubled
    # (other people's jobs may end in between, so the ledger may only grow by those).
    again = ROOT.slurmctl_json("accounting", "ingest", "--since", since, env=env)
    assert again["attempts"] >= first["attempts"]
    assert _ledger_rows(operator_site["ledger"], three_users_jobs["tag"]) == rows
    db = sqlite3.connect(operator_site["ledger"])
    assert db.execute("SELECT COUNT(*) FROM attempts WHERE run_id LIKE ?",
                      (f"acct-cli-{three_users_jobs['tag']}-%",)).fetchone()[0] == 3
    db.close()


def test_showback_files_total_three_users_in_two_accounts(three_users_jobs, operator_site):
    env = {"SLURMCTL_SITE_CONFIG": operator_site["SLURMCTL_SITE_CONFIG"]}
    result = ROOT.slurmctl_json("accounting", "showback", "--days", "1", env=env)
    files = [Path(f) for f in result["files"]]
    expected = {f"showback-{by}.{ext}" for by in ("account", "user", "partition", "run")
                for ext in ("html", "csv", "json")}
    assert {f.name for f in files} == expected and all(f.stat().st_size > 0 for f in files)
    assert len({f.parent for f in files}) == 1 and result["ingest"]["attempts"] >= 3
    folder = files[0].parent
    mine = _ledger_rows(operator_site["ledger"], three_users_jobs["tag"])
    assert set(mine) == set(JOBS)

    by_user = json.loads((folder / "showback-user.json").read_text())
    by_account = json.loads((folder / "showback-account.json").read_text())
    by_run = json.loads((folder / "showback-run.json").read_text())
    by_run_key = "CASE WHEN run_id = '' THEN '' ELSE user || '/' || run_id END"  # identity is (user, run id)
    for report, key in ((by_user, "user"), (by_account, "account"), (by_run, by_run_key)):
        sql = _sql_totals(operator_site["ledger"], key, report["since"], report["until"])
        groups = {g["group"]: g for g in report["groups"]}
        assert set(groups) == set(sql), key
        for name, (attempts, gpu_hours, cost) in sql.items():
            assert groups[name]["attempts"] == attempts
            assert groups[name]["gpu_hours"] == pytest.approx(gpu_hours, rel=1e-9)
            assert groups[name]["cost_usd"] == pytest.approx(cost, rel=1e-9)
        assert report["totals"]["cost_usd"] == pytest.approx(sum(c for _, _, c in sql.values()), rel=1e-9)

    users = {g["group"]: g for g in by_user["groups"]}
    accounts = {g["group"]: g for g in by_account["groups"]}
    assert {"alice", "bob", "carol"} <= set(users) and {"vision", "nlp"} <= set(accounts)
    for name in JOBS:
        assert users[name]["cost_usd"] >= mine[name]["cost_usd"] > 0
    assert accounts["vision"]["cost_usd"] >= mine["alice"]["cost_usd"] + mine["bob"]["cost_usd"]
    assert accounts["nlp"]["cost_usd"] >= mine["carol"]["cost_usd"]
    runs = {g["group"]: g for g in by_run["groups"]}
    for row in mine.values():
        run = runs[f"{row['user']}/{row['run_id']}"]
        assert run["attempts"] == 1 and run["cost_usd"] == pytest.approx(row["cost_usd"], rel=1e-9)

    header = (folder / "showback-account.csv").read_text().splitlines()[0]
    assert header.startswith("account,attempts,gpu_hours,cost_usd")
    page = (folder / "showback-account.html").read_text()
    assert "vision" in page and "nlp" in page and "<svg" in page
