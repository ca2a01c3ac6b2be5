"""GPU-hours lost per node (health/lost.py) from accounting lines captured on the local cluster
(sacct --duplicates attempts, sacctmgr node events of 2026-12-01): which attempts are the node's
loss, which node of a multi-node NODE_FAIL is charged, which drained time counts."""

from __future__ import annotations

from datetime import datetime

import pytest

from slurmctl.ops.health.lost import gpu_hours_lost
from slurmctl.slurm.client import SlurmClient

from .fakes import ReplayRunner, pin_seal, sacct_output

ATTEMPTS = [  # JobIDRaw State NodeList ElapsedRaw AllocTRES Start End
    ["1007", "NODE_FAIL", "h100-[1-2]", "182", "billing=16,cpu=16,gres/gpu:h100=16,gres/gpu=16,mem=16000M,node=2",
     "2026-12-01T15:30:59", "2026-12-01T15:34:01"],  # h100-2 went down at its end: h100-2's loss alone
    ["14", "FAILED", "h100-[1-2]", "3600", "billing=2,cpu=2,gres/gpu:h100=16,gres/gpu=16,mem=2000M,node=2",
     "2026-12-01T14:48:28", "2026-12-01T15:48:28"],  # diagnosed nccl_timeout: split over both
    ["15", "FAILED", "h100-1", "3600", "billing=1,cpu=1,gres/gpu=8,mem=1000M,node=1",
     "2026-12-01T14:48:28", "2026-12-01T15:48:28"],  # diagnosed import_error: the user's, not the node's
    ["9", "FAILED", "l4-1", "1", "billing=1,cpu=1,mem=1000M,node=1", "2026-12-01T14:48:12", "2026-12-01T14:48:13"],
    ["16", "COMPLETED", "h100-1", "3600", "billing=1,cpu=1,gres/gpu=8,mem=1000M,node=1",
     "2026-12-01T14:48:28", "2026-12-01T15:48:28"],
]
EVENTS = "\n".join([
    "|2026-12-01T14:47:16|Unknown||Cluster Registered TRES",
    "h100-2|2026-12-01T15:34:01|2026-12-01T15:35:25|DOWN*|Not responding",  # 84 s x 8 GPUs
    "h100-3|2026-12-01T19:17:19|2026-12-01T19:47:19|DRAIN|maint",  # an operator's: not the node's loss
    "h100-3|2026-12-01T20:00:00|Unknown|DRAIN|slurmctl:[node_problem] disk: /scratch has 3 MB free",  # open: to now
    "h100-1|2026-12-01T20:00:00|2026-12-01T21:00:00|DRAIN|slurmctl:[user_problem] shm: uid 1001 holds 90%",
]) + "\n"


@pytest.fixture
def client(monkeypatch):
    pin_seal(monkeypatch)
    hosts = {"h100-[1-2]": "h100-1\nh100-2\n", "h100-1": "h100-1\n", "l4-1": "l4-1\n"}

    class Runner(ReplayRunner):
        def run(self, argv, timeout=60.0):
            if argv[:3] == ["scontrol", "show", "hostnames"]:
                self.outputs = {**self.outputs, "scontrol": hosts[argv[3]]}
            return super().run(argv, timeout)

    return SlurmClient(Runner({"sacct": sacct_output(*ATTEMPTS), "sacctmgr": EVENTS}))


def test_the_nodes_own_losses_only(client):
    categories = {(14, "2026-12-01T14:48:28"): "nccl_timeout", (15, "2026-12-01T14:48:28"): "import_error"}
    lost = gpu_hours_lost(client, {"h100-1": 8, "h100-2": 8, "h100-3": 8, "l4-1": 1}, categories,
                          datetime(2026, 12, 1, 22, 0, 0))
    node_fail = 16 * 182 / 3600
    assert lost["h100-2"].failed_jobs == pytest.approx(node_fail + 8.0) and lost["h100-2"].jobs == 2
    assert lost["h100-1"].failed_jobs == pytest.approx(8.0) and lost["h100-1"].jobs == 1
    assert lost["h100-2"].drained == pytest.approx(84 / 3600 * 8)
    assert lost["h100-1"].drained == 0  # a [user_problem] drain is the user's doing
    assert lost["h100-3"].drained == pytest.approx(2 * 8)  # ours, still open at 22:00; maint not counted
    assert lost["l4-1"].total == 0
    argv = client.runner.calls
    assert argv[0][:5] == ["sacctmgr", "-n", "-P", "show", "event"]
    assert argv[0][5:] == ["start=2026-11-24T22:00:00", "end=2026-12-01T22:00:00",
                           "format=NodeName,TimeStart,TimeEnd,State,Reason"]
    assert argv[1][:5] == ["sacct", "-a", "-X", "--duplicates", "-n"]


def test_no_diagnosis_no_charge_for_a_failed_job(client):
    lost = gpu_hours_lost(client, {"h100-1": 8, "h100-2": 8}, {}, datetime(2026, 12, 1, 22, 0, 0))
    assert lost["h100-1"].failed_jobs == 0 and lost["h100-2"].jobs == 1
