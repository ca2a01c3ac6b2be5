"""Live health on the real cluster, as alice, under a site config of the test's own
(SLURMCTL_SITE_CONFIG: the installed one plus `fabric: infiniband` on h100-ondemand and
`idle_action: drain` with an 8 s grace):

* a real 2-process gloo run with a deliberately slow data loader: while it runs, status names the
  transport each rank uses (gloo over TCP), warns that the partition has InfiniBand, and flags it
  input-bound with the fixes; the operator's exporter exports the same;
* a run that stops stepping while holding a GPU (at 0% by the nvidia-smi test stub): the watchdog
  sidecar drains it under the idle policy, the training checkpoints and acknowledges, the run stops
  (not requeued), and status says so, with the asked-vs-used time and GPUs of a finished run.

Both jobs run side by side (~1 minute together)."""

import json
import time

import yaml

from .conftest import REPO, give, slurmctl, wait_for_state, write_run

SLOW_LOADER = """
import os, time, torch, torch.distributed as dist
from slurmctl.runtime import Runtime

def batches():
    while True:
        time.sleep(0.05)          # a slow loader: 50 ms per batch
        yield torch.ones(64)

dist.init_process_group("gloo")
rt = Runtime.from_env()
started = time.time()
for step, batch in enumerate(rt.data(batches())):
    t = batch.sum().reshape(1)
    dist.all_reduce(t)            # the step: ~1 ms of work
    rt.log(step, loss=float(t.item()))
    if rt.should_stop() or time.time() - started > 150:
        rt.ack_drain(step)
        break
dist.destroy_process_group()
"""

GOES_IDLE = """
import time
from slurmctl.runtime import Runtime

rt = Runtime.from_env()
for step in range(3):
    rt.log(step, loss=1.0)
    time.sleep(0.2)
while not rt.should_stop():       # holds its GPU and does nothing, but still polls the drain flag
    time.sleep(0.2)
ck = rt.checkpoints.save(2, lambda d: (d / "state.txt").write_text("2"))
rt.ack_drain(2, ck.path)
"""


def _site(workdir) -> tuple[dict, str]:
    from slurmctl.config.locate import find_site_config

    site = yaml.safe_load(find_site_config().read_text())
    site["partitions"]["h100-ondemand"]["fabric"] = "infiniband"
    site["idle_action"], site["idle_grace"] = "drain", "8s"
    path = workdir / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    give(path)
    return {"SLURMCTL_SITE_CONFIG": str(path)}, str(path)


def test_transport_input_bound_and_idle_drain_while_alive(workdir, alice):
    env, _ = _site(workdir)
    fast_checks = {"SLURMCTL_HEALTH_INTERVAL": "1s", "SLURMCTL_WATCHDOG_CHECK": "1s"}
    io_spec = write_run(workdir / "io", {
        "name": "health-io", "entrypoint": "train.py", "partition": "h100-ondemand", "gpu_type": "h100",
        "gpus_per_node": 1, "procs_per_node": 2, "time_limit": "10m", "env": fast_checks}, {"train.py": SLOW_LOADER})
    # GPU utilisation from the documented nvidia-smi test stub (the GPUs here are fake device nodes): 0%
    stub = {"SLURMCTL_NVIDIA_SMI": str(REPO / "tests" / "fixtures" / "bin" / "nvidia-smi"),
            "SLURMCTL_STUB_GPU_UTIL": "0"}
    idle_spec = write_run(workdir / "idle", {
        "name": "health-idle", "entrypoint": "train.py", "partition": "h100-ondemand", "gpu_type": "h100",
        "gpus_per_node": 1, "time_limit": "10m", "env": {**fast_checks, **stub}}, {"train.py": GOES_IDLE})
    io_run = alice.slurmctl_json("submit", io_spec, env=env)["run_id"]
    idle_run = alice.slurmctl_json("submit", idle_spec, env=env)["run_id"]
    try:
        # 1. the gloo run: transport of both ranks, the fabric warning, input-bound
        deadline, live = time.monotonic() + 150, {}
        while time.monotonic() < deadline:
            status = alice.slurmctl_json("status", io_run, env=env)
            live = status.get("live_health") or {}
            if live.get("transports") == {"gloo-tcp": 2} and live.get("input_bound"):
                break
            assert status["state"] in {"PENDING", "RUNNING", "CONFIGURING"}, status
            time.sleep(2)
        assert live.get("transports") == {"gloo-tcp": 2} and live["ranks_reporting"] == 2, live
        assert live["fallback"] and live["fabric"] == "infiniband"
        # 50 ms waits vs ~1 ms of work plus rt.log's fsyncs (a loaded disk makes those slow)
        assert 0.25 <= live["input_wait_share"] <= 1.0, live
        print(f"slowest rank waited {live['input_wait_share']:.0%} of its step time for data")
        human = alice.slurmctl("status", io_run, env=env).stdout
        assert "Health: Network: gloo over TCP on 2 rank(s)." in human, human
        assert "gloo over TCP although partition h100-ondemand has InfiniBand" in human
        assert "input-bound: rank" in human and "num_workers" in human and "pin_memory" in human
        assert "health: network fallback" in human  # the progress line's one-word health
        # the operator's exporter (root) names the same from alice's run dir
        metrics = slurmctl("exporter", "--once", user="root", env=env).stdout
        def series(name: str, *labels: str) -> float:  # alice's series of this run (labels in any order)
            wanted = (f'run="{io_run}"', 'user="alice"', *labels)
            line = next(line for line in metrics.splitlines()
                        if line.startswith(name + "{") and all(label in line for label in wanted))
            return float(line.split()[-1])

        assert series("slurmctl_run_network_ranks", 'transport="gloo-tcp"') == 2.0, metrics
        assert series("slurmctl_run_network_fallback") == 1.0
        assert series("slurmctl_run_input_wait_ratio") > 0.25
        slurmctl("cancel", io_run, check=False, env=env)  # drain: the training acknowledges and stops

        # 2. the idle run: drained by the site's idle policy through the watchdog's drain path
        status = wait_for_state(idle_run, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=150)
        run_dir = alice.runs_root / idle_run
        request = json.loads((run_dir / "drain.request").read_text())
        assert request["reason"] == "idle", request  # no step, or its GPU at 0%: whichever passed 8 s first
        assert "no training step for" in request["summary"] or "under 5% busy" in request["summary"]
        ends = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()
                if '"end"' in line]
        assert ends[-1]["outcome"] == "idle" and ends[-1]["action"] == "stop", ends
        assert status["state"] == "COMPLETED" and (run_dir / "drain.ack").exists()
        idle_state = json.loads((run_dir / "health" / "idle.json").read_text())
        assert idle_state["state"] == "drain-requested" and idle_state["action"] == "drain"
        notes = "\n".join(status["health_notes"])
        assert "Idle allocation drained by the site's policy (idle_action: drain): " in notes
        assert "Asked 10m00s, used " in notes and "a tighter limit (time_limit: 5m in run.yaml)" in notes, notes
        assert "Used 0 of 1 GPUs on its first node" in notes
        log = (run_dir / "logs" / f"{status['job_id']}.out").read_text()
        assert "IDLE: " in log and "idle policy: drain after 8 s" in log
    finally:
        slurmctl("cancel", io_run, "--now", check=False, env=env)
        slurmctl("cancel", idle_run, "--now", check=False, env=env)
