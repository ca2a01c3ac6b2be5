"""Showback across real users: alice and bob (account vision) and carol (account nlp) each run a
short GPU job; the operator's `slurmctl report --by user` and `--by account` (run as root) show the
three users in their two accounts, with totals equal to an independent reckoning from sacct
(elapsed x GPUs x the partition's price, with the site's discounts, second by second).

The cluster is shared, so other people's jobs of these users may end inside the window too: the
expected totals cover every ended attempt in the window, read from sacct just before and just after
the report; if the two reads differ (a job ended meanwhile), the comparison is retried.
"""

import json
import subprocess
import time
from collections import defaultdict
from datetime import datetime, timedelta

import pytest

from .conftest import USERS, as_user, slurmctl, slurmctl_json, wait_ended_in_sacct, wait_for_state, write_run
from .test_accounting_real import _discounted_cost, _site_discounts

JOBS = {  # user -> (partition, GPUs); two partitions with different prices
    "alice": ("h100-ondemand", 1),
    "bob": ("h100-spot", 2),
    "carol": ("h100-ondemand", 2),
}
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "DEADLINE",
         "BOOT_FAIL", "REQUEUED"}
FIELDS = "JobIDRaw,User,Account,Partition,AllocTRES,Start,End,State"


def _gpus(tres: str) -> int:
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            return int(value)
    return 0


def ended_attempts(since: str, until: str) -> list[dict]:
    """Every ended, started attempt of the test users that overlaps [since, until), from sacct (root)."""
    out = subprocess.run(["sacct", "-a", "-X", "--duplicates", "-n", "-P", "-S", since, "-E", until, "-o", FIELDS],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    rows = []
    for line in out.splitlines():
        job, user, account, partition, tres, start, end, state = line.split("|", 7)
        if user not in USERS or state.split(" ", 1)[0] not in ENDED or "Unknown" in (start, end) \
                or "None" in (start, end) or not (end >= since and start < until):
            continue
        rows.append({"job": job, "user": user, "account": account, "partition": partition, "gpus": _gpus(tres),
                     "start": start, "end": end})
    return sorted(rows, key=lambda r: (r["job"], r["start"]))


def expected_totals(attempts: list[dict], key: str, prices: dict, discounts: dict) -> dict[str, dict]:
    totals = defaultdict(lambda: {"gpu_hours": 0.0, "cost_usd": 0.0})
    for a in attempts:
        seconds = (datetime.fromisoformat(a["end"]) - datetime.fromisoformat(a["start"])).total_seconds()
        totals[a[key]]["gpu_hours"] += a["gpus"] * seconds / 3600
        totals[a[key]]["cost_usd"] += _discounted_cost(a["gpus"], a["start"], a["end"], prices[a["partition"]],
                                                       discounts)
    return dict(totals)


def test_report_by_user_and_by_account_shows_three_users_in_two_accounts(cluster, user_dir):
    prices = {name: p.price_per_gpu_hour for name, p in cluster.partitions.items()}
    discounts = _site_discounts()
    since = (datetime.now() - timedelta(seconds=2)).isoformat(timespec="seconds")
    runs = {}
    for name, (partition, gpus) in JOBS.items():
        spec = write_run(user_dir(name), {"name": f"showback-{name}", "entrypoint": "nap.py", "partition": partition,
                                          "gpus_per_node": gpus, "time_limit": "5m"},
                         {"nap.py": "import time; time.sleep(4)\n"})
        runs[name] = slurmctl_json("submit", spec, user=name)
    try:
        for name, run in runs.items():
            assert wait_for_state(run["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=180,
                                  user=name)["state"] == "COMPLETED"
    finally:
        for name, run in runs.items():
            as_user(name).scancel(run["job_id"])
    wait_ended_in_sacct({run["job_id"]: run["run_id"] for run in runs.values()})
    until = (datetime.now() + timedelta(seconds=1)).isoformat(timespec="seconds")
    time.sleep(1.5)  # `until` is in the past now: nothing can start inside the window any more

    for _ in range(3):
        before = ended_attempts(since, until)
        by_user = json.loads(slurmctl("report", "--since", since, "--until", until, "--by", "user", "--format",
                                      "json", user="root").stdout)
        by_account = json.loads(slurmctl("report", "--since", since, "--until", until, "--by", "account",
                                         "--format", "json", user="root").stdout)
        if ended_attempts(since, until) == before:
            break
    else:
        pytest.fail("jobs of alice/bob/carol kept ending inside the window; could not compare a stable set")

    mine = {(a["user"], a["job"]) for a in before}
    for name, run in runs.items():  # each user's own job is in the window, under the right account
        assert (name, str(run["job_id"])) in mine, (name, run["job_id"], before)
        assert {a["account"] for a in before if a["user"] == name} == {USERS[name]}

    users = {g["group"]: g for g in by_user["groups"]}
    accounts = {g["group"]: g for g in by_account["groups"]}
    assert set(USERS) <= set(users), users
    assert {"vision", "nlp"} <= set(accounts), accounts
    for key, report in (("user", users), ("account", accounts)):
        for group, want in expected_totals(before, key, prices, discounts).items():
            got = report[group]
            assert got["gpu_hours"] == pytest.approx(want["gpu_hours"], rel=1e-9), (key, group, got, want)
            assert got["cost_usd"] == pytest.approx(want["cost_usd"], rel=1e-9, abs=1e-12), (key, group, got, want)
    # the two views agree: a team is the sum of its people
    for account in ("vision", "nlp"):
        members = [u for u, a in USERS.items() if a == account]
        assert accounts[account]["cost_usd"] == pytest.approx(sum(users[u]["cost_usd"] for u in members), rel=1e-9)

    print("showback:", {g: round(users[g]["cost_usd"], 6) for g in USERS},
          {a: round(accounts[a]["cost_usd"], 6) for a in ("vision", "nlp")}, f"{len(before)} attempts")
    table = slurmctl("report", "--since", since, "--until", until, "--by", "user", "--no-ingest", user="root").stdout
    assert all(name in table for name in USERS), table
