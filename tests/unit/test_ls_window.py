"""`slurmctl ls --since DURATION` shows every run of the window, not the default newest 20; `-n` still caps it.

Slurm's commands are stand-ins that answer with nothing (an empty queue, no accounting record): this pins
which runs are listed, read from the run dirs; `ls` against the real cluster is tested in tests/integration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from slurmctl.rundir import current_user

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("window")
    mine = tmp / "runs" / current_user()
    mine.mkdir(parents=True)
    os.chmod(mine, 0o700)
    now = time.time()
    for n in range(30):  # 25 runs of the last hours, 5 of last week
        run_id = f"window-20260101-{n:04d}"
        created = now - (n * 600 if n < 25 else 6 * 86400)
        run = mine / run_id
        run.mkdir()
        (run / "run.json").write_text(json.dumps({"run_id": run_id, "name": "window", "created": created,
                                                  "partition": "l4-dev",
                                                  "checkpoint_dir": str(run / "checkpoints")}))
        (run / "run.yaml").write_text("name: window\nentrypoint: train.py\npartition: l4-dev\ntime_limit: 5m\n")
        os.utime(run / "run.json", (created, created))
    site = yaml.safe_load((REPO / "deploy/local/site.yaml").read_text())
    (tmp / "site.yaml").write_text(yaml.safe_dump({**site, "runs_root": str(tmp / "runs")}))
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in ("squeue", "sacct", "sinfo", "scontrol", "sacctmgr"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("SLURMCTL_", "FORCE_COLOR", "TTY_"))},
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "SLURMCTL_SITE_CONFIG": str(tmp / "site.yaml"), "SLURMCTL_USER_CONFIG": str(tmp / "no-config.yaml"),
            "XDG_CACHE_HOME": str(tmp / "cache"), "XDG_STATE_HOME": str(tmp / "state")}


def _listed(env: dict, *argv: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "slurmctl.cli", "ls", "--json", *argv], capture_output=True,
                          text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return [row["run_id"] for row in json.loads(done.stdout)]


@pytest.mark.parametrize(("argv", "count"), [((), 20), (("--since", "1d"), 25), (("--since", "1d", "-n", "3"), 3),
                                             (("--all",), 30), (("--since", "30m"), 3)])
def test_a_window_is_shown_whole_unless_a_count_is_asked(env, argv, count):
    assert len(_listed(env, *argv)) == count
