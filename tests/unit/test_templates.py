"""The run templates fsdp, hf-lora and deepspeed: rendered scripts (golden files), `init` output,
and the memory check with each template's sharding."""

import json
import os
import py_compile
import subprocess
from pathlib import Path

import pytest

from slurmctl.config.models import TEMPLATES, load_run_spec
from slurmctl.errors import SpecError
from slurmctl.submit.memory import estimate_memory, resolve_model
from slurmctl.submit.preflight.cluster import check_memory
from slurmctl.submit.render import render, template_file
from slurmctl.submit.scaffold import init_run

from .test_render import context

GOLDEN = Path(__file__).parent / "golden"
NEW = ("fsdp", "hf-lora", "deepspeed")


@pytest.mark.parametrize("template", NEW)
def test_rendered_script_matches_golden(local_site, template):
    script = render(template_file(template), context(local_site, template=template))
    golden = GOLDEN / f"{template}.sbatch"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(script)
    assert script == golden.read_text(), "rendered script changed; rerun with UPDATE_GOLDEN=1 and review the diff"
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


@pytest.mark.parametrize("template", NEW)
def test_template_is_torchrun_plus_its_environment(local_site, template):
    """Launch, drain, requeue and restart are torchrun's, line for line: only the block differs."""
    ctx = context(local_site, template=template)
    base = render(template_file("torchrun"), ctx).splitlines()
    script = render(template_file(template), ctx).splitlines()
    at = next(i for i, (a, b) in enumerate(zip(script, base)) if a != b)
    added = script[at:at + len(script) - len(base)]
    assert script[:at] + script[at + len(added):] == base  # one block inserted, nothing else changed
    assert f"export SLURMCTL_TEMPLATE={template}" in added
    assert all(line.startswith(("#", "export ")) or not line for line in added), added


def test_hf_lora_offline_and_tracking(local_site):
    script = render(template_file("hf-lora"), context(local_site, template="hf-lora"))
    for line in ("export HF_HUB_OFFLINE=1", "export SLURMCTL_TRACKING=wandb",
                 "export WANDB_RUN_ID=tiny-lm-20261129-abcd"):
        assert line in script
    # run.yaml env: comes after the template's settings, so a user value wins
    assert script.index("export HF_HUB_OFFLINE=1") < script.index("export HF_HOME=")


def test_the_local_sites_wandb_mode_is_offline_unless_the_user_chose(local_site, tmp_path):
    script = render(template_file("hf-lora"), context(local_site, template="hf-lora"))
    (line,) = [x for x in script.splitlines() if "export WANDB_MODE=" in x]
    mode = {}
    for name, env in {"default": {}, "own mode": {"WANDB_MODE": "online"}, "api key": {"WANDB_API_KEY": "k"}}.items():
        out = subprocess.run(["bash", "-c", line + '\necho "${WANDB_MODE:-unset}"'], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env}, check=True)
        mode[name] = out.stdout.strip()
    assert mode == {"default": "offline", "own mode": "online", "api key": "unset"}


def test_unknown_template_is_a_spec_error():
    with pytest.raises(SpecError, match="template"):
        template_file("megatron")


@pytest.mark.parametrize("template", TEMPLATES)
def test_init_writes_a_valid_run_for_every_template(tmp_path, local_site, template):
    written = init_run(f"demo-{template}", tmp_path / template, template, site=local_site)
    names = sorted(p.name for p in written)
    expected = {"run.yaml", "train.py"} | ({"ds_config.json"} if template == "deepspeed" else set())
    assert expected <= set(names) and not any(n.endswith((".j2", ".pyc")) for n in names)
    spec = load_run_spec(tmp_path / template / "run.yaml")
    assert spec.template == template and spec.name == f"demo-{template}"
    py_compile.compile(str(tmp_path / template / "train.py"), doraise=True)
    with pytest.raises(Exception, match="already exist"):
        init_run(f"demo-{template}", tmp_path / template, template, site=local_site)


@pytest.mark.parametrize("template,sharding,data_parallel", [("fsdp", "fsdp", 2), ("hf-lora", "ddp", 2),
                                                             ("deepspeed", "zero2", 2)])
def test_dry_run_memory_check_of_each_example(tmp_path, local_site, template, sharding, data_parallel):
    """What `submit --dry-run` prints for the example as `init` writes it: fits, with the template's
    sharding, and a max safe micro-batch."""
    init_run("demo", tmp_path, template, site=local_site)
    spec = load_run_spec(tmp_path / "run.yaml")
    result = check_memory(spec, local_site, workdir=tmp_path)
    assert not result.findings, result.findings
    assert f"with {sharding} over {data_parallel} GPU(s)" in result.note and "max safe micro-batch ≈ " in result.note
    if template == "deepspeed":  # the micro-batch comes from ds_config.json
        assert resolve_model(spec, tmp_path).micro_batch == json.loads(
            (tmp_path / "ds_config.json").read_text())["train_micro_batch_size_per_gpu"]


def _spec(tmp_path, template, **model):
    from slurmctl.config.models import RunSpec

    return RunSpec(name="big", entrypoint="train.py", partition="h100-ondemand", nodes=2, gpus_per_node=8,
                   template=template, model={"params": "7b", "seq_len": 4096, "hidden_size": 4096,
                                             "num_layers": 32, "vocab_size": 32000, **model},
                   args=["--deepspeed-config", "conf/zero.json"])


def test_a_7b_model_fits_under_fsdp_and_zero3_but_not_ddp(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "zero.json").write_text(json.dumps({"zero_optimization": {"stage": 3},
                                                             "train_micro_batch_size_per_gpu": 2}))
    verdicts = {}
    for template in ("torchrun", "fsdp", "deepspeed"):
        model = resolve_model(_spec(tmp_path, template, activation_checkpointing=True), tmp_path)
        est = estimate_memory(model, "h100", data_parallel=16)
        verdicts[template] = (model.sharding, est.verdict, est.max_micro_batch)
    assert verdicts["torchrun"][:2] == ("ddp", "does-not-fit")  # 7b x 16 bytes = 112 GB of states
    assert verdicts["fsdp"][:2] == ("fsdp", "fits") and verdicts["fsdp"][2] >= 4
    assert verdicts["deepspeed"][:2] == ("zero3", "fits") and verdicts["deepspeed"][2] == verdicts["fsdp"][2]
    assert resolve_model(_spec(tmp_path, "deepspeed"), tmp_path).micro_batch == 2


def test_explicit_sharding_wins_except_under_deepspeed(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "zero.json").write_text(json.dumps({"zero_optimization": {"stage": 1}}))
    assert resolve_model(_spec(tmp_path, "fsdp", sharding="zero2"), tmp_path).sharding == "zero2"
    assert resolve_model(_spec(tmp_path, "deepspeed", sharding="zero3"), tmp_path).sharding == "zero1"


def test_lora_trainable_params_shrink_gradients_and_optimizer():
    from slurmctl.config.models import ModelSpec

    full = estimate_memory(ModelSpec(params="7b"), "h100", data_parallel=1)
    lora = estimate_memory(ModelSpec(params="7b", trainable_params="40m"), "h100", data_parallel=1)
    assert lora.weights_gb == full.weights_gb == pytest.approx(14.0)
    assert lora.gradients_gb == pytest.approx(0.08) and lora.optimizer_gb == pytest.approx(0.48)
    assert full.verdict == "does-not-fit" or full.states_gb > 100
    assert lora.states_gb < 15


@pytest.mark.parametrize("content,message", [(None, "cannot be read"), ("{not json", "not valid JSON"),
                                             ('{"zero_optimization": {"stage": 5}}', "stage 5")])
def test_bad_deepspeed_config_is_a_finding_naming_the_file(tmp_path, local_site, content, message):
    if content is not None:
        (tmp_path / "conf").mkdir()
        (tmp_path / "conf" / "zero.json").write_text(content)
    result = check_memory(_spec(tmp_path, "deepspeed"), local_site, workdir=tmp_path)
    (finding,) = result.findings
    assert finding.code == "invalid-deepspeed-config" and message in finding.message
    assert "zero.json" in finding.message


def test_merge_refuses_a_run_without_an_adapter_or_base(tmp_path):
    from slurmctl.control.merge import merge_adapter
    from slurmctl.errors import MergeError
    from slurmctl.rundir import Run

    run = Run("ft-20261130-abcd", tmp_path)
    with pytest.raises(MergeError, match="no LoRA adapter") as exc:
        merge_adapter(run)
    assert exc.value.code == "merge-failed" and "finished hf-lora runs" in exc.value.hint
    adapter = tmp_path / "artifacts" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.raises(MergeError, match="gone has no config.json") as exc:
        merge_adapter(run)
    assert "--base-model" in exc.value.hint
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text("{}")
    (tmp_path / "artifacts" / "merged").mkdir()
    with pytest.raises(MergeError, match="already exists"):
        merge_adapter(run, base_model=tmp_path / "base")
