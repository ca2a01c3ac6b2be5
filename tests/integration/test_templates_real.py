"""The run templates on the real cluster, as alice: `slurmctl init --template T`, then the example
training it writes, 2 nodes x 2 processes, through `slurmctl submit`.

- fsdp: preempted on a spot node (bob's on-demand job), drained with a sharded DCP checkpoint,
  requeued and resumed on 4 ranks; then the same code on 1 node x 2 processes continues from that
  checkpoint (resharded onto another world size).
- hf-lora: Trainer + LoRA preempted the same way (the drain goes through the Trainer callback),
  resumed, finished; its adapter artifact merged with `slurmctl merge`.
- deepspeed: ZeRO-2 on CPU (gloo), to completion with ZeRO-sharded checkpoints.

Requeued jobs would wait ~120 s in PENDING(BeginTime); the tests start them at once as an
operator (conftest.start_requeued_now). The models are tiny and the steps few: each test takes
well under a minute of training.
"""

import json
import time
from pathlib import Path

import yaml

from .conftest import as_user, slurmctl, slurmctl_json, start_requeued_now, wait_for_state, write_run

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
SMALL_LM = ["--width", "32", "--layers", "2", "--heads", "4", "--seq-len", "16", "--vocab", "128"]


def init(workdir: Path, template: str, name: str, args: list[str], **fields) -> Path:
    """`slurmctl init` as alice, then the run.yaml changes a user would make (size, partition)."""
    directory = workdir / name
    slurmctl("init", name, "--template", template, "--dir", str(directory))
    spec = yaml.safe_load((directory / "run.yaml").read_text())
    assert spec["template"] == template
    spec.update(args=args, gpu_type="h100", time_limit="5m", **fields)
    return write_run(directory, spec)


def events(run_dir: str, kind: str) -> list[dict]:
    lines = (Path(run_dir) / "attempts.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def wait_for(predicate, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def log_text(run_dir: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((Path(run_dir) / "logs").glob("*.out")))


def metrics(run_dir: str) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def preempt_and_resume(run: dict, ck_root: Path) -> dict:
    """bob's on-demand job takes h100-3 once the spot run has a valid checkpoint; the run drains,
    is requeued, started at once, and finishes. Returns the preempted attempt's end event."""
    # Two whole spot nodes are alice's whole GPU limit (16): the job waits while other tests hold GPUs.
    wait_for(lambda: (ck_root / "latest").exists(), "the spot run's first checkpoint", timeout=300)
    bob = as_user("bob")
    job = bob.sbatch("-p", "h100-ondemand", "-w", "h100-3", "--gres=gpu:h100:8", "-t", "1", "-J", "tpl-preemptor",
                     "-o", "/dev/null", "--wrap", "sleep 2")
    try:
        end = wait_for(lambda: events(run["run_dir"], "end"), "the preempted attempt's end", timeout=90)[0]
        assert (end["outcome"], end["action"], end["drain_acked"]) == ("preemption", "requeue", True), end
        start_requeued_now(run["job_id"])
        status = wait_for_state(run["run_id"], ENDED, timeout=150)
    finally:
        bob.scancel(job)
    assert status["state"] == "COMPLETED", log_text(run["run_dir"])[-3000:]
    starts = events(run["run_dir"], "start")
    assert [s["restart_count"] for s in starts] == [0, 1] and starts[1]["resume_step"] == end["checkpoint_step"]
    return end


def test_fsdp_preempted_on_4_ranks_resumes_then_continues_on_2(workdir):
    began = time.monotonic()
    ckpt = {"interval_steps": 10, "keep_last": 2, "dir": "ckpt"}  # in the code folder: both submissions share it
    spot = dict(partition="h100-spot", nodes=2, gpus_per_node=8, procs_per_node=2, checkpoint=ckpt)
    path = init(workdir, "fsdp", "tpl-fsdp", ["--steps", "40", "--sleep", "0.05", "--micro-batch", "8", "--lr", "1e-2",
                                              *SMALL_LM], **spot)
    run = slurmctl_json("submit", path, "--", "--nodelist=h100-3")
    ck_root = path.parent / "ckpt"
    end = preempt_and_resume(run, ck_root)
    drained = ck_root / f"checkpoint-{end['checkpoint_step']}"
    final = ck_root / "checkpoint-39"
    for ck in (final,) + ((drained,) if drained.exists() else ()):  # keep_last may have pruned the drained one
        assert json.loads((ck / ".complete").read_text())["world_size"] == 4
        assert sorted(p.name for p in ck.glob("*.distcp")) == [f"__{r}_0.distcp" for r in range(4)]
    four = metrics(run["run_dir"])
    assert "resumed from step" in log_text(run["run_dir"])

    # The same code, 1 node x 2 processes: DCP reshards the 4-rank checkpoint onto 2 ranks.
    spec = yaml.safe_load(path.read_text())
    spec.update(nodes=1, gpus_per_node=2, partition="h100-ondemand",
                args=["--steps", "50", "--micro-batch", "8", "--lr", "1e-2", *SMALL_LM])
    write_run(path.parent, spec)
    smaller = slurmctl_json("submit", path)
    status = wait_for_state(smaller["run_id"], ENDED, timeout=150)
    assert status["state"] == "COMPLETED", log_text(smaller["run_dir"])[-3000:]
    assert "resumed from step 39 (checkpoint-39) on 2 ranks" in log_text(smaller["run_dir"])
    two = metrics(smaller["run_dir"])
    assert two[0]["step"] == 40 and {m["world_size"] for m in two} == {2.0}
    assert json.loads((ck_root / "checkpoint-49" / ".complete").read_text())["world_size"] == 2
    assert two[-1]["loss"] < four[0]["loss"] / 2, (four[0], two[-1])
    print(f"fsdp: 2x2 (preempted at step {end['checkpoint_step']}, resumed) then 1x2: "
          f"loss {four[0]['loss']:.3f} -> {four[-1]['loss']:.3f} (step 39) -> {two[-1]['loss']:.3f} (step 49); "
          f"{time.monotonic() - began:.0f} s wall-clock for both submissions")


def test_hf_lora_preempted_resumes_finishes_and_merges(workdir):
    began = time.monotonic()
    path = init(workdir, "hf-lora", "tpl-lora", ["--steps", "40", "--sleep", "0.1"], partition="h100-spot", nodes=2,
                gpus_per_node=8, procs_per_node=2, checkpoint={"interval_steps": 10, "keep_last": 2})
    run = slurmctl_json("submit", path, "--", "--nodelist=h100-3")
    run_dir = Path(run["run_dir"])
    end = preempt_and_resume(run, run_dir / "checkpoints")
    log = log_text(run["run_dir"])
    assert f"resuming the Trainer from step {end['checkpoint_step']}" in log
    final = run_dir / "checkpoints" / "checkpoint-40"
    assert (final / ".complete").is_file() and (final / "adapter_model.safetensors").is_file()
    assert {p.name for p in final.glob("rng_state_*.pth")} == {f"rng_state_{r}.pth" for r in range(4)}
    adapter = run_dir / "artifacts" / "adapter"
    assert (adapter / "adapter_model.safetensors").is_file()
    losses = metrics(run["run_dir"])
    assert losses[-1]["step"] == 40 and losses[-1]["loss"] < losses[0]["loss"], (losses[0], losses[-1])

    merged = slurmctl_json("merge", run["run_id"])
    assert merged["merged"] == str(run_dir / "artifacts" / "merged") and merged["max_abs_diff"] < 1e-3
    from safetensors.torch import load_file

    base = load_file(run_dir / "artifacts" / "base-model" / "model.safetensors")
    folded = load_file(run_dir / "artifacts" / "merged" / "model.safetensors")
    key = "model.layers.0.self_attn.q_proj.weight"
    assert set(folded) == set(base) and not (folded[key] == base[key]).all()  # the adapter changed the weights
    assert (run_dir / "artifacts" / "merged").stat().st_mode & 0o077 == 0  # the run dir's privacy
    again = slurmctl("merge", run["run_id"], check=False)
    assert again.returncode != 0 and "already exists" in again.stderr and "Traceback" not in again.stderr
    print(f"hf-lora: 2x2 (preempted at step {end['checkpoint_step']}, resumed): loss {losses[0]['loss']:.3f} -> "
          f"{losses[-1]['loss']:.3f} (step 40), merge {merged['seconds']:.1f} s; "
          f"{time.monotonic() - began:.0f} s wall-clock")


def test_deepspeed_zero2_trains_to_completion_on_2x2(workdir):
    began = time.monotonic()
    path = init(workdir, "deepspeed", "tpl-ds", ["--steps", "30", "--deepspeed-config", "ds_config.json", *SMALL_LM],
                partition="h100-ondemand", nodes=2, gpus_per_node=2, checkpoint={"interval_steps": 15})
    run = slurmctl_json("submit", path)
    status = wait_for_state(run["run_id"], ENDED, timeout=180)
    log = log_text(run["run_dir"])
    assert status["state"] == "COMPLETED", log[-3000:]
    assert "on 4 ranks, ZeRO stage 2" in log
    final = Path(run["run_dir"]) / "checkpoints" / "checkpoint-29"
    assert (final / ".complete").is_file()
    assert sorted(p.name for p in (final / "zero").glob("zero_pp_rank_*_optim_states.pt")) == [
        f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(4)]
    losses = metrics(run["run_dir"])
    assert losses[-1]["step"] == 29 and losses[-1]["loss"] < losses[0]["loss"] / 2, (losses[0], losses[-1])
    print(f"deepspeed: 2x2 ZeRO-2: loss {losses[0]['loss']:.3f} -> {losses[-1]['loss']:.3f} (step 29); "
          f"{time.monotonic() - began:.0f} s wall-clock")
