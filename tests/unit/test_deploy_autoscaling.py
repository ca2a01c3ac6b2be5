"""Autoscaling of the node sets, computed by the controllers' own documented rules.

The ScaledObjects of deploy/chart (rendered by the real helm) are fed to two models written from
the upstream sources, not from our expectations:
- the HPA's replica calculator (kubernetes pkg/controller/podautoscaler/replica_calculator.go):
  an External metric with target `Value` gives ceil(usage / target x READY pods); with target
  `AverageValue` it gives ceil(usage / target); no change while |ratio - 1| <= 0.1 (tolerance);
  the result is clamped to [minReplicas, maxReplicas]; a scale-down takes the highest
  recommendation of the last 300 s (default stabilization window);
- KEDA 2.20.2 (pkg/scaling/executor/scale_scaledobjects.go RequestScale, pkg/fallback): at 0
  replicas KEDA itself activates to minReplicaCount once the metric is above activationThreshold;
  after cooldownPeriod without activity it sets idleReplicaCount (0); in between the HPA owns the
  count. No data is a scaler error (ignoreNullValues false): with no fallback KEDA changes nothing
  and the HPA, which cannot read its metric, keeps the count; with a fallback, once the failures
  pass failureThreshold the trigger counts as ACTIVE (scale_handler.go isActiveOrFallback), so a set
  at 0 is scaled to minReplicaCount, and the HPA is fed the fallback's replicas.
The metric value of each scenario is what Prometheus computes from the rendered query over the
series the real exporter (slurmctl.ops.exporter, with the production site.yaml) serves for the
scenario's queue and nodes: promtool evaluates it (the real PromQL engine), so exporter, query and
arithmetic are checked together. Every scenario's queue also holds jobs more nodes never start
(held, dependencies, limits, a QOS or time limit the partition does not take, bigger than the
pool): they must add nothing. The GKE firewall rules the control plane needs are checked against the RUNBOOK's
table and the pinned charts' ports.
"""

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .test_deploy_chart import by_kind, render
from .test_deploy_consistency import _terraform, _tf_resources

REPO = Path(__file__).resolve().parents[2]
KEDA_FACTS = REPO / "tests" / "fixtures" / "keda" / "keda-2.20.2.json"
OPERATOR_FACTS = REPO / "tests" / "fixtures" / "slinky" / "slurm-operator-1.1.2.json"
TOLERANCE = 0.1            # HPA --horizontal-pod-autoscaler-tolerance default
SCALE_DOWN_WINDOW = 300    # HPA behavior.scaleDown.stabilizationWindowSeconds default


def hpa_recommendation(metric_type: str, usage: float, target: float, current: int, ready: int) -> int:
    """replica_calculator.go: GetExternalMetricReplicas (Value) / GetExternalPerPodMetricReplicas (AverageValue)."""
    if metric_type == "AverageValue":
        ratio = usage / (target * current)
        return current if abs(1.0 - ratio) <= TOLERANCE else math.ceil(usage / target)
    ratio = usage / target
    return current if abs(1.0 - ratio) <= TOLERANCE else math.ceil(ratio * ready)


class NodeSetScaler:
    """One ScaledObject and its HPA, stepped once per KEDA polling interval."""

    def __init__(self, spec: dict):
        [trigger] = spec["triggers"]
        self.metric_type = trigger["metricType"]
        self.target = float(trigger["metadata"]["threshold"])
        self.activation = float(trigger["metadata"]["activationThreshold"])
        self.lo, self.hi = spec["minReplicaCount"], spec["maxReplicaCount"]
        self.idle, self.cooldown, self.poll = spec["idleReplicaCount"], spec["cooldownPeriod"], spec["pollingInterval"]
        self.replicas, self.now, self.last_active = 0, 0, None
        self.recommendations: list[tuple[int, int]] = []
        self.fallback, self.failures = spec.get("fallback"), 0

    def step(self, usage: float | None, ready: int) -> int:
        """One poll; usage None: the query returned no data (a scaler error)."""
        self.now += self.poll
        if usage is None:
            if self.fallback is None:
                return self.replicas  # "isError && Fallback == nil": no scaling; the HPA has no metric
            self.failures += 1
            if self.failures <= self.fallback["failureThreshold"]:
                return self.replicas  # not active, error, fallback replicas != 0: no change yet
            behavior = self.fallback.get("behavior", "static")
            usage = {"static": self.fallback["replicas"], "currentReplicas": self.replicas,
                     "currentReplicasIfHigher": max(self.replicas, self.fallback["replicas"]),
                     "currentReplicasIfLower": min(self.replicas, self.fallback["replicas"])}[behavior] * self.target
            if self.replicas == 0:  # fallback active = trigger active: scaleFromZeroOrIdle
                self.last_active, self.replicas = self.now, self.lo
                return self.replicas
        else:
            self.failures = 0
        if usage > self.activation:
            self.last_active = self.now
        if self.replicas == 0:  # the HPA is off at 0: KEDA activates
            self.replicas = self.lo if usage > self.activation else 0
            return self.replicas
        if self.last_active is None or self.now - self.last_active >= self.cooldown:
            self.replicas, self.recommendations = self.idle, []
            return self.replicas
        wanted = min(self.hi, max(self.lo, hpa_recommendation(self.metric_type, usage, self.target,
                                                             self.replicas, ready)))
        self.recommendations = [(t, r) for t, r in self.recommendations if self.now - t < SCALE_DOWN_WINDOW]
        self.recommendations.append((self.now, wanted))
        if wanted < self.replicas:  # scale-down: the highest recommendation of the window
            wanted = max(r for _, r in self.recommendations)
        self.replicas = wanted
        return self.replicas


def _scaled_objects(tmp_path) -> dict[str, dict]:
    return {d["spec"]["scaleTargetRef"]["name"].removeprefix("slurm-worker-"): d["spec"]
            for d in by_kind(render(tmp_path), "ScaledObject").values()}


# Pending jobs that more nodes never start, as squeue -O shows them: (reason, nodes, GPUs, time limit).
# The QOSNotAllowed line is the sentence slurmctld puts in its place (the job's state_desc), seen on
# real daemons by tests/integration/test_deploy_preemption.py.
NEVER_STARTED_BY_NODES = [
    (reason, 1, 8, "1-00:00:00") for reason in [
        "JobHeldUser", "JobHeldAdmin", "Dependency", "BeginTime", "DependencyNeverSatisfied",
        "QOSMaxJobsPerUserLimit", "QOSGrpGRES", "AssocMaxJobsLimit", "AssocGrpGRES", "InvalidQOS", "InvalidAccount",
        "PartitionTimeLimit", "QOSNotAllowed",
        "Job's QOS not permitted to use this partition (h100-ondemand allows production not burst)"]
] + [
    ("Resources", 20, 160, "1-00:00:00"),         # more nodes than any pool may have (site.yaml max_nodes)
    ("PartitionNodeLimit", 1, 16, "1-00:00:00"),  # more GPUs per node than the pool's nodes have
    # over the partitions' MaxTime (7 days): on a pool with no node Slurm says PartitionConfig first
    ("PartitionConfig", 1, 8, "8-00:00:00"),
]
WAITING_REASONS = ["Resources", "PartitionConfig", "PartitionNodeLimit", "Priority"]  # more nodes start these


def exporter_series(tmp_path: Path, partition: str, busy: int, waiting: list[int]) -> list[tuple[str, float]]:
    """(series, value) the exporter serves for a queue with `waiting` jobs (their node counts) that
    more nodes would start, every NEVER_STARTED_BY_NODES job, `busy` allocated + 3 idle nodes in
    `partition`, and 7 busy nodes in another partition."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from slurmctl.config.models import load_site_config
    from slurmctl.ops.exporter import build
    from slurmctl.slurm.client import SEP

    from .fakes import ReplayRunner, squeue_output

    site = load_site_config(REPO / "deploy" / "slinky" / "site.yaml").model_copy(update={"runs_root": str(tmp_path)})
    jobs = [(WAITING_REASONS[i % len(WAITING_REASONS)], nodes, 8 * nodes) for i, nodes in enumerate(waiting)]
    records = [[str(100 + i), "PENDING", reason, partition, str(nodes),
                f"cpu={nodes},mem=1000M,node={nodes},billing={nodes},gres/gpu={gpus}", "2026-12-01T10:00:00",
                "N/A", limit, "alice", "production", "(null)", "N/A", "N/A", "(null)"]
               for i, (reason, nodes, gpus, limit) in enumerate([(*job, "1-00:00:00") for job in jobs]
                                                                + NEVER_STARTED_BY_NODES)]
    other = "h100-flex" if partition != "h100-flex" else "h100-spot"
    sinfo = "".join(f"{name}{SEP}{part}{SEP}gpu:8{SEP}gpu:{used}(IDX:N/A){SEP}{state}{SEP}none{SEP}\n"
                    for name, part, used, state in
                    [(f"{partition}-{i}", partition, 8, "allocated") for i in range(busy)]
                    + [(f"{partition}-{busy + i}", partition, 0, "idle") for i in range(3)]
                    + [(f"{other}-{i}", other, 8, "allocated") for i in range(7)])
    # each partition's MaxTime, as partitions.conf sets it (sinfo -o %R|%l|%a)
    limits = "".join(f"{name}{SEP}{'04:00:00' if name == 'l4-dev' else '7-00:00:00'}{SEP}up\n"
                     for name in site.partitions)
    registry, _ = build(site, 15.0, ReplayRunner({"squeue": squeue_output(*records), "sinfo": sinfo,
                                                  ("sinfo", "-h", "-o", SEP.join(["%R", "%l", "%a"])): limits}))
    text = generate_latest(registry).decode()
    found = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(("slurmctl_nodes", "slurmctl_jobs", "slurmctl_job_", "slurmctl_slurm_up")):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                found.append((f"{sample.name}{{{labels}}}", sample.value))
    return found


def demand(query: str, tmp_path: Path, busy: int, waiting: list[int], partition: str = "h100-ondemand") -> float:
    """What Prometheus computes from the rendered query over the exporter's series (promtool's engine)."""
    if shutil.which("promtool") is None:
        pytest.fail("promtool is missing (deploy/local/apt-extras.txt installs prometheus)")
    series = exporter_series(tmp_path, partition, busy, waiting)
    expected = busy + max(len(waiting), max(waiting, default=0))
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": f"{v}x3"} for s, v in series],
        "promql_expr_test": [{"expr": query, "eval_time": "1m", "exp_samples": [{"labels": "{}", "value": expected}]}],
    }]}
    path = tmp_path / "query-test.yaml"
    path.write_text(yaml.safe_dump(test))
    out = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, ("the query over the exporter's series is not busy + max(jobs waiting for nodes, "
                                 f"the biggest one's nodes):\n{out.stdout}")
    return expected


def promql(query: str, tmp_path: Path, series: list[tuple[str, float]],
           expected: list[dict]) -> subprocess.CompletedProcess:
    """promtool's verdict on `query` over `series` (held for 3 minutes) against `expected` samples."""
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": [{"series": s, "values": f"{v}x3"} for s, v in series],
        "promql_expr_test": [{"expr": query, "eval_time": "1m", "exp_samples": expected}]}]}
    path = tmp_path / "outage-test.yaml"
    path.write_text(yaml.safe_dump(test))
    return subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_an_outage_is_no_data_and_no_pool_moves(tmp_path):
    """Slurm unreachable (the exporter says slurmctl_slurm_up 0 and drops the cluster series) or the
    exporter not scraped (no series at all): the query returns NO data, not 0; KEDA, told that no data
    is an error (ignoreNullValues false) and given no fallback, scales nothing, and the HPA keeps its
    count: an idle pool is not scaled up, a busy one not down, for an outage longer than the cooldown."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from slurmctl.config.models import load_site_config
    from slurmctl.ops.exporter import build

    from .fakes import ReplayRunner

    spec = _scaled_objects(tmp_path)["h100-ondemand"]
    [trigger] = spec["triggers"]
    query = trigger["metadata"]["query"]
    assert trigger["metadata"]["ignoreNullValues"] == "false"
    outage = [(None, 0)] * (2 * spec["cooldownPeriod"] // spec["pollingInterval"])
    assert run(spec, outage) == [0] * len(outage), "an outage scales an idle pool up"
    busy = NodeSetScaler(spec)
    busy.replicas, busy.last_active = 3, 0
    assert [busy.step(None, 3) for _ in outage] == [3] * len(outage), "an outage scales a busy pool down"
    # what a fallback would do (KEDA >= 2.19 applies it from zero): the idle pool gets a GPU VM
    with_fallback = {**spec, "fallback": {"failureThreshold": 3, "behavior": "currentReplicas", "replicas": 1}}
    assert run(with_fallback, outage[:4]) == [0, 0, 0, 1]
    site = load_site_config(REPO / "deploy" / "slinky" / "site.yaml").model_copy(update={"runs_root": str(tmp_path)})
    registry, _ = build(site, 15.0, ReplayRunner({}, returncode=1, stderr="Unable to contact slurm controller"))
    down = [(f"{s.name}{{}}", s.value) for f in text_string_to_metric_families(generate_latest(registry).decode())
            for s in f.samples if s.name.startswith(("slurmctl_nodes", "slurmctl_jobs", "slurmctl_slurm_up"))]
    assert down == [("slurmctl_slurm_up{}", 0.0)]
    for series in (down, [("other_metric{}", 1)]):
        out = promql(query, tmp_path, series, [])
        assert out.returncode == 0, f"the query gives data during an outage ({series}):\n{out.stdout}"
    # and data when Slurm answers, even with nothing to do (0 is a real answer then)
    assert promql(query, tmp_path, [("slurmctl_slurm_up{}", 1)], [{"labels": "{}", "value": 0}]).returncode == 0


def test_a_draining_node_that_still_runs_a_job_is_busy(tmp_path):
    query = _scaled_objects(tmp_path)["h100-spot"]["triggers"][0]["metadata"]["query"]
    series = [("slurmctl_slurm_up{}", 1), ('slurmctl_nodes{partition="h100-spot",state="draining"}', 2),
              ('slurmctl_nodes{partition="h100-spot",state="drained"}', 1)]
    out = promql(query, tmp_path, series, [{"labels": "{}", "value": 2}])
    assert out.returncode == 0, out.stdout


def run(spec: dict, timeline: list[tuple[float, int]]) -> list[int]:
    scaler = NodeSetScaler(spec)
    return [scaler.step(usage, ready) for usage, ready in timeline]


# --- the scenarios -------------------------------------------------------------------------------------
def test_scaled_objects_use_average_value_and_one_node_per_unit_of_demand(tmp_path):
    served = {name.split("{")[0] for name, _ in exporter_series(tmp_path, "h100-spot", 1, [2])}
    for pool, spec in _scaled_objects(tmp_path).items():
        [trigger] = spec["triggers"]
        # only series the exporter serves (Prometheus scrapes it: deploy/chart/prometheus-values.yaml)
        used = set(re.findall(r"\b([a-z_]+)\{", trigger["metadata"]["query"]))
        assert used and used <= served, used - served
        assert trigger["metricType"] == "AverageValue", pool  # Value multiplies by the READY pods
        assert (trigger["metadata"]["threshold"], trigger["metadata"]["activationThreshold"]) == ("1", "0"), pool
        assert (spec["idleReplicaCount"], spec["minReplicaCount"]) == (0, 1), pool


def test_three_jobs_pending_and_no_node_ready_yet_scales_up_to_three(tmp_path):
    spec = _scaled_objects(tmp_path)["h100-ondemand"]
    usage = demand(spec["triggers"][0]["metadata"]["query"], tmp_path, busy=0, waiting=[1, 1, 1])
    # poll 1: KEDA activates 0 -> 1; the VM boots for minutes, so no slurmd pod is ready for several polls
    assert run(spec, [(usage, 0)] * 4) == [1, 3, 3, 3]


def test_two_busy_of_six_scales_in_to_two_after_the_stabilization_window(tmp_path):
    spec = _scaled_objects(tmp_path)["h100-ondemand"]
    assert spec["maxReplicaCount"] == 6
    full = demand(spec["triggers"][0]["metadata"]["query"], tmp_path, busy=6, waiting=[])
    two = demand(spec["triggers"][0]["metadata"]["query"], tmp_path, busy=2, waiting=[])
    scaler = NodeSetScaler(spec)
    scaler.replicas, scaler.last_active = 6, 0
    assert scaler.step(full, 6) == 6
    steps = [scaler.step(two, 6) for _ in range(SCALE_DOWN_WINDOW // spec["pollingInterval"] + 1)]
    assert steps[0] == 6 and steps[-1] == 2, steps  # scale-in, after the window (the drained nodes go)


def test_drain_to_zero_after_the_cooldown(tmp_path):
    spec = _scaled_objects(tmp_path)["h100-spot"]
    query = spec["triggers"][0]["metadata"]["query"]
    busy = demand(query, tmp_path, busy=2, waiting=[], partition="h100-spot")
    idle = demand(query, tmp_path, busy=0, waiting=[], partition="h100-spot")
    scaler = NodeSetScaler(spec)
    scaler.replicas = 2
    assert [scaler.step(busy, 2) for _ in range(3)] == [2, 2, 2]
    polls = spec["cooldownPeriod"] // spec["pollingInterval"]
    drained = [scaler.step(idle, 2) for _ in range(polls)]
    window = SCALE_DOWN_WINDOW // spec["pollingInterval"]
    # the HPA keeps 2 for its stabilization window, then its minimum 1; KEDA idles the set to 0 once
    # cooldownPeriod has passed since the metric was last above activationThreshold
    assert drained == [2] * (window - 1) + [1] * (polls - window) + [0], drained


def test_jobs_more_nodes_never_start_ask_for_no_node(tmp_path):
    """Only never-startable jobs pending (every one of NEVER_STARTED_BY_NODES): no demand, the pool stays at 0."""
    spec = _scaled_objects(tmp_path)["h100-ondemand"]
    nothing = demand(spec["triggers"][0]["metadata"]["query"], tmp_path, busy=0, waiting=[])
    assert nothing == 0 and run(spec, [(nothing, 0)] * 4) == [0, 0, 0, 0]


def test_a_four_node_job_pending_alone_gets_four_nodes(tmp_path):
    spec = _scaled_objects(tmp_path)["h100-spot"]
    query = spec["triggers"][0]["metadata"]["query"]
    pending = demand(query, tmp_path, busy=0, waiting=[4], partition="h100-spot")
    # the job cannot start before all four nodes are up: nothing is busy meanwhile
    assert run(spec, [(pending, 0), (pending, 0), (pending, 2), (pending, 4)]) == [1, 4, 4, 4]
    running = demand(query, tmp_path, busy=4, waiting=[], partition="h100-spot")
    assert run(spec, [(pending, 0), (pending, 0), (running, 4)])[-1] == 4


def test_value_metric_type_is_the_broken_arithmetic():
    """The same models show the old `metricType: Value`: stuck at 1 with none ready, at the max once 2 are busy."""
    value = {"triggers": [{"metricType": "Value", "metadata": {"threshold": "1", "activationThreshold": "0"}}],
             "minReplicaCount": 1, "maxReplicaCount": 6, "idleReplicaCount": 0, "cooldownPeriod": 600,
             "pollingInterval": 30}
    assert run(value, [(3.0, 0)] * 4) == [1, 1, 1, 1]
    scaler = NodeSetScaler(value)
    scaler.replicas, scaler.last_active = 6, 0
    assert [scaler.step(2.0, 6) for _ in range(20)] == [6] * 20


# --- what GKE's control plane must reach ------------------------------------------------------------------
def runbook_control_plane_ports() -> dict[int, str]:
    """{port: who listens} from the RUNBOOK's 'Control plane -> pods' table."""
    text = (REPO / "deploy" / "RUNBOOK.md").read_text()
    section = text.split("### Control plane -> pods", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if re.match(r"\|\s*\d+\s*\|", line)]
    return {int(cells[0]): cells[1].strip() for cells in rows}


def test_every_port_the_control_plane_calls_is_open_and_listed():
    keda = json.loads(KEDA_FACTS.read_text())
    operator = json.loads(OPERATOR_FACTS.read_text())
    needed = {operator["webhookPort"]: "slurm-operator webhook", keda["metricsServerPortHttpsTarget"]: "KEDA metrics",
              keda["webhooksPort"]: "KEDA webhooks"}
    table = runbook_control_plane_ports()
    assert set(needed) == set(table), table
    tf = _terraform()
    cluster = _tf_resources(tf, "google_container_cluster")["ml"]
    opened = set()
    for rule in _tf_resources(tf, "google_compute_firewall").values():
        if rule["source_ranges"] == ["${var.master_ipv4_cidr_block}"] and rule["direction"] == "INGRESS":
            for allow in rule["allow"]:
                opened |= {int(p) for p in allow["ports"]}
            for pool in _tf_resources(tf, "google_container_node_pool").values():
                assert set(rule["target_tags"]) <= set(pool["node_config"][0]["tags"])
    assert cluster["private_cluster_config"][0]["master_ipv4_cidr_block"] == "${var.master_ipv4_cidr_block}"
    assert set(table) <= opened, f"not opened from the control plane: {set(table) - opened}"
