"""adopt's reading of sbatch scripts (offline): options as sbatch names them, the body's launchers and
environment lines, the shape, and the wrapper that runs the original."""

import subprocess

import pytest

from slurmctl.errors import SpecError
from slurmctl.submit.adopt.body import read_body
from slurmctl.submit.adopt.plan import _array_size, _gpu_count, read_shape
from slurmctl.submit.adopt.script import parse_script
from slurmctl.submit.adopt.wrapper import render_wrapper

SCRIPT = """#!/bin/bash -l
# a comment before the options
#SBATCH -N 2 --ntasks-per-node 4   # trailing comment
#SBATCH -J "my job"
#SBATCH --gres=gpu:a100:4
#SBATCH --time=1-00:00:00
#SBATCH --requeue
#SBATCH -a 1-5%1

module load cuda
python -m torch.distributed.run --nproc_per_node 4 \\
   train.py --init_from=resume
#SBATCH --qos=late
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "job.sbatch"
    path.write_text(SCRIPT)
    return parse_script(path, ["-t", "30", "--no-requeue"])


def test_options_by_long_name_and_the_command_line_wins(script):
    assert [(d.option, d.value, d.where) for d in script.directives] == [
        ("nodes", "2", "line 3"), ("ntasks-per-node", "4", "line 3"), ("job-name", "my job", "line 4"),
        ("gres", "gpu:a100:4", "line 5"), ("time", "1-00:00:00", "line 6"), ("requeue", None, "line 7"),
        ("array", "1-5%1", "line 8"), ("time", "30", "command line"), ("no-requeue", None, "command line")]
    assert script.value("time") == "30"
    assert [n for n, _ in script.ignored] == [13]  # after the first command: sbatch ignores it


def test_shape(script):
    shape = read_shape(script)
    assert (shape.gpus_total, shape.gpu_type, shape.time_seconds, shape.requeue) == (8, "a100", 1800, False)
    assert (shape.array_tasks, shape.array_throttle) == (5, 1)


def test_body_launchers_with_continuations(script):
    body = read_body(script.body)
    assert [(e[0], e[1]) for e in body.environment] == [(10, "module")]
    (launch,) = body.launches
    assert launch.line == 11 and launch.launchers == ["torchrun", "python"] and launch.program == "train.py"
    assert launch.options == {"--nproc_per_node": "4"} and not body.under_srun


@pytest.mark.parametrize("value, expected", [("gpu:h100:2", (2, "h100")), ("gres:gpu:2", (2, None)),
                                             ("l4:1", (1, "l4")), ("3", (3, None)), ("shard:1", (None, None))])
def test_gpu_count(value, expected):
    assert _gpu_count(value, gres=value.startswith(("gpu", "gres", "shard"))) == expected


def test_array_size():
    assert _array_size("0-9%2") == (10, 2) and _array_size("1,3,5") == (3, None) and _array_size("0-15:4") == (4, None)


@pytest.mark.parametrize("text", ["#!/bin/bash\n#SBATCH -J a\x1bb\n", "#!/bin/bash\n#SBATCH -J 'open\n",
                                  "echo no shebang\n", "#!/bin/bash\n#SBATCH notanoption\n"])
def test_bad_scripts_are_spec_errors(tmp_path, text):
    path = tmp_path / "bad.sbatch"
    path.write_text(text)
    with pytest.raises(SpecError):
        parse_script(path)


def test_wrapper_keeps_the_header_and_runs_under_bash_with_hostile_values(tmp_path):
    path = tmp_path / "job.sbatch"
    path.write_text("#!/bin/bash\n#SBATCH -J '$(touch pwned)'\n#SBATCH --signal=B:USR1@60\necho hi\n")
    script = parse_script(path)
    run_dir = tmp_path / "run-20261201-abcd"
    wrapper = render_wrapper(script, "run-20261201-abcd", run_dir, "py'thon $(touch pwned2)", 60, False, "077")
    assert "#SBATCH -J '$(touch pwned)'" in wrapper.splitlines()[3:5]
    assert "drain-signal; kill -USR1 \"$body_pid\"" in wrapper and "attempt interrupted; exit 143' TERM" in wrapper
    check = subprocess.run(["bash", "-n", "-c", wrapper], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("line, kind", [
    ("source /opt/conda/bin/activate && conda activate train", "conda"),
    ("source ~/miniconda3/etc/profile.d/conda.sh && conda activate train", "conda"),
    ('eval "$(conda shell.bash hook)"', "conda"),
    ('source "$CONDA_PREFIX/bin/activate" train', "conda"),
    ("source activate train", "conda"),
    ("source .venv/bin/activate", "venv"),
    ("module load cuda/12.1 && source venv/bin/activate", "module"),
])
def test_environment_lines_are_read_in_every_command_of_a_chain(line, kind):
    body = read_body([(5, line), (6, "srun python train.py")])
    assert body.environment == [(5, kind, line)] and not body.other


def test_open_mode_is_compared_in_slurms_spelling():
    from slurmctl.submit.adopt.plan import _same

    assert _same("open-mode", "append", "a") and _same("open-mode", "truncate", "t")
    assert not _same("open-mode", "append", "t")


def test_singleton_keeps_the_jobs_name_and_the_run_id_goes_in_the_comment(tmp_path):
    from slurmctl.submit.adopt.wrapper import job_name, platform_args

    named = tmp_path / "named.sbatch"
    named.write_text("#!/bin/bash\n#SBATCH -J nightly\n#SBATCH --dependency=afterok:12,singleton\necho hi\n")
    unnamed = tmp_path / "unnamed.sbatch"
    unnamed.write_text("#!/bin/bash\n#SBATCH -d singleton\necho hi\n")
    plain = tmp_path / "plain.sbatch"
    plain.write_text("#!/bin/bash\n#SBATCH -J nightly\n#SBATCH -d afterok:12\necho hi\n")
    run_id = "nightly-20261201-abcd"
    assert job_name(parse_script(named), run_id) == "nightly"
    assert job_name(parse_script(unnamed), run_id) == "unnamed.sbatch"  # sbatch's default: the file name
    assert job_name(parse_script(plain), run_id) == run_id
    args = platform_args(run_id, tmp_path / run_id, False, 60, "nightly")
    assert "--job-name=nightly" in args and f"--comment=slurmctl:{run_id}" in args


@pytest.mark.parametrize("launch, warned", [
    ("srun torchrun --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:29500 train.py", True),
    ("srun python -m torch.distributed.run --rdzv_backend c10d train.py", True),
    ("srun bash -c 'torchrun --nnodes=2 --node-rank=$SLURM_NODEID --rdzv-backend=static train.py'", False),
    ("srun python train.py --rdzv-backend=c10d", False),  # the program's own option, not torchrun's
])
def test_a_torchrun_c10d_rendezvous_gets_one_note(tmp_path, launch, warned):
    from slurmctl.submit.adopt.plan import _notes

    path = tmp_path / "job.sbatch"
    path.write_text(f"#!/bin/bash\n#SBATCH -N 2\n{launch}\n")
    script = parse_script(path)
    notes = [n for n in _notes(script, read_shape(script), read_body(script.body), False, 60)
             if n.startswith("rendezvous:")]
    assert len(notes) == warned and all("pickle" in n and "--rdzv-backend=static" in n for n in notes)


PROGRAM_THAT_SAVES_ON_USR1 = """import pathlib, signal, sys, time
def save(*_):
    pathlib.Path(sys.argv[1]).write_text("saved")
    sys.exit(0)
signal.signal(signal.SIGUSR1, save)
pathlib.Path(sys.argv[1] + ".up").write_text("up")
time.sleep(30)
"""


def test_a_program_started_without_srun_gets_cancels_signal_through_the_batch_shell(tmp_path):
    """`python train.py & wait` in the batch script: no srun step exists, so cancel signals the batch
    shell (scancel --batch), which passes the program's signal on to it; the script's shell lives on."""
    import os
    import signal
    import sys
    import time
    from pathlib import Path

    from slurmctl.rundir import ADOPTED_SCRIPT
    from slurmctl.runtime import write_drain_request
    from slurmctl.submit.adopt.plan import _resilience, _signal_target

    (tmp_path / "prog.py").write_text(PROGRAM_THAT_SAVES_ON_USR1)
    saved = tmp_path / "saved"
    path = tmp_path / "job.sbatch"
    path.write_text(f"#!/bin/bash\n#SBATCH -N 1\n{sys.executable} {tmp_path / 'prog.py'} {saved} & child=$!\n"
                    "wait $child\necho script-went-on\n")
    script = parse_script(path)
    body, shape = read_body(script.body), read_shape(script)
    block, *_ = _resilience(body, shape, "pytorch", str(tmp_path), "USR1", None)
    assert block.signal_to == "batch"  # cancel: scancel --batch --signal=USR1
    assert "passes it on to the program" in _signal_target(block, body, shape.signal)
    run_dir = tmp_path / "run-20261201-abcd"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / ADOPTED_SCRIPT).write_text(path.read_text())
    (run_dir / ADOPTED_SCRIPT).chmod(0o755)
    wrapper = render_wrapper(script, "run-20261201-abcd", run_dir, sys.executable, 60, True, "077", block.signal)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for key in [k for k in env if k.startswith("SLURM")]:
        del env[key]
    job = subprocess.Popen(["bash", "-c", wrapper], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    deadline = time.monotonic() + 20
    while not Path(f"{saved}.up").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    write_drain_request(run_dir, "cancel", job_id="1")  # what cancel writes before its signal
    job.send_signal(signal.SIGUSR1)  # what `scancel --batch --signal=USR1` does
    out, _ = job.communicate(timeout=30)
    assert saved.read_text() == "saved", out
    assert "passed SIGUSR1 on to the program" in out and "script-went-on" in out
    assert "exit code 0" in out and "time-limit" not in out  # the script's own end; still the user's cancel
