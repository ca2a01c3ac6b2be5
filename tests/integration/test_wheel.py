"""The installed wheel (fresh venv outside the source tree) as alice uses it on the real cluster:
`slurmctl init` and `slurmctl submit --dry-run` from her own directory, rendering with the templates
the wheel ships and checking placement with the real Slurm."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.unit.test_wheel import REPO, build_wheel, install_fresh_venv


@pytest.fixture(scope="module")
def shared_venv():
    """The venv must be reachable by alice: a 0755 directory under /tmp, removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="slurmctl-wheel-", dir="/tmp"))
    try:
        base.chmod(0o755)
        (base / "build").mkdir()
        venv = install_fresh_venv(build_wheel(base / "build"), base / "venv")
        yield venv
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_wheel_dry_run_as_alice_outside_the_repo(shared_venv, workdir, alice):
    slurmctl = str(shared_venv / "bin" / "slurmctl")
    alice.run([slurmctl, "init", "wheelrun", "--dir", str(workdir / "wheelrun")], check=True, cwd=workdir)
    spec = workdir / "wheelrun" / "run.yaml"
    done = alice.run([slurmctl, "submit", str(spec), "--dry-run", "--json"], check=True, cwd=workdir, timeout=120)
    result = json.loads(done.stdout)
    assert result["dry_run"] is True and result["job_id"] is None
    script = result["script"]
    assert script.startswith("#!/bin/bash") and f"#SBATCH --job-name={result['run_id']}" in script
    assert f"{alice.runs_root}/{result['run_id']}" in script  # alice's own runs root
    assert str(REPO) not in script.replace(str(REPO / ".venv"), "")  # nothing from the checkout but the site python
    which = alice.run([str(shared_venv / "bin" / "python"), "-c", "import slurmctl.submit.render as r; "
                       "print(r.DEFAULT_TEMPLATES_DIR)"], check=True, cwd=workdir).stdout.strip()
    assert Path(which).is_relative_to(shared_venv)
