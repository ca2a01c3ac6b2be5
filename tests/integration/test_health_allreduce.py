"""The active check on real daemons: a throwaway two-node Slurm cluster (throwaway_slurm.py; the
shared cluster is never drained) whose HealthCheckProgram verifies a node we drained before it
returns, the verification now running a real gloo all-reduce (its own ranks, as root).

Then `slurmctl nodes --json` charges the drained node its drained GPU-hours from accounting.

One node goes through four verifications in a row (SLURMCTL_HEALTH_VERIFY_RETRY_SECONDS=1):
the fault stub on `allreduce`, a gloo interface that does not exist, a site minimum bandwidth no
node reaches, then a clean one that returns the node. The other node runs the scheduled active
check as root's job (`python -m slurmctl.ops.health active`) with a bad interface: drained. An
active check whose torch python is missing drains nothing; the exporter shows it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT, SLURMCTL
from tests.integration.test_node_health import job_by_name, node, wait_for
from tests.integration.throwaway_slurm import ThrowawayCluster

REPO = Path(__file__).resolve().parents[2]
TORCH_PYTHON = str(REPO / ".venv" / "bin" / "python")
INTERVAL = 5
NODES = {"an1": "", "an2": ""}


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0 or not shutil.which("slurmctld") or not shutil.which("mariadbd"):
        pytest.fail("needs root, Slurm and MariaDB (scripts/setup installs them)")
    if not Path(TORCH_PYTHON).exists():
        pytest.fail(f"needs torch in {TORCH_PYTHON} (scripts/setup installs it)")
    c = ThrowawayCluster("allreduce")
    try:
        c.faults = c.dir / "hookstate" / "health-faults"
        for n in NODES:
            (c.faults / n).mkdir(parents=True, mode=0o755)
        c.settings = c.dir / "health.env"  # the test changes the site's settings between verifications
        c.settings.write_text("")
        env = " ".join([f"SLURM_CONF={c.conf}", f"SLURMCTL_LOCAL_DIR={c.dir}/hookstate",
                        f"SLURMCTL_HOOKS_LOG={c.dir}/log/hooks.jsonl", "SLURMCTL_MIN_FREE_SCRATCH_MB=1",
                        "SLURMCTL_MIN_FREE_SHM_MB=1", "SLURMCTL_HEALTH_VERIFY_RETRY_SECONDS=1",
                        f"SLURMCTL_HEALTH_TORCH_PYTHON={TORCH_PYTHON}", "SLURMCTL_DATA_CACHE_DIRS="])
        hc = c.dir / "healthcheck.sh"
        hc.write_text(f"#!/bin/sh\nexport {env}\n. {c.settings}\nexec /usr/bin/python3 {REPO}/plugins/healthcheck.py\n")
        hc.chmod(0o755)
        c.hook_env = env
        c.write("\n".join([f"HealthCheckProgram={hc}", f"HealthCheckInterval={INTERVAL}", "HealthCheckNodeState=ANY",
                           "SelectType=select/cons_tres", "SchedulerParameters=sched_interval=2,bf_interval=2",
                           "PartitionName=main Nodes=ALL Default=YES MaxTime=60 State=UP", ""]), NODES)
        # two fake GPUs per node (character devices, as the local cluster's): the GPU-hours lost to a node
        (c.dir / "dev").mkdir()
        for i in range(2):
            os.mknod(c.dir / "dev" / f"nvidia{i}", 0o666 | stat.S_IFCHR, os.makedev(195, i))
        (c.dir / "gres.conf").write_text(f"AutoDetect=off\nNodeName=an[1-2] Name=gpu File={c.dir}/dev/nvidia[0-1]\n")
        c.conf.write_text("\n".join(line + " Gres=gpu:2" if line.startswith("NodeName=") else line
                                    for line in c.conf.read_text().splitlines()) + "\n")
        c.start()
        c.start_slurm()
        yield c
    finally:
        c.close()


WEEK_AS_ALICE = """
from datetime import datetime
from slurmctl.ops.health.lost import node_week, ATTEMPT_FIELDS, EVIDENCE_BEFORE, WINDOW
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.runner import LocalRunner
c = SlurmClient(LocalRunner())
end = datetime.now().replace(microsecond=0)
rows = list(c.all_attempts(ATTEMPT_FIELDS, start=end - WINDOW - EVIDENCE_BEFORE, end=end))
print("end", end, "rows", [r[:1] + r[5:9] for r in rows][-8:], "rejects", dict(c.rejects.counts))
print("health_jobs", node_week(c, {"an1": 2, "an2": 2}, {}, end).health_jobs)
"""


def verify_lines(c: ThrowawayCluster) -> list[dict]:
    return [d for d in map(json.loads, c.log("hooks.jsonl").splitlines()) if d.get("hook") == "health-verify"]


def test_verification_runs_a_gloo_allreduce_and_keeps_a_bad_or_slow_node_drained(cluster):
    c = cluster
    show = lambda: "\n".join([c.run(["squeue", "-h", "-t", "all", "-o", "%i %u %j %T %r %N"]).stdout,  # noqa: E731
                              c.run(["sinfo", "-h", "-N", "-o", "%N %T %E"]).stdout, c.log("hooks.jsonl")[-3000:]])
    stub = c.faults / "an1" / "allreduce"
    stub.write_text("simulated slow interconnect\n")
    ours = "slurmctl:[node_problem] disk: repaired by the test"
    assert c.run(["scontrol", "update", "nodename=an1", "state=drain", f"reason={ours}"]).returncode == 0

    def verified_with(text: str):
        return lambda: text in node(c, "an1")["reason"] and node(c, "an1")

    failed = wait_for("stub", verified_with("verify: allreduce: injected fault"), 6 * INTERVAL + 60, show=show)
    assert failed["drained"] and failed["reason"] == \
        "slurmctl:[node_problem] verify: allreduce: injected fault: simulated slow interconnect", failed

    stub.unlink()  # a real failure: the ranks cannot bind a gloo interface that does not exist
    c.settings.write_text("export SLURMCTL_HEALTH_GLOO_IFNAME=nosuch0\n")
    failed = wait_for("bad interface", verified_with("nosuch0"), 6 * INTERVAL + 90, show=show)
    assert failed["drained"], failed
    assert failed["reason"] == ("slurmctl:[node_problem] verify: allreduce: gloo all-reduce over 2 ranks failed: "
                                "Unable to find address for: nosuch0"), failed

    c.settings.write_text("export SLURMCTL_HEALTH_MIN_BUSBW_MBPS=100000000\n")  # 100 TB/s: no node reaches it
    failed = wait_for("too slow", verified_with("too slow"), 6 * INTERVAL + 90, show=show)
    assert failed["drained"], failed
    assert failed["reason"].startswith("slurmctl:[node_problem] verify: allreduce: gloo all-reduce over 2 ranks: "
                                       "bus bandwidth "), failed
    assert failed["reason"].endswith(": too slow, the site minimum is 100000000 MB/s"), failed

    c.settings.write_text("")  # the site's defaults: the node passes and returns
    wait_for("an1 back in service", lambda: not node(c, "an1")["drained"]
             and (job_by_name(c, "slurmctl-verify-an1") or ("",))[0] == "COMPLETED", 6 * INTERVAL + 90, show=show)
    passed = [d for d in verify_lines(c) if d.get("action") == "passed"][-1]
    verify_job = str(passed["job_id"])
    assert admin_comment(c, verify_job) == "slurmctl:health verify passed an1"  # what lost.py reads as a pass
    measured = next(f for f in passed["findings"] if f["check"] == "allreduce")
    assert measured["ok"] and measured["detail"].startswith("gloo all-reduce over 2 ranks: bus bandwidth "), passed
    print(measured["detail"])


def test_the_scheduled_active_check_drains_a_node_whose_allreduce_fails(cluster):
    c = cluster
    command = (f"cd / && exec /usr/bin/env {c.hook_env} SLURMCTL_HEALTH_GLOO_IFNAME=nosuch0 PYTHONPATH={REPO} "
               "/usr/bin/python3 -m slurmctl.ops.health active")
    out = c.run(["sbatch", "--parsable", "--job-name=slurmctl-active-an2", "--nodelist=an2", "--time=5",
                 f"--output={c.dir}/jobs/active-%j.out", f"--wrap={command}"])
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip().split(";")[0]
    wait_for("an2 drained by the active check", lambda: node(c, "an2")["drained"], 120,
             show=lambda: c.log("hooks.jsonl")[-2000:])
    assert node(c, "an2")["reason"] == ("slurmctl:[node_problem] allreduce: gloo all-reduce over 2 ranks failed: "
                                        "Unable to find address for: nosuch0")
    wait_for("the active job FAILED", lambda: c.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State"])
             .stdout.strip() == "FAILED", 30)
    assert admin_comment(c, job_id) == "slurmctl:health active drained an2"


def admin_comment(c: ThrowawayCluster, job_id: str) -> str:
    return c.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "AdminComment"]).stdout.strip()


def test_nodes_shows_the_gpu_hours_the_drained_node_lost(cluster):
    """After the tests above: an1 spent its verifications drained ([node_problem], 2 GPUs); an2 was
    drained by the active check. Accounting's node events charge them; read as alice."""
    c = cluster
    out = subprocess.run(["runuser", "-u", "alice", "--", "env", f"SLURM_CONF={c.conf}", "PATH=/usr/bin:/bin",
                          f"PYTHONPATH={REPO}", TORCH_PYTHON, "-m", "slurmctl.cli", "nodes", "--json"],
                         capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert out.returncode == 0, out.stderr
    views = {v["node"]: v for v in json.loads(out.stdout)}
    events = c.run(["sacctmgr", "-n", "-P", "show", "event", "format=NodeName,TimeStart,TimeEnd,State,Reason"]).stdout
    an1 = views["an1"]["gpu_hours_lost"]
    assert views["an1"]["gpus"] == 2 and an1["failed_jobs"] == 0 and an1["jobs"] == 0, views["an1"]
    spans = [line.split("|") for line in events.splitlines() if line.startswith("an1|")]
    seconds = sum((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
                  for _, start, end, _, reason in spans if reason.startswith("slurmctl:[node_problem]"))
    assert len(spans) >= 4 and seconds > 0, events  # the drain before each of the four verifications
    assert an1["drained"] == pytest.approx(2 * seconds / 3600, abs=0.001), (views["an1"], events)
    assert an1["total"] == an1["drained"]
    print({n: v["gpu_hours_lost"] for n, v in views.items()}, events, sep="\n")


def test_an_active_checks_configuration_error_drains_nothing_and_the_exporter_says_so(cluster):
    """The active check with a torch python that does not exist: the job FAILS, an1 stays in
    service, the job's AdminComment says config_error, and alice's `slurmctl exporter --once` shows
    slurmctl_node_health_config_error 1 for an1 (an2's newest active check drained it: 0)."""
    c = cluster
    command = (f"cd / && exec /usr/bin/env {c.hook_env} SLURMCTL_HEALTH_TORCH_PYTHON=/nonexistent/python "
               f"PYTHONPATH={REPO} /usr/bin/python3 -m slurmctl.ops.health active")
    out = c.run(["sbatch", "--parsable", "--job-name=slurmctl-active-an1", "--nodelist=an1", "--time=5",
                 f"--output={c.dir}/jobs/active-%j.out", f"--wrap={command}"])
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip().split(";")[0]
    wait_for("the active job FAILED", lambda: c.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State"])
             .stdout.strip() == "FAILED", 60)
    assert not node(c, "an1")["drained"], node(c, "an1")
    assert admin_comment(c, job_id) == "slurmctl:health active config_error an1"
    said = (c.dir / "jobs" / f"active-{job_id}.out").read_text()
    assert "CONFIGURATION ERROR on an1, nothing measured and nothing drained" in said, said
    as_alice = ["runuser", "-u", "alice", "--", "env", f"SLURM_CONF={c.conf}", "PATH=/usr/bin:/bin"]
    for _ in range(6):  # accounting may take a moment to hold what slurmctld already answers
        out = subprocess.run([*as_alice, f"PYTHONPATH={REPO}", TORCH_PYTHON, "-m", "slurmctl.cli", "exporter",
                              "--once"], capture_output=True, text=True, timeout=120, cwd="/tmp")
        assert out.returncode == 0, out.stderr
        if "slurmctl_node_health_config_error{" in out.stdout:
            break
        time.sleep(5)
    # what the exporter's weekly sacct read, as alice, should the series be missing
    seen = subprocess.run([*as_alice, "sacct", "-a", "-X", "--duplicates", "-n", "-P", "-S", "now-1days", "-E", "now",
                           "-o", "JobIDRaw,State,UID,Start,End,AdminComment"],
                          capture_output=True, text=True, timeout=60, cwd="/tmp")
    series = [line for line in out.stdout.splitlines()
              if "node_health" in line or "slurm_command" in line or "unparsed" in line]
    # and what the exporter's own reading of that week (lost.node_week) makes of it, as alice
    week = subprocess.run([*as_alice, f"PYTHONPATH={REPO}", TORCH_PYTHON, "-c", WEEK_AS_ALICE],
                          capture_output=True, text=True, timeout=120, cwd="/tmp")
    why = "\n".join([*series, "stderr:", out.stderr[-2000:], "alice's sacct:", seen.stdout[-3000:], seen.stderr,
                      "node_week:", week.stdout[-3000:], week.stderr[-2000:]])
    assert 'slurmctl_node_health_config_error{moment="active",node="an1"} 1.0' in out.stdout, why
    assert 'slurmctl_node_health_config_error{moment="active",node="an2"} 0.0' in out.stdout, out.stdout


@pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("chromedriver")),
                    reason="chromium and chromium-driver are in deploy/local/apt-extras.txt")
def test_the_operators_nodes_page_in_chromium_shows_the_view_as_text(cluster):
    """root's `slurmctl web` on this cluster: the Nodes page renders node_views (the same as `slurmctl
    nodes`), and an operator's reason holding markup is shown as text, never run."""
    from selenium.webdriver.common.by import By

    from tests.integration.test_web_browser import SCREENS, WebServer, _browser, _wait

    c = cluster
    hostile = 'maint <script>document.title="pwned"</script> & <b>bold</b>'
    assert c.run(["scontrol", "update", "nodename=an2", "state=drain", f"reason={hostile}"]).returncode == 0
    server = WebServer(_RootOn(c))
    driver = None
    try:
        driver = _browser()
        driver.get(server.url)
        driver.find_element(By.ID, "nav-nodes").click()
        table = _wait(lambda: driver.find_elements(By.ID, "nodes"), 20, "the Nodes page")[0]
        SCREENS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENS / "nodes.png"))
        rows = {r.get_attribute("data-node"): [td.text for td in r.find_elements(By.TAG_NAME, "td")]
                for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")}
        expected = {v["node"]: v for v in json.loads(ROOT.run([*SLURMCTL, "nodes", "--json"],
                                                              env={"SLURM_CONF": str(c.conf)}).stdout)}
        assert set(rows) == set(expected) == {"an1", "an2"}, rows
        an2 = rows["an2"]
        assert an2[2] == "root" and an2[5] == hostile, an2  # the reason as text, markup and all
        assert driver.title != "pwned" and not table.find_elements(By.TAG_NAME, "b")
        assert not driver.find_elements(By.CSS_SELECTOR, "td script")
        for name, cells in rows.items():
            lost = expected[name]["gpu_hours_lost"]
            assert cells[8] == "2" and cells[11] == f"{lost['total']:.2f}", (cells, lost)
    finally:
        if driver is not None:
            driver.quit()
        server.stop()
        c.run(["scontrol", "update", "nodename=an2", "state=resume"])


class _RootOn:
    """root (the operator) whose commands speak to the throwaway cluster (SLURM_CONF)."""

    def __init__(self, c: ThrowawayCluster):
        self.c = c

    def argv(self, argv):
        return ROOT.argv(argv, env={"SLURM_CONF": str(self.c.conf)})

    @property
    def home(self):
        return ROOT.home
