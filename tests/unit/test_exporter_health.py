"""The exporter's live-health series: transport per rank, fallback on a fast fabric, data wait, idle
verdict and GPU utilisation, read from the run dir's health/ files (slurmctl/runtime/health.py)."""

import json

from slurmctl.ops.exporter import build

from .fakes import ReplayRunner
from .test_exporter import SINFO, SQUEUE, make, scrape, site, value, write_active_run

RUN = "fixture-20261129-0009"  # the running job 29 of the replayed squeue, on h100-ondemand


def _health(run, rank, transport, wait_share, job_id="29"):
    (run / "health").mkdir(exist_ok=True)
    (run / "health" / f"rank-{rank}.json").write_text(json.dumps({
        "rank": rank, "world_size": 2, "job_id": job_id, "transport": transport,
        "data": {"batches": 40, "wait_share": wait_share, "window": {"batches": 20, "wait_share": wait_share}}}))


def test_health_series_of_a_run_on_sockets_over_infiniband(tmp_path):
    run = write_active_run(tmp_path)
    _health(run, 0, {"backend": "nccl", "network": "Socket", "transport": "socket", "evidence": "x"}, 0.1)
    _health(run, 1, {"backend": "nccl", "network": "IB", "transport": "ib", "evidence": "x"}, 0.7)
    _health(run, 2, {"backend": "nccl", "network": "Socket", "transport": "socket"}, 0.9, job_id="28")  # old job
    (run / "health" / "idle.json").write_text(json.dumps({"state": "idle", "job_id": "29",
                                                          "gpu_utilisation": {"0": 3.0, "1": 1.0}}))
    config = site(tmp_path)
    config.partitions["h100-ondemand"].fabric = "infiniband"
    registry, _ = build(config, 15.0, ReplayRunner({"squeue": SQUEUE, "sinfo": SINFO}))
    s = scrape(registry)
    assert value(s, "slurmctl_run_network_ranks", user="root", run=RUN, transport="socket") == 1
    assert value(s, "slurmctl_run_network_ranks", user="root", run=RUN, transport="ib") == 1
    assert value(s, "slurmctl_run_network_fallback", user="root", run=RUN) == 1
    assert value(s, "slurmctl_run_input_wait_ratio", user="root", run=RUN) == 0.7  # the slowest rank of job 29
    assert value(s, "slurmctl_run_idle", user="root", run=RUN) == 1
    assert value(s, "slurmctl_run_gpu_utilisation_percent", user="root", run=RUN) == 3.0


def test_no_health_files_no_health_series(tmp_path):
    write_active_run(tmp_path)
    _, registry, _ = make(tmp_path)
    names = {name for name, _ in scrape(registry)}
    assert not {"slurmctl_run_network_ranks", "slurmctl_run_network_fallback", "slurmctl_run_input_wait_ratio",
                "slurmctl_run_idle"} & names
