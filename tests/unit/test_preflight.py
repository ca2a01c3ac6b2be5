"""Each preflight check: a failing fixture that yields exactly its finding code, and a passing one.

The cluster view mirrors the local cluster as `sinfo` and `sacctmgr` reported it (deploy/local,
Slurm 22.05.8): h100-[1-3] with gpu:h100:8 in h100-ondemand and h100-spot (MaxTime 7 days),
l4-1 with gpu:l4:1 in l4-dev (MaxTime 4 h); user root has ml-research and root (QOS normal).
"""

import os
import sys
from pathlib import Path

import pytest

from slurmctl.config.models import RunSpec
from slurmctl.errors import PreflightError, PreflightFailed
from slurmctl.slurm.client import Association, NodeInfo, PartitionInfo
from slurmctl.submit.preflight import ClusterView, raise_on_errors, run_preflight, secret_leaks

H100 = ["h100-ondemand", "h100-spot"]
VIEW = ClusterView(
    nodes=[NodeInfo(f"h100-{i}", list(H100), "h100", 8, 8, 32000, "idle") for i in (1, 2, 3)]
    + [NodeInfo("l4-1", ["l4-dev"], "l4", 1, 4, 16000, "idle")],
    partitions={"h100-ondemand": PartitionInfo("h100-ondemand", 7 * 86400),
                "h100-spot": PartitionInfo("h100-spot", 7 * 86400), "l4-dev": PartitionInfo("l4-dev", 4 * 3600)},
    associations=[Association("ml-research", ["normal"]), Association("root", ["normal"])],
)
DIGEST = "registry.local/team/train@sha256:" + "a" * 64


@pytest.fixture
def site(local_site, tmp_path):
    return local_site.model_copy(update={"python": sys.executable, "secrets_file": str(tmp_path / "secrets.env")})


@pytest.fixture
def workdir(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("import os\nimport yaml\nimport helpers\n")
    (code / "helpers.py").write_text("")
    return code


def spec(**fields):
    return RunSpec(**{"name": "t", "entrypoint": "train.py", "partition": "l4-dev", **fields})


def codes(the_spec, site, workdir, view=VIEW, **kwargs):
    report = run_preflight(the_spec, site, view, workdir, user="root", **kwargs)
    return sorted(f.code for f in report.findings)


def test_clean_spec_passes_every_check(site, workdir):
    report = run_preflight(spec(), site, VIEW, workdir, user="root")
    assert report.findings == [] and all(c.status == "ok" for c in report.checks)
    assert len(report.checks) == 13


@pytest.mark.parametrize("fields", [
    {"env": {"MLFLOW_TRACKING_URI": "${TRACKING_URI}"}},
    {"args": ["--out", "$OUTPUT_DIR"]},
    {"data": ["${DATA_ROOT}/train"]},
])
def test_unresolved_placeholder_in_spec(site, workdir, fields):
    assert codes(spec(**fields), site, workdir) == ["unresolved-variable"]


def test_unresolved_placeholder_in_config_file_names_file_and_line(site, workdir):
    (workdir / "train.yaml").write_text("# ${COMMENTED} is fine\nlr: 0.1\ntracking_uri: ${TRACKING_URI}\n")
    report = run_preflight(spec(config_files=["train.yaml"]), site, VIEW, workdir, user="root")
    [finding] = report.findings
    assert finding.code == "unresolved-variable" and "train.yaml line 3" in finding.message
    assert "${TRACKING_URI}" in finding.message


@pytest.mark.parametrize("name,text,code", [
    ("missing.yaml", None, "missing-config-file"),
    ("bad.json", '{"lr": 0.1,,}', "invalid-config-file"),
    ("bad.toml", "lr = = 1", "invalid-config-file"),
    ("bad.yaml", "a: [1,\n", "invalid-config-file"),
    (".env", "GOOD=1\nnot a pair\n", "invalid-config-file"),
])
def test_config_files_must_exist_and_parse(site, workdir, name, text, code):
    if text is not None:
        (workdir / name).write_text(text)
    assert codes(spec(config_files=[name]), site, workdir) == [code]


def test_good_config_files_pass(site, workdir):
    (workdir / "a.json").write_text('{"lr": 0.1}')
    (workdir / "b.toml").write_text("lr = 0.1\n")
    (workdir / "c.env").write_text("export LR=0.1\n")
    assert codes(spec(config_files=["a.json", "b.toml", "c.env"]), site, workdir) == []


def test_missing_entrypoint_and_syntax_error(site, workdir):
    assert codes(spec(entrypoint="nope.py"), site, workdir) == ["missing-entrypoint"]
    (workdir / "broken.py").write_text("def f(:\n")
    assert codes(spec(entrypoint="broken.py"), site, workdir) == ["entrypoint-syntax"]


def test_missing_import_names_module_and_line(site, workdir):
    (workdir / "train.py").write_text("import os\n\nfrom no_such_pkg_zz.sub import thing\n"
                                      "try:\n    import optional_zz\nexcept ImportError:\n    pass\n")
    report = run_preflight(spec(), site, VIEW, workdir, user="root")
    [finding] = report.findings
    assert finding.code == "missing-import" and "line 3" in finding.message and "`no_such_pkg_zz`" in finding.message


def test_imports_unverifiable_when_python_is_missing(site, workdir):
    assert codes(spec(python="/nonexistent/python3"), site, workdir) == ["cannot-verify-imports"]


def test_data_paths(site, workdir, tmp_path):
    (tmp_path / "data").mkdir()
    assert codes(spec(data=[str(tmp_path / "data")]), site, workdir) == []
    assert codes(spec(data=["nowhere/train"]), site, workdir) == ["missing-data"]


CHECK_DATA = r"""
import sys
from pathlib import Path
from slurmctl.submit.preflight.files import check_data
from slurmctl.config.models import RunSpec
spec = RunSpec(name="t", entrypoint="train.py", partition="l4-dev", data=sys.argv[1:])
print(" ".join(sorted(f.code for f in check_data(spec, Path("/")).findings)) or "-")
"""


def _data_codes_as_user(paths: list[Path]) -> list[str]:
    """check_data run by a real unprivileged user (alice where deploy/local/up made her, else nobody)."""
    import pwd
    import subprocess

    try:
        user = pwd.getpwnam("alice").pw_name
    except KeyError:
        user = "nobody"
    done = subprocess.run(["runuser", "-u", user, "--", sys.executable, "-c", CHECK_DATA, *map(str, paths)],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_unreadable_data(site, workdir, tmp_path):
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o000)
        assert codes(spec(data=[str(locked)]), site, workdir) == ["unreadable-data"]
        return
    # Root reads anything: CI runs as root, so the check runs as a real user on root's private dir.
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="preflight-data-", dir="/tmp"))
    try:
        base.chmod(0o755)
        (base / "open").mkdir(mode=0o755)
        (base / "locked").mkdir(mode=0o700)
        assert _data_codes_as_user([base / "open"]) == ["-"]
        assert _data_codes_as_user([base / "locked"]) == ["unreadable-data"]
    finally:
        shutil.rmtree(base)


def test_remote_data_through_fsspec(site, workdir):
    fsspec = pytest.importorskip("fsspec")
    with fsspec.open("memory://bucket/train/part-0", "w") as fh:
        fh.write("x")
    assert codes(spec(data=["memory://bucket/train/part-0"]), site, workdir) == []
    assert codes(spec(data=["memory://bucket/missing"]), site, workdir) == ["missing-data"]


def test_remote_data_without_backend_is_a_warning(site, workdir, monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec -> ImportError
    report = run_preflight(spec(data=["gs://bucket/train"]), site, VIEW, workdir, user="root")
    assert [(f.code, f.level) for f in report.findings] == [("cannot-verify-data", "warning")]


def write_secrets(site, text, mode=0o600):
    path = Path(site.secrets_file)
    path.write_text(text)
    path.chmod(mode)


def test_secrets_file_checks(site, workdir):
    the_spec = spec(secrets=["WANDB_API_KEY", "HF_TOKEN"])
    assert codes(the_spec, site, workdir) == ["secrets-file-missing"]
    write_secrets(site, "WANDB_API_KEY=abc123\nHF_TOKEN=hf_xyz\n", mode=0o644)
    assert codes(the_spec, site, workdir) == ["secrets-file-mode"]
    write_secrets(site, "WANDB_API_KEY=abc123\n")
    assert codes(the_spec, site, workdir) == ["secrets-missing-key"]
    write_secrets(site, "WANDB_API_KEY=abc123\nHF_TOKEN=hf_xyz\n")
    assert codes(the_spec, site, workdir) == []


def test_secret_value_in_script_is_found(site):
    write_secrets(site, "HF_TOKEN=hf_secret_value\n")
    the_spec = spec(secrets=["HF_TOKEN"])
    assert secret_leaks("export HF_TOKEN=x\n", the_spec, site) == []
    [leak] = secret_leaks("export TOKEN=hf_secret_value\n", the_spec, site)
    assert leak.code == "secret-in-script" and "hf_secret_value" not in leak.message


@pytest.mark.parametrize("image", ["nvcr.io/nvidia/pytorch:latest", "ghcr.io/team/train", "ghcr.io/team/train:v1"])
def test_mutable_image_refused_unless_allowed(site, workdir, image):
    report = run_preflight(spec(image=image), site, VIEW, workdir, user="root")
    found = [(f.code, f.level) for f in report.findings if f.code != "cannot-verify-imports"]
    assert found == [("mutable-image", "error")]
    report = run_preflight(spec(image=image), site, VIEW, workdir, user="root", allow_mutable_image=True)
    assert ("mutable-image", "warning") in [(f.code, f.level) for f in report.findings]


def test_digest_pinned_image_passes(site, workdir):
    assert codes(spec(image=DIGEST), site, workdir) == ["cannot-verify-imports"]  # a warning: checked by --smoke


@pytest.mark.parametrize("fields,code", [
    ({"partition": "h100-ondemandd"}, "unknown-partition"),
    ({"gpu_type": "a100"}, "gpu-type-mismatch"),
    ({"partition": "h100-ondemand", "gpus_per_node": 16}, "too-many-gpus"),
    ({"partition": "h100-ondemand", "nodes": 4, "gpus_per_node": 8}, "too-many-nodes"),
    ({"time_limit": "5h"}, "time-limit-too-long"),
])
def test_cluster_shape_and_limits(site, workdir, fields, code):
    assert codes(spec(**fields), site, workdir) == [code]


def test_a_partition_without_nodes_exists_and_an_autoscaled_pool_is_checked_by_its_size(site, workdir):
    """A pool scaled to zero: sinfo lists the partition (view.partitions) but no node is in it."""
    empty_spot = ClusterView([NodeInfo(n.name, [p for p in n.partitions if p != "h100-spot"], n.gpu_type, n.gpus,
                                       n.cpus, n.memory_mb, n.state) for n in VIEW.nodes],
                             VIEW.partitions, VIEW.associations)
    on_spot = spec(partition="h100-spot", gpus_per_node=8, nodes=2)
    # a fixed partition with no node: it exists, nothing fits
    assert codes(on_spot, site, workdir, view=empty_spot) == ["too-many-gpus"]
    parts = dict(site.partitions)
    parts["h100-spot"] = parts["h100-spot"].model_copy(update={"max_nodes": 8})
    scaled = site.model_copy(update={"partitions": parts})
    assert codes(on_spot, scaled, workdir, view=empty_spot) == []  # the pool scales up to 8 nodes of 8 GPUs
    assert codes(spec(partition="h100-spot", gpus_per_node=8, nodes=9), scaled, workdir, view=empty_spot) == [
        "too-many-nodes"]
    assert codes(spec(partition="h100-spot", gpus_per_node=16), scaled, workdir, view=empty_spot) == ["too-many-gpus"]
    # a partition Slurm does not have is still unknown
    gone = ClusterView(empty_spot.nodes, {k: v for k, v in VIEW.partitions.items() if k != "h100-spot"},
                       VIEW.associations)
    assert codes(on_spot, scaled, workdir, view=gone) == ["unknown-partition"]


def test_account_must_be_associated(site, workdir):
    assert codes(spec(), site.model_copy(update={"account": "physics"}), workdir) == ["account-not-allowed"]
    unknown = ClusterView(VIEW.nodes, VIEW.partitions, associations=None)
    with_account = site.model_copy(update={"account": "ml-research"})
    assert codes(spec(), with_account, workdir, view=unknown) == ["cannot-verify-account"]


def test_memory_does_not_fit_then_fits_sharded(site, workdir):
    seven_b = {"params": "7b", "precision": "bf16", "optimizer": "adamw"}
    dense = spec(partition="h100-ondemand", gpus_per_node=8, model={**seven_b, "sharding": "ddp"})
    report = run_preflight(dense, site, VIEW, workdir, user="root")
    [finding] = report.findings
    assert finding.code == "memory-does-not-fit" and "model states alone" in finding.message
    sharded = spec(partition="h100-ondemand", gpus_per_node=8,
                   model={**seven_b, "sharding": "fsdp", "micro_batch": 2, "seq_len": 4096, "hidden_size": 4096,
                          "num_layers": 32})
    report = run_preflight(sharded, site, VIEW, workdir, user="root")
    memory = next(c for c in report.checks if c.name == "memory")
    assert memory.status == "ok" and memory.note.startswith("fits") and "max safe micro-batch ≈ 3" in memory.note
    too_big = sharded.model_copy(update={"model": sharded.model.model_copy(update={"micro_batch": 64})})
    assert codes(too_big, site, workdir) == ["memory-does-not-fit"]


def test_memory_of_unknown_gpu_is_a_warning(site, workdir):
    site = site.model_copy(update={"partitions": {**site.partitions, "l4-dev": site.partitions["l4-dev"].model_copy(
        update={"gpu_type": "mystery"})}})
    view = ClusterView([NodeInfo("l4-1", ["l4-dev"], "mystery", 1)], VIEW.partitions, VIEW.associations)
    assert codes(spec(model={"params": "1b"}), site, workdir, view=view) == ["unknown-gpu-memory"]
    assert codes(spec(model={"params": "lots"}), site, workdir) == ["invalid-model-size"]


def test_nccl_override_names_the_variable(site, workdir):
    report = run_preflight(spec(env={"NCCL_IB_DISABLE": "0", "NCCL_ALGO": "Ring", "HF_HOME": "/x"}), site, VIEW,
                           workdir, user="root")
    assert [(f.code, f.level) for f in report.findings] == [("nccl-override", "warning")] * 2
    assert "NCCL_IB_DISABLE" in report.findings[0].message and "NCCL_ALGO" in report.findings[1].message
    assert codes(spec(env={"NCCL_IB_DISABLE": "1"}), site, workdir) == []  # same as the platform's value


def test_three_problems_are_reported_at_once(site, workdir):
    bad = spec(entrypoint="nope.py", env={"URI": "${TRACKING_URI}"}, time_limit="6h")
    report = run_preflight(bad, site, VIEW, workdir, user="root")
    with pytest.raises(PreflightFailed) as caught:
        raise_on_errors(report)
    exc = caught.value
    assert isinstance(exc, PreflightError) and exc.code == "preflight-failed"
    assert "3 problems" in exc.message and "(3)" in exc.message
    assert sorted(f["code"] for f in exc.to_dict()["findings"]) == ["missing-entrypoint", "time-limit-too-long",
                                                                     "unresolved-variable"]


@pytest.mark.parametrize("name", ["WANDB_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "OPENAI_APIKEY",
                                  "github_token", "MY_SECRETS", "SMTP_PASSWD"])
def test_credential_in_env_is_an_error_pointing_to_secrets(site, workdir, name):
    report = run_preflight(spec(env={name: "hunter2-value"}), site, VIEW, workdir, user="root")
    assert [f.code for f in report.findings] == ["credential-in-env"]
    finding = report.findings[0]
    assert f"env.{name}" in finding.message and "job.sbatch" in finding.message
    assert "secrets:" in finding.hint and str(site.secrets_file) in finding.hint


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "HF_HOME", "KEYBOARD", "OMP_NUM_THREADS"])
def test_ordinary_env_names_are_not_credentials(site, workdir, name):
    assert codes(spec(env={name: "1"}), site, workdir) == []


def _planted_interpreter(workdir, marker):
    tool = workdir / "tools.sh"
    tool.write_text(f"#!/bin/sh\ntouch {marker}\necho '[]'\n")
    tool.chmod(0o755)
    return tool


@pytest.mark.parametrize("how", ["relative", "absolute", "symlink-outside-to-inside"])
def test_preflight_never_runs_a_python_from_the_workdir(site, workdir, tmp_path, how):
    marker = tmp_path / "executed"
    tool = _planted_interpreter(workdir, marker)
    python = {"relative": "./tools.sh", "absolute": str(tool)}.get(how)
    if python is None:
        link = tmp_path / "python3"
        link.symlink_to(tool)
        python = str(link)
    report = run_preflight(spec(python=python), site, VIEW, workdir, user="root")
    assert [f.code for f in report.findings] == ["cannot-verify-imports"]
    assert "code directory" in report.findings[0].message
    assert not marker.exists()


def test_preflight_runs_the_site_python_outside_the_workdir(site, workdir):
    # the control for the test above: an interpreter outside the code is still used (yaml resolves)
    report = run_preflight(spec(), site, VIEW, workdir, user="root")
    imports = next(c for c in report.checks if c.name == "imports")
    assert imports.status == "ok" and "found by" in imports.note


def test_force_does_not_override_a_credential_in_env(site, workdir):
    report = run_preflight(spec(env={"HF_TOKEN": "hf_abc", "NCCL_DEBUG": "INFO"}, entrypoint="missing.py"), site, VIEW,
                           workdir, user="root")
    assert report.must_stop(force=False) and report.must_stop(force=True)
    assert [f.code for f in report.unforceable] == ["credential-in-env"]
    with pytest.raises(PreflightFailed) as info:
        raise_on_errors(report)
    assert "does not override" in info.value.hint
    other = run_preflight(spec(entrypoint="missing.py"), site, VIEW, workdir, user="root")
    assert other.must_stop(force=False) and not other.must_stop(force=True)
