"""`slurmctl ls --since DURATION` shows every run of the window, not the default newest 20; `-n` still caps it.

Slurm's commands are stand-ins that answer with nothing (an empty queue, no accounting record): this pins
which runs are listed, read from the run dirs; `ls` against the real cluster is tested in tests/integration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from slurmctl.rundir import current_user
from tests.unit.fakes import silent_slurm_env


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
    return silent_slurm_env(tmp, tmp / "runs")


def _listed(env: dict, *argv: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "slurmctl.cli", "ls", "--json", *argv], capture_output=True,
                          text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return [row["run_id"] for row in json.loads(done.stdout)]


@pytest.mark.parametrize(("argv", "count"), [((), 20), (("--since", "1d"), 25), (("--since", "1d", "-n", "3"), 3),
                                             (("--all",), 30), (("--since", "30m"), 3)])
def test_a_window_is_shown_whole_unless_a_count_is_asked(env, argv, count):
    assert len(_listed(env, *argv)) == count
