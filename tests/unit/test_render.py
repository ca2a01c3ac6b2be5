"""Golden-file test of the rendered sbatch script, plus quoting of hostile input."""

import os
import subprocess
from pathlib import Path

from slurmctl.config.models import RunSpec
from slurmctl.submit.render import render
from slurmctl.submit.submission import TEMPLATE, sbatch_context

GOLDEN = Path(__file__).parent / "golden" / "torchrun.sbatch"


def context(local_site, **overrides):
    fields = dict(name="tiny-lm", entrypoint="train.py", args=["--steps", "600"], nodes=2, gpus_per_node=2,
                  gpu_type="h100", partition=["h100-spot", "h100-ondemand"], time_limit="15m",
                  env={"HF_HOME": "/data/hf cache"}, secrets=["WANDB_API_KEY"],
                  tracking={"backend": "wandb", "project": "tiny"})
    spec = RunSpec(**{**fields, **overrides})
    # account set here, not taken from deploy/local: the golden file covers the --account line
    local_site = local_site.model_copy(update={"secrets_file": "/home/alice/.config/slurmctl/secrets.env",
                                               "account": "ml-research"})
    return sbatch_context(spec, local_site, "tiny-lm-20261129-abcd", Path("/runs/tiny-lm-20261129-abcd"),
                          Path("/home/alice/tiny-lm"))


def test_rendered_script_matches_golden(local_site):
    script = render(TEMPLATE, context(local_site))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(script)
    assert script == GOLDEN.read_text(), "rendered script changed; rerun with UPDATE_GOLDEN=1 and review the diff"


def test_script_has_the_contract_lines(local_site):
    script = render(TEMPLATE, context(local_site))
    for line in ["#SBATCH --job-name=tiny-lm-20261129-abcd", "#SBATCH --comment=slurmctl:tiny-lm-20261129-abcd",
                 "#SBATCH --partition=h100-spot,h100-ondemand", "#SBATCH --gres=gpu:h100:2",
                 "#SBATCH --signal=B:USR1@60", "#SBATCH --no-requeue", "#SBATCH --open-mode=append",
                 "--nproc-per-node=2", "--rdzv-backend=static", "export WANDB_RUN_ID=tiny-lm-20261129-abcd",
                 "export WANDB_RESUME=allow", "export NCCL_SOCKET_IFNAME=lo"]:
        assert line in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    # the c10d (dynamic) rendezvous unpickles what its unauthenticated store holds: never launched
    assert "c10d" not in script.split("while :; do", 1)[1]


def test_each_node_launches_static_rendezvous_with_its_rank_and_no_port_on_the_command_line(local_site, tmp_path):
    """The launch through a real bash and /bin/sh, as srun runs it on node 3 (no shell of its own)."""
    script = render(TEMPLATE, context(local_site, args=["--steps", "$(touch pwned)", "it's"]))
    launch = script.split("srun --kill-on-bad-exit=1 --ntasks-per-node=1 \\\n", 1)[1].split(" &\n", 1)[0]
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/bin/sh\necho "PET_NODE_RANK=$PET_NODE_RANK PET_RDZV_ENDPOINT=$PET_RDZV_ENDPOINT"\n'
                           'printf \'%s\\n\' "$@"\n')
    fake_python.chmod(0o755)
    probe = (f"srun() {{ env SLURM_NODEID=3 \"$@\"; }}\nPY={fake_python}\nSLURM_JOB_NUM_NODES=4 SLURM_JOB_ID=77\n"
             f"export PET_RDZV_ENDPOINT=h100-1:23456\nsrun {launch}\n")
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    lines = out.splitlines()
    assert lines[0] == "PET_NODE_RANK=3 PET_RDZV_ENDPOINT=h100-1:23456"
    assert lines[1:] == ["-m", "torch.distributed.run", "--nnodes=4", "--nproc-per-node=2", "--rdzv-backend=static",
                         "--rdzv-id=77", "--max-restarts=0", "--tee=3", "train.py", "--steps", "$(touch pwned)", "it's"]
    assert not (tmp_path / "pwned").exists()


def test_the_rendezvous_port_is_picked_before_each_launch_never_computed(local_site):
    script = render(TEMPLATE, context(local_site))
    loop = script.split("while :; do\n", 1)[1]
    assert loop.startswith('MASTER_PORT=$("$PY" -m slurmctl.runtime.rendezvous port) || { rc=$?; break; }\n')
    assert "SLURM_JOB_ID %" not in script and "MASTER_PORT=$((" not in script


def test_hostile_args_and_env_are_quoted_not_executed(local_site, tmp_path):
    marker = tmp_path / "pwned"
    hostile = [f"$(touch {marker})", f"`touch {marker}`", "it's", 'a"b', "glob * ?", "; touch " + str(marker)]
    spec_ctx = context(local_site, args=hostile, env={"EVIL": f"$(touch {marker})"})
    script = render(TEMPLATE, spec_ctx)
    # Execute only the quoted words: the env export line and the argument list, through a real bash.
    export_line = next(line for line in script.splitlines() if line.startswith("export EVIL="))
    arg_words = script.split("train.py", 1)[1].split(" &\n", 1)[0]
    probe = f"{export_line}\nprintf '%s\\0' \"$EVIL\" {arg_words}"
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split("\0")[:-1] == [f"$(touch {marker})", *hostile]
    assert not marker.exists()


def test_secret_values_never_in_script(local_site):
    script = render(TEMPLATE, context(local_site))
    assert "slurmctl.runtime.secrets" in script and "WANDB_API_KEY" in script
    assert "WANDB_API_KEY=" not in script


# --- values that would break out of their line: refused, by validation and again at render ---
import pytest  # noqa: E402

from slurmctl.errors import SpecError  # noqa: E402
from slurmctl.submit.render import check_context  # noqa: E402


@pytest.mark.parametrize("key, value, field", [
    ("workdir", "/home/alice/x\n#SBATCH --uid=0", "`workdir`"),
    ("run_id", "evil\n", "run id"),
    ("gpu_type", "h100\nexport X=1", "`gpu_type`"),
    ("partitions", ["l4-dev\n#SBATCH --qos=high"], "`partition`"),
    ("python", "/usr/bin/python3\r", "`python`"),
    ("env", {"GOOD": "a\nb"}, "`env` GOOD"),
    ("env", {"BAD\n": "a"}, "a key of `env`"),
    ("args", ["ok", "x\x00y"], "`args`"),
    ("checkpoint_dir", "/ck\u2028x", "`checkpoint.dir`"),
])
def test_render_refuses_control_characters_and_names_the_field(local_site, key, value, field):
    ctx = {**context(local_site), key: value}
    with pytest.raises(SpecError) as info:
        render(TEMPLATE, ctx)
    assert field in info.value.message and "control character" in info.value.message
    assert "one line" in info.value.hint


@pytest.mark.parametrize("key, value", [("workdir", "/home/alice/My Project"), ("run_dir", "/runs/a'b")])
def test_sbatch_line_values_must_be_single_words(local_site, key, value):
    with pytest.raises(SpecError, match="#SBATCH line"):
        check_context({**context(local_site), key: value})


def test_finalize_guard_catches_what_the_context_check_missed(local_site, tmp_path):
    # a template that computes a value with a line break: no context value has one
    (tmp_path / "t.j2").write_text("#SBATCH --job-name={{ 'a' ~ sep ~ 'b' }}\n")
    from slurmctl.submit.render import environment

    with pytest.raises(SpecError, match="refusing to render"):
        environment(tmp_path).get_template("t.j2").render(sep="\n")


def test_spec_with_newlines_never_reaches_render():
    for fields in ({"name": "evil\n"}, {"env": {"A\n": "1"}}, {"env": {"A": "1\nreboot"}},
                   {"workdir": "/tmp/a\nb"}, {"gpu_type": "h100\n"}, {"partition": "l4-dev\n"}):
        with pytest.raises(ValueError):
            RunSpec(**{"name": "a", "entrypoint": "train.py", "partition": "l4-dev", **fields})


def test_datasets_are_exported_and_staged_before_the_training(local_site):
    script = render(TEMPLATE, context(local_site, data=[
        "/data/local", {"src": "s3://slurmctl-datasets/synthetic", "name": "shards"},
        {"src": "s3://slurmctl-datasets/eval", "cache": "none"}]))
    user = __import__("pwd").getpwuid(os.geteuid()).pw_name
    cache = local_site.data.node_cache_dir
    assert f"export SLURMCTL_DATA_SHARDS={cache}/{user}/views/tiny-lm-20261129-abcd/shards\n" in script
    assert "export SLURMCTL_DATA_EVAL=s3://slurmctl-datasets/eval\n" in script
    stage = script.index('srun --ntasks-per-node=1 --kill-on-bad-exit=1 "$PY" -m slurmctl.runtime.datastage stage')
    assert stage < script.index("torch.distributed.run") and stage > script.index("attempt start")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    plain = render(TEMPLATE, context(local_site, data=[{"src": "s3://b-1/x", "cache": "none"}]))
    assert "slurmctl.runtime.datastage stage" not in plain  # nothing to stage
