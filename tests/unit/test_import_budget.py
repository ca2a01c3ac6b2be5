"""Which heavy modules a read command imports, as a whole process: `ls`, `status`, `queue`, `logs`
and `explain`, piped, import none of pydantic, yaml, jinja2, torch, docker, paramiko or rich once the
site config and the run's run.yaml were validated (the first read validates them with pydantic and
keeps the result in the user's private cache: slurmctl.config.views).

Slurm is out of the picture here (its commands are stand-ins that answer with an empty queue on
PATH): this pins imports only; the commands against the real cluster are benchmarked by
benchmarks/cli_whole_process.py and tested in tests/integration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmctl.rundir import Run, current_user
from tests.unit.fakes import silent_slurm_env

HEAVY = {"pydantic", "yaml", "jinja2", "torch", "docker", "paramiko", "rich", "matplotlib", "submitit",
         "prometheus_client"}
RUN_ID = "budget-20260101-0001"
_PROBE = """
import json, sys
from slurmctl.cli.main import main
code = main(sys.argv[1:])
sys.stderr.write("\\nMODULES " + json.dumps(sorted({m.split('.')[0] for m in sys.modules})) + "\\n")
sys.exit(code)
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("budget")
    runs = tmp / "runs"
    run = runs / current_user() / RUN_ID
    run.mkdir(parents=True)
    os.chmod(runs / current_user(), 0o700)
    (run / "run.json").write_text(json.dumps({"run_id": RUN_ID, "name": "budget", "created": time.time(),
                                              "partition": "l4-dev", "checkpoint_dir": str(run / "checkpoints")}))
    (run / "run.yaml").write_text("name: budget\nentrypoint: train.py\npartition: l4-dev\ntime_limit: 5m\n")
    (run / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": 4242, "time": time.time()}) + "\n")
    log = Run(RUN_ID, run).log_path(4242)
    log.parent.mkdir()
    log.write_text("[rank0]: step 1 loss 2.0\n")
    return silent_slurm_env(tmp, runs)


def _imports(env: dict, *argv: str) -> tuple[int, set[str], str]:
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)
    tail = done.stderr.rsplit("\nMODULES ", 1)
    assert len(tail) == 2, done.stderr
    return done.returncode, set(json.loads(tail[1])), done.stdout


COMMANDS = [("ls",), ("status", RUN_ID), ("queue",), ("logs", RUN_ID), ("explain", "PD"), ("ls", "--json")]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_read_commands_import_no_heavy_module(env, argv):
    _imports(env, "ls")  # the first read of site.yaml and run.yaml validates them (pydantic) and caches
    code, loaded, out = _imports(env, *argv)
    assert code == 0, out
    assert not loaded & HEAVY, loaded & HEAVY
    if argv[0] in ("ls", "status"):
        assert RUN_ID in out
    if argv[0] == "logs":
        assert "step 1 loss 2.0" in out


def test_first_read_validates_then_a_changed_file_is_validated_again(env, tmp_path):
    fresh = {**env, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    _, first, _ = _imports(fresh, "status", RUN_ID)
    _, second, out = _imports(fresh, "status", RUN_ID)
    assert "pydantic" in first and "pydantic" not in second, out
    site = Path(env["SLURMCTL_SITE_CONFIG"])
    broken = tmp_path / "site.yaml"
    broken.write_text(site.read_text().replace("price_per_gpu_hour: 0.35", "price_per_gpu_hour: -1"))
    code, loaded, out = _imports({**fresh, "SLURMCTL_SITE_CONFIG": str(broken)}, "status", RUN_ID)
    assert code != 0 and "pydantic" in loaded  # new bytes: validated, and refused as before


def test_a_cache_that_is_not_private_is_not_used(env, tmp_path):
    fresh = {**env, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    _imports(fresh, "ls")
    os.chmod(tmp_path / "cache" / "slurmctl", 0o755)  # open to others: ignored, validated again
    _, loaded, _ = _imports(fresh, "ls")
    assert "pydantic" in loaded
