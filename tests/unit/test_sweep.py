"""Sweeps without Slurm: the grid's checks, the elements' specs, the array script, job ids of array
tasks, and how ls/status/compare read a sweep. The real array runs in tests/integration/test_sweep_real.py."""

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurmctl.config.models import RunSpec
from slurmctl.errors import SpecError
from slurmctl.observe.sweep import ElementStatus, SweepStatus, best_value, ls_entries, sweep_for
from slurmctl.rundir import Run, RunRegistry, sweep_element_id
from slurmctl.rundir.sweep import create_sweep_dir, find_sweep
from slurmctl.submit.render import render
from slurmctl.submit.submission import TEMPLATE, sbatch_context
from slurmctl.submit.sweep import element_spec, plan_sweep


def spec(**overrides) -> RunSpec:
    fields = {"name": "lrs", "entrypoint": "train.py", "partition": "h100-spot",
              "args": ["--lr", "0.1", "--seed=0", "--steps", "10"], "env": {"WARMUP": "5"}}
    return RunSpec(**{**fields, **overrides})


def test_grid_options_become_every_combination_in_order():
    plan = plan_sweep(spec(), ["lr=1e-4,3e-4", "seed=1,2,3"], max_parallel=2)
    assert plan.array == "0-5%2" and len(plan.combinations) == 6
    assert plan.combinations[0] == {"lr": "1e-4", "seed": "1"} and plan.combinations[5] == {"lr": "3e-4", "seed": "3"}
    assert plan_sweep(spec(), ["WARMUP=1,2"]).array == "0-1"  # no %N: Slurm runs as many as fit


def test_the_sweep_block_of_run_yaml_and_grid_options_replacing_it():
    with_block = spec(sweep={"grid": {"lr": [1e-4, "3e-4"], "seed": [1]}, "max_parallel": 1, "metric": "val/acc",
                             "goal": "max"})
    plan = plan_sweep(with_block)
    assert plan.grid == {"lr": ["0.0001", "3e-4"], "seed": ["1"]} and plan.array == "0-1%1"
    assert (plan.metric, plan.goal) == ("val/acc", "max")
    replaced = plan_sweep(with_block, ["seed=4,5,6"], max_parallel=3)
    assert replaced.grid == {"seed": ["4", "5", "6"]} and replaced.array == "0-2%3"


@pytest.mark.parametrize("options, words", [
    (["lr=1e-4,,3e-4"], "`lr` has an empty value"),
    (["lr="], "`lr` has an empty value"),
    (["lr=1e-4", "lr=3e-4"], "names `lr` twice"),
    (["lr=1,1"], "lists '1' twice"),
    (["lr"], "is not KEY=VALUE"),
    (["=1,2"], "is not KEY=VALUE"),
    (["l r=1"], "is not an option or environment variable name"),
    (["momentum=0.9"], "neither an option in `args`"),
    (["lr=" + ",".join(map(str, range(20))), "seed=" + ",".join(map(str, range(51)))], "1,020 combinations"),
    (["lr=a\nb"], "control character"),
])
def test_bad_grids_name_the_key_and_the_fix(options, words):
    with pytest.raises(SpecError) as info:
        plan_sweep(spec(), options)
    assert words in info.value.message and info.value.hint


def test_exactly_1000_elements_is_allowed_and_a_long_name_is_refused():
    grid = ["lr=" + ",".join(map(str, range(10))), "seed=" + ",".join(map(str, range(100)))]
    assert len(plan_sweep(spec(), grid).combinations) == 1000
    with pytest.raises(SpecError, match="too long for a sweep"):
        plan_sweep(spec(name="n" * 46), grid)
    with pytest.raises(SpecError, match="metric"):
        plan_sweep(spec(), ["lr=1"], metric="[red]loss")


def test_an_element_gets_its_values_in_args_and_env_its_name_and_own_checkpoint_dir():
    base = spec(checkpoint={"dir": "ckpt/"})
    element = element_spec(base, {"lr": "3e-4", "seed": "2", "WARMUP": "9"}, 4, "lrs-4-20261130-abcd")
    assert element.args == ["--lr", "3e-4", "--seed=2", "--steps", "10"] and element.env == {"WARMUP": "9"}
    assert element.name == "lrs-4" and element.sweep is None
    assert element.checkpoint.dir == "ckpt/lrs-4-20261130-abcd"
    assert element_spec(spec(), {"lr": "1"}, 0, "lrs-0-20261130-abcd").checkpoint.dir is None


def test_element_run_ids_and_the_output_pattern():
    assert sweep_element_id("lrs-20261130-abcd", 3) == "lrs-3-20261130-abcd"
    assert sweep_element_id("lrs-20261130-abcd", "%a") == "lrs-%a-20261130-abcd"
    with pytest.raises(ValueError):
        sweep_element_id("../x", 1)


def test_the_array_script_runs_element_i_for_task_i(local_site, tmp_path):
    base = spec()
    context = sbatch_context(base, local_site, "lrs-20261130-abcd", tmp_path / "lrs-%a-20261130-abcd", tmp_path)
    elements = []
    for i in range(3):
        script = tmp_path / f"el {i}" / "job.sbatch"  # a space: the exec line must quote it
        script.parent.mkdir()
        script.write_text(f"echo element {i} task $SLURM_ARRAY_TASK_ID\n")
        elements.append({"run_id": f"lrs-{i}-20261130-abcd", "script": str(script)})
    context["sweep"] = {"id": "lrs-20261130-abcd", "array": "0-2%2", "element_pattern": "x", "elements": elements}
    text = render(TEMPLATE, context)
    fake_bin = tmp_path / "bin"  # scontrol that records how the task names itself
    fake_bin.mkdir()
    (fake_bin / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/scontrol.log\n")
    (fake_bin / "scontrol").chmod(0o755)
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "SLURM_JOB_ID": "123", "SLURM_ARRAY_JOB_ID": "120"}
    assert "#SBATCH --array=0-2%2" in text
    assert f"#SBATCH --output={tmp_path}/lrs-%a-20261130-abcd/logs/%j.out" in text
    assert "torch.distributed.run" not in text  # only the dispatch: each element's own script trains
    commands = [line for line in text.split("#SBATCH --array", 1)[0].splitlines()[1:] if line.strip()]
    assert all(line.startswith("#") for line in commands)  # sbatch reads #SBATCH lines up to the first command
    for task in ("1", "2"):
        ran = subprocess.run(["bash", "-c", text.split("\n", 1)[1]], env={**env, "SLURM_ARRAY_TASK_ID": task},
                             capture_output=True, text=True)
        assert ran.stdout == f"element {task} task {task}\n", ran
    assert (tmp_path / "scontrol.log").read_text().splitlines() == [
        f"update JobId=120_{t} JobName=lrs-{t}-20261130-abcd Comment=slurmctl:lrs-{t}-20261130-abcd" for t in "12"]
    stray = subprocess.run(["bash", "-c", text], env={**env, "SLURM_ARRAY_TASK_ID": "7"}, capture_output=True,
                           text=True)
    assert stray.returncode == 2 and "no element of sweep" in stray.stderr


def test_a_plain_run_renders_no_array_lines(local_site, tmp_path):
    text = render(TEMPLATE, sbatch_context(spec(), local_site, "lrs-20261130-abcd", tmp_path / "r", tmp_path))
    assert "--array" not in text and "torch.distributed.run" in text


def _record(run: Run, event: str, **fields) -> None:
    run.record(event, **fields)


def test_an_element_is_found_by_the_array_id_until_it_starts_then_by_its_own(tmp_path):
    run = Run("lrs-0-20261130-abcd", tmp_path)
    _record(run, "submitted", job_id=100, array_task_id=0)
    assert run.job_ids() == [100]
    _record(run, "start", job_id=101, restart_count=0)
    _record(run, "start", job_id=101, restart_count=1)  # requeued: the task keeps its id
    assert run.job_ids() == [100, 101] and run.latest_job_id() == 101
    plain = Run("p-20261130-abcd", tmp_path / "p")
    plain.path.mkdir()
    _record(plain, "submitted", job_id=5)
    _record(plain, "start", job_id=5)
    _record(plain, "submitted", job_id=9)  # resume
    assert plain.job_ids() == [5, 9]


def test_best_value_and_ranking(tmp_path):
    run = Run("a-0-20261130-abcd", tmp_path)
    lines = [{"step": 0, "loss": 3.0}, {"step": 1, "loss": 1.5}, {"step": 2, "loss": float("nan")},
             {"step": 3, "loss": 2.0}, {"step": 4, "acc": 1}]
    run.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert best_value(run, "loss") == (1.5, 2.0, 1)
    assert best_value(run, "loss", "max") == (3.0, 2.0, 0)
    assert best_value(run, "missing") == (None, None, None)
    status = SweepStatus("a-20261130-abcd", "a", 1, "loss", "min", [
        ElementStatus(i, f"a-{i}-20261130-abcd", {}, "finished", "COMPLETED", i, 1, 0, best, best, 1, 1)
        for i, best in enumerate([2.0, None, 1.0, 2.0])])
    assert [e.index for e in status.ranked()] == [2, 0, 3]
    status.goal = "max"
    assert [e.index for e in status.ranked()] == [0, 3, 2]


def _element(root: Path, sweep_id: str, index: int) -> Run:
    run_id = sweep_element_id(sweep_id, index)
    path = root / run_id
    path.mkdir(mode=0o700)
    (path / "run.json").write_text(json.dumps({"run_id": run_id, "sweep_id": sweep_id, "array_index": index}))
    run = Run(run_id, path)
    run.record("submitted", job_id=77, array_task_id=index)
    return run


def test_ls_groups_a_sweeps_elements_under_one_header(tmp_path):
    plain = tmp_path / "p-20261130-0000"
    plain.mkdir()
    (plain / "run.json").write_text("{}")
    runs = [Run("p-20261130-0000", plain)] + [_element(tmp_path, "s-20261130-abcd", i) for i in (1, 0)]
    statuses = [SimpleNamespace(run_id=r.run_id, run_dir=str(r.path), phase=p)
                for r, p in zip(runs, ["finished", "training", "queued"])]
    entries = ls_entries([statuses[1], statuses[0], statuses[2]])
    assert [label for _, _, _, label in entries] == ["s-20261130-abcd", "  s-0-20261130-abcd", "  s-1-20261130-abcd",
                                                     "p-20261130-0000"]
    header = entries[0][2]
    assert header[:3] == ("s-20261130-abcd", "77", "sweep") and header[-1] == "2 element(s): 1 queued, 1 training"


def test_sweep_for_finds_a_sweep_by_id_or_name_and_leaves_runs_alone(tmp_path):
    registry = RunRegistry(tmp_path)
    registry.user_dir(create=True)
    sweep = create_sweep_dir(registry, "s-20261130-abcd")
    sweep.meta_path.write_text(json.dumps({"sweep_id": "s-20261130-abcd", "name": "s", "elements": []}))
    run = registry.root / "r-20261130-0000"
    run.mkdir(mode=0o700)
    (run / "run.json").write_text(json.dumps({"run_id": "r-20261130-0000", "name": "r"}))
    assert sweep_for(registry, "s-20261130-abcd").path == sweep.path
    assert sweep_for(registry, "s").path == sweep.path  # its name
    assert sweep_for(registry, "r-20261130-0000") is None and sweep_for(registry, "r") is None
    assert find_sweep(registry, "nothing") is None and sweep_for(registry, "nothing") is None
    newer = create_sweep_dir(registry, "s-20261201-0000")
    newer.meta_path.write_text(json.dumps({"sweep_id": "s-20261201-0000", "name": "s", "created": 5}))
    assert sweep_for(registry, "s").path == newer.path  # the newest sweep of that name


class _TaskRunner:
    """squeue answers for one pending array task until scancel named exactly that task."""

    def __init__(self):
        self.calls, self.cancelled = [], False

    def run(self, argv, timeout=60.0):
        from slurmctl.slurm.runner import CommandResult

        self.calls.append(list(argv))
        if argv[0] == "scancel":
            self.cancelled = True
        out = "PENDING\n" if argv[0] == "squeue" and not self.cancelled else ""
        return CommandResult(tuple(argv), 0, out, "")


def test_a_waiting_element_is_cancelled_as_its_own_task_never_the_whole_array(tmp_path):
    from slurmctl.control.cancel import cancel_run
    from slurmctl.slurm.client import SlurmClient

    run = Run("lrs-2-20261130-abcd", tmp_path)
    run.record("submitted", job_id=100, array_task_id=2)
    assert run.waiting_array_task() == (100, 2)
    runner = _TaskRunner()
    result = cancel_run(run, SlurmClient(runner), poll=0.01)
    assert result.verified and result.final_state == "CANCELLED"
    assert ["scancel", "100_2"] in runner.calls and ["scancel", "100"] not in runner.calls
    assert ["squeue", "-h", "-j", "100_2", "-o", "%T"] in runner.calls
    run.record("start", job_id=104)
    assert run.waiting_array_task() is None  # started: its own job id (104) is cancelled as any run's


def test_array_task_states_reads_one_line_per_task():
    from slurmctl.slurm.client import SEP, SlurmClient
    from slurmctl.slurm.runner import CommandResult

    class Runner:
        def run(self, argv, timeout=60.0):
            assert argv == ["squeue", "-h", "-r", "-j", "100", "-o", f"%K{SEP}%T"]
            return CommandResult(tuple(argv), 0, f"0{SEP}RUNNING\n3{SEP}PENDING\nN/A{SEP}PENDING\n", "")

    assert SlurmClient(Runner()).array_task_states(100) == {0: "RUNNING", 3: "PENDING"}


def test_inside_an_array_task_slurm_calls_name_the_task_never_the_array():
    from slurmctl.slurm.client import job_ref, job_ref_from_env

    task = {"SLURM_JOB_ID": "120", "SLURM_ARRAY_JOB_ID": "120", "SLURM_ARRAY_TASK_ID": "5"}  # the last task
    assert job_ref_from_env(task) == "120_5" and job_ref_from_env({"SLURM_JOB_ID": "7"}) == 7
    assert job_ref("120_5") == "120_5" and job_ref(7) == "7"
    with pytest.raises(ValueError):
        job_ref("120_5; rm -rf /")
