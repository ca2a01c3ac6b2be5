"""monitoring/: promtool checks and unit-tests the alert rules; dashboards and rules only use
metrics the exporter really exports."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmctl.ops.exporter import _RUN_GAUGES

from .test_exporter import make, write_active_run

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"


def promtool(*args) -> subprocess.CompletedProcess:
    if shutil.which("promtool") is None:
        pytest.fail("promtool is missing: apt-get install prometheus (deploy/local/apt-extras.txt)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=MONITORING, timeout=60)


def test_promtool_check_rules_and_config():
    rules = promtool("check", "rules", "alerts.yml")
    assert rules.returncode == 0 and "SUCCESS: 14 rules found" in rules.stdout, rules.stdout + rules.stderr
    config = promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr


def test_promtool_rule_unit_tests():
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_every_alert_has_a_summary_and_a_runbook_and_a_test():
    import yaml

    rules = [r for g in yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"] for r in g["rules"]]
    tested = (MONITORING / "alerts_test.yml").read_text()
    for rule in rules:
        assert {"summary", "runbook"} <= rule["annotations"].keys(), rule["alert"]
        assert f"alertname: {rule['alert']}\n" in tested, f"{rule['alert']} has no promtool test"


def exported_names(tmp_path) -> set[str]:
    write_active_run(tmp_path)
    _, registry, _ = make(tmp_path)
    names = {m.name for m in registry.collect()}
    names |= {n + "_total" for n in names} | {n + suffix for n in names for suffix in ("_bucket", "_sum", "_count")}
    return names | {name for name, _, _ in _RUN_GAUGES}


def test_dashboards_and_rules_use_only_exported_metrics(tmp_path):
    exported = exported_names(tmp_path) | {"up"}
    texts = [(MONITORING / "alerts.yml").read_text()]
    for path in (MONITORING / "grafana").glob("*.json"):
        dashboard = json.loads(path.read_text())
        assert dashboard["panels"] and dashboard["uid"].startswith("slurmctl-")
        texts += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for text in texts for m in re.findall(r"\b(slurmctl_[a-z_]+|up)\b(?=\s*[{\[)=<>*+-/]|\s*$)", text)}
    assert used - exported == set()
    assert len(used) > 25


def test_queue_wait_series_exist_at_zero_before_any_job_starts(tmp_path):
    """rate() in the queue-wait panel only sees an increase from a sample Prometheus already has:
    every site partition's histogram must be scraped at zero before its first job starts."""
    _, registry, _ = make(tmp_path, squeue="")
    counts = {s.labels["partition"]: s.value for m in registry.collect() if m.name == "slurmctl_queue_wait_seconds"
              for s in m.samples if s.name == "slurmctl_queue_wait_seconds_count"}
    assert counts == {"h100-ondemand": 0, "h100-spot": 0, "l4-dev": 0}
