"""Hostile input on the real cluster, as the real user alice: every attack must end in one clear
error (exit code != 0, no traceback) before anything reaches sbatch, or print as plain text.

Each test failed on the code before the input/output safety work: the newline fields rendered
extra #SBATCH/export lines, `--where` was never validated, a credential in env: was submitted,
`--dry-run` ran the run.yaml's `python:`, brackets crashed rich, a FIFO hung `diagnose`.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from .conftest import as_user, give, slurmctl, write_run

BASE = {"entrypoint": "train.py", "partition": "l4-dev", "gpus_per_node": 1, "time_limit": "5m"}
TRAIN = {"train.py": "print('hello')\n"}


def _name(label: str) -> str:
    return f"hostile-{label}-{uuid.uuid4().hex[:4]}"


def assert_clear_error(result, *fragments, exit_code=2):
    text = result.stdout + result.stderr
    assert result.returncode == exit_code, text
    assert "Traceback" not in text and "internal error" not in text, text
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def _alice_runs(prefix: str) -> list[str]:
    root = as_user("alice").runs_root
    return [p.name for p in root.iterdir() if p.name.startswith(prefix)] if root.is_dir() else []


def _alice_jobs(prefix: str) -> list[str]:
    names = as_user("alice").squeue("-h", "-u", "alice", "-o", "%j").split()
    return [n for n in names if n.startswith(prefix)]


CONTROL = "control character"


@pytest.mark.parametrize("label, changes, field, why", [
    ("name", {"name": "evil\n#SBATCH --qos=high"}, "`name`", CONTROL),
    ("envkey", {"env": {"HF_HOME\n": "1"}}, "`env`", "not a valid environment variable name"),
    ("envvalue", {"env": {"A": "1\ntouch /tmp/pwned-by-env"}}, "`env.A`", CONTROL),
    ("workdir", {"workdir": "code\n#SBATCH --chdir=/"}, "`workdir`", CONTROL),
    ("gputype", {"gpu_type": "l4\n#SBATCH --qos=high"}, "`gpu_type`", CONTROL),
    ("ckdir", {"checkpoint": {"dir": "ck\nrm -rf ~"}}, "`checkpoint.dir`", CONTROL),
])
def test_newline_in_a_field_is_refused_before_sbatch(workdir, label, changes, field, why):
    name = _name(label)
    spec = write_run(workdir, {**BASE, "name": name, **changes}, TRAIN)
    for extra in (["--dry-run"], []):
        assert_clear_error(slurmctl("submit", spec, *extra, check=False), field, why)
    assert not _alice_runs(name) and not _alice_jobs(name) and not _alice_jobs("evil")


def test_run_yaml_in_a_folder_whose_path_has_a_newline(workdir):
    folder = workdir / "a\n#SBATCH --qos=high"
    name = _name("folder")
    spec = write_run(folder, {**BASE, "name": name}, TRAIN)
    result = slurmctl("submit", spec, check=False)
    assert_clear_error(result, "`workdir`", CONTROL)
    assert not _alice_runs(name) and not _alice_jobs(name)


@pytest.mark.parametrize("where, fragment", [("l4-dev\n#SBATCH --qos=high", "--where"),
                                             ("h100-ondemand,l4-dev", "--where"), ("no-such-part", "--where")])
def test_where_must_name_a_configured_partition(workdir, where, fragment):
    name = _name("where")
    spec = write_run(workdir, {**BASE, "name": name}, TRAIN)
    assert_clear_error(slurmctl("submit", spec, "--where", where, check=False), fragment, "l4-dev")
    assert not _alice_runs(name) and not _alice_jobs(name)


def test_where_with_a_configured_partition_still_works(workdir):
    spec = write_run(workdir, {**BASE, "name": _name("where-ok"), "partition": ["h100-spot", "l4-dev"]}, TRAIN)
    result = slurmctl("submit", spec, "--dry-run", "--where", "l4-dev", check=False)
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --partition=l4-dev\n" in result.stdout


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_credential_in_env_is_refused_even_with_force(workdir, force):
    name = _name("cred")
    secret = "wandb-" + uuid.uuid4().hex
    spec = write_run(workdir, {**BASE, "name": name, "env": {"WANDB_API_KEY": secret}}, TRAIN)
    result = slurmctl("submit", spec, *force, check=False)
    assert_clear_error(result, "credential-in-env", "secrets:")
    assert secret not in result.stdout + result.stderr
    assert not _alice_runs(name) and not _alice_jobs(name)


def test_dry_run_never_executes_the_python_named_by_run_yaml(workdir):
    marker = workdir / "executed"
    tool = "#!/bin/sh\n" f"touch {marker}\n" "echo '[]'\n"
    spec = write_run(workdir, {**BASE, "name": _name("dryrun"), "python": "./tools.sh"},
                     {"train.py": "import numpy\n", "tools.sh": tool})
    os.chmod(workdir / "tools.sh", 0o755)
    result = slurmctl("submit", spec, "--dry-run", check=False)
    assert result.returncode == 0, result.stderr
    assert "cannot-verify-imports" in result.stderr and "code directory" in result.stderr
    assert not marker.exists()


def test_alias_bomb_run_yaml_is_refused_quickly(workdir):
    lines = [f"name: {_name('bomb')}", "entrypoint: train.py", "partition: l4-dev",
             'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    path = workdir / "run.yaml"
    path.write_text("\n".join(lines) + "\nargs: *l8\n")
    give(path)
    started = time.monotonic()
    assert_clear_error(slurmctl("submit", path, "--dry-run", check=False, timeout=60), "expands to more than")
    assert time.monotonic() - started < 30


def test_explain_prints_brackets_as_text():
    for word in ("[/]", "[bold]x[/bold]"):
        result = slurmctl("explain", word, check=False)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert f"{word} (unknown)" in result.stdout


def test_queue_shows_a_job_named_with_markup_or_terminal_escapes(alice, bob):
    # bob reads the queue; alice chose the name: markup must not crash it, ESC must not reach bob's terminal
    job = alice.sbatch("--hold", "-J", "[/]x\x1b[2Jy", "-p", "l4-dev", "-t", "1", "--wrap", "true")
    try:
        result = slurmctl("queue", "-u", "alice", check=False, user="bob")
        assert result.returncode == 0, result.stderr
        assert "[/]x?[2Jy" in result.stdout and str(job) in result.stdout
        assert "\x1b" not in result.stdout
    finally:
        alice.scancel(job)


def test_diagnose_log_on_a_fifo_or_dev_zero_fails_at_once(workdir):
    fifo = workdir / "slurm-1.out"
    os.mkfifo(fifo)
    give(fifo)
    for path, kind in ((fifo, "FIFO"), ("/dev/zero", "device")):
        started = time.monotonic()
        assert_clear_error(slurmctl("diagnose", "--log", path, check=False, timeout=60), kind, exit_code=7)
        assert time.monotonic() - started < 30


def test_paths_in_another_users_private_dir_are_unreadable_not_a_crash(workdir, user_dir):
    # os.stat under a folder alice cannot enter raises PermissionError (Path.exists() does not hide it)
    bobs = user_dir("bob")
    (bobs / "dataset").mkdir()
    (bobs / "config.yaml").write_text("lr: 1\n")
    give(bobs / "dataset"), give(bobs / "config.yaml")
    spec = write_run(workdir, {**BASE, "name": _name("data"), "data": [str(bobs / "dataset")],
                               "config_files": [str(bobs / "config.yaml")]}, TRAIN)
    assert_clear_error(slurmctl("submit", spec, "--dry-run", check=False), "unreadable-data",
                       "unreadable-config-file", str(bobs / "dataset"))


def test_fifos_among_the_code_and_config_files_do_not_hang_submit(workdir):
    spec = write_run(workdir, {**BASE, "name": _name("fifo"), "config_files": ["cfg.yaml"]}, TRAIN)
    for name in ("helpers.py", "cfg.yaml"):
        os.mkfifo(workdir / name)
        give(workdir / name)
    started = time.monotonic()
    result = slurmctl("submit", spec, "--dry-run", check=False, timeout=120)
    assert_clear_error(result, "invalid-config-file", "not a regular file")
    assert time.monotonic() - started < 60
