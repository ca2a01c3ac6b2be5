"""`slurmctl resume` confirms the new job's worst case as submit and adopt do: above the site's
threshold it needs `--yes` or a yes at the prompt, else nothing is submitted (a run's own spec on the
partition it was placed on; an adopted script's estimate as adopt showed it). Slurm's side is replayed:
the job is gone from the queue, sbatch answers a job id."""

import json
import pickle
import time
import zipfile

import pytest

from slurmctl.cli.main import main
from slurmctl.control.adopted import resume_adopted
from slurmctl.control.resume import resume_run
from slurmctl.errors import CostNotConfirmed
from slurmctl.rundir import ADOPTED_SCRIPT, JOB_SCRIPT, Run
from slurmctl.slurm.client import SlurmClient

from .fakes import ReplayRunner


def _client() -> tuple[SlurmClient, ReplayRunner]:
    runner = ReplayRunner({"squeue": "", "sacct": "", "sbatch": "777\n"})
    return SlurmClient(runner), runner


def _sbatches(runner: ReplayRunner) -> list[list[str]]:
    return [c for c in runner.calls if c[0] == "sbatch"]


def _adopted_run(tmp_path, max_usd: float) -> Run:
    path = tmp_path / "runs" / "lit-20261202-abcd"
    (path / "logs").mkdir(parents=True)
    out = tmp_path / "out" / "step-00000020"
    out.mkdir(parents=True)
    with zipfile.ZipFile(out / "lit_model.pth", "w") as archive:  # laid out as torch.save writes it
        archive.writestr("lit_model/data.pkl", pickle.dumps({"iter_num": 20, "model": {}}, protocol=2))
    (path / ADOPTED_SCRIPT).write_text("#!/bin/bash\n#SBATCH --nodes=2\nsrun litgpt pretrain\n")
    (path / JOB_SCRIPT).write_text("#!/bin/bash\n")
    block = {"framework": "pytorch", "checkpoint_dir": str(tmp_path / "out"), "signal": None, "signal_to": "steps"}
    (path / "run.json").write_text(json.dumps({
        "run_id": path.name, "created": time.time(), "partition": "h100-ondemand",
        "adopted": {"script": str(tmp_path / "x.sbatch"), "cwd": str(tmp_path), "sbatch_args": [],
                    "platform_args": [], "resilience": block, "cost": {"max_usd": max_usd}}}))
    (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": 81, "time": 1.0}) + "\n")
    return Run(path.name, path)


def test_resuming_an_adopted_run_above_the_threshold_needs_yes_or_a_confirmation(tmp_path, local_site):
    site = local_site.model_copy(update={"cost_confirm_threshold": 1.0})
    run = _adopted_run(tmp_path, max_usd=5.0)
    client, runner = _client()
    with pytest.raises(CostNotConfirmed) as refused:
        resume_adopted(run, client, site)
    assert "$5.00" in refused.value.message and "--yes" in refused.value.hint and not _sbatches(runner)
    with pytest.raises(CostNotConfirmed):
        resume_adopted(run, client, site, confirm=lambda usd: False)  # "no" at the prompt
    assert not _sbatches(runner)
    asked = []
    assert resume_adopted(run, client, site, confirm=lambda usd: asked.append(usd) or True).job_id == 777
    assert asked == [5.0] and len(_sbatches(runner)) == 1
    assert resume_adopted(run, client, site, yes=True).from_step == 20 and len(_sbatches(runner)) == 2
    # under the threshold nothing is asked
    cheap = _adopted_run(tmp_path / "cheap", max_usd=0.5)
    assert resume_adopted(cheap, client, site, confirm=lambda usd: pytest.fail("asked")).job_id == 777


def test_resuming_a_run_prices_its_own_spec_on_its_partition(tmp_path, local_site):
    path = tmp_path / "runs" / "big-20261202-abcd"
    ck = path / "checkpoints" / "checkpoint-40"
    ck.mkdir(parents=True)
    (ck / ".complete").write_text("")
    (path / "run.yaml").write_text("name: big\nentrypoint: train.py\npartition: h100-ondemand\nnodes: 2\n"
                                   "gpus_per_node: 8\ntime_limit: 10h\n")
    (path / JOB_SCRIPT).write_text("#!/bin/bash\n")
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "created": time.time(),
                                               "partition": "h100-ondemand",
                                               "checkpoint_dir": str(path / "checkpoints")}))
    (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": 81, "time": 1.0}) + "\n")
    run = Run(path.name, path)
    site = local_site.model_copy(update={"cost_confirm_threshold": 10.0})
    price = site.partitions["h100-ondemand"].price_per_gpu_hour
    client, runner = _client()
    with pytest.raises(CostNotConfirmed) as refused:
        resume_run(run, client, site)
    assert f"${16 * 10 * price:,.2f}" in refused.value.message and not _sbatches(runner)
    assert resume_run(run, client, site, yes=True).from_step == 40 and len(_sbatches(runner)) == 1


def test_resume_takes_yes_as_submit_and_adopt_do(capsys):
    for command in ("submit", "adopt", "resume"):
        assert main([command, "--help"]) == 0
        assert "-y, --yes" in capsys.readouterr().out, command
