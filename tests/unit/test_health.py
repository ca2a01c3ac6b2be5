"""Live health inside the job (slurmctl/runtime/health.py) and in words (slurmctl/observe/health.py):
NCCL's transport from real log lines of public issue threads, gloo's from a real 2-process group,
the data-wait share of a real slow iterator, and the idle policy with the nvidia-smi test stub."""

import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

import pytest

from slurmctl.observe.health import apply_live_health, efficiency, read_live
from slurmctl.rundir import Run
from slurmctl.runtime import Runtime
from slurmctl.runtime.health import (
    DataMeter,
    IdleMonitor,
    IdlePolicy,
    RankHealth,
    gpu_utilisation,
    nccl_transport,
    transport_class,
)
from slurmctl.runtime.policy import STOP, decide
from slurmctl.slurm.records import Job

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASES = json.loads((FIXTURES / "nccl_transport" / "cases.json").read_text())["cases"]
STUB_SMI = str(FIXTURES / "bin" / "nvidia-smi")


@pytest.mark.parametrize("case", CASES, ids=[c.get("file") or c["url"].split("github.com/")[1] for c in CASES])
def test_nccl_transport_of_real_log_lines(case):
    lines = case.get("lines") or (FIXTURES / "nccl_transport" / case["file"]).read_text().splitlines()
    found = nccl_transport(lines, pid=case["pid"], host=case["host"])
    assert found is not None and (found["network"], found["transport"]) == (case["network"], case["transport"])
    assert f":{case['pid']}:" in found["evidence"]


def test_a_rank_reads_only_its_own_lines_behind_launcher_prefixes():
    case = next(c for c in CASES if "nccl-tests/issues/185" in c["url"])
    prefixed = [f"[rank{i % 2}]:{line}" for i, line in enumerate(case["lines"])]  # torchrun --tee
    assert nccl_transport(prefixed, pid=460770)["network"] == "IB"
    assert nccl_transport(["[3] " + ln for ln in case["lines"]], pid=2152176)["network"] == "IB"  # srun --label
    assert nccl_transport(case["lines"], pid=12345) is None  # another process's lines say nothing about this one
    assert nccl_transport(case["lines"], pid=460770, host="dgxh100-3") is None  # same pid, other host
    socket_then_ib = ["h:7:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
                      "h:7:7 [0] NCCL INFO Using network IB"]
    assert nccl_transport(socket_then_ib, pid=7)["network"] == "IB"  # 'Using network' outranks a channel line
    no_device = "h:7:7 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:192.0.2.2<0>"  # NCCL 2.28 after "No device found"
    assert nccl_transport([no_device], pid=7) is None


def test_transport_classes_are_bounded():
    assert [transport_class(n) for n in ("Socket", "IB", "IBext_v8", "AWS Libfabric", "GPUDirectTCPX",
                                         "FasTrak", "Foo")] == ["socket", "ib", "ib", "efa", "tcpx", "tcpx", "other"]


GLOO_RANK = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    from slurmctl.runtime import Runtime
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1],  # no port to race for
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rt = Runtime.from_env(handle_sigterm=False)
    t = torch.ones(1)
    dist.all_reduce(t)
    rt.log(1, loss=float(t.item()))
    rt.health.flush()
    dist.destroy_process_group()
""")


def test_a_real_gloo_group_reports_gloo_over_tcp(tmp_path):
    procs = []
    for rank in range(2):
        # No SLURM_JOB_ID: the local cluster's prolog ends processes of other jobs on this machine.
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "SLURMCTL_RUN_DIR": str(tmp_path),
               "GLOO_SOCKET_IFNAME": "lo"}
        procs.append(subprocess.Popen([sys.executable, "-c", GLOO_RANK, str(tmp_path / "store")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    records = [json.loads((tmp_path / "health" / f"rank-{r}.json").read_text()) for r in range(2)]
    assert [r["transport"]["transport"] for r in records] == ["gloo-tcp", "gloo-tcp"]
    assert records[0]["transport"]["backend"] == "gloo" and records[1]["world_size"] == 2
    live = read_live(Run(tmp_path.name, tmp_path), None)
    assert live.transports == {"gloo-tcp": 2} and live.notes[0] == "Network: gloo over TCP on 2 rank(s)."


def _slow(items, delay):
    for i in range(items):
        time.sleep(delay)
        yield i


def test_data_wait_share_of_a_slow_and_a_fast_loader():
    slow = DataMeter()
    for _ in slow.wrap(_slow(12, 0.02)):
        time.sleep(0.002)
    fast = DataMeter()
    for _ in fast.wrap(range(12)):
        time.sleep(0.02)
    assert slow.totals()["wait_share"] > 0.8 and fast.totals()["wait_share"] < 0.05
    assert slow.totals()["batches"] == 11  # the first batch (worker start-up) is counted apart
    assert slow.take_window()["batches"] == 11 and slow.take_window()["batches"] == 0


def test_runtime_data_writes_the_rank_record_and_status_flags_input_bound(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURMCTL_HEALTH_INTERVAL", "0.05s")
    rt = Runtime(run_dir=tmp_path)
    for step, _batch in enumerate(rt.data(_slow(15, 0.05))):
        if step % 5 == 0:  # rt.log writes files (fsync): a loaded disk must not turn the test into "busy"
            rt.log(step, loss=1.0)
    rt.health.flush()
    record = json.loads((tmp_path / "health" / "rank-0.json").read_text())
    assert record["job_id"] == "77" and record["data"]["wait_share"] > 0.5
    live = read_live(Run(tmp_path.name, tmp_path), 77)
    assert live.input_bound and live.input_wait_rank == 0
    assert any("input-bound" in n and "num_workers" in n for n in live.notes)
    assert read_live(Run(tmp_path.name, tmp_path), 78).input_wait_share is None  # another job's record


class _Site:
    def __init__(self, fabric):
        self.partitions = {"h100": type("P", (), {"fabric": fabric})()}


def _rank_file(run_dir: Path, rank: int, transport: dict, job_id="9"):
    (run_dir / "health").mkdir(exist_ok=True)
    (run_dir / "health" / f"rank-{rank}.json").write_text(json.dumps(
        {"rank": rank, "world_size": 2, "job_id": job_id, "transport": transport, "data": {}}))


def test_sockets_on_an_infiniband_partition_is_a_warning_with_the_fix(tmp_path):
    case = next(c for c in CASES if "nccl/issues/1267" in c["url"])
    sock = nccl_transport(case["lines"], pid=case["pid"])
    _rank_file(tmp_path, 0, sock)
    _rank_file(tmp_path, 1, {"backend": "nccl", "network": "IB", "transport": "ib", "evidence": "x"})
    run = Run(tmp_path.name, tmp_path)
    live = read_live(run, 9, "h100", _Site("infiniband"))
    assert live.fallback and live.transports == {"socket": 1, "ib": 1}
    warning = next(n for n in live.notes if n.startswith("WARNING: NCCL is using sockets"))
    assert "1 rank(s)" in warning and "InfiniBand" in warning and "NCCL_IB_DISABLE" in warning
    assert not read_live(run, 9, "h100", _Site("ethernet")).fallback
    assert not read_live(run, 9, "h100", _Site(None)).fallback


def test_efficiency_of_a_finished_run():
    job = Job(job_id=5, name="r", state="COMPLETED", elapsed_seconds=47 * 60, time_limit_seconds=8 * 3600)
    lines = efficiency(job)
    assert lines[0].startswith("Asked 8h00m, used 47m00s: a tighter limit (time_limit: 1h in run.yaml)")
    means = {"0": 80.0, "1": 71.5, **{str(i): 0.0 for i in range(2, 8)}}
    live = type("L", (), {"idle": {"gpu_utilisation_mean": means}})
    assert "Used 2 of 8 GPUs" in efficiency(job, live=live)[1]
    running = Job(job_id=5, name="r", state="RUNNING", elapsed_seconds=60, time_limit_seconds=3600)
    assert efficiency(running) == []
    assert efficiency(Job(job_id=5, name="r", state="COMPLETED", elapsed_seconds=3000, time_limit_seconds=3600)) == []


def test_gpu_utilisation_through_the_stub_binary(monkeypatch):
    monkeypatch.setenv("SLURMCTL_STUB_GPU_UTIL", "3,90,40")
    assert gpu_utilisation(["0", "1"], command=STUB_SMI) == {"0": 3.0, "1": 90.0}
    assert gpu_utilisation(["0"], command="/nonexistent/nvidia-smi") is None
    assert gpu_utilisation([], command=STUB_SMI) is None


def test_idle_gpus_drain_under_drain_and_only_warn_under_warn(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMCTL_STUB_GPU_UTIL", "0")
    util = lambda gpus: gpu_utilisation(gpus, command=STUB_SMI)  # noqa: E731
    drain = IdleMonitor(IdlePolicy("drain", 10), tmp_path, "9", gpus=["0", "1"], utilisation=util)
    assert drain.check(100.0, last_progress=99.0) is None  # idle GPUs, but within the grace
    assert drain.check(111.0, last_progress=110.0) == "drain"  # steps, but every GPU idle for 11 s
    assert drain.check(120.0, last_progress=119.0) is None  # asked once
    state = json.loads((tmp_path / "health" / "idle.json").read_text())
    assert state["state"] == "drain-requested" and state["gpu_utilisation_mean"] == {"0": 0.0, "1": 0.0}

    monkeypatch.setenv("SLURMCTL_STUB_GPU_UTIL", "60")
    busy = IdleMonitor(IdlePolicy("drain", 10), tmp_path, "9", gpus=["0"], utilisation=util)
    assert busy.check(100.0, 99.0) is None and busy.check(200.0, 199.0) is None  # busy GPUs and steps
    warn = IdleMonitor(IdlePolicy("warn", 10), tmp_path, "9", gpus=["0"], utilisation=lambda g: None)
    assert warn.check(100.0, 50.0) is None  # no step for 50 s: idle, but warn only
    live = read_live(Run(tmp_path.name, tmp_path), 9)
    assert live.idle["state"] == "idle" and any(n.startswith("WARNING: idle allocation: no training step")
                                                for n in live.notes)
    assert IdleMonitor(IdlePolicy("drain", 1), tmp_path, "9", gpus=[]).check(100.0, 0.0) is None  # no GPUs held
    starting = IdleMonitor(IdlePolicy("drain", 10), tmp_path, "9", gpus=["0"], utilisation=lambda g: None)
    assert starting.check(100.0, 50.0, progressed=False, startup=60) is None  # still within the start-up window
    assert starting.check(111.0, 50.0, progressed=False, startup=60) == "drain"


def test_watchdog_drains_an_idle_allocation_through_its_drain_path(tmp_path):
    from slurmctl.runtime.watchdog import Settings, StepReader, Watchdog

    (tmp_path / "heartbeat.json").write_text(json.dumps({"step": 3, "time": 0}))
    clock = iter([1000.0, 1000.0, 1006.0, 1012.0]).__next__
    idle = IdleMonitor(IdlePolicy("drain", 10), tmp_path, "9", gpus=["0"], utilisation=lambda g: None)
    dog = Watchdog(Settings(run_dir=tmp_path, reader=StepReader("step", tmp_path / "heartbeat.json"),
                            stall_seconds=900, startup_seconds=900, job_id="9"), clock=clock, idle=idle)
    (tmp_path / "heartbeat.json").write_text(json.dumps({"step": 4, "time": 0}))  # a step at t=1000, then none
    assert dog.check() is None and dog.check() is None and not (tmp_path / "drain.request").exists()
    assert dog.check() is None
    request = json.loads((tmp_path / "drain.request").read_text())
    assert request["reason"] == "idle" and "no training step for 12 s" in request["summary"]
    assert dog.drain_since == 1012.0


def test_an_idle_drain_stops_the_run_and_is_not_requeued():
    d = decide(exit_code=0, drain={"reason": "idle"}, acked=True, checkpoint_step=40, previous_ends=[],
               max_restarts=3)
    assert (d.action, d.outcome) == (STOP, "idle") and "idle policy" in d.reason


def test_status_gets_the_notes_and_the_health_line(tmp_path):
    from slurmctl.observe.status import RunStatus

    _rank_file(tmp_path, 0, {"backend": "gloo", "network": "TCP", "transport": "gloo-tcp", "evidence": "e"})
    status = RunStatus("r", str(tmp_path), 9, "RUNNING", "h", "a", partition="h100")
    job = Job(job_id=9, name="r", state="RUNNING", start_time=datetime.now())
    apply_live_health(status, Run(tmp_path.name, tmp_path), job, _Site("infiniband"))
    assert status.health.startswith("network fallback") and status.live_health["fallback"]
    assert any("gloo over TCP although partition h100 has InfiniBand" in n for n in status.health_notes)


def test_rank_health_survives_an_unwritable_run_dir(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    health = RankHealth(blocked, 0, 1, job_id="1", interval=0)
    health.tick()
    assert health.disabled


def test_site_fabric_and_idle_policy_are_validated_with_the_field_named(tmp_path):
    from slurmctl.config.models import load_site_config
    from slurmctl.errors import ConfigError

    base = ("cluster: c\npartitions:\n  h100: {capacity: ondemand, gpu_type: h100, gpus_per_node: 8, "
            "price_per_gpu_hour: 1, fabric: %s}\nidle_action: %s\nidle_grace: %s\n")
    path = tmp_path / "site.yaml"
    path.write_text(base % ("infiniband", "drain", "20m"))
    site = load_site_config(path)
    assert site.partitions["h100"].fabric == "infiniband" and (site.idle_action, site.idle_grace) == ("drain", "20m")
    for values, field in ((("quantum", "warn", "1h"), "partitions.h100.fabric"),
                          (("ethernet", "kill", "1h"), "idle_action"), (("ethernet", "warn", "soon"), "idle_grace")):
        path.write_text(base % values)
        with pytest.raises(ConfigError) as err:
            load_site_config(path)
        assert f"`{field}`" in err.value.message


def test_a_finished_runs_status_shows_its_data_wait_over_the_whole_run(tmp_path):
    """What the ranks' records say of the whole run stays in status once the job ended (its transport does not)."""
    from slurmctl.observe.status import RunStatus

    (tmp_path / "health").mkdir()
    for rank, (wait, busy) in enumerate([(30.0, 70.0), (5.0, 95.0)]):
        window = {"batches": 3, "wait_seconds": 0.0, "step_seconds": 1.0, "wait_share": 0.0}  # the last flush
        (tmp_path / "health" / f"rank-{rank}.json").write_text(json.dumps({
            "rank": rank, "world_size": 2, "job_id": "9", "transport": {"transport": "socket", "network": "Socket"},
            "data": {"batches": 400, "wait_seconds": wait, "step_seconds": wait + busy,
                     "wait_share": wait / (wait + busy), "window": window}}))
    status = RunStatus("r", str(tmp_path), 9, "COMPLETED", "h", "a", partition="h100")
    job = Job(job_id=9, name="r", state="COMPLETED", elapsed_seconds=600, time_limit_seconds=900)
    apply_live_health(status, Run(tmp_path.name, tmp_path), job, _Site("infiniband"))
    said = [n for n in status.health_notes if "Data loading over the run" in n]
    assert said and "rank 0 spent 30% of its step time waiting" in said[0] and "mean over ranks 18%" in said[0]
    # whether to cache its datasets is the run's to say (status's cache_suggestion knows what it cached)
    assert said[0].startswith("WARNING: input-bound") and "num_workers" in said[0] and "cache: node" not in said[0]
    assert not any(n.startswith(("Network:", "WARNING: NCCL")) for n in status.health_notes)  # history, not news


def test_the_end_of_a_pass_over_the_data_reaches_the_record(tmp_path, monkeypatch):
    """A pass shorter than the flush interval (30 s) still leaves its totals for status once it ended."""
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    rt = Runtime(run_dir=tmp_path)
    assert list(rt.data(range(8))) == list(range(8))
    record = json.loads((tmp_path / "health" / "rank-0.json").read_text())
    assert record["data"]["batches"] == 7  # the first batch (the loader's start-up) is counted apart
