"""The checkpoint adapters read a program's own checkpoints: complete ones only, with their step, and
without torch or running any of the archive's code."""

import json
import pickle
import zipfile

import pytest

from slurmctl.runtime.adapters import ADAPTERS, Resilience, detect


def _torch_like_archive(path, state: dict) -> None:
    """A zip laid out as torch.save writes it: <name>/data.pkl (tensors would be persistent ids)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{path.stem}/data.pkl", pickle.dumps(state, protocol=2))
        archive.writestr(f"{path.stem}/version", "3\n")


class Boom:
    def __reduce__(self):
        return (exec, ("open('/tmp/adapter-pwned', 'w')",))


def test_lightning_checkpoints_complete_only_with_global_step(tmp_path):
    out = tmp_path / "lightning_out"
    (out / "checkpoints").mkdir(parents=True)
    _torch_like_archive(out / "hpc_ckpt_1.ckpt", {"global_step": 117, "epoch": 7, "state_dict": {}})
    _torch_like_archive(out / "checkpoints" / "epoch=0-step=50.ckpt", {"global_step": 50, "state_dict": {}})
    (out / "hpc_ckpt_2.ckpt").write_bytes(b"PK\x03\x04 a save cut short")
    block = Resilience("lightning", str(tmp_path), "USR1")
    assert sorted(c.step for c in block.checkpoints()) == [50, 117]


def test_no_code_of_the_archive_runs(tmp_path):
    _torch_like_archive(tmp_path / "evil.ckpt", {"global_step": 3, "x": Boom()})
    (found,) = Resilience("lightning", str(tmp_path)).checkpoints()
    assert found.step == 3
    import os
    assert not os.path.exists("/tmp/adapter-pwned")


def test_hf_trainer_checkpoint_dirs(tmp_path):
    for step, state in ((200, {"global_step": 200}), (400, {"global_step": 400}), (600, None)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if state:
            (d / "trainer_state.json").write_text(json.dumps(state))
    assert [c.step for c in Resilience("hf-trainer", str(tmp_path)).checkpoints()] == [200, 400]


def test_nanogpt_ckpt_pt(tmp_path):
    _torch_like_archive(tmp_path / "ckpt.pt", {"iter_num": 13300, "model": {}})
    (ck,) = Resilience("pytorch", str(tmp_path)).checkpoints()
    assert ck.step == 13300 and ck.path.name == "ckpt.pt"


def test_progress_from_the_programs_output():
    block = Resilience("pytorch", "/nowhere")
    assert block.last_step(["iter 100: loss 2.3", "iter 110: loss 2.2", "saving checkpoint"]) == 110
    hf = Resilience("hf-trainer", "/nowhere")
    assert hf.last_step([" 45%|####      | 270/600 [01:10<01:20,  4.1it/s]"]) == 270
    custom = Resilience("lightning", "/nowhere", step_pattern=r"it=(?P<step>\d+)")
    assert custom.last_step(["it=7", "it=8 done"]) == 8


def test_detect_from_imports():
    assert detect("import lightning as L\n") == "lightning"
    assert detect("from pytorch_lightning import Trainer\n") == "lightning"
    assert detect("from transformers import AutoModel, Trainer, TrainingArguments\n") == "hf-trainer"
    assert detect("import torch\nfrom model import GPT\n") == "pytorch"
    assert detect("print('hi')\n") is None


@pytest.mark.parametrize("text, framework", [
    ("import argparse, os, time, torch\n", "pytorch"),
    ("from torch import nn\n", "pytorch"),
    ("import numpy as np, torch\n", "pytorch"),
    ("import torch.distributed as dist\n", "pytorch"),
    ("try:\n    import lightning.pytorch as pl\nexcept ImportError:\n    pass\nimport torch\n", "lightning"),
    ("from transformers import (\n    AutoModel,\n    Trainer,\n)\n", "hf-trainer"),
    ("from trl import SFTTrainer\n", "hf-trainer"),
    ("from transformers import AutoModel\nimport torch\n", "pytorch"),  # no Trainer: plain PyTorch
    ("import torchvision\n", None),  # another package whose name starts with torch
    ("# import torch\ns = 'import torch'\n", None),  # a comment and a string are no import
    # Python 2 syntax: the parser fails, the line reading still finds the imports
    ("print 'hi'\nimport os, torch\nfrom pytorch_lightning import Trainer\n", "lightning"),
    ("print 'hi'\nimport numpy as np, torch\n", "pytorch"),
])
def test_detect_reads_imports_as_python_does(text, framework):
    assert detect(text) == framework
    assert set(ADAPTERS) == {"lightning", "hf-trainer", "pytorch"}


def test_lightning_restores_by_its_own_precedence(tmp_path):
    from slurmctl.runtime.adapters.lightning import restore_mode

    assert restore_mode("trainer.fit(model, loader)", under_srun=True) == "hpc"
    assert restore_mode("trainer.fit(model, loader)", under_srun=False) == "none"
    assert restore_mode('trainer.fit(model, ckpt_path="last")', under_srun=True) == "last"
    assert restore_mode("trainer.fit(model, ckpt_path=args.resume)", under_srun=True) == "program"
    assert restore_mode("trainer.fit(model, ckpt_path=None)", under_srun=True) == "hpc"
    out = tmp_path / "lightning_out"
    (out / "checkpoints").mkdir(parents=True)
    _torch_like_archive(out / "hpc_ckpt_1.ckpt", {"global_step": 100, "state_dict": {}})
    _torch_like_archive(out / "hpc_ckpt_2.ckpt", {"global_step": 200, "state_dict": {}})
    _torch_like_archive(out / "checkpoints" / "last.ckpt", {"global_step": 250, "state_dict": {}})
    block = Resilience("lightning", str(tmp_path), "USR1", restore="hpc")
    assert block.restored().path.name == "hpc_ckpt_2.ckpt" and block.latest().path.name == "last.ckpt"
    block.restore = "last"
    assert block.restored().step == 250
    block.restore = "none"  # fit() without ckpt_path outside srun restores nothing
    assert block.restored() is None
    assert Resilience.from_dict({**block.to_dict(), "restore": "hpc"}).restored().step == 200


def test_a_lightning_attempts_last_step_is_its_newest_progress_not_the_step_it_resumed_from():
    from pathlib import Path

    # captured: the attempt's header names the step it resumed from (129); the program then logged 180..185
    text = (Path(__file__).parents[1] / "fixtures" / "adopted" / "lightning_cancelled_attempt.txt").read_text()
    lines = [line for line in text.splitlines() if not line.startswith("# ")]
    assert Resilience("lightning", "/nowhere").last_step(lines) == 185
    assert Resilience("pytorch", "/nowhere").last_step(
        ["slurmctl: attempt 2 of job 9 (Slurm restart 1) starting on n1, resuming from checkpoint step 140"]) is None


def test_an_hf_trainers_step_is_its_training_bars_not_a_checkpoint_writing_bar():
    """Captured: an adopted run_clm (HF Trainer, torchrun 2x1) preempted just after a save; its output's last
    bar was "Writing model shards: 100%| 1/1" after the training bar's 2000/4000, and the attempt was
    recorded as preempted at step 1. The step is read as the runtime reads the log (tail_text_lines)."""
    import re
    from pathlib import Path

    from slurmctl.fsutil import tail_text_lines

    log = Path(__file__).parents[1] / "fixtures" / "adopted" / "hf_trainer_preempted_after_save.log"
    lines = tail_text_lines(log, 0, 256 * 1024)
    bars = [line for line in lines if re.search(r"\| *\d+/\d+ \[", line)]
    assert bars[-1].startswith("Writing model shards: 100%|") and "| 2000/4000 [" in bars[-3], bars[-3:]
    hf = Resilience("hf-trainer", "/nowhere")
    assert hf.last_step(lines) == 2000
    # the training bar behind a rank label (srun --label, torchrun's prefix) is still read; a bar nested under
    # it (the evaluation's: the cursor moves back up after it) and datasets' or loaders' bars are not
    assert hf.last_step(["0:  12%|#2        | 480/4000 [00:10<01:20, 44.1it/s]"]) == 480
    assert hf.last_step(["[default0]: 12%|#2        | 490/4000 [00:10<01:20]"]) == 490
    assert hf.last_step([" 12%|#2   | 500/4000 [00:10<01:20]", " 40%|####    | 4/10 [00:01<00:01]\x1b[A",
                         "Map: 100%|##########| 1000/1000 [00:00<00:00]",
                         "Loading checkpoint shards: 100%|##########| 2/2 [00:01<00:00]"]) == 500
