"""The exporter: one Slurm snapshot per interval, cluster gauges, run gauges from the run dir.

SQUEUE/SINFO below were captured on 2026-11-29 from deploy/local (Slurm 22.05.8) with the exact
`-O` formats SlurmClient.queue_snapshot/node_usage use; the h100-3 row of SINFO was edited by hand to
the state and reason Slurm gives a node whose prolog failed ("drained", "Prolog error").
"""

import json
import time
from datetime import datetime

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurmctl.config.models import SiteConfig
from slurmctl.fsutil import append_jsonl
from slurmctl.ops.exporter import build, drain_cause, node_state, reason_label
from slurmctl.ops.run_sample import step_seconds
from slurmctl.rundir import run_id_from_comment
from slurmctl.runtime.checkpoint import CheckpointManager
from slurmctl.slurm.client import SEP, SlurmClient
from slurmctl.slurm.parsing import field_separator, record_end

from .fakes import TEST_SEAL, ReplayRunner, squeue_output

S = SEP
FS, END = field_separator(TEST_SEAL), record_end(TEST_SEAL)
SQUEUE = squeue_output(
    ["27", "PENDING", "JobHeldUser", "h100-ondemand,h100-spot", "2",
     "cpu=2,mem=2000M,node=2,billing=2,gres/gpu=4,gres/gpu:h100=4", "2026-11-29T13:29:20", "N/A", "1:00:00", "root",
     "normal", "(null)", "N/A", "N/A", "slurmctl:fixture-20261129-0008"],
    ["28", "PENDING", "Priority", "l4-dev", "1", "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=1", "2026-11-29T13:29:20",
     "N/A", "10:00", "root", "normal", "(null)", "N/A", "N/A", "(null)"],
    ["29", "RUNNING", "None", "h100-ondemand", "1", "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=2,gres/gpu:h100=2",
     "2026-11-29T13:29:23", "2026-11-29T13:29:24", "10:00", "root", "normal", "(null)", "N/A", "N/A",
     "slurmctl:fixture-20261129-0009"],
)
SINFO = (
    f"h100-1{S}h100-ondemand{S}gpu:h100:8{S}gpu:h100:2(IDX:0-1){S}mixed{S}none{S}\n"
    f"h100-1{S}h100-spot{S}gpu:h100:8{S}gpu:h100:2(IDX:0-1){S}mixed{S}none{S}\n"
    f"h100-2{S}h100-ondemand{S}gpu:h100:8{S}gpu:h100:0(IDX:N/A){S}idle{S}none{S}\n"
    f"h100-2{S}h100-spot{S}gpu:h100:8{S}gpu:h100:0(IDX:N/A){S}idle{S}none{S}\n"
    f"h100-3{S}h100-ondemand{S}gpu:h100:8{S}gpu:h100:0(IDX:N/A){S}drained{S}Prolog error{S}\n"
    f"h100-3{S}h100-spot{S}gpu:h100:8{S}gpu:h100:0(IDX:N/A){S}drained{S}Prolog error{S}\n"
    f"l4-1{S}l4-dev*{S}gpu:l4:1{S}gpu:l4:1(IDX:0){S}mixed{S}none{S}\n"
)


def site(tmp_path) -> SiteConfig:
    return SiteConfig.model_validate({
        "cluster": "test", "runs_root": str(tmp_path),
        "partitions": {
            "h100-ondemand": {"capacity": "ondemand", "gpu_type": "h100", "gpus_per_node": 8,
                              "price_per_gpu_hour": 3.9},
            "h100-spot": {"capacity": "spot", "gpu_type": "h100", "gpus_per_node": 8, "price_per_gpu_hour": 1.4},
            "l4-dev": {"capacity": "dev", "gpu_type": "l4", "gpus_per_node": 1, "price_per_gpu_hour": 0.35},
        }})


def scrape(registry) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of one scrape."""
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make(tmp_path, squeue=SQUEUE, sinfo=SINFO, interval=15.0, **runner_kwargs):
    runner = ReplayRunner({"squeue": squeue, "sinfo": sinfo}, **runner_kwargs)
    registry, collector = build(site(tmp_path), interval, runner)
    clock = Clock()
    collector.cache.clock = clock
    return runner, registry, clock


def test_snapshot_argv_are_one_lean_squeue_and_one_sinfo():
    runner = ReplayRunner({"squeue": SQUEUE, "sinfo": SINFO})
    jobs, nodes = SlurmClient(runner).queue_snapshot(), SlurmClient(runner).node_usage()
    assert runner.calls == [
        ["squeue", "-h", "-O", ",".join([*(f"{f}:{FS}" for f in ["JobID", "State", "Reason", "Partition", "NumNodes",
                                                                 "tres-alloc", "SubmitTime", "StartTime",
                                                                 "TimeLimit", "UserName", "QOS", "Dependency",
                                                                 "tres-per-node", "ArrayTaskID"]),
                                              f"Comment:{END}"])],
        ["sinfo", "-h", "-N", "-O", ",".join(f"{f}:{SEP}" for f in ["NodeList", "Partition", "Gres", "GresUsed",
                                                                  "StateLong", "Reason"])],
    ]
    held, dev, running = jobs
    assert held.partitions == ["h100-ondemand", "h100-spot"] and held.gpus == 4 and held.num_nodes == 2
    assert run_id_from_comment(held.comment) == "fixture-20261129-0008" and held.start_time is None
    assert dev.gpus == 1 and run_id_from_comment(dev.comment) is None and dev.comment == ""
    assert running.state == "RUNNING" and running.reason == ""
    assert running.start_time == datetime(2026, 11, 29, 13, 29, 24)
    l4 = [n for n in nodes if n.name == "l4-1"][0]
    assert (l4.partition, l4.gpu_type, l4.gpus, l4.gpus_used) == ("l4-dev", "l4", 1, 1)
    assert [n.reason for n in nodes if n.name == "h100-3"] == ["Prolog error", "Prolog error"]


def test_many_scrapes_in_one_interval_ask_slurm_once(tmp_path):
    runner, registry, clock = make(tmp_path)
    for _ in range(20):
        scrape(registry)
        clock.now += 0.5  # 10 s of scraping every 0.5 s, inside one 15 s interval
    # jobs, nodes, partitions' MaxTime, their AllowQos and MaxNodes, the QOS limits, the week's node
    # events and failed attempts (GPU-hours lost per node)
    first = ["squeue", "sinfo", "sinfo", "scontrol", "sacctmgr", "sacctmgr", "sacct"]
    assert [c[0] for c in runner.calls] == first
    clock.now += 5.1
    samples = scrape(registry)
    # the QOS limits and the lost GPU-hours are asked every few minutes, not every interval
    assert [c[0] for c in runner.calls] == [*first, "squeue", "sinfo", "sinfo", "scontrol"]
    assert value(samples, "slurmctl_slurm_commands_total", command="squeue") == 2


def test_cluster_gauges(tmp_path):
    _, registry, _ = make(tmp_path)
    s = scrape(registry)
    assert value(s, "slurmctl_slurm_up") == 1
    assert value(s, "slurmctl_jobs", partition="h100-ondemand", state="PENDING") == 1
    assert value(s, "slurmctl_jobs", partition="h100-ondemand", state="RUNNING") == 1
    assert value(s, "slurmctl_jobs_pending", partition="l4-dev", reason="Priority") == 1
    assert value(s, "slurmctl_gpus", partition="h100-ondemand", gpu_type="h100", state="allocated") == 2
    assert value(s, "slurmctl_gpus", partition="h100-ondemand", gpu_type="h100", state="idle") == 14
    assert value(s, "slurmctl_gpus", partition="h100-ondemand", gpu_type="h100", state="down") == 8
    assert value(s, "slurmctl_gpus", partition="l4-dev", gpu_type="l4", state="idle") == 0
    # nodes shared by two partitions count once cluster-wide
    assert value(s, "slurmctl_cluster_gpus", gpu_type="h100", state="idle") == 14
    assert value(s, "slurmctl_nodes", partition="h100-spot", state="drained") == 1
    assert value(s, "slurmctl_node_unavailable_info", node="h100-3", cause="prolog") == 1
    assert value(s, "slurmctl_cost_burn_dollars_per_hour", partition="h100-ondemand") == pytest.approx(2 * 3.9)
    # job 29 started 1 s after submit: one observation in the <= 60 s bucket, once only
    assert value(s, "slurmctl_queue_wait_seconds_bucket", partition="h100-ondemand", le="60") == 1
    assert value(scrape(registry), "slurmctl_queue_wait_seconds_count", partition="h100-ondemand") == 1


def test_slurm_down_reports_up_zero_and_no_stale_series(tmp_path):
    runner, registry, clock = make(tmp_path, returncode=1,
                                   stderr="squeue: error: Unable to contact slurm controller (connect failure)")
    s = scrape(registry)
    clock.now += 1
    scrape(registry)
    assert value(s, "slurmctl_slurm_up") == 0
    assert value(s, "slurmctl_slurm_command_errors_total", command="squeue") == 1
    assert not any(name == "slurmctl_gpus" for name, _ in s)
    assert len(runner.calls) == 1  # a failing Slurm is not asked more often than a healthy one


def write_active_run(tmp_path, run_id="fixture-20261129-0009", now=None):
    now = now or time.time()
    run = tmp_path / "root" / run_id  # <runs_root>/<job's user>/<run id>
    (run / "checkpoints").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": run_id}))
    (run / "run.yaml").write_text("name: fixture\nentrypoint: train.py\npartition: [h100-ondemand, h100-spot]\n"
                                  "checkpoint: {interval_steps: 10}\n")
    for step in range(20, 41):  # a previous attempt's steps, then a resume from step 30
        append_jsonl(run / "metrics.jsonl", {"step": step, "time": now - 100 + step, "loss": 1.0})
    for step in range(31, 51):
        append_jsonl(run / "metrics.jsonl", {"step": step, "time": now - 50 + (step - 31) * 2.0, "loss": 0.5})
    (run / "heartbeat.json").write_text(json.dumps({"step": 50, "time": now - 12, "job_id": "29", "world_size": 2,
                                                    "metrics": {"step": 50, "time": now - 12, "loss": 0.25}}))
    CheckpointManager(run / "checkpoints").save(40, lambda d: (d / "state.pt").write_text("x"))
    (run / "checkpoints" / "checkpoint-50.tmp").mkdir()  # a save in progress
    for event, when in (("submitted", now - 200), ("start", now - 100), ("end", now - 55), ("start", now - 51)):
        append_jsonl(run / "attempts.jsonl", {"event": event, "job_id": 29, "time": when})
    (run / "drain.request").write_text(json.dumps({"reason": "watchdog", "job_id": "29", "time": now}))
    (run / "watchdog" / "29-1795950000").mkdir(parents=True)  # a hung step the watchdog ended earlier
    return run


def test_run_gauges_from_the_run_directory(tmp_path):
    write_active_run(tmp_path)
    (tmp_path / "root" / "ended-20261129-0001").mkdir()  # no active job: must not appear
    _, registry, _ = make(tmp_path)
    s = scrape(registry)
    run = "fixture-20261129-0009"
    info = [labels for name, labels in s if name == "slurmctl_run_info"]
    assert info == [(("job_id", "29"), ("partition", "h100-ondemand"), ("run", run), ("state", "RUNNING"),
                     ("user", "root"))]
    assert value(s, "slurmctl_run_step", user="root", run=run) == 50
    assert value(s, "slurmctl_run_loss", user="root", run=run) == 0.25
    assert value(s, "slurmctl_run_step_seconds", user="root", run=run) == pytest.approx(2.0)  # after the resume only
    assert value(s, "slurmctl_run_checkpoint_step", user="root", run=run) == 40
    assert value(s, "slurmctl_run_checkpoint_interval_seconds", user="root", run=run) == pytest.approx(20.0)
    assert 0 <= value(s, "slurmctl_run_checkpoint_age_seconds", user="root", run=run) < 30
    assert 0 <= value(s, "slurmctl_run_checkpoint_save_in_progress_seconds", user="root", run=run) < 30
    assert value(s, "slurmctl_run_starts", user="root", run=run) == 2
    assert value(s, "slurmctl_run_watchdog_interventions", user="root", run=run) == 2
    assert value(s, "slurmctl_run_drain_requested", user="root", run=run) == 1
    assert value(s, "slurmctl_run_drain_acknowledged", user="root", run=run) == 0
    assert value(s, "slurmctl_run_cost_burn_dollars_per_hour", user="root", run=run) == pytest.approx(7.8)
    assert value(s, "slurmctl_run_attempt_start_timestamp_seconds", user="root", run=run) == \
        datetime(2026, 11, 29, 13, 29, 24).timestamp()
    # the held job's run has no run directory here, so it is not exported
    assert not any(dict(labels).get("run") == "fixture-20261129-0008" for _, labels in s)


def test_pending_job_with_room_in_another_acceptable_partition(tmp_path):
    spot_only = squeue_output(["31", "PENDING", "Priority", "h100-spot", "1", "cpu=1,gres/gpu=4", "2026-11-29T10:00:00",
                               "N/A", "10:00", "root", "normal", "(null)", "N/A", "N/A",
                               "slurmctl:fixture-20261129-0009"])
    write_active_run(tmp_path)
    _, registry, _ = make(tmp_path, squeue=spot_only)
    s = scrape(registry)
    # run.yaml accepts h100-ondemand, where h100-1 has 6 and h100-2 has 8 free GPUs
    assert value(s, "slurmctl_pending_capacity_elsewhere_oldest_seconds", partition="h100-spot") > 3 * 3600 - 60
    _, registry, _ = make(tmp_path, squeue=spot_only.replace("gres/gpu=4", "gres/gpu=16"))
    assert value(scrape(registry), "slurmctl_pending_capacity_elsewhere_oldest_seconds", partition="h100-spot") is None


def test_small_helpers():
    assert [node_state(s) for s in ("idle*", "mixed-", "down~", "drained")] == ["idle", "mixed", "down", "drained"]
    assert drain_cause("Prolog error", "drained") == "prolog"
    assert drain_cause("", "down*") == "not_responding"
    assert drain_cause("maintenance by bob", "drained") == "admin"
    assert [reason_label(r) for r in ("Priority", "ReqNodeNotAvail, UnavailableNodes:h100-3", "SomethingNew", "")] == \
        ["Priority", "ReqNodeNotAvail", "other", "none"]
    assert step_seconds([{"step": 1, "time": 10.0}]) is None
    assert step_seconds([{"step": s, "time": s * 3.0} for s in range(100)]) == pytest.approx(3.0)


def test_run_labels_come_only_from_valid_run_ids_of_the_jobs_user(tmp_path):
    """A comment like `slurmctl:..` or a planted symlink creates no series and reads no path."""
    import os

    hostile = "".join(
        f"{n}{S}RUNNING{S}None{S}h100-ondemand{S}1{S}cpu=1,gres/gpu=2{S}2026-11-29T13:29:23{S}2026-11-29T13:29:24"
        f"{S}root{S}{comment}{S}\n"
        for n, comment in ((40, "slurmctl:.."), (41, "slurmctl:../root"), (42, "slurmctl:fixture-20261129-0009/..")))
    write_active_run(tmp_path)
    (tmp_path / "heartbeat.json").write_text(json.dumps({"step": 999, "time": time.time()}))  # the root's parent
    _, registry, _ = make(tmp_path, squeue=hostile)
    runs = {dict(labels).get("run") for name, labels in scrape(registry) if name == "slurmctl_run_info"}
    assert runs == set()
    # the run dir swapped for a symlink to someone else's directory: not followed
    real = tmp_path / "root" / "fixture-20261129-0009"
    os.rename(real, tmp_path / "moved")
    real.symlink_to(tmp_path / "moved")
    _, registry, _ = make(tmp_path)
    assert not any(name == "slurmctl_run_step" for name, _ in scrape(registry))


def test_unparsable_queue_lines_are_counted_not_fatal(tmp_path):
    broken = SQUEUE + f"x{S}piece of a job name after a newline{S}\n"
    _, registry, _ = make(tmp_path, squeue=broken)
    s = scrape(registry)
    assert value(s, "slurmctl_slurm_unparsed_lines_total", query="queue_snapshot") == 1
    assert value(s, "slurmctl_slurm_up") == 1


def test_a_node_our_checks_drained_has_its_check_as_a_series_and_others_have_none(tmp_path):
    ours = "slurmctl:[node_problem] shm: /dev/shm has 3 MB free, needs 256 MB"
    sinfo = SINFO.replace("Prolog error", ours)
    _, registry, _ = make(tmp_path, sinfo=sinfo)
    s = scrape(registry)
    assert value(s, "slurmctl_node_health_check_failed", node="h100-3", check="shm") == 1
    assert value(s, "slurmctl_node_unavailable_info", node="h100-3", cause="checks") == 1
    _, registry, _ = make(tmp_path)  # Slurm's own "Prolog error" is not ours
    assert value(scrape(registry), "slurmctl_node_health_check_failed", node="h100-3", check="shm") is None
    assert drain_cause(ours, "drained") == "checks" and drain_cause("slurmctl prolog: old", "drained") == "prolog"


def test_a_health_jobs_configuration_error_is_a_series(tmp_path):
    """The active check (or the verification job) that met a configuration error drained nothing: its
    AdminComment (root's job; only an admin can write the field) is what the exporter shows, from the
    same week's sacct call that prices the GPU-hours lost. The newest job of each kind decides."""
    from .fakes import sacct_output

    def health_job(job, node, moment, action, end, uid="0"):
        return [str(job), "FAILED" if action != "passed" else "COMPLETED", node, "9", "billing=1,cpu=1,node=1",
                end, end, uid, f"slurmctl:health {moment} {action} {node}"]

    now = datetime.now().replace(microsecond=0)
    hours_ago = [(now.timestamp() - h * 3600) for h in (3, 2, 1)]
    at = [datetime.fromtimestamp(t).isoformat() for t in hours_ago]
    rows = [health_job(41, "h100-2", "active", "passed", at[0]),
            health_job(42, "h100-2", "active", "config_error", at[1]),  # newer: the torch python went missing
            health_job(43, "l4-1", "active", "config_error", at[0]),
            health_job(44, "l4-1", "active", "passed", at[1]),  # fixed since
            health_job(45, "h100-1", "verify", "config_error", at[2]),
            health_job(46, "h100-3", "active", "config_error", at[2], uid="1002")]  # not root's: no health job
    runner = ReplayRunner({"squeue": SQUEUE, "sinfo": SINFO, "sacct": sacct_output(*rows)})
    registry, _ = build(site(tmp_path), 15.0, runner)
    s = scrape(registry)
    assert value(s, "slurmctl_node_health_config_error", node="h100-2", moment="active") == 1
    assert value(s, "slurmctl_node_health_config_error", node="l4-1", moment="active") == 0
    assert value(s, "slurmctl_node_health_config_error", node="h100-1", moment="verify") == 1
    assert value(s, "slurmctl_node_health_config_error", node="h100-3", moment="active") is None
    assert [c[0] for c in runner.calls].count("sacct") == 1
