"""bob against alice's 2-node torchrun job, on the real cluster (the launch of torchrun.sbatch.j2).

The job script used to start torchrun with c10d's dynamic rendezvous on port 20000 + job id % 20000.
That rendezvous keeps its state as a pickle in torch's TCPStore, which has no authentication and
listens on every interface, and every agent unpickles it. bob wrote a pickle into alice's running
store and ran code as alice; bound the computed port before her job started, and her agent, unable
to bind, connected to his store instead and unpickled his pickle. Now the launch uses torchrun's
static rendezvous (JSON and counters in the store, no pickle), node 0 listens or fails, and the port
is a free one picked at random on node 0 at launch. bob's attacker: tests/integration/rdzv_attacker.py.
"""

import glob
import json
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from .conftest import as_user, wait_for_state, write_run

ATTACKER = Path(__file__).with_name("rdzv_attacker.py")
# Every rank says it is up with a file (torchrun's --tee copies lines to the log only in blocks) and waits
# for the test's go, so that bob writes into the store while all agents still run it.
TRAIN = """
import os, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, f"ready-{dist.get_rank()}"), "w") as f:
    f.write(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {int(t.item())}")
proceed = os.path.join(here, "proceed")
deadline = time.time() + 90
while not os.path.exists(proceed) and time.time() < deadline:
    time.sleep(0.2)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} done sum {int(t.item())}", flush=True)
dist.destroy_process_group()
"""
PORT_LINE = re.compile(r"slurmctl: torchrun rendezvous \(static\): node 0 (\S+) listens on port (\d+)")


def _job_log(run_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("*")) if p.is_file())


def _wait_for_ranks(workdir: Path, run_dir: Path, timeout: float) -> None:
    ready = [workdir / f"ready-{rank}" for rank in (0, 1)]
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in ready):
        if time.monotonic() > deadline:
            log = _job_log(run_dir) if (run_dir / "logs").is_dir() else ""
            raise AssertionError(f"the ranks were not up after {timeout} s:\n{log[-3000:]}")
        time.sleep(0.5)
    assert [p.read_text() for p in ready] == ["rank 0 of 2 sum 2", "rank 1 of 2 sum 2"]


def test_bob_neither_takes_the_port_of_alices_job_nor_runs_code_through_her_store(workdir):
    alice, bob = as_user("alice"), as_user("bob")
    marker = f"/tmp/rdzv-inject-{uuid.uuid4().hex[:12]}"
    spec = write_run(workdir, {"name": "rdzv-attack", "entrypoint": "train.py", "partition": "h100-ondemand",
                               "gpu_type": "h100", "nodes": 2, "gpus_per_node": 1, "time_limit": "5m"},
                     {"train.py": TRAIN})
    submitted = alice.slurmctl_json("submit", spec, "-y", "--", "--hold")
    job, run_dir = submitted["job_id"], Path(submitted["run_dir"])
    holder = None
    try:
        # (a) before the job starts: bob plants a pickle on the port the job id used to give, and holds
        # 1,000 more of the ports slurmctl picks from
        holder = subprocess.Popen(bob.argv([sys.executable, ATTACKER, "hold", job, 1000]), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        held = json.loads(holder.stdout.readline() or "null") or {}
        assert held.get("ports"), holder.stderr.read() if holder.poll() is not None else "bob's holder said nothing"
        alice.run(["scontrol", "release", str(job)], check=True)

        _wait_for_ranks(workdir, run_dir, timeout=90)
        host, port = PORT_LINE.search(_job_log(run_dir)).groups()
        port = int(port)
        assert port != held["store_port"] and port not in held["ports"]

        # (b) bob, told the store's port, writes a pickle under the keys c10d's rendezvous state lives in
        injected = bob.run([sys.executable, ATTACKER, "inject", host, port, job, marker], timeout=60)
        assert injected.returncode == 0 and "torch.rendezvous" in injected.stdout, injected.stderr[-2000:]
        time.sleep(6)  # c10d's agents re-read their state at every keep-alive (5 s)
        proceed = workdir / "proceed"
        proceed.touch()
        status = wait_for_state(submitted["run_id"], {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=90)
        log = _job_log(run_dir)
        assert status["state"] == "COMPLETED", log[-3000:]
        assert "[rank0]:rank 0 done sum 4" in log and "[rank1]:rank 1 done sum 4" in log
        assert "--rdzv-backend=c10d" not in (run_dir / "job.sbatch").read_text()
    finally:
        if holder is not None:
            out, err = holder.communicate(timeout=30)  # closing stdin ends the holder
        alice.scancel(job)
    ended = json.loads(out.splitlines()[-1])
    assert ended == {"accepted": 0, "store_keys": held["store_keys"]}, (ended, err[-2000:])
    assert not glob.glob(marker + "*") and not glob.glob(f"/tmp/rdzv-prebind-{job}*")


def test_node_0_fails_on_a_taken_port_instead_of_joining_the_holders_store(user_dir):
    """Node 0's launch exactly as the job runs it (static rendezvous, rank 0), the port held by bob's
    store with a pickle planted: torchrun stops with EADDRINUSE at once, and nothing of bob's runs."""
    alice, bob = as_user("alice"), as_user("bob")
    probe = socket.socket()
    probe.bind(("0.0.0.0", 0))
    port = probe.getsockname()[1]
    while not 20000 <= port < 40000:  # the holder's store goes on 20000 + job % 20000
        probe.close()
        probe = socket.socket()
        probe.bind(("0.0.0.0", 20000 + uuid.uuid4().int % 20000))
        port = probe.getsockname()[1]
    probe.close()
    job = port - 20000
    holder = subprocess.Popen(bob.argv([sys.executable, ATTACKER, "hold", job, 0]), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        held = json.loads(holder.stdout.readline() or "null") or {}
        assert held.get("store_port") == port, holder.stderr.read() if holder.poll() is not None else held
        started = time.monotonic()
        launched = alice.run([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
                              "--rdzv-backend=static", f"--rdzv-id={job}", "--max-restarts=0", "--no-python", "true"],
                             env={"PET_NODE_RANK": "0", "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}"},
                             timeout=120, cwd=user_dir("alice"))
        took = time.monotonic() - started
    finally:
        out, err = holder.communicate(timeout=30)
    assert launched.returncode != 0 and "EADDRINUSE" in launched.stderr, launched.stderr[-3000:]
    assert took < 30, f"node 0 took {took:.0f} s to give up"
    assert json.loads(out.splitlines()[-1])["store_keys"] == held["store_keys"]  # alice never joined bob's store
    assert not glob.glob(f"/tmp/rdzv-prebind-{job}*")
