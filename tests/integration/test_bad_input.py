"""Bad input: one clear paragraph naming what and how to fix, exit code != 0, no traceback (as alice)."""

import re
from pathlib import Path

from .conftest import give, slurmctl, write_run

BASE = {"name": "bad-input", "entrypoint": "train.py", "partition": "l4-dev", "gpus_per_node": 1}


def submit_bad(workdir, **changes):
    spec = write_run(workdir, {**BASE, **changes}, {"train.py": "pass\n"})
    return slurmctl("submit", spec, check=False)


def assert_clear_error(result, *fragments, exit_code=2):
    assert result.returncode == exit_code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_unknown_partition(workdir):
    assert_clear_error(submit_bad(workdir, partition="h100-ondemandd"), "partition 'h100-ondemandd' does not exist",
                       "h100-ondemand, h100-spot, l4-dev")


def test_wrong_gpu_type(workdir):
    assert_clear_error(submit_bad(workdir, gpu_type="a100"), "has l4 GPUs, not 'a100'", "gpu_type")


def test_more_gpus_than_a_node_has(workdir):
    assert_clear_error(submit_bad(workdir, partition="h100-ondemand", gpus_per_node=16),
                       "gpus_per_node=16", "at most 8")


def test_missing_entrypoint(workdir):
    assert_clear_error(submit_bad(workdir, entrypoint="nope.py"), "entrypoint nope.py not found")


def test_malformed_run_yaml(workdir):
    path = workdir / "run.yaml"
    path.write_text("name: x\n  entrypoint: [oops\n")
    give(path)
    assert_clear_error(slurmctl("submit", path, check=False), "not valid YAML", "line")


def test_unknown_run(workdir):
    assert_clear_error(slurmctl("status", "no-such-run-zz", check=False), "no run 'no-such-run-zz'", exit_code=5)


def test_slurm_not_installed(workdir):
    spec = write_run(workdir, BASE, {"train.py": "pass\n"})
    result = slurmctl("submit", spec, check=False, env={"PATH": "/nonexistent"})
    assert_clear_error(result, "is not installed", exit_code=3)


def test_controller_not_reachable(workdir):
    conf = Path("/etc/slurm/slurm.conf").read_text()
    broken = workdir / "slurm.conf"
    broken.write_text(re.sub(r"(?m)^SlurmctldPort=\S+", "SlurmctldPort=6899", conf)
                      if re.search(r"(?m)^SlurmctldPort=", conf) else conf + "\nSlurmctldPort=6899\n")
    give(broken)
    spec = write_run(workdir, BASE, {"train.py": "pass\n"})
    result = slurmctl("submit", spec, check=False, env={"SLURM_CONF": str(broken)}, timeout=120)
    assert_clear_error(result, "Slurm did not answer", exit_code=3)


def test_json_errors_are_machine_readable(workdir):
    result = submit_bad(workdir / "j", partition="nope")
    result = slurmctl("submit", workdir / "j" / "run.yaml", "--json", check=False)
    assert result.returncode == 2 and '"error": "preflight-failed"' in result.stdout
