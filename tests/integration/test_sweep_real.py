"""Sweeps on the real cluster, as alice: one Slurm array whose elements are runs of their own.

A 6-element grid with --max-parallel 2 runs on h100-spot (pinned to h100-3, as the reliability
test's preemption); bob's on-demand job takes that node, so the running elements drain, are
requeued by Slurm and resume from their own checkpoints while the other elements go on. Then
status, compare, cost and ls work on the sweep id; a second sweep (from run.yaml's `sweep:` block)
is cancelled with a drain; bad grids are refused before anything reaches Slurm.
"""

import json
import time
from pathlib import Path

from .conftest import as_user, slurmctl, slurmctl_json, start_requeued_now, write_run

TRAIN_PY = '''"""A tiny training for sweep tests: its loss depends on --lr and --seed; checkpoints, drains."""
import argparse, json, sys, time
from slurmctl.runtime import Runtime
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--steps", type=int, default=30)
p.add_argument("--sleep", type=float, default=0.1)
a = p.parse_args()
rt = Runtime.from_env()
ck = rt.checkpoints.latest()
start = ck.step + 1 if ck else 0
print(f"lr={a.lr} seed={a.seed} starts at step {start}", flush=True)
def save(step):
    return rt.checkpoints.save(step, lambda d: (d / "state.json").write_text(json.dumps({"step": step})))
for step in range(start, a.steps):
    time.sleep(a.sleep)
    rt.log(step, loss=abs(a.lr * 1e4 - 2.5) + a.seed * 0.01 + 1.0 / (step + 1))
    if rt.should_stop():
        ck = save(step)
        rt.ack_drain(step, ck.path)
        print(f"drained at step {step}", flush=True)
        sys.exit(0)
    if (step + 1) % rt.checkpoint_interval == 0:
        save(step)
save(a.steps - 1)
print("finished", flush=True)
'''
FIELDS = {"entrypoint": "train.py", "partition": "h100-spot", "gpus_per_node": 1, "time_limit": "5m",
          "checkpoint": {"interval_steps": 5}}


def events(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "attempts.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def wait_until(check, timeout: float, what: str, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s")


def test_six_element_sweep_with_a_preempted_element_resumes_and_reads_as_one(workdir):
    spec = write_run(workdir / "sweep", {"name": "swp-real", **FIELDS,
                                         "args": ["--lr", "1e-3", "--seed", "0", "--steps", "80"]},
                     {"train.py": TRAIN_PY})
    started = time.monotonic()
    sweep = slurmctl_json("sweep", spec, "--grid", "lr=1e-4,3e-4", "--grid", "seed=1,2,3", "--max-parallel", "2",
                          "--", "--nodelist=h100-3")
    array = sweep["job_id"]
    root = Path(sweep["sweep_dir"]).parent
    dirs = [root / e["run_id"] for e in sweep["elements"]]
    bob = as_user("bob")
    preemptor = None
    try:
        assert sweep["array"] == "0-5%2" and len(dirs) == 6
        assert [e["values"] for e in sweep["elements"]][:2] == [{"lr": "1e-4", "seed": "1"},
                                                                {"lr": "1e-4", "seed": "2"}]
        # Slurm's view: one array, at most 2 tasks running at once.
        queue = as_user("alice").squeue("-j", str(array), "-o", "%i|%T")
        assert sum("RUNNING" in line for line in queue.splitlines()) <= 2, queue
        wait_until(lambda: (dirs[0] / "checkpoints" / "latest").exists(), 180, "element 0's first checkpoint")
        preemptor = bob.sbatch("-p", "h100-ondemand", "-w", "h100-3", "--gres=gpu:h100:8", "-t", "1",
                               "-J", "swp-preemptor", "-o", "/dev/null", "--wrap", "sleep 2")
        end = wait_until(lambda: events(dirs[0], "end"), 60, "element 0's preemption")[0]
        assert (end["outcome"], end["action"], end["drain_acked"]) == ("preemption", "requeue", True), end
        # Every preempted element (1 or 2 were running) restarts now instead of after Slurm's ~120 s,
        # as soon as its end says "requeue"; the sweep is done when every element's last end says "stop".
        restarted = set()

        def all_stopped() -> bool:
            for d in dirs:
                ends = events_or_none(d, "end")
                if ends and ends[-1]["action"] == "requeue" and (d, len(ends)) not in restarted:
                    restarted.add((d, len(ends)))
                    start_requeued_now(ends[-1]["job_id"], restarts=sum(e["action"] == "requeue" for e in ends))
            return all((ends := events_or_none(d, "end")) and ends[-1]["action"] == "stop" for d in dirs)

        wait_until(all_stopped, 180, "every element's last end (stop)")
        preempted = [d for d in dirs if any(e["action"] == "requeue" for e in events(d, "end"))]
    finally:
        if preemptor:
            bob.scancel(preemptor)
        as_user("alice").scancel(array)
    print(f"6-element sweep with a preemption: {time.monotonic() - started:.0f} s")
    starts = events(dirs[0], "start")
    assert [s["restart_count"] for s in starts] == [0, 1] and starts[1]["resume_step"] == end["checkpoint_step"]
    assert starts[0]["job_id"] == starts[1]["job_id"] != array  # the task's own id, kept across its requeue

    # an element's end event comes before Slurm has finished the job (COMPLETING, "finishing", while its epilog
    # runs): on a loaded controller that takes seconds
    status = wait_until(lambda: (got := slurmctl_json("status", sweep["sweep_id"])) and not any(
        e["phase"] == "finishing" for e in got["elements"]) and got, 60, "every element out of COMPLETING")
    assert [e["phase"] for e in status["elements"]] == ["finished"] * 6, status
    assert [e["step"] for e in status["elements"]] == [79] * 6
    assert status["elements"][0]["requeues"] == 1 and len({e["job_id"] for e in status["elements"]}) == 6
    single = slurmctl_json("status", sweep["elements"][0]["run_id"])  # an element is a run of its own
    assert single["state"] == "COMPLETED" and single["requeues"] == 1

    ranked = slurmctl_json("compare", sweep["sweep_id"])
    assert ranked["ranking"][:3] == [sweep["elements"][i]["run_id"] for i in (3, 4, 5)]  # lr=3e-4: lower loss
    text = slurmctl("compare", sweep["sweep_id"]).stdout
    assert "ranked by loss" in text and "lr=3e-4 seed=1" in text.splitlines()[2]

    cost = slurmctl_json("cost", sweep["sweep_id"])
    jobs = {e["job_id"] for e in status["elements"]}
    assert {a["job_id"] for a in cost["attempts"]} == jobs
    # each task took its element's name and comment when it started: accounting attributes it to that run
    assert {a["run_id"] for a in cost["attempts"]} == set(sweep_run_ids(sweep))
    assert len(cost["attempts"]) == 6 + len(preempted) and cost["related_runs"] == sweep_run_ids(sweep)
    listing = slurmctl("ls", "-n", "40", env={"COLUMNS": "400"}).stdout.splitlines()
    header = next(i for i, line in enumerate(listing) if line.startswith(sweep["sweep_id"]))
    assert "6 element(s): 6 finished" in listing[header]
    assert [line.split()[0] for line in listing[header + 1:header + 7]] == sweep_run_ids(sweep)


def events_or_none(run_dir: Path, kind: str) -> list[dict]:
    try:
        return events(run_dir, kind)
    except FileNotFoundError:
        return []


def sweep_run_ids(sweep: dict) -> list[str]:
    return [e["run_id"] for e in sweep["elements"]]


def test_cancel_drains_the_running_element_and_ends_the_whole_array(workdir):
    spec = write_run(workdir / "cancel", {"name": "swp-cancel", **FIELDS,
                                          "args": ["--lr", "1e-3", "--seed", "0", "--steps", "2000"],
                                          "sweep": {"grid": {"seed": [1, 2, 3]}, "max_parallel": 1}},
                     {"train.py": TRAIN_PY})
    sweep = slurmctl_json("sweep", spec)
    array = sweep["job_id"]
    alice = as_user("alice")
    try:
        first = Path(sweep["sweep_dir"]).parent / sweep["elements"][0]["run_id"]
        wait_until(lambda: (first / "heartbeat.json").exists(), 180, "element 0's first step")
        # One element that has not started: only its task goes (`scancel <array>`, its job id, would end all).
        one = slurmctl_json("cancel", sweep["elements"][2]["run_id"])
        assert one["verified"] and one["final_state"] == "CANCELLED", one
        left = alice.squeue("-h", "-j", str(array), "-r", "-o", "%K|%T").split()
        assert sorted(left) == ["0|RUNNING", "1|PENDING"], left
        phases = [e["phase"] for e in slurmctl_json("status", sweep["sweep_id"])["elements"]]
        # element 0 trains and saves a checkpoint every few steps: either is what it may be doing right now
        assert phases[0] in ("training", "checkpointing") and phases[1:] == ["queued", "cancelled"], phases
        alone = slurmctl_json("status", sweep["elements"][2]["run_id"])  # the element as a run of its own
        assert (alone["state"], alone["phase"]) == ("CANCELLED", "cancelled"), alone
        result = slurmctl_json("cancel", sweep["sweep_id"], "--timeout", "60")
    finally:
        alice.scancel(array)
    assert result["verified"] and result["ok"], result
    drained, waiting, _ = result["elements"]
    assert drained["drain"] == "acknowledged" and waiting["drain"] == "not-needed", result
    assert (first / "checkpoints" / f"checkpoint-{drained['ack_step']}" / ".complete").is_file()
    assert not alice.squeue("-j", str(array), "-h").strip()
    assert [e["phase"] for e in slurmctl_json("status", sweep["sweep_id"])["elements"]] == ["cancelled"] * 3


def test_bad_grids_are_refused_with_the_field_and_the_fix(workdir):
    spec = write_run(workdir / "bad", {"name": "swp-bad", **FIELDS, "args": ["--lr", "1e-3"], "env": {"SEED": "0"}},
                     {"train.py": TRAIN_PY})
    cases = {
        ("--grid", "lr=1e-4,,3e-4"): "empty value",
        ("--grid", "lr=1e-4", "--grid", "lr=3e-4"): "names `lr` twice",
        ("--grid", "lr=" + ",".join(str(i) for i in range(40)), "--grid",
         "SEED=" + ",".join(str(i) for i in range(30))): "1,200 combinations",
        ("--grid", "momentum=0.9"): "neither an option in `args`",
    }
    for args, words in cases.items():
        done = slurmctl("sweep", spec, *args, check=False)
        assert done.returncode != 0 and words in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    assert not [p for p in (as_user("alice").runs_root).glob("swp-bad-*")]  # nothing was created
