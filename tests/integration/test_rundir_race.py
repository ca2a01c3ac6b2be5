"""bob swaps his run directory with a symlink to alice's, atomically and in a loop
(``renameat2(RENAME_EXCHANGE)``), while root's exporter reads his run. Checking the directory by
name and then reading files by name lets some reads land in alice's 0700 directory, which root can
read: root then published her step and loss as bob's run's. The exporter reads through the run
dir's fd (slurmctl.rundir.pinned), so no read may ever return her values."""

from __future__ import annotations

import pwd
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime

import pytest

from slurmctl.config.models import load_site_config
from slurmctl.ops.exporter import read_active_run
from slurmctl.rundir import Run, RunRegistry
from slurmctl.slurm.records import Job

from .conftest import as_user

READS = 3000
# bob's racer: exchange two names of his own runs directory until the deadline, as fast as it can
RACER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
a, b, until = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2]), time.monotonic() + float(sys.argv[3])
swaps = 0
while time.monotonic() < until:
    if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
    swaps += 1
print(swaps)
"""
WRITE_RUN = r"""
import json, os, sys, time
folder, step, loss, transport, job = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
os.makedirs(folder + "/health", mode=0o700)
os.chmod(folder, 0o700)
now = time.time()
json.dump({"run_id": os.path.basename(folder), "created": now}, open(folder + "/run.json", "w"))
json.dump({"step": step, "time": now, "metrics": {"loss": loss}}, open(folder + "/heartbeat.json", "w"))
with open(folder + "/metrics.jsonl", "w") as fh:
    for i in range(20):
        fh.write(json.dumps({"step": step - 20 + i, "time": now - 20 + i}) + "\n")
open(folder + "/attempts.jsonl", "w").write(json.dumps({"event": "start", "time": now - 30}) + "\n")
json.dump({"job_id": job, "rank": 0, "transport": {"transport": transport}},
          open(folder + "/health/rank-0.json", "w"))
"""


def _run_id(name: str) -> str:
    return f"{name}-{datetime.now(UTC):%Y%m%d}-{uuid.uuid4().hex[:4]}"


@pytest.fixture
def racing():
    """alice's run (step 777, loss 7.77, an `ib` rank) and bob's (step 5, loss 0.5, a `socket` rank),
    and bob's racer exchanging his run dir's name with a symlink to hers; yields (bob's Run, his job)."""
    alice, bob = as_user("alice"), as_user("bob")
    site = load_site_config()
    alice_id, bob_id = _run_id("race-alice"), _run_id("race-bob")
    alice_dir = site.runs_root_path / "alice" / alice_id
    bob_dir = site.runs_root_path / "bob" / bob_id
    swap = bob_dir.with_name(f".{bob_id}.swap")
    racer = None
    try:
        alice.run([sys.executable, "-c", WRITE_RUN, str(alice_dir), "777", "7.77", "ib", "42"], check=True)
        bob.run([sys.executable, "-c", WRITE_RUN, str(bob_dir), "5", "0.5", "socket", "42"], check=True)
        bob.run(["ln", "-s", str(alice_dir), str(swap)], check=True)
        racer = subprocess.Popen(bob.argv([sys.executable, "-c", RACER, str(bob_dir), str(swap), "120"]),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        # the reads by name that root did before: the race is real on this machine
        by_name = sum((Run(bob_id, bob_dir).heartbeat() or {}).get("step") == 777 for _ in range(READS))
        assert by_name > 0, "the racer never won against reads by name: this test proves nothing"
        print(f"\nreads by name: {by_name}/{READS} returned alice's step")
        yield Run(bob_id, bob_dir), Job(job_id=42, state="RUNNING", partition="l4-dev", user="bob",
                                        comment=f"slurmctl:{bob_id}", start_time=datetime.now(UTC))
        assert racer.poll() is None, racer.communicate()
    finally:
        if racer is not None:
            racer.terminate()  # runuser passes it on; and with its names gone the racer stops anyway
        bob.run(["rm", "-rf", str(bob_dir), str(swap)])
        alice.run(["rm", "-rf", str(alice_dir)])
        if racer is not None:
            racer.wait(timeout=30)


def test_a_run_dir_swapped_by_rename_exchange_never_makes_the_exporter_read_another_users_run(racing):
    run, job = racing
    site = load_site_config()
    bobs, refused, alices = 0, 0, []
    for _ in range(READS):
        try:
            read = read_active_run(Run(run.run_id, run.path), job, site, time.time())
        except OSError:
            refused += 1  # the name was the symlink when the exporter opened it
            continue
        assert read is not None
        sample, live = read
        if sample.step == 777 or sample.loss == 7.77 or "ib" in live.transports:
            alices.append((sample.step, sample.loss, live.transports))
        elif sample.step == 5 and sample.loss == 0.5 and live.transports == {"socket": 1}:
            bobs += 1
    print(f"the exporter's reads: {bobs} bob's, {refused} refused, {len(alices)} alice's")
    assert alices == [], alices[:5]
    assert bobs > 0 and bobs + refused == READS


def test_the_operators_listing_reads_a_swapped_run_dir_only_as_its_owners(racing):
    """root's `ls --all-users` and web view: the runs RunRegistry finds of another user are read
    through their directory's fd, the owner checked, on every read."""
    run, _ = racing
    site = load_site_config()
    registry = RunRegistry(site.runs_root_path, "bob", uid=pwd.getpwnam("bob").pw_uid)
    listed = []
    for _ in range(100):  # listed while the name was the symlink: no run there; list again
        listed = [r for r in registry.list() if r.run_id == run.run_id]
        if listed:
            break
    assert listed and listed[0].owner == registry.uid
    seen = {"bob": 0, "nothing": 0, "alice": 0}
    for _ in range(READS):
        step = (listed[0].heartbeat() or {}).get("step")
        seen["alice" if step == 777 else "bob" if step == 5 else "nothing"] += 1
    print(f"the operator's reads: {seen}")
    assert seen["alice"] == 0 and seen["bob"] > 0, seen
