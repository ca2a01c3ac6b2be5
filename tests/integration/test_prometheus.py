"""A real Prometheus (Debian package) scrapes `slurmctl exporter` while a tiny training runs on the
local cluster (alice's run; the exporter is the operator's, root): the run's step advances in Prometheus,
the cluster gauges match Slurm, every dashboard panel's query returns data (a pending job of alice's is
queued for the queue panels), and a fast scrape loop still asks Slurm at most twice per interval."""

import json
import math
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from .conftest import REPO, SLURMCTL, slurmctl_json, write_run

# Dashboard queries that can only have data in a state this test must not create on a shared
# cluster; each is checked against Slurm's own view instead of being skipped.
NEEDS_UNAVAILABLE_NODE = "slurmctl_node_unavailable_info == 1"  # draining a node would disturb others

EXPORTER_INTERVAL = 1.0

TRAIN = """
import time
from slurmctl.runtime import Runtime

rt = Runtime.from_env()
for step in range(600):
    time.sleep(0.25)
    rt.log(step, loss=1.0 / (step + 1), samples_per_second=512.0)
    if (step + 1) % rt.checkpoint_interval == 0:
        rt.checkpoints.save(step, lambda d: (d / "state.txt").write_text(str(step)))
    if rt.should_stop():
        rt.ack_drain(step)
        break
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via an http_proxy


def get(url: str) -> str:
    with _LOCAL.open(url, timeout=10) as response:
        return response.read().decode()


def wait_until(predicate, timeout: float, what: str, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = predicate()
        except OSError:  # not listening yet
            result = None
        if result:
            return result
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Prometheus:
    def __init__(self, tmp: Path, target: str):
        self.port = free_port()
        config = tmp / "prometheus.yml"
        config.write_text(f"global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n"
                          f"scrape_configs:\n  - job_name: slurmctl\n    static_configs:\n"
                          f"      - targets: ['{target}']\n")
        self.log = open(tmp / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, expr: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(get(url))
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def scalar(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.close()


@pytest.fixture
def stack(tmp_path):
    exporter_port = free_port()
    exporter_log = open(tmp_path / "exporter.log", "w")
    exporter = subprocess.Popen([*SLURMCTL, "exporter", "--port", str(exporter_port), "--address", "127.0.0.1",
                                 "--interval", str(EXPORTER_INTERVAL)], stdout=exporter_log, stderr=subprocess.STDOUT)
    prometheus = Prometheus(tmp_path, f"127.0.0.1:{exporter_port}")
    try:
        wait_until(lambda: prometheus.scalar('up{job="slurmctl"}') == 1, 60, "Prometheus to scrape the exporter")
        yield prometheus, f"http://127.0.0.1:{exporter_port}/metrics"
    finally:
        prometheus.stop()
        exporter.terminate()
        exporter.wait(timeout=20)
        exporter_log.close()


def counters(metrics_url: str) -> dict[str, float]:
    out = {}
    for line in get(metrics_url).splitlines():
        if line.startswith("slurmctl_slurm_commands_total{"):
            out[line.split('"')[1]] = float(line.rsplit(" ", 1)[1])
    return out


def has_finite_data(prometheus: Prometheus, expr: str) -> bool:
    """At least one series with a number Grafana can draw (a quantile of a partition where no job
    started in the window is NaN; the panel still shows the others)."""
    return any(math.isfinite(float(r["value"][1])) for r in prometheus.query(expr))


def unavailable_nodes() -> set[str]:
    """Nodes sinfo reports down, drained, draining or failing."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, check=True).stdout
    return {node for node, state in (line.split() for line in out.splitlines())
            if any(word in state.upper() for word in ("DOWN", "DRAIN", "FAIL"))}


def test_prometheus_sees_the_run_advance_and_the_cluster(stack, workdir, alice):
    prometheus, metrics_url = stack
    spec = write_run(workdir / "code", {
        "name": "prom-test", "entrypoint": "train.py", "partition": "h100-ondemand", "gpus_per_node": 1,
        "time_limit": "5m", "checkpoint": {"interval_steps": 20}}, {"train.py": TRAIN})
    submitted = slurmctl_json("submit", spec)
    run_id, job_id = submitted["run_id"], submitted["job_id"]
    held = None
    try:
        # the step advances, as seen through Prometheus's HTTP API
        step_query = f'slurmctl_run_step{{run="{run_id}"}}'
        first = wait_until(lambda: prometheus.scalar(step_query), 150, f"{run_id} to report steps")
        later = wait_until(lambda: (v := prometheus.scalar(step_query)) and v >= first + 8 and v, 30,
                           f"{run_id}'s step to advance past {first}")
        assert later > first
        assert prometheus.scalar(f'slurmctl_run_info{{run="{run_id}",state="RUNNING",job_id="{job_id}"}}') == 1
        assert prometheus.scalar(f'slurmctl_run_loss{{run="{run_id}"}}') == pytest.approx(1 / (later + 1), rel=0.5)
        assert prometheus.scalar(f'slurmctl_run_cost_burn_dollars_per_hour{{run="{run_id}"}}') == pytest.approx(3.90)
        wait_until(lambda: prometheus.scalar(f'slurmctl_run_checkpoint_step{{run="{run_id}"}}'), 30,
                   "the first checkpoint to show up")

        # cluster gauges agree with Slurm: every configured GPU is accounted for once per partition
        configured = {}
        for line in subprocess.run(["sinfo", "-h", "-N", "-o", "%P %G"], capture_output=True, text=True,
                                   check=True).stdout.splitlines():
            partition, gres = line.split()
            configured[partition.rstrip("*")] = configured.get(partition.rstrip("*"), 0) + int(gres.rsplit(":", 1)[1])
        for partition, total in configured.items():
            assert prometheus.scalar(f'sum(slurmctl_gpus{{partition="{partition}"}})') == total, partition
        assert prometheus.scalar('slurmctl_gpus{partition="h100-ondemand",state="allocated"}') >= 1
        assert prometheus.scalar('sum(slurmctl_jobs{state="RUNNING"})') >= 1
        assert prometheus.scalar("slurmctl_slurm_up") == 1

        # every dashboard panel's query returns finite data, as written (only $run is filled in); the
        # pending-job panels get a held job of alice's, the queue-wait panel the run's own start
        held = alice.sbatch("--hold", "-p", "l4-dev", "-J", f"{run_id}-held", "-o", "/dev/null", "--wrap", "true")
        panels = 0
        for path in sorted((REPO / "monitoring" / "grafana").glob("*.json")):
            for panel in json.loads(path.read_text())["panels"]:
                for target in panel["targets"]:
                    expr = target["expr"].replace("$run", run_id)
                    panels += 1
                    if expr == NEEDS_UNAVAILABLE_NODE:
                        # valid PromQL whose nodes are sinfo's (a node may change state meanwhile: wait)
                        wait_until(lambda e=expr: {r["metric"]["node"] for r in prometheus.query(e)}
                                   == unavailable_nodes(), 60, f"panel {panel['title']!r} to match sinfo")
                        continue
                    wait_until(lambda e=expr: has_finite_data(prometheus, e), 60,
                               f"dashboard panel {panel['title']!r} ({path.name}) to show data: {expr}")
        assert panels >= 30

        # a fast scrape loop still asks Slurm for at most one snapshot per interval: one squeue, two
        # sinfo (nodes, partitions) and one scontrol show partition; sacctmgr is cached for minutes
        before, started = counters(metrics_url), time.monotonic()
        scrapes = 0
        while time.monotonic() - started < 3.0:
            get(metrics_url)
            scrapes += 1
        after, elapsed = counters(metrics_url), time.monotonic() - started
        intervals = math.floor(elapsed / EXPORTER_INTERVAL) + 1
        calls = {c: after[c] - before.get(c, 0) for c in after}
        assert scrapes > 10 * intervals
        assert calls["squeue"] <= intervals and calls["sinfo"] <= 2 * intervals and calls["scontrol"] <= intervals \
            and calls.get("sacctmgr", 0) <= 1, \
            (calls, intervals, scrapes)
    finally:
        alice.scancel(job_id, held)
