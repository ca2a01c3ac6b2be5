"""What one node does with its findings (as root, on that node): drain with our reason, start a
verification when our drain's cause is gone, and let the verification job decide its return.

The life of a node we drained:
  1. a check fails  -> `scontrol update state=drain reason="slurmctl:[node_problem] <check>: ..."`
  2. the checks pass again (periodic run), the node still drained with OUR reason ->
     reservation `slurmctl-verify-<node>` (root only), then resume: the reservation fences the
     node from every other job, and a root job of the same name is submitted into it
  3. the verification job runs every check plus an active probe on the node; on a failure it
     drains the node again, reason "slurmctl:[node_problem] verify: <check>: <detail>" (the evidence)
  4. the next periodic run sees the job ended (a job cannot delete the reservation it runs in):
       COMPLETED -> deletes the reservation: the node is back in service
       anything else -> deletes the reservation, the node drained with the job's evidence, or
               "verify: ... without a verdict" when the job could not say (killed, timed out, lost)
  5. a node whose verification failed is verified again after verify_retry_seconds.
A drain whose reason is not ours (an operator's "maint", Slurm's "Prolog error") is never touched,
not even when our own checks fail on that node: the operator owns it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field

from slurmctl.errors import SlurmctlError
from slurmctl.ops.health import blame, reasons
from slurmctl.ops.health.checks import Finding, Subject, first_failure, run_checks
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.slurm.records import NodeHealthRow

VERIFY_PREFIX = "slurmctl-verify-"
VERIFY_MINUTES = 15  # the reservation's life; a verification job not done by then is a failure
VERIFY_JOB_LIMIT = "00:10:00"


@dataclass
class Outcome:
    node: str
    action: str  # none | drained | left_alone | verify_started | verifying | verify_lost | passed | failed
    findings: list[Finding] = field(default_factory=list)
    detail: str = ""

    def to_dict(self) -> dict:
        return {"node": self.node, "action": self.action, "detail": self.detail,
                "findings": [f.to_dict() for f in self.findings]}


def verify_name(node: str) -> str:
    return VERIFY_PREFIX + node


def node_row(cfg: HookConfig) -> NodeHealthRow | None:
    if cfg.slurm is None:
        return None
    try:
        rows = cfg.slurm.node_health_rows(cfg.node, timeout=10.0)
    except SlurmctlError:
        return None
    return next((r for r in rows if r.name == cfg.node), None)


def drain(cfg: HookConfig, reason: reasons.DrainReason, row: NodeHealthRow | None = None) -> str:
    """Drain this node with our reason unless someone else's drain is on it. Returns what happened:
    "drained", "left_alone" (another's drain, or ours already says a node problem), "failed"."""
    row = row if row is not None else node_row(cfg)
    if row is None or cfg.slurm is None:
        return "failed"
    if row.drained:
        return "left_alone"  # someone else's drain, or ours already (its first cause stays the record)
    try:
        cfg.slurm.drain_node(cfg.node, reason.text(), timeout=10.0)
    except SlurmctlError:
        return "failed"
    return "drained"


def periodic(cfg: HookConfig, now: float | None = None) -> Outcome:
    """One HealthCheckProgram run on this node."""
    findings = run_checks(Subject(cfg, moment="periodic"))
    failed = first_failure(findings)
    row = node_row(cfg)
    if row is None:
        return Outcome(cfg.node, "none", findings, "the controller did not describe this node")
    name = verify_name(cfg.node)
    verifying = cfg.slurm.reservation_exists(name, timeout=10.0)
    if failed is not None:
        action = drain(cfg, failed.reason(), row)
        if verifying and action == "drained":
            cfg.slurm.delete_reservation(name, timeout=10.0)
        return Outcome(cfg.node, action, findings, failed.reason().text())
    if verifying:
        return settle_verification(cfg, row, findings)
    if not row.drained:
        failures = blame.read(cfg.health_failures_dir)
        suspect = blame.score(failures, now if now is not None else time.time())
        if suspect >= blame.SUSPECT_SCORE:
            jobs = ",".join(str(f.job_id) for f in failures if f.category in blame.GPU_CLASS)
            why = reasons.DrainReason(reasons.NODE_PROBLEM, "suspect",
                                      f"{suspect} jobs with GPU/NCCL-class failures here within 24 h: {jobs}")
            return Outcome(cfg.node, drain(cfg, why, row), findings, why.text())
    ours = reasons.parse(row.reason) if row.drained else None
    if ours is None:
        return Outcome(cfg.node, "none", findings)
    age = seconds_since(row.reason_time, now)
    if ours.check == "verify" and age is not None and age < cfg.verify_retry_seconds:
        return Outcome(cfg.node, "waiting", findings,
                       f"the failed verification is retried {cfg.verify_retry_seconds - age:.0f} s from now")
    return start_verification(cfg, findings)


def seconds_since(slurm_time: str, now: float | None = None) -> float | None:
    """Seconds since Slurm's local ISO timestamp (sinfo's TimeStamp), None when there is none."""
    try:
        then = time.mktime(time.strptime(slurm_time, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    return (now if now is not None else time.time()) - then


def start_verification(cfg: HookConfig, findings: list[Finding]) -> Outcome:
    """Reservation first, then resume: no other job can land between the two; then the root job."""
    name = verify_name(cfg.node)
    slurm = cfg.slurm
    try:
        slurm.create_reservation(name, cfg.node, VERIFY_MINUTES, timeout=10.0)
        slurm.resume_node(cfg.node, timeout=10.0)
        job = slurm.submit_wrapped([
            f"--job-name={name}", f"--reservation={name}", f"--nodelist={cfg.node}", "--nodes=1", "--ntasks=1",
            f"--time={VERIFY_JOB_LIMIT}", "--no-requeue", "--output=/dev/null",
            f"--wrap={verify_command()}",
        ])
    except SlurmctlError as exc:
        slurm.delete_reservation(name, timeout=10.0)
        return Outcome(cfg.node, "failed", findings, f"could not start the verification: {exc}")
    return Outcome(cfg.node, "verify_started", findings, f"job {job} in reservation {name}")


def verify_command(environ=os.environ) -> str:
    """The verification job's command line: this interpreter and this package, as the hooks run
    them, with the health program's own settings (SLURM_CONF, SLURMCTL_*: root's wrapper set them)
    spelled out. A root job's environment is not inherited from here on every Slurm, and without
    SLURM_CONF the job's scontrol would speak to another cluster's controller."""
    import shlex  # why: only the step that submits a verification job needs it

    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    settings = sorted((k, v) for k, v in environ.items()
                      if (k == "SLURM_CONF" or k.startswith("SLURMCTL_")) and "\n" not in v and "\0" not in v)
    assigns = " ".join(shlex.quote(f"{k}={v}") for k, v in [("PYTHONPATH", package_root), *settings])
    return f"cd / && exec /usr/bin/env {assigns} {shlex.quote(sys.executable)} -m slurmctl.ops.health verify"


def settle_verification(cfg: HookConfig, row: NodeHealthRow, findings: list[Finding]) -> Outcome:
    """The reservation is on: wait for the verification job, then end the reservation. A job that
    completed returns the node; one that failed has drained it with its evidence (or is drained
    here, when it could not say why: killed, timed out, lost)."""
    name = verify_name(cfg.node)
    jobs = cfg.slurm.named_job_states(name, "root", timeout=10.0)
    newest = jobs[max(jobs)] if jobs else None
    if newest in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"):
        return Outcome(cfg.node, "verifying", findings, f"job {max(jobs)} {newest}")
    if newest == "COMPLETED":
        cfg.slurm.delete_reservation(name, timeout=10.0)
        blame.clear(cfg.health_failures_dir, blame.read(cfg.health_failures_dir))  # answered by the pass
        return Outcome(cfg.node, "passed", findings, f"job {max(jobs)} passed; back in service")
    ours = reasons.parse(row.reason) if row.drained else None
    if ours is None or ours.check != "verify":
        lost = reasons.DrainReason(reasons.NODE_PROBLEM, "verify",
                                   f"the verification job ended {newest or 'out of sight'} without a verdict")
        cfg.slurm.drain_node(cfg.node, lost.text(), timeout=10.0)
    cfg.slurm.delete_reservation(name, timeout=10.0)
    return Outcome(cfg.node, "failed", findings, row.reason if ours else f"job ended {newest}")


def verify(cfg: HookConfig) -> Outcome:
    """Inside the verification job, on the node: every check plus the probe. A failure drains the
    node with the evidence; the periodic run ends the reservation either way (a job cannot delete
    the reservation it runs in)."""
    findings = run_checks(Subject(cfg, job_id=int(os.environ.get("SLURM_JOB_ID") or 0), moment="verify"))
    failed = first_failure(findings)
    if failed is None:
        return Outcome(cfg.node, "passed", findings)
    evidence = reasons.DrainReason(reasons.NODE_PROBLEM, "verify", f"{failed.check}: {failed.detail}")
    cfg.slurm.drain_node(cfg.node, evidence.text(), timeout=10.0)
    return Outcome(cfg.node, "failed", findings, evidence.text())


def log_outcome(cfg: HookConfig, env, moment: str, outcome: Outcome, started: float) -> None:
    """One line in the hooks log (hooklog), and in the job's / slurmd's output."""
    from slurmctl.ops.hooks.hooklog import log_hook  # why: only the entry points log

    log_hook(env, f"health-{moment}", started, **outcome.to_dict())
    print(json.dumps({"moment": moment, **outcome.to_dict(), "time": round(time.time(), 3)}))
