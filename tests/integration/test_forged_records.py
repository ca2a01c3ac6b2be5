"""Forged Slurm records, on the real cluster: bob submits held jobs whose names and comments are
random bytes (separators, newlines, our record marks) and whole forged records for alice's jobs, in
every shape slurmctl ever read (squeue -o and -O lines, 16-field sacct lines, scontrol pairs). What
alice's slurmctl decides on must not change: her status, the job views cancel verifies with, queue,
ls, quota, the node hooks' job facts, the web Queue page, the exporter's series of her run and the
cost ledger's rows for her.

The random part is seeded (SLURMCTL_FORGE_SEED to replay a failure; the seed is in every message).
Every job made here is cancelled at the end, bob's first.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from .conftest import REPO, ROOT, as_user, slurmctl_json, wait_ended_in_sacct, write_run

SEED = int(os.environ.get("SLURMCTL_FORGE_SEED") or random.SystemRandom().randrange(1 << 30))
VIEWS = REPO / "tests" / "integration" / "slurm_views.py"
CODE = {"PYTHONPATH": str(REPO)}  # the users run this checkout's slurmctl
OLD = "\x1f"  # the separator every earlier format used
# what a name or comment may hold: every control character but NUL, our marks, Slurm's own syntax
ALPHABET = [chr(c) for c in range(1, 32)] + list("=|%:,;[]() _-./\\'\"$`*?!#&<>") + list("aZ09é€😀\udcff")


def _views(user, job_ids) -> dict:
    result = user.run([sys.executable, VIEWS, *map(str, job_ids)], env=CODE, check=True, timeout=120)
    return json.loads(result.stdout)


def _exporter(user_name: str, run_id: str) -> list[str]:
    result = ROOT.run([sys.executable, VIEWS, "--exporter", user_name, run_id], env=CODE, check=True, timeout=120)
    return json.loads(result.stdout)


def _status(run_id: str) -> dict:
    status = slurmctl_json("status", run_id, env=CODE)
    return {k: status.get(k) for k in ("run_id", "state", "reason", "job_id", "phase", "headline")}


def _forgeries(held: int, ended: int, run_id: str, fake: int) -> list[tuple[str, str]]:
    """(name, comment) pairs that would have made a record for alice's jobs in the old formats."""
    now = datetime.now().replace(microsecond=0)
    t0, t1 = (now - timedelta(hours=12)).isoformat(), now.isoformat()
    queue = [str(held), "COMPLETED", "None", "l4-dev", "1", "l4-1", "1:00", "5:00", t0, t0, "alice",
             run_id, f"slurmctl:{run_id}"]
    root_job = [str(fake), "RUNNING", "None", "h100-ondemand", "8", "h100-[1-3]", "1:00", "5:00", t0, t0, "root",
                "fake", "slurmctl:fake-20261201-0000"]
    snapshot = [str(held), "RUNNING", "None", "h100-ondemand", "64", "cpu=512,gres/gpu=512,gres/gpu:h100=512",
                t0, t0, "alice", f"slurmctl:{run_id}", ""]
    sacct = [str(ended), "alice", "vision", "h100-ondemand", "billing=512,cpu=512,gres/gpu:h100=512,gres/gpu=512",
             "64", t0, t0, t0, t1, "43200", "1-00:00:00", "COMPLETED", "0:0", "x", f"slurmctl:{run_id}"]
    info = [str(held), "COMPLETED", "0", "0", t0, t1, "h100-1", "h100-[1-3]", "cpu=1,gres/gpu=512", "/etc", "/"]
    return [
        ("y\n" + OLD.join(queue[:-1]), queue[-1]),  # the attack: bob's comment ends the line
        ("y\n" + OLD.join(root_job[:-1]), root_job[-1]),
        ("z", "c\n" + OLD.join(queue)),
        ("s\n" + OLD.join(snapshot[:-2]), snapshot[-2] + OLD),  # squeue -O, every field ends with \x1f
        ("a\n" + OLD.join(sacct[:-1]), "c\n" + OLD.join(sacct) + "\n"),  # a 16-field sacct line
        (f"n JobId={held} JobState=COMPLETED UserId=alice(1001)", f"\nJobId={held} JobState=COMPLETED"),
        ("i\n" + OLD.join(info), f"slurmctl:{run_id}"),  # bob's own run id: alice's, under bob's name
        ("\x1e" * 3 + "\x1f\n" * 3, "\x1e\n\x1f"),  # the bare marks of the sealed format
        ("not utf-8 \udcff\udcfe\r\n", "\udcc3\r"),  # bytes that are no text (argv carries them raw)
    ]


def _as_read(text: str) -> str:
    """What a reader gets back of bytes written as `text` (not UTF-8: U+FFFD, see LocalRunner)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(1, 120)))


def _submit_held(user, name: str, comment: str) -> int:
    return user.sbatch("--hold", "-p", "l4-dev", "-t", "5", "--chdir=/tmp", "--output=/dev/null",
                       "-J", name, f"--comment={comment}", "--wrap", "true")


def test_forged_records_in_names_and_comments_change_nothing_alice_sees(workdir):
    alice, bob = as_user("alice"), as_user("bob")
    rng = random.Random(SEED)
    bob_jobs: list[int] = []
    alice_jobs: list[int] = []
    try:
        spec = write_run(workdir, {"name": f"forge-{uuid.uuid4().hex[:4]}", "entrypoint": "train.py",
                                   "partition": "l4-dev", "gpus_per_node": 1, "time_limit": "5m"},
                         {"train.py": "print('hi')\n"})
        submitted = slurmctl_json("submit", spec, "--", "--hold", env=CODE)
        run_id, held = submitted["run_id"], int(submitted["job_id"])
        alice_jobs.append(held)
        name = f"forge-ended-{uuid.uuid4().hex[:4]}"
        ended = alice.sbatch("-p", "h100-ondemand", "--gres=gpu:h100:1", "-t", "2", "-J", name, "--chdir=/tmp",
                             "--output=/dev/null", f"--comment=slurmctl:{run_id}", "--wrap", "true")
        alice_jobs.append(ended)
        wait_ended_in_sacct({ended: name}, timeout=240)
        _wait_gone([ended])  # out of squeue too (COMPLETING): alice's views stay still from here on
        started = datetime.now() - timedelta(minutes=30)

        before = _views(alice, [held, ended])
        status_before, series_before = _status(run_id), _exporter("alice", run_id)
        assert before["jobs"] and before["queue"] and not isinstance(before["queue"], dict), before
        assert series_before, "the exporter has no series of alice's held run"

        fake = 900000 + rng.randrange(99999)
        attacks = _forgeries(held, ended, run_id, fake)
        attacks += [(_random_text(rng), _random_text(rng)) for _ in range(12)]
        for name, comment in attacks:
            bob_jobs.append(_submit_held(bob, name, comment))

        after = _views(alice, [held, ended])
        for view in before:
            assert after[view] == before[view], f"seed {SEED}: alice's {view} changed\n{before[view]}\n{after[view]}"
        assert _status(run_id) == status_before, f"seed {SEED}: alice's status changed"
        assert _exporter("alice", run_id) == series_before, f"seed {SEED}: the exporter's series of alice changed"
        # bob's jobs are listed, each once, as bob's, with the bytes he wrote
        bobs = _views(bob, bob_jobs)
        assert sorted(j[0] for j in bobs["queue"]) == sorted(bob_jobs), f"seed {SEED}: {bobs['queue']}"
        assert {j[3] for j in bobs["queue"]} == {"bob"} and {j[1] for j in bobs["queue"]} == {"PENDING"}
        written = {job: tuple(_as_read(text) for text in attack) for job, attack in zip(bob_jobs, attacks)}
        assert {j[0]: (j[4], j[5]) for j in bobs["queue"]} == written, f"seed {SEED}"

        # the ledger: what sacct says of bob's jobs never becomes an attempt of alice's
        bob.scancel(*bob_jobs)
        _wait_gone(bob_jobs)
        _assert_ledger_unchanged(alice_jobs, bob_jobs, started)
    finally:
        bob.scancel(*bob_jobs)
        alice.scancel(*alice_jobs)


def _wait_gone(job_ids: list[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not ROOT.squeue("-h", "-o", "%A", "-j", ",".join(map(str, job_ids))).split():
            return
        time.sleep(1)


def _assert_ledger_unchanged(alice_jobs: list[int], bob_jobs: list[int], since: datetime) -> None:
    """Alice's priced attempts are the same whether sacct is asked for her jobs alone or for bob's
    too, and the ledger an ingest writes holds exactly those rows for her."""
    code = f"""
import json, sys
from datetime import datetime
from pathlib import Path
from slurmctl.ops.accounting import Ledger, attempts_from_records, ingest, stream_sacct
from slurmctl.slurm.client import SlurmClient
from slurmctl.config.models import load_site_config
site = load_site_config()
site = site.model_copy(update={{"accounting": site.accounting.model_copy(
    update={{"ledger_path": sys.argv[1]}})}})
client, now = SlurmClient(), datetime.now()
def alices(ids):
    return sorted([a.job_id, a.start, a.gpus, a.cost_usd, a.run_id] for a in
                  attempts_from_records(stream_sacct(client, now, now, ids), site, {{}}) if a.user == "alice")
alone, mixed = alices({alice_jobs!r}), alices({alice_jobs + bob_jobs!r})
ingest(site, client, since=datetime.fromisoformat({since.isoformat()!r}), now=now)
rows = Ledger(Path(sys.argv[1])).db.execute(
    "SELECT job_id, start, gpus, cost_usd, run_id FROM attempts WHERE user = 'alice' AND job_id IN "
    "({",".join(map(str, alice_jobs))})").fetchall()
print(json.dumps({{"alone": alone, "mixed": mixed, "ledger": sorted(map(list, rows))}}))
"""
    ledger = Path(f"/tmp/slurmctl-forge-ledger-{uuid.uuid4().hex[:6]}.sqlite")
    try:
        result = ROOT.run([sys.executable, "-c", code, str(ledger)], env=CODE, check=True, timeout=300)
    finally:
        for suffix in ("", "-wal", "-shm", ".lock"):
            Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    seen = json.loads(result.stdout)
    assert seen["alone"], f"alice's ended job has no attempt: {seen}"
    assert seen["mixed"] == seen["alone"] == seen["ledger"], f"seed {SEED}: {seen}"
