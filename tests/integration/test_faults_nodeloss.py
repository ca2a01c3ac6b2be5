"""Node loss on a 2-node run, on the real cluster: one node's slurmd and every process of this job on
that node are killed mid-run (the local cluster runs each slurmd in its own UTS namespace, so "the
node" is exactly the processes in that namespace). The survivors' gloo collectives fail, srun waits
for the dead node's task, and the watchdog's peer check (no rank alive on the batch node while the
step still runs, and a probe step that cannot run on the dead node) ends the step and its srun --
not the 15-minute stall window, let alone a 30-minute collective timeout. restart-step's probe
finds the allocation broken and srun names the node its launch failed on; `end` shrinks
the job to its surviving node and requeues it held, and the expediter gives it its two nodes back
and releases it: it lands on the other nodes without waiting for Slurm to declare the lost node
DOWN (SlurmdTimeout, 120 s here), and resumes from the newest checkpoint; status and diagnose say
"node h100-N was lost at step S".

Disturbs the shared cluster: one node is down for ~1-2 minutes (the job is --exclusive: no other
job runs on it).
The slurmd is ALWAYS started again the way deploy/local/up starts it, and the node resumed, in a
finally. Wall time ~2-3 minutes once the job runs.
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path

from .conftest import slurmctl, slurmctl_json, write_run
from .test_reliability import events, wait_for_event

DIST_STEPS_PY = (Path(__file__).parent / "reliability" / "dist_steps.py").read_text()


def _config(key: str) -> str:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    return next(line.split("=", 1)[1].strip() for line in out.splitlines() if line.split("=")[0].strip() == key)


def _slurmd_pid(node: str) -> int | None:
    try:
        pid = int(Path(_config("SlurmdPidFile").replace("%n", node)).read_text().split()[0])
        return pid if Path(f"/proc/{pid}/comm").read_text().strip() == "slurmd" else None
    except (OSError, ValueError, IndexError):
        return None


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def kill_node(node: str, job_id: int) -> list[str]:
    """SIGKILL the node's slurmd and every process of `job_id` in its UTS namespace (slurmstepd, the
    launcher, the ranks). Returns what was killed. Nothing of another job or node is touched."""
    slurmd = _slurmd_pid(node)
    assert slurmd, f"no slurmd for {node}"
    namespace = os.readlink(f"/proc/{slurmd}/ns/uts")
    assert namespace != os.readlink("/proc/self/ns/uts"), "slurmds share our UTS namespace: cannot tell nodes apart"
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.readlink(f"/proc/{pid}/ns/uts") != namespace:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ours = f"SLURM_JOB_ID={job_id}".encode() in _environ(pid) or f"[{job_id}." in cmdline
        if pid == slurmd or ours:
            try:
                os.kill(pid, 9)
                killed.append(cmdline.strip())
            except ProcessLookupError:
                pass
    return killed


def restore_node(node: str) -> None:
    """Start the node's slurmd as deploy/local/up does (its own UTS namespace named after the node)
    and resume the node; a node that came back by itself (ReturnToService) is left as it is."""
    if _slurmd_pid(node) is None:
        # slurmd daemonizes; its own log is SlurmdLogFile (a pipe here would be held open by the daemon)
        subprocess.run(["unshare", "--uts", "/bin/sh", "-c", 'hostname "$1" && exec slurmd -N "$1"', "slurmd-wrapper",
                        node], check=True, timeout=60, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env={**os.environ, "SLURM_CONF": _config("SLURM_CONF")})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True, text=True,
                               timeout=30).stdout.split()
        if state and state[0].rstrip("*") in {"down", "drained", "draining", "drain"}:
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], timeout=30, capture_output=True)
        elif state and not state[0].endswith("*"):
            return
        time.sleep(1)
    raise AssertionError(f"{node} did not come back: {state}")


def _hostnames(nodelist: str) -> list[str]:
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                          timeout=30, check=True).stdout.split()


def test_a_lost_node_ends_the_step_fast_and_the_run_resumes_elsewhere(workdir):
    path = write_run(workdir / "faults-nodeloss", {
        "name": "faults-nodeloss", "entrypoint": "dist_steps.py", "args": ["--sleep", "0.1"], "nodes": 2,
        "gpus_per_node": 2, "gpu_type": "h100", "partition": "h100-ondemand", "time_limit": "10m",
        "max_restarts": 3, "checkpoint": {"interval_steps": 20},
        # the default 15 min stall window: only the peer check can end the step this fast
        "env": {"SLURMCTL_WATCHDOG_CHECK": "2s"}}, {"dist_steps.py": DIST_STEPS_PY})
    # --exclusive: no other job shares the node this test takes down
    run = slurmctl_json("submit", path, "--", "--exclusive")
    run_dir, job_id, victim = Path(run["run_dir"]), run["job_id"], None
    try:
        (start,) = wait_for_event(run["run_dir"], "start", 1, timeout=900)  # the shared cluster may be busy
        first, victim = _hostnames(start["nodes"])  # the batch script runs on the first node
        deadline = time.monotonic() + 90
        while not (run_dir / "checkpoints" / "checkpoint-39" / ".complete").exists():
            assert time.monotonic() < deadline, "two checkpoints did not come within 90 s"
            time.sleep(0.5)
        killed_at = time.time()
        killed = kill_node(victim, job_id)
        assert any("slurmd" in k for k in killed) and any("dist_steps.py" in k for k in killed), killed

        (lost,) = wait_for_event(run["run_dir"], "node-lost", 1, timeout=120)
        print(f"node {victim} killed; the step ended and the loss was recorded {lost['time'] - killed_at:.1f} s later")
        assert lost["nodes_lost"] == [victim] and lost["time"] - killed_at < 60, lost  # survivors fail in ~5-20 s
        log = (run_dir / "logs" / f"{job_id}.out").read_text()
        assert "PEER LOST: no rank of job" in log and "a probe step could not run on every node" in log, log[-3000:]
        # two signals (the ranks here gone, a node that cannot run a probe step) end the step before the
        # 30 s floor of the peer check, and its srun with it (no KillWait for the dead node's task)
        # its scene folder <job>-<time> is named when it acted (state.json moves on with the next attempt)
        (scene,) = (run_dir / "watchdog").glob(f"{job_id}-*")
        acted = int(scene.name.rsplit("-", 1)[1])
        said = next(line for line in log.splitlines() if "PEER LOST" in line)
        print(f"the watchdog ended the step {acted - killed_at:.1f} s after the kill: {said}")
        assert acted - killed_at < 25 and "Unable to create step" not in said, said
        assert "Timed out waiting for job step to complete" not in log
        step, ck = lost["last_step"], lost["checkpoint_step"]
        assert step >= 39 and ck is not None and step - ck <= 20, lost  # lost at most one checkpoint interval
        (end,) = wait_for_event(run["run_dir"], "end", 1, timeout=30)
        assert (end["outcome"], end["action"], end["nodes_lost"], end["failures"], end["lost_nodes_released"]) == (
            "node-lost", "requeue", [victim], 0, True), end
        # named by srun's failed launch of the probe step on it, without waiting for slurmctld's ping
        assert any(e.startswith("probe step: ") and f"failed on node {victim}:" in e for e in lost["evidence"]), lost

        # The job left the lost node and requeued itself held; its expediter gave it its 2 nodes back and
        # released it at once: the next attempt does not wait for Slurm to declare the node DOWN
        # (SlurmdTimeout, 120 s); it starts as soon as two other nodes are free (the cluster is shared)
        second = wait_for_event(run["run_dir"], "start", 2, timeout=600)[1]
        log = (run_dir / "logs" / f"{job_id}.out").read_text()
        released = re.search(r"requeue wait ended \(NumNodes=2 NumTasks=2 StartTime=now ExcNodeList=[^)]*"
                             + re.escape(victim) + r", released\) ([\d.]+) s after this watcher started", log)
        print(f"released {released and released[1]} s after the expediter started; the next attempt started "
              f"{second['time'] - end['time']:.1f} s after the attempt's end ({second['time'] - killed_at:.1f} s "
              f"after the kill) on {second['nodes']}")
        assert released and float(released[1]) < 30, log[-3000:]
        assert victim not in _hostnames(second["nodes"]) and second["resume_step"] == ck, second
        assert len(_hostnames(second["nodes"])) == 2, second  # its size back: never fewer nodes
        deadline = time.monotonic() + 90
        while True:
            beat = json.loads((run_dir / "heartbeat.json").read_text())
            if beat.get("job_id") == str(job_id) and beat["time"] > second["time"] and beat["step"] > ck:
                break
            assert time.monotonic() < deadline, f"no step after the resume: {beat}"
            time.sleep(1)

        deadline = time.monotonic() + 30
        while True:  # the new attempt's watchdog clears its start-up warning at its next check
            status = slurmctl_json("status", run["run_id"])
            if status["health"] == "ok" or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert f"node {victim} was lost at step {step}, newest checkpoint {ck}" in status["history"][0], status
        assert status["history"][1].endswith("running") and status["health"] == "ok", status
        diagnosis = slurmctl_json("diagnose", run["run_id"])
        assert diagnosis["category"] == "node_lost", diagnosis
        assert diagnosis["summary"].startswith(f"node {victim} was lost at step {step}"), diagnosis
        assert len(events(run["run_dir"], "step-restart")) == 0  # a lost node is never restarted in place
    finally:
        slurmctl("cancel", run["run_id"], "--now", check=False)
        if victim:
            restore_node(victim)
