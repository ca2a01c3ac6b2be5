"""adopt reads where an adopted program saves from what the job runs (its command line, a config file
on it, the program's own text), so status, cancel, history and resume see the program's checkpoints
without --checkpoint-dir; a place known only at run time falls back to the job's start directory,
said in the dry run's note. Scripts as the independent check adopted them, unchanged."""

import json

import pytest

from slurmctl.submit.adopt.body import read_body
from slurmctl.submit.adopt.checkpoint_location import job_workdir, program_output_dir
from slurmctl.submit.adopt.plan import _resilience, read_shape, start_directory
from slurmctl.submit.adopt.script import parse_script

HF_SBATCH = """#!/bin/bash
#SBATCH --job-name=hf-clm
#SBATCH --partition=h100-spot
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:h100:1
#SBATCH --requeue
module load cuda/12.1
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun torchrun --nnodes=$SLURM_JOB_NUM_NODES --nproc-per-node=1 --rdzv-backend=c10d \\
  --rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT --rdzv-id=$SLURM_JOB_ID \\
  run_clm.py --output_dir out --do_train --max_steps 4000 --per_device_train_batch_size 8 \\
  --save_steps 50 --logging_steps 10 --save_total_limit 3 --use_cpu --report_to none
"""
HF_PROGRAM = """import os
from transformers import HfArgumentParser, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint
parser = HfArgumentParser(TrainingArguments)
(training_args,) = parser.parse_args_into_dataclasses()
"""
NANOGPT_SBATCH = """#!/bin/bash
#SBATCH --nodes=1
INIT=scratch
if [ -f out-tiny/ckpt.pt ]; then INIT=resume; fi
srun python train.py config/train_tiny.py --init_from=$INIT
"""
NANOGPT_PROGRAM = "import torch\nout_dir = 'out'\ninit_from = 'scratch'\nexec(open('configurator.py').read())\n"
LIGHTNING_PROGRAM = """import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
trainer = L.Trainer(num_nodes=2, default_root_dir="lit_out",
                    callbacks=[ModelCheckpoint(dirpath="lit_out/ckpts", every_n_train_steps=100)])
"""


def _block(tmp_path, sbatch: str, program: str, name: str, given=None):
    """What plan_adopt concludes when adopt runs in tmp_path."""
    (tmp_path / name).write_text(program)
    path = tmp_path / "job.sbatch"
    path.write_text(sbatch)
    script = parse_script(path)
    body = read_body(script.body)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        return _resilience(body, read_shape(script), None, given, None, None, start_directory(script, body))


def _hf_checkpoint(directory, step):
    (directory / f"checkpoint-{step}").mkdir(parents=True)
    (directory / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def test_hf_trainer_adopted_as_written_has_its_output_dir_read_and_its_checkpoints_seen(tmp_path):
    _hf_checkpoint(tmp_path / "out", 1150)
    _hf_checkpoint(tmp_path / "out", 1200)
    block, how, note = _block(tmp_path, HF_SBATCH, HF_PROGRAM, "run_clm.py")
    assert block.framework == "hf-trainer" and block.checkpoint_dir == str(tmp_path / "out")
    assert block.latest().step == 1200  # what status, cancel, history and resume read
    assert "output_dir" in note and "--output_dir out" in note and "--checkpoint-dir" in note


def test_the_given_checkpoint_dir_wins(tmp_path):
    block, _, note = _block(tmp_path, HF_SBATCH, HF_PROGRAM, "run_clm.py", given=str(tmp_path / "elsewhere"))
    assert block.checkpoint_dir == str(tmp_path / "elsewhere") and "given with --checkpoint-dir" in note


def test_nanogpt_out_dir_from_its_config_file_then_its_command_line(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "train_tiny.py").write_text("out_dir = 'out-tiny'\neval_interval = 100\n")
    block, _, note = _block(tmp_path, NANOGPT_SBATCH, NANOGPT_PROGRAM, "train.py")
    assert block.framework == "pytorch" and block.checkpoint_dir == str(tmp_path / "out-tiny")
    assert "config/train_tiny.py" in note
    block, _, _ = _block(tmp_path, NANOGPT_SBATCH.replace("--init_from", "--out_dir=run2 --init_from"),
                         NANOGPT_PROGRAM, "train.py")
    assert block.checkpoint_dir == str(tmp_path / "run2")
    (tmp_path / "config" / "train_tiny.py").write_text("eval_interval = 100\n")  # the program's own default
    block, _, note = _block(tmp_path, NANOGPT_SBATCH, NANOGPT_PROGRAM, "train.py")
    assert block.checkpoint_dir == str(tmp_path / "out") and "own text" in note


def test_lightning_default_root_dir_from_the_program_or_its_cli(tmp_path):
    sbatch = "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --signal=SIGUSR1@90\nsrun python train_lit.py\n"
    block, _, _ = _block(tmp_path, sbatch, LIGHTNING_PROGRAM, "train_lit.py")
    assert block.framework == "lightning" and block.checkpoint_dir == str(tmp_path / "lit_out")
    cli = sbatch.replace("train_lit.py", "train_lit.py fit --trainer.default_root_dir=/scratch/a/run7")
    block, _, note = _block(tmp_path, cli, "import lightning as L\n", "train_lit.py")
    assert block.checkpoint_dir == "/scratch/a/run7" and "--trainer.default_root_dir" in note
    # ModelCheckpoint's dirpath inside the start directory: that directory (Lightning's default root,
    # where its hpc_ckpt_<n> land) still holds both
    block, _, note = _block(tmp_path, sbatch.replace("train_lit.py", "train_lit.py --dirpath ckpts"),
                            "import lightning as L\n", "train_lit.py")
    assert block.checkpoint_dir == str(tmp_path) and "dirpath" in note


@pytest.mark.parametrize("line, why", [
    ("srun python run_clm.py --output_dir $SCRATCH/out", "fills it in only when the job runs"),
    ("cd $WORK && srun python run_clm.py --output_dir out", "only known when it runs"),
    ("cd $WORK\nsrun python run_clm.py --output_dir out", "only known when it runs"),
])
def test_a_place_known_only_at_run_time_falls_back_to_the_start_directory_and_says_so(tmp_path, line, why):
    sbatch = f"#!/bin/bash\n#SBATCH -N 1\n{line}\n"
    block, _, note = _block(tmp_path, sbatch, HF_PROGRAM, "run_clm.py")
    assert block.checkpoint_dir == str(tmp_path)
    assert note.startswith(f"checkpoints: looked for in {tmp_path}") and "--checkpoint-dir DIR" in note
    if why:
        assert why in note


def test_the_jobs_start_directory(tmp_path):
    assert job_workdir(None, [], tmp_path) == tmp_path
    assert job_workdir("sub", ["cd ../x"], tmp_path) == tmp_path / "x"
    assert job_workdir(None, ['cd "$SLURM_SUBMIT_DIR"'], tmp_path) == tmp_path
    assert job_workdir(None, ["cd $WORK/run"], tmp_path) is None
    assert job_workdir(None, ["cd"], tmp_path) is None  # home: not where it was submitted
    assert job_workdir(None, ["mkdir -p run && cd run"], tmp_path) == tmp_path / "run"


def test_command_line_spellings(tmp_path):
    def read(words: str) -> str | None:
        found = program_output_dir(f"python t.py {words}", "t.py", "", ("output_dir",), tmp_path)
        return str(found[1].path) if found else None
    assert read("--output_dir a --output_dir b") == str(tmp_path / "b")  # argparse keeps the last
    assert read("--output-dir=c") == str(tmp_path / "c")
    (tmp_path / "args.json").write_text(json.dumps({"output_dir": "/abs/d"}))
    assert read("args.json") == "/abs/d"
    assert read("--logging_dir x") is None


LAB_SBATCH = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --signal=B:USR1@60
#SBATCH --requeue
requeue_job() {
  scontrol requeue $SLURM_JOB_ID
}
trap requeue_job USR1
srun --kill-on-bad-exit=1 torchrun --nnodes=$SLURM_NNODES --nproc-per-node=1 ddp_toy.py --lr $LR --steps 30 &
wait
"""
TOY = "import torch, torch.distributed as dist\nfor step in range(30):\n    print(f'step {step}')\n"


def test_a_scripts_batch_signal_is_no_save_signal_of_a_program_with_no_handler(tmp_path):
    """The lab script's B:USR1 goes to its own trap (scontrol requeue); ddp_toy.py handles no signal."""
    block, _, _ = _block(tmp_path, LAB_SBATCH, TOY, "ddp_toy.py")
    assert block.framework == "pytorch" and block.signal is None
    handles = "import signal, torch\nsignal.signal(signal.SIGUSR1, lambda *a: None)\n" + TOY
    block, _, _ = _block(tmp_path, LAB_SBATCH, handles, "ddp_toy.py")
    assert block.signal == "USR1"


def test_the_drain_note_says_whether_the_program_hears_slurmctls_signal(tmp_path):
    from slurmctl.runtime.adapters import Resilience
    from slurmctl.submit.adopt.plan import _program_told

    told = _program_told(Resilience("pytorch", "/x", "USR1", "batch"), "USR1")  # python train.py & wait
    assert "passes it on to the program, which saves on it" in told and "not told" not in told
    under_srun = _program_told(Resilience("pytorch", "/x", "USR1", "steps"), None)
    assert "not told" in under_srun and "only cancel sends it USR1" in under_srun
    nothing = _program_told(Resilience("pytorch", "/x", None, "steps"), None)
    assert "not told" in nothing and "--signal SIG" in nothing and "adapter" not in nothing


def test_an_entry_point_that_is_no_python_file_has_its_command_line_read(tmp_path):
    """litgpt as its users run it: `srun litgpt pretrain ... --out_dir out --resume auto`, adopted with
    --framework pytorch (no program text to detect it from)."""
    path = tmp_path / "job.sbatch"
    path.write_text("#!/bin/bash\n#SBATCH -N 1\nsrun litgpt pretrain --config pretrain.yaml --out_dir out "
                    "--resume auto\n")
    script = parse_script(path)
    body = read_body(script.body)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        block, _, note = _resilience(body, read_shape(script), "pytorch", None, None, None,
                                     start_directory(script, body))
    assert block.checkpoint_dir == str(tmp_path / "out") and "--out_dir out" in note
