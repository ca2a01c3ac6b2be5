"""Batch-shell hooks, called by the rendered sbatch script as ``python -m slurmctl.runtime.attempt EVENT``:

  start           record the attempt in attempts.jsonl; clear the previous attempt's drain handshake
  drain-signal    the USR1 trap: write drain.request, classified as time-limit or preemption
  watch-requeue   background: once the first valid checkpoint exists, make the job requeueable
  restart-step --exit-code
                  a training step that failed: probe the allocation (a tiny srun on every node); a
                  lost node is recorded (node-lost event) and left to `end` (requeue); on a healthy
                  allocation exit 0 to have the script srun the training again right here (no
                  requeue, no Slurm requeue delay). SLURMCTL_RESTART_IN_ALLOCATION=0 turns that off.
  end --exit-code decide requeue or stop (runtime/policy.py; a lost node requeues), record it, and
                  requeue if so; after a node loss the job first leaves the lost node (shrinks to the
                  nodes it has left) and is requeued held, so that it neither waits for Slurm's
                  SlurmdTimeout nor runs smaller: the expediter gives it its size back and releases it

The requeue expediter that `end` and `drain-signal` start is slurmctl.runtime.expediter.

Requeue is enabled from the batch shell (not from the training's save()) because the batch shell
always runs where Slurm's client commands are, while training images may not have scontrol and a
rank should never block a step on a Slurm RPC.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from pathlib import Path

from slurmctl import rundir
from slurmctl.errors import SlurmctlError
from slurmctl.fsutil import append_jsonl, child_pids, read_json, read_jsonl, read_text_capped, tail_text_lines
from slurmctl.runtime import DRAIN_ACK, DRAIN_REQUEST, checkpoint_dir, read_drain_request, write_drain_request
from slurmctl.runtime.adapters import Resilience
from slurmctl.runtime.checkpoint import CheckpointManager
from slurmctl.runtime.expediter import start_expediter
from slurmctl.runtime.policy import REQUEUE, STOP, Decision, decide
from slurmctl.slurm.client import SlurmClient, job_ref_from_env

# USR1 this much earlier than the time-limit margin can only be a preemption (Slurm's own
# signal timer is up to ~60 s early, as measured on the local cluster).
_PREEMPTION_SLACK_SECONDS = 90
# Drains Slurm, the user or the site's idle policy asked for: the step ended on purpose, the
# allocation is not in question.
_ORDERED_DRAINS = {"cancel", "preemption", "time-limit", "signal", "smoke", "idle"}
# How long a failed allocation probe waits for slurmctld to name the lost node: it flags a slurmd
# that stopped answering at its next ping (every SlurmdTimeout/3; 40 s on the local cluster).
_NAME_LOST_NODE_SECONDS = 60.0
# After a node loss the batch script waits this long for Slurm's own NODE_FAIL requeue
# (SlurmdTimeout is 300 s by default) before requeueing the job itself.
_NODE_FAIL_WAIT_SECONDS = 600.0


def _env_int(name: str, default: int = 0) -> int:
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


def _checkpoints(run_dir: Path) -> CheckpointManager:
    return CheckpointManager(checkpoint_dir(run_dir))


def _max_restarts(run_dir: Path) -> int:
    try:
        import yaml

        return int((yaml.safe_load(read_text_capped(run_dir / rundir.RUN_YAML)) or {}).get("max_restarts", 3))
    except (OSError, ValueError, ImportError, AttributeError):
        return 3


def _program_block(run_dir: Path) -> Resilience | None:
    """An adopted program's (`slurmctl adopt`) checkpoint adapter (run.json's adopt block); None for a
    run of ours or a program without one."""
    if os.environ.get("SLURMCTL_ADOPTED") != "1":
        return None
    meta = read_json(run_dir / rundir.RUN_JSON, 1024 * 1024)
    adopted = meta.get("adopted") if isinstance(meta, dict) else None
    return Resilience.from_dict(adopted.get("resilience") if isinstance(adopted, dict) else None)


def _program_checkpoint(run_dir: Path):
    """An adopted program's own newest complete checkpoint."""
    block = _program_block(run_dir)
    return block.latest() if block else None


def _program_checkpoint_step(run_dir: Path) -> int | None:
    """The step of the checkpoint an adopted program restores by itself (its framework's precedence)."""
    block = _program_block(run_dir)
    restored = block.restored() if block else None
    return restored.step if restored else None


def _resume_step(run_dir: Path) -> int | None:
    """The step the next attempt starts from: slurmctl's own newest valid checkpoint, else the one an
    adopted program restores by itself (Resilience.restored, as status, cancel and resume read it)."""
    ck = _checkpoints(run_dir).latest()
    return ck.step if ck else _program_checkpoint_step(run_dir)


def _drain_seen_by_slurm(client: SlurmClient, exit_code: int, started: float | None) -> dict | None:
    """A drain nobody recorded: the job's own --signal goes to its srun tasks, not to the batch shell,
    so a program that dies of it (Lightning before trainer.fit installs its handler: exit 128+USR1)
    leaves no drain request. Slurm's record says what it was: a preemption (PreemptTime, under
    preempt_send_user_signal the signal comes at once), or the time limit (the program died of the
    job's own signal within its margin of the limit). None when it was neither."""
    if exit_code == 0:
        return None
    try:
        job = client.requeue_check(job_ref_from_env())
    except SlurmctlError:
        job = None
    if job is None:
        return None
    if job.preempt_time is not None and (started is None or job.preempt_time.timestamp() >= started - 1):
        return {"reason": "preemption", "time": job.preempt_time.timestamp(), "read_from": "slurm"}
    signame = os.environ.get("SLURMCTL_PROGRAM_SIGNAL", "")
    signum = getattr(signal, "SIG" + signame, None) if signame.isalnum() else None
    if signum is None or exit_code != 128 + int(signum) or not job.time_limit_seconds or started is None:
        return None
    left = job.time_limit_seconds - (time.time() - started)
    if left > _program_margin() + _PREEMPTION_SLACK_SECONDS:
        return None
    return {"reason": "time-limit", "time": time.time() - 1, "read_from": "slurm", "time_left_seconds": int(left)}


def _base_record(event: str) -> dict:
    return {
        "event": event,
        "time": time.time(),
        "job_id": _env_int("SLURM_JOB_ID"),
        "restart_count": _env_int("SLURM_RESTART_COUNT"),
        "nodes": os.environ.get("SLURM_JOB_NODELIST", ""),
        "batch_host": socket.gethostname(),
    }


def start(run_dir: Path) -> int:
    record = _base_record("start")
    # A fresh attempt must not inherit the previous attempt's drain handshake.
    for name in (DRAIN_REQUEST, DRAIN_ACK):
        (run_dir / name).unlink(missing_ok=True)
    record["resume_step"] = _resume_step(run_dir)
    step = record["resume_step"]
    earlier = rundir.attempt_ids(read_jsonl(run_dir / rundir.ATTEMPTS))
    this = (record["job_id"], record["restart_count"] or 0)
    number = (earlier.index(this) if this in earlier else len(earlier)) + 1  # numbered across the run
    print(rundir.attempt_header(number, record["job_id"], record["restart_count"]) + f" starting on "
          f"{record['nodes']}" + (f", resuming from checkpoint step {step}" if step is not None else ""),
          file=sys.stderr)
    append_jsonl(run_dir / rundir.ATTEMPTS, record)
    return 0


def drain_signal(run_dir: Path, client: SlurmClient) -> int:
    margin = _env_int("SLURMCTL_DRAIN_MARGIN", 120)
    left = None
    try:
        left = client.time_left_seconds(job_ref_from_env())
    except SlurmctlError:
        pass
    reason = "preemption" if left is not None and left > margin + _PREEMPTION_SLACK_SECONDS else "time-limit"
    current = read_drain_request(run_dir)
    if current and current.get("reason") == "cancel":  # the user's cancel sent this signal: it stays a cancel
        return 0
    write_drain_request(run_dir, reason, time_left_seconds=left)
    if reason == "preemption":
        # Slurm requeues a preempted job itself after GraceTime if the drain has not requeued it
        start_expediter()
    print(f"slurmctl: drain requested ({reason}, {left} s left); waiting for the training to "
          "checkpoint and acknowledge", file=sys.stderr)
    return 0


def watch_requeue(run_dir: Path, client: SlurmClient, poll: float = 5.0) -> int:
    checkpoints, job_id = _checkpoints(run_dir), _env_int("SLURM_JOB_ID")
    while (ck := checkpoints.latest()) is None:
        time.sleep(poll)
    try:
        client.update_job(job_ref_from_env(), Requeue=1)  # a sweep element: its array task alone
    except SlurmctlError as exc:
        print(f"slurmctl: could not make job {job_id} requeueable: {exc.message}", file=sys.stderr)
        return 1
    # Only logged: attempts.jsonl keeps one start and one end line per attempt.
    print(f"slurmctl: first valid checkpoint (step {ck.step}) exists; job {job_id} is now requeueable",
          file=sys.stderr)
    return 0


def _last_step(run_dir: Path, since: float | None) -> int | None:
    """The last step this attempt's training reported (heartbeat.json), for the steps it lost."""
    beat = read_json(run_dir / rundir.HEARTBEAT, 64 * 1024)
    if not isinstance(beat, dict) or str(beat.get("job_id")) != str(_env_int("SLURM_JOB_ID")):
        return None
    if since is not None and float(beat.get("time") or 0) < since:
        return None  # the previous attempt's heartbeat: this one never stepped
    step = beat.get("step")
    return step if isinstance(step, int) else None


def _unresponsive(state: str) -> bool:
    """sinfo's state of a node that cannot run this job's processes any more: not responding
    (trailing '*'), down, failed, or taken out of service while the job ran (drain)."""
    base = state.rstrip("*~#!%$@^-").split("+")[0].lower()
    return state.endswith("*") or base in {"down", "fail", "failing", "drain", "drained", "draining", "unknown"}


def lost_nodes(client: SlurmClient, wait: float = _NAME_LOST_NODE_SECONDS) -> tuple[list[str], list[str]] | None:
    """None when every node of this allocation runs a probe step; else the nodes lost, possibly []
    when none is named in time, and the evidence: the probe's failure in srun's words, and each
    node's state in sinfo. A node is named by srun itself (the probe's launch failed on it, after the
    training step failed: two signals) or by slurmctld (not responding, down, drained: waiting up to
    `wait` s for its next ping)."""
    failure = client.allocation_probe_failure(_env_int("SLURM_JOB_NUM_NODES", 1))
    if failure is None:
        return None
    try:
        names = set(client.hostnames(os.environ.get("SLURM_JOB_NODELIST", "")))
    except SlurmctlError:
        names = set()
    named_by_srun = client.nodes_not_launched(failure) & names
    deadline = time.monotonic() + wait
    while True:
        try:
            lost = sorted((n.name, n.state) for n in client.nodes() if n.name in names and _unresponsive(n.state))
        except SlurmctlError:
            lost = []
        if lost or named_by_srun or time.monotonic() >= deadline:
            return sorted(named_by_srun | {n for n, _ in lost}), [
                f"probe step: {failure}", *(f"sinfo: {n} {state}" for n, state in lost)]
        time.sleep(5)


def _this_attempt(events: list[dict]) -> tuple[dict | None, list[dict]]:
    """This Slurm attempt's start record and the events after it."""
    job_id = _env_int("SLURM_JOB_ID")
    at = max((i for i, e in enumerate(events) if e.get("event") == "start" and e.get("job_id") == job_id),
             default=None)
    return (events[at], events[at + 1:]) if at is not None else (None, [])


def _node_loss_decision(lost: dict, ck, previous_ends: list[dict], max_restarts: int) -> Decision:
    """A lost node is the cluster's fault, not the training's: requeue (Slurm places the next attempt
    on healthy nodes) without counting a failure, while a checkpoint exists and node losses stay
    within max_restarts."""
    failures = sum(1 for e in previous_ends if e.get("outcome") == "failed")
    preemptions = sum(1 for e in previous_ends if e.get("outcome") == "preemption")
    losses = 1 + sum(1 for e in previous_ends if e.get("outcome") == "node-lost")
    nodes = ", ".join(lost.get("nodes_lost") or []) or "a node of the allocation (unnamed by Slurm)"
    what = f"node {nodes} was lost" + (f" at step {lost['last_step']}" if lost.get("last_step") is not None else "")
    if ck is None:
        return Decision(STOP, "node-lost", f"{what} before the first valid checkpoint; not restarting "
                        "(it would start from step 0 again). Resubmit.", failures, preemptions)
    if losses > max_restarts:
        return Decision(STOP, "node-lost", f"{what}; {losses} node losses reach the cap of max_restarts="
                        f"{max_restarts}; stopping at checkpoint step {ck.step}. `slurmctl resume` continues it.",
                        failures, preemptions)
    return Decision(REQUEUE, "node-lost", f"{what}; requeued on healthy nodes from checkpoint step {ck.step}.",
                    failures, preemptions)


def _shape() -> tuple[int, int | None]:
    """This job's node and task counts as submitted (the batch script's environment)."""
    return _env_int("SLURM_JOB_NUM_NODES", 1), _env_int("SLURM_NTASKS") or None


def _expediter_dies_with_job() -> bool:
    """Under proctrack/cgroup the job's cgroup (this script's: .../job_<id>/...) is killed whole at the
    requeue, and the expediter the script starts with it."""
    try:
        return f"job_{_env_int('SLURM_JOB_ID')}" in Path("/proc/self/cgroup").read_text()
    except OSError:
        return False


def _leave_lost_nodes(client: SlurmClient, lost: list[str]) -> bool:
    """Shrink this job to the nodes it has left (its owner may: `scontrol update NodeList=`): Slurm
    then lets the lost nodes go at once, and the requeued job no longer waits for them to be declared
    DOWN (SlurmdTimeout). Only when restart-step named the lost nodes (a probe step that cannot run
    there, and slurmctld's own state of the node), a node survives, and the expediter that gives the
    requeued job its size back outlives this script. False: Slurm's own requeue, as before."""
    try:
        nodes = client.hostnames(os.environ.get("SLURM_JOB_NODELIST", ""))
    except SlurmctlError:
        return False
    keep = [n for n in nodes if n not in lost]
    here = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if not lost or not set(lost) <= set(nodes) or here not in keep or _expediter_dies_with_job():
        return False
    try:
        client.update_job(job_ref_from_env(), NodeList=",".join(keep))
    except SlurmctlError as exc:
        print(f"slurmctl: could not leave the lost node(s) {', '.join(lost)}: {exc.message}; waiting for Slurm "
              "instead", file=sys.stderr)
        return False
    print(f"slurmctl: left the lost node(s) {', '.join(lost)}: the job now holds {', '.join(keep)} until its "
          "requeue, which no longer waits for Slurm to declare them DOWN", file=sys.stderr)
    return True


def _await_node_failure(client: SlurmClient, nodes: list[str], limit: float = _NODE_FAIL_WAIT_SECONDS) -> None:
    """Where the job could not leave the lost node (_leave_lost_nodes), let Slurm end this attempt
    itself: once the lost node is DOWN it kills the job (NODE_FAIL) and, the job being requeueable,
    requeues it onto healthy nodes. Our own `scontrol requeue` of a job that still holds a node that is
    only "not responding" makes Slurm start the next attempt the moment the node goes DOWN, with a
    broken GPU allocation (Slurm 22.05: every srun then fails "Invalid generic resource
    (gres) specification"). Returns only when Slurm did not act within `limit` s."""
    print(f"slurmctl: waiting for Slurm to declare {', '.join(nodes) or 'the lost node'} DOWN and requeue "
          "the job (SlurmdTimeout)", file=sys.stderr)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(5)


def end(run_dir: Path, client: SlurmClient, exit_code: int) -> int:
    events = read_jsonl(run_dir / rundir.ATTEMPTS)
    last_submit = max((i for i, e in enumerate(events) if e.get("event") == "submitted"), default=-1)
    # An in-allocation restart is a failure too: it counts against the cap (policy.decide).
    previous_ends = [e for e in events[last_submit + 1:] if e.get("event") in {"end", "step-restart"}]
    drain = read_drain_request(run_dir)
    start_record, since_start = _this_attempt(events)
    block = _program_block(run_dir)
    if drain is None and block is not None:
        drain = _drain_seen_by_slurm(client, exit_code, start_record.get("time") if start_record else None)
    acked = (run_dir / DRAIN_ACK).exists()
    if drain is not None and not acked:  # an adopted program acknowledges with a new checkpoint of its own
        own = _program_checkpoint(run_dir)
        acked = own is not None and own.mtime >= float(drain.get("time") or 0)
    ck = _checkpoints(run_dir).latest()
    # the checkpoint the next attempt starts from, for the decision as for the record
    ck_step = _resume_step(run_dir)
    # restart-step probed the allocation after the failed step and recorded the nodes it lost
    lost = next((e for e in reversed(since_start) if e.get("event") == "node-lost"), None)
    if lost is not None and exit_code != 0:
        decision = _node_loss_decision(lost, ck, previous_ends, _max_restarts(run_dir))
    else:
        decision = decide(exit_code=exit_code, drain=drain, acked=acked, checkpoint_step=ck_step,
                          previous_ends=previous_ends, max_restarts=_max_restarts(run_dir))
    last_step = _program_last_step(run_dir, block) if block else \
        _last_step(run_dir, start_record.get("time") if start_record else None)
    # steps_lost: steps this attempt made past its newest valid checkpoint (status tells the story)
    record = {**_base_record("end"), "exit_code": exit_code, "drain_requested": drain is not None,
              "drain_reason": (drain or {}).get("reason"), "drain_acked": acked,
              "checkpoint_step": ck_step, "last_step": last_step,
              "steps_lost": (max(0, last_step - ck_step) if ck_step is not None else last_step + 1)
              if last_step is not None else None,
              **({"nodes_lost": lost.get("nodes_lost") or []} if decision.outcome == "node-lost" else {}),
              **decision.to_dict()}
    if decision.action == REQUEUE and decision.outcome == "node-lost":
        # the evidence of restart-step (a probe step that cannot run there, and slurmctld's own word)
        record["lost_nodes_released"] = _leave_lost_nodes(client, record["nodes_lost"])
    # Record first: `scontrol requeue` SIGTERMs this very batch script.
    append_jsonl(run_dir / rundir.ATTEMPTS, record)
    loud = "" if acked or drain is None else "WARNING: DRAIN NOT ACKNOWLEDGED. "
    print(f"slurmctl: attempt ended with exit code {exit_code}: {loud}{decision.reason}", file=sys.stderr)
    if decision.action != REQUEUE:
        ok = decision.outcome in {"completed", "cancelled", "idle"} and (acked or drain is None)
        if ok and os.environ.get("SLURMCTL_SMOKE") == "1":
            ok = _smoke_round_trip(run_dir)
        return 0 if ok else (exit_code or 1)
    job_id = _env_int("SLURM_JOB_ID")
    # Before the requeue, which kills this script: the next attempt starts without Slurm's BeginTime
    # wait and, after a lost node, never on that node (and, shrunk, with its node and task counts back).
    released = bool(record.get("lost_nodes_released"))
    start_expediter(record.get("nodes_lost") or [], shape=_shape() if released else None)
    try:
        client.update_job(job_ref_from_env(), Requeue=1)  # normally already done by watch-requeue
        if released:  # held until the expediter gave it its size back: it never runs on fewer nodes
            client.requeue_held(job_ref_from_env())
            return 0
        if decision.outcome == "node-lost":
            _await_node_failure(client, record.get("nodes_lost") or [])
        client.requeue(job_ref_from_env())  # a sweep element: its array task, never the whole array
    except SlurmctlError as exc:
        append_jsonl(run_dir / rundir.ATTEMPTS, {**_base_record("requeue-failed"), "message": exc.message})
        print(f"slurmctl: requeue of job {job_id} failed: {exc.message}", file=sys.stderr)
        return exit_code or 1
    return 0


def _program_margin() -> int:
    """How long before the time limit the job's own --signal arrives (the adopted script's `@N`; ours
    otherwise): a requeue that close to the limit is the time limit's."""
    return max(_env_int("SLURMCTL_DRAIN_MARGIN", 120), _env_int("SLURMCTL_PROGRAM_SIGNAL_MARGIN", 0))


def _program_last_step(run_dir: Path, block: Resilience | None) -> int | None:
    """The last step an adopted program printed in this job's log (its adapter's step pattern)."""
    if block is None:
        return None
    try:
        lines = tail_text_lines(rundir.job_log_path(run_dir, _env_int("SLURM_JOB_ID")), 0, 256 * 1024,
                                nofollow=True)
    except OSError:
        return None
    heads = [i for i, line in enumerate(lines) if line.startswith("slurmctl: attempt ")]
    return block.last_step(lines[heads[-1]:] if heads else lines)


def interrupted(run_dir: Path, client: SlurmClient) -> dict | None:
    """The batch shell was sent SIGTERM (the adopted wrapper's trap). When Slurm requeued the job (its
    restart count moved past this attempt's) before this attempt recorded its end — the script's own
    trap or the program (Lightning on its signal) ran `scontrol requeue`, or a preemption requeued it —
    record that end now, with why: preemption (Slurm's PreemptTime), the time limit (the requeue came
    within the job's signal margin of it), or the job's own requeue. Anything else (a cancel, the time
    limit's kill) is recorded as before (cancel; the epilog). Returns the record written, if any."""
    events = read_jsonl(run_dir / rundir.ATTEMPTS)
    start_record, since_start = _this_attempt(events)
    restart = _env_int("SLURM_RESTART_COUNT")
    if start_record is None or int(start_record.get("restart_count") or 0) != restart or any(
            e.get("event") in {"end", "cancel-requested"} for e in since_start):
        return None
    try:
        job = client.requeue_check(job_ref_from_env())
    except SlurmctlError:
        job = None
    if job is None or job.restarts <= restart:
        return None  # not a requeue
    drain = read_drain_request(run_dir)
    if drain is not None and drain.get("reason") == "cancel":
        return None
    elapsed = time.time() - float(start_record.get("time") or time.time())
    left = job.time_limit_seconds - elapsed if job.time_limit_seconds else None
    if drain is not None and drain.get("reason") in ("preemption", "time-limit"):
        outcome = drain["reason"]  # our own signal came first: its reason stands
    elif job.preempt_time is not None:
        outcome = "preemption"
    elif left is not None and left <= _program_margin() + _PREEMPTION_SLACK_SECONDS:
        outcome = "time-limit"
    else:
        outcome = "requeued"
    block = _program_block(run_dir)
    kept = block.restored() if block else _checkpoints(run_dir).latest()
    last_step = _program_last_step(run_dir, block) if block else _last_step(run_dir, start_record.get("time"))
    ck_step = kept.step if kept is not None else None
    # it saved on the signal: a checkpoint of its own after our drain request, else one at its last step
    saved = block is not None and kept is not None and (
        kept.mtime >= float(drain.get("time") or 0) if drain is not None
        else ck_step is not None and last_step is not None and ck_step >= last_step)
    before_limit = f", {int(left)} s before its time limit" if left is not None else ""
    why = {"preemption": "preempted: requeued (by Slurm after the grace time, or by the job itself on the "
                         "preemption's signal)",
           "time-limit": "requeued by the job itself (its script's trap or its program, e.g. Lightning on its "
                         f"signal){before_limit}: the time limit's",
           "requeued": f"requeued by the job itself (`scontrol requeue` in its script or program){before_limit}",
           }[outcome]
    record = {**_base_record("end"), "exit_code": 143, "outcome": outcome, "action": REQUEUE,
              "recorded_by": "requeue", "drain_requested": drain is not None or outcome != "requeued",
              "drain_reason": (drain or {}).get("reason") or (outcome if outcome != "requeued" else None),
              "drain_acked": saved, "checkpoint_step": ck_step, "last_step": last_step,
              "steps_lost": (max(0, last_step - ck_step) if ck_step is not None else last_step + 1)
              if last_step is not None else None,
              "reason": why + ("; it saved a checkpoint of its own first" if saved else "")}
    append_jsonl(run_dir / rundir.ATTEMPTS, record)
    print(f"slurmctl: attempt requeued ({outcome}): {record['reason']}", file=sys.stderr)
    return record


# Slurm's final state of an attempt whose batch script died before `end` -> the outcome `end` would have recorded
_KILLED_OUTCOMES = {"FAILED": "failed", "OUT_OF_MEMORY": "failed", "TIMEOUT": "time-limit", "CANCELLED": "cancelled"}


def record_killed_end(run_dir: Path, job_id: int, restart_count: int, slurm_state: str, exit_code: str) -> dict | None:
    """The `end` record of an attempt whose batch script was killed before it could run `end` (scancel
    --signal=KILL of the batch step, the batch step's memory limit, the time limit without a drain).
    Called by root's epilog on the batch host, in a child running as the job's user, after the job:
    it writes the record once (none when the attempt recorded its own end, or never started), so
    status, the story and the `failed` message know how the attempt ended. Returns the record."""
    outcome = _KILLED_OUTCOMES.get(slurm_state)
    events = read_jsonl(run_dir / rundir.ATTEMPTS)
    at = max((i for i, e in enumerate(events) if e.get("event") == "start" and e.get("job_id") == job_id
              and e.get("restart_count") == restart_count), default=None)
    if outcome is None or at is None or any(e.get("event") == "end" for e in events[at + 1:]):
        return None
    start_record = events[at]
    code, _, sig = (exit_code or "").partition(":")
    status = (int(code) if code.isdigit() and int(code) else 128 + int(sig) if sig.isdigit() and int(sig) else 1)
    ck = _checkpoints(run_dir).latest()
    beat = read_json(run_dir / rundir.HEARTBEAT, 64 * 1024)
    last_step = beat.get("step") if isinstance(beat, dict) and str(beat.get("job_id")) == str(job_id) \
        and float(beat.get("time") or 0) >= float(start_record.get("time") or 0) else None
    last_step = last_step if isinstance(last_step, int) else None
    killed = f"signal {sig}" if sig.isdigit() and int(sig) else f"exit code {code or '?'}"
    reason = {"OUT_OF_MEMORY": "the batch script was killed by its memory limit (Slurm: OUT_OF_MEMORY)",
              "TIMEOUT": "the job reached its time limit and the batch script was killed before it recorded its end",
              "CANCELLED": "the job was cancelled before the batch script recorded its end"}.get(
        slurm_state, f"the batch script was killed ({killed}) before it could record the attempt's end")
    record = {"event": "end", "time": time.time(), "job_id": job_id, "restart_count": restart_count,
              "nodes": start_record.get("nodes", ""), "batch_host": start_record.get("batch_host", ""),
              "exit_code": status, "slurm_state": slurm_state, "recorded_by": "epilog",
              "drain_requested": (run_dir / DRAIN_REQUEST).exists(), "drain_acked": (run_dir / DRAIN_ACK).exists(),
              "checkpoint_step": ck.step if ck else None, "last_step": last_step,
              "steps_lost": (max(0, last_step - ck.step) if ck else last_step + 1) if last_step is not None else None,
              "outcome": outcome, "action": STOP, "reason": reason}
    append_jsonl(run_dir / rundir.ATTEMPTS, record)
    return record


def restart_step(run_dir: Path, client: SlurmClient, exit_code: int) -> int:
    """0 when the failed training should be started again inside this allocation. First the
    allocation is probed (unless Slurm or the user ordered the end: preemption, time limit, cancel):
    a lost node is recorded as a `node-lost` event and `end` requeues. On a healthy allocation the
    restart needs: not turned off (SLURMCTL_RESTART_IN_ALLOCATION=0), no drain request (a watchdog
    drain goes through `end`), a valid checkpoint, failures under the cap and progress since the
    previous failure (the same rules as a requeue, policy.decide). It is recorded as a `step-restart`
    event, which status, the story and cost count."""
    if exit_code == 0:
        return 1
    drain = read_drain_request(run_dir)
    if drain is not None and drain.get("reason") in _ORDERED_DRAINS:
        return 1
    events = read_jsonl(run_dir / rundir.ATTEMPTS)
    start_record, _ = _this_attempt(events)
    since = start_record.get("time") if start_record else None
    found = lost_nodes(client)
    if found is not None:
        gone, evidence = found
        ck = _checkpoints(run_dir).latest()
        last_step = _last_step(run_dir, since)
        append_jsonl(run_dir / rundir.ATTEMPTS, {
            **_base_record("node-lost"), "nodes_lost": gone, "exit_code": exit_code, "evidence": evidence,
            "last_step": last_step, "checkpoint_step": ck.step if ck else None})
        print(f"slurmctl: the allocation lost node(s) {', '.join(gone) or '(not named by Slurm)'} at step "
              f"{last_step}; not restarting here", file=sys.stderr)
        return 1
    if os.environ.get("SLURMCTL_RESTART_IN_ALLOCATION") == "0" or drain is not None:
        return 1
    last_submit = max((i for i, e in enumerate(events) if e.get("event") == "submitted"), default=-1)
    previous = [e for e in events[last_submit + 1:] if e.get("event") in {"end", "step-restart"}]
    ck = _checkpoints(run_dir).latest()
    decision = decide(exit_code=exit_code, drain=None, acked=False, checkpoint_step=ck.step if ck else None,
                      previous_ends=previous, max_restarts=_max_restarts(run_dir))
    if decision.action != REQUEUE:
        return 1  # `end` decides again, records the stop and says why
    last_step = _last_step(run_dir, since)
    append_jsonl(run_dir / rundir.ATTEMPTS, {
        **_base_record("step-restart"), "exit_code": exit_code, "outcome": "failed", "checkpoint_step": ck.step,
        "last_step": last_step, "steps_lost": max(0, last_step - ck.step) if last_step is not None else None,
        "failures": decision.failures, "reason": decision.reason})
    print(f"slurmctl: training exited with code {exit_code}; the allocation is healthy: restarting it here "
          f"from checkpoint step {ck.step} (failure {decision.failures} of max_restarts={_max_restarts(run_dir)})",
          file=sys.stderr)
    return 0


def check_round_trip(run: rundir.Run) -> tuple[bool, str]:
    """The in-job half of the verdict: a logged step, an acknowledged drain, a valid checkpoint."""
    if not run.metrics_tail(1):
        return False, "the job exited 0 but logged no step: does the training call rt.log(step, ...)?"
    ack = run.drain_ack()
    if not ack:
        return False, ("no drain.ack after the first step: does the training poll rt.should_stop() and call "
                       "rt.ack_drain()?")
    latest = CheckpointManager(run.checkpoint_dir).latest()
    named = ack.get("checkpoint")
    if latest is None or not named or Path(named).resolve() != latest.path.resolve():
        return False, "the drain saved no valid checkpoint (drain.ack names none, or it is not the newest valid one)."
    return True, f"1 step, checkpoint at step {latest.step} written and read back valid."


def _smoke_round_trip(run_dir: Path) -> bool:
    """A smoke job exits 0 only if it logged a step, acknowledged the drain and left a valid
    checkpoint: Slurm accounting's COMPLETED is then the smoke verdict the submit gate trusts."""
    passed, why = check_round_trip(rundir.Run(run_dir.name, run_dir))
    print(f"slurmctl: smoke test {'passed' if passed else 'FAILED'}: {why}", file=sys.stderr)
    return passed


_SHELLS = {"bash", "sh", "dash", "zsh", "ksh"}


def _is_shell(pid: int) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name in _SHELLS
    except OSError:
        return False


def signal_program(parent: int, signame: str) -> int:
    """Pass the program's save signal on to a program the batch script started without srun: the
    processes under the original script (`parent`), looking through its subshells (a shell dies of a
    signal it does not trap, and would take nothing with it but its own wait)."""
    signum = getattr(signal, "SIG" + signame.removeprefix("SIG"), None)
    if not isinstance(signum, signal.Signals):
        print(f"slurmctl: no signal {signame!r} to pass on", file=sys.stderr)
        return 2
    sent, pending = [], child_pids(parent)
    while pending:
        pid = pending.pop(0)
        if _is_shell(pid):
            pending += child_pids(pid)
            continue
        try:
            os.kill(pid, signum)
            sent.append(pid)
        except OSError:
            pass  # it ended meanwhile
    print(f"slurmctl: passed {signum.name} on to the program (started without srun): "
          f"{', '.join(map(str, sent)) or 'no process found'}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurmctl.runtime.attempt")
    parser.add_argument("event", choices=["start", "end", "drain-signal", "watch-requeue", "restart-step",
                                          "interrupted", "signal-program"])
    parser.add_argument("--exit-code", type=int, default=None)
    parser.add_argument("--parent", type=int, default=None)
    parser.add_argument("--signal", default="USR1")
    args = parser.parse_args(argv)
    if args.event == "signal-program":
        return signal_program(args.parent, args.signal) if args.parent else 2
    run_dir = os.environ.get("SLURMCTL_RUN_DIR")
    if not run_dir:
        print("slurmctl: SLURMCTL_RUN_DIR is not set; not inside a slurmctl job", file=sys.stderr)
        return 2
    run_path, client = Path(run_dir), SlurmClient()
    if args.event == "start":
        return start(run_path)
    if args.event == "drain-signal":
        return drain_signal(run_path, client)
    if args.event == "interrupted":
        interrupted(run_path, client)
        return 0
    if args.event == "watch-requeue":
        return watch_requeue(run_path, client)
    if args.event == "restart-step":
        return restart_step(run_path, client, args.exit_code if args.exit_code is not None else 1)
    return end(run_path, client, args.exit_code if args.exit_code is not None else 1)


if __name__ == "__main__":
    sys.exit(main())
