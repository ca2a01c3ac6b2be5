"""`slurmctl ls` as alice on the real cluster: the default view is the newest runs plus every run with
a job in the queue however old; --since and --all; the piped table has the same columns either way.

The runs live in a runs root of the test's own (a copy of the site config pointing at alice's test
directory), so alice's real runs are neither read nor changed. The one Slurm job is a held job of
alice's, cancelled at the end.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

import yaml

from slurmctl.config.locate import find_site_config

from .conftest import as_user

DAY = 86400


def _own(path, user) -> None:
    os.chown(path, user.uid, user.gid)


def _make_run(root, user, run_id: str, created: float, job_id: int | None = None) -> None:
    path = root / run_id
    path.mkdir(mode=0o700)
    _own(path, user)
    files = {"run.json": json.dumps({"run_id": run_id, "name": run_id.rsplit("-", 2)[0], "created": created}),
             "run.yaml": yaml.safe_dump({"name": run_id.rsplit("-", 2)[0], "entrypoint": "train.py",
                                         "partition": "l4-dev", "gpus_per_node": 1})}
    if job_id is not None:
        files["attempts.jsonl"] = json.dumps({"event": "submitted", "job_id": job_id, "time": created}) + "\n"
    for name, text in files.items():
        (path / name).write_text(text)
        os.chmod(path / name, 0o600)
        _own(path / name, user)


def _run_id(name: str, created: float, n: int) -> str:
    return f"{name}-{datetime.fromtimestamp(created, UTC):%Y%m%d}-{n:04x}"


def test_ls_default_view_is_recent_plus_active(workdir):
    alice = as_user("alice")
    site = yaml.safe_load(find_site_config().read_text())
    site["runs_root"] = str(workdir / "runs")
    (workdir / "runs").mkdir(mode=0o755)
    (workdir / "runs" / "alice").mkdir(mode=0o700)
    site_file = workdir / "site.yaml"
    site_file.write_text(yaml.safe_dump(site))
    for p in (workdir / "runs", workdir / "runs" / "alice", site_file):
        _own(p, alice)
    root = workdir / "runs" / "alice"
    now = time.time()
    old_active = _run_id("old-active", now - 400 * DAY, 1)
    job = alice.sbatch("--hold", "-p", "l4-dev", "-J", old_active, "-o", "/dev/null",
                       f"--comment=slurmctl:{old_active}", "--wrap", "true")
    try:
        _make_run(root, alice, old_active, now - 400 * DAY, job)
        old_ended = [_run_id("old-ended", now - (300 + i) * DAY, i) for i in range(30)]
        for i, run_id in enumerate(old_ended):
            _make_run(root, alice, run_id, now - (300 + i) * DAY)
        recent = [_run_id("recent", now - 3600 * (30 - i), i) for i in range(30)]  # oldest first
        for i, run_id in enumerate(recent):
            _make_run(root, alice, run_id, now - 3600 * (30 - i))
        env = {"SLURMCTL_SITE_CONFIG": str(site_file)}

        def ls(*args):
            # runs only: alice's plain sbatch jobs (kind "sbatch"), if another test has one queued, are listed too
            return [r["run_id"] for r in alice.slurmctl_json("ls", *args, env=env) if r.get("kind") != "sbatch"]

        assert ls() == [old_active, *recent[-20:]]  # the held job's run is shown though 400 days old
        assert ls("-n", "3") == [old_active, *recent[-3:]]
        assert ls("--since", "5h") == [old_active, *recent[-4:]]  # created 4, 3, 2 and 1 hours ago
        assert ls("--all") == [old_active, *reversed(old_ended), *recent]
        rows = [r for r in alice.slurmctl("ls", "-n", "3", env=env).stdout.splitlines() if "(sbatch)" not in r]
        assert rows[0].split() == ["RUN", "JOB", "PHASE", "STEP", "GPUS", "ELAPSED", "COST", "WHAT", "IS",
                                   "HAPPENING"]
        assert [r.split()[0] for r in rows[1:]] == [old_active, *recent[-3:]]
        assert rows[1].split()[1:3] == [str(job), "held"]
    finally:
        alice.scancel(job)
