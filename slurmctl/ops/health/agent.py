"""What one node does with its findings (as root, on that node): drain with our reason, start a
verification when our drain's cause is gone, and let the verification job decide its return.

The life of a node we drained:
  1. a check fails  -> `scontrol update state=drain reason="slurmctl:[node_problem] <check>: ..."`
  2. the checks pass again (periodic run), the node drained with OUR reason and no job left on it
     -> reservation `slurmctl-verify-<node>` (root only, Duration=UNLIMITED: 365 days on 22.05,
     far past any verification), then resume: the reservation fences the node from every other
     job for as long as it exists, and a root job of the same name is submitted into it
  3. the verification job runs every check plus an active probe on the node; on a failure it
     drains the node again, reason "slurmctl:[node_problem] verify: <check>: <detail>" (the evidence)
  4. the next periodic run sees the job ended (a job cannot delete the reservation it runs in):
       COMPLETED -> deletes the reservation: the node is back in service (the only way back)
       anything else, or still pending after verify_start_seconds -> drains the node with the
               evidence (or "verify: ... without a verdict"), THEN deletes the reservation
  5. a node whose verification failed is verified again after verify_retry_seconds.
Every drain and resume re-reads the node just before it and acts only when the reason is ours
(or, for a drain, the node is in service with no reason at all): a node whose reason is not ours,
in any state (an operator's "maint" drain, `state=fail` or `state=down`, Slurm's own "Prolog
error" or "Not responding") is never drained over, resumed or verified by us, not even when our
own checks fail on that node (the slurmd check fails on a FAIL or DOWN node: that is the other
party's verdict already, not ours to take over). An operator who drains, fails or downs the node
during our verification takes it over: we cancel our verification job, delete our reservation and
leave their state as it is. Slurm has no compare-and-set for a
node's reason: between our re-read and our `scontrol update` (milliseconds) an operator's drain
can still be replaced; the operator's next drain wins, and we never resume a reason not ours.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from slurmctl.errors import SlurmctlError
from slurmctl.ops.health import blame, reasons
from slurmctl.ops.health.checks import Finding, Subject, config_error, first_failure, run_checks
from slurmctl.ops.hooks.config import HookConfig

if TYPE_CHECKING:  # annotations only: the prolog imports this module and never reads a node row
    from slurmctl.slurm.records import NodeHealthRow

VERIFY_PREFIX = "slurmctl-verify-"
VERIFY_JOB_LIMIT = "00:10:00"
_BUSY_STATES = ("allocated", "mixed", "completing")


@dataclass
class Outcome:
    node: str
    # none | drained | left_alone | verify_started | verifying | verify_lost | passed | failed | config_error
    action: str
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


def someone_elses(row: NodeHealthRow) -> bool:
    """The node carries a reason not ours (any state: drain, fail, down, not responding), or is out
    of service with no reason of ours: another party's, never drained over, resumed or verified."""
    if reasons.is_ours(row.reason):
        return False
    return bool(row.reason) or row.out_of_service


def drain(cfg: HookConfig, reason: reasons.DrainReason, row: NodeHealthRow | None = None) -> str:
    """Drain this node with our reason unless it is someone else's (someone_elses). Returns what
    happened: "drained", "left_alone" (another's, or our drain already: its first cause stays the record),
    "failed". The node is read again just before the drain (`row` only saves that read when the
    caller read it a moment ago and has acted on nothing since)."""
    if cfg.slurm is None:
        return "failed"
    row = row if row is not None else node_row(cfg)
    if row is None:
        return "failed"
    if row.drained or someone_elses(row):
        return "left_alone"
    return "drained" if replace_reason(cfg, reason) else "left_alone"


def replace_reason(cfg: HookConfig, reason: reasons.DrainReason) -> bool:
    """Drain with `reason` after one more look at the node: over no reason or our own, never over
    another's (someone_elses). False when it did not (another's, or Slurm refused)."""
    row = node_row(cfg)
    if row is None or someone_elses(row):
        return False
    try:
        cfg.slurm.drain_node(cfg.node, reason.text(), timeout=10.0)
    except SlurmctlError:
        return False
    return True


def resume_if_ours(cfg: HookConfig) -> bool:
    """Resume this node only while it is drained with our reason and nothing else: a node Slurm
    marked DOWN or FAIL meanwhile (keeping our reason) is Slurm's to return."""
    row = node_row(cfg)
    if row is None or not ours_alone(row):
        return False
    cfg.slurm.resume_node(cfg.node, timeout=10.0)
    return True


def ours_alone(row: NodeHealthRow) -> bool:
    """Drained with our reason, and not also down, failed or not responding."""
    return row.drained and reasons.is_ours(row.reason) and not row.down_or_failed


def end_verification(cfg: HookConfig) -> None:
    """Our verification job(s) cancelled and our reservation deleted (the drain decided first)."""
    name = verify_name(cfg.node)
    try:
        live = [j for j, st in cfg.slurm.named_job_states(name, "root", timeout=10.0).items()
                if st in ("PENDING", "CONFIGURING", "RUNNING", "SUSPENDED")]
        if live:
            cfg.slurm.cancel_many(live)
    except SlurmctlError:
        pass
    cfg.slurm.delete_reservation(name, timeout=10.0)


def periodic(cfg: HookConfig, now: float | None = None) -> Outcome:
    """One HealthCheckProgram run on this node."""
    now = now if now is not None else time.time()
    findings = run_checks(Subject(cfg, moment="periodic"))
    failed = first_failure(findings)
    row = node_row(cfg)
    if row is None:
        return Outcome(cfg.node, "none", findings, "the controller did not describe this node")
    name = verify_name(cfg.node)
    verifying = cfg.slurm.reservation_exists(name, timeout=10.0)
    if someone_elses(row):
        if verifying:
            end_verification(cfg)  # an operator took the node over during our verification: theirs now
        return Outcome(cfg.node, "left_alone", findings, f"{row.state} by someone else: {row.reason}")
    if failed is not None:
        if verifying:  # the check's own drain is the verdict: drain over our verification, then end it
            action = "drained" if replace_reason(cfg, failed.reason()) else "left_alone"
            if action == "drained":
                end_verification(cfg)
        else:
            action = drain(cfg, failed.reason(), row)
        return Outcome(cfg.node, action, findings, failed.reason().text())
    if verifying:
        return settle_verification(cfg, row, findings, now)
    if not row.drained and (why := suspect_reason(cfg, now)) is not None:
        return Outcome(cfg.node, drain(cfg, why), findings, why.text())
    ours = reasons.parse(row.reason) if ours_alone(row) else None
    if ours is None:
        return Outcome(cfg.node, "none", findings)
    if any(s in row.state.split("+") for s in _BUSY_STATES):
        return Outcome(cfg.node, "waiting", findings, f"a job still runs here ({row.state}): verified once it ends")
    age = seconds_since(row.reason_time, now)
    if ours.check == "verify" and age is not None and age < cfg.verify_retry_seconds:
        return Outcome(cfg.node, "waiting", findings,
                       f"the failed verification is retried {cfg.verify_retry_seconds - age:.0f} s from now")
    return start_verification(cfg, findings)


def suspect_reason(cfg: HookConfig, now: float) -> reasons.DrainReason | None:
    """Our suspect drain reason when this node's recorded failures make it a suspect (blame.suspect)."""
    verdict = blame.suspect(cfg.node, blame.read(cfg.health_failures_dir), now,
                            blame.passed_at(cfg.health_failures_dir))
    return reasons.DrainReason(reasons.NODE_PROBLEM, "suspect", verdict.why) if verdict.suspect else None


def seconds_since(slurm_time: str, now: float | None = None) -> float | None:
    """Seconds since Slurm's local ISO timestamp (sinfo's TimeStamp), None when there is none."""
    try:
        then = time.mktime(time.strptime(slurm_time, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    return (now if now is not None else time.time()) - then


def start_verification(cfg: HookConfig, findings: list[Finding]) -> Outcome:
    """Reservation first (no end), then resume (only while the drain is still ours): no other job
    can land between the two, nor ever while the reservation exists; then the root job."""
    name = verify_name(cfg.node)
    slurm = cfg.slurm
    try:
        slurm.create_reservation(name, cfg.node, None, timeout=10.0)
        if not resume_if_ours(cfg):
            slurm.delete_reservation(name, timeout=10.0)
            return Outcome(cfg.node, "left_alone", findings, "the drain is no longer ours")
        job = slurm.submit_wrapped([
            f"--job-name={name}", f"--reservation={name}", f"--nodelist={cfg.node}", "--nodes=1", "--ntasks=1",
            f"--time={VERIFY_JOB_LIMIT}", "--no-requeue", "--output=/dev/null",
            f"--wrap={verify_command()}",
        ])
    except SlurmctlError as exc:
        lost = reasons.DrainReason(reasons.NODE_PROBLEM, "verify", f"could not start the verification: {exc}")
        replace_reason(cfg, lost)  # drained again before the fence goes
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


def settle_verification(cfg: HookConfig, row: NodeHealthRow, findings: list[Finding],
                        now: float | None = None) -> Outcome:
    """The reservation is on: wait for the verification job, then end the reservation. A job that
    completed returns the node; any other end (or a job that never started) leaves it drained with
    the evidence, drained BEFORE the reservation goes, so the node never returns unverified."""
    name = verify_name(cfg.node)
    jobs = cfg.slurm.named_job_states(name, "root", timeout=10.0)
    newest = jobs[max(jobs)] if jobs else None
    if newest in ("CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"):
        return Outcome(cfg.node, "verifying", findings, f"job {max(jobs)} {newest}")
    if newest == "PENDING":
        waited = seconds_since(cfg.slurm.job_submit_time(max(jobs), timeout=10.0), now)
        if waited is None or waited < cfg.verify_start_seconds:
            return Outcome(cfg.node, "verifying", findings, f"job {max(jobs)} PENDING")
    if newest == "COMPLETED":
        if row.drained or someone_elses(row):  # the job said pass, yet the node is out: someone's, or ours
            if someone_elses(row):
                end_verification(cfg)
                return Outcome(cfg.node, "left_alone", findings, f"drained by someone else: {row.reason}")
            end_verification(cfg)
            return Outcome(cfg.node, "failed", findings, row.reason)
        cfg.slurm.delete_reservation(name, timeout=10.0)
        blame.clear(cfg.health_failures_dir, blame.read(cfg.health_failures_dir))  # answered by the pass
        blame.mark_passed(cfg.health_failures_dir, now if now is not None else time.time())
        return Outcome(cfg.node, "passed", findings, f"job {max(jobs)} passed; back in service")
    ours = reasons.parse(row.reason) if row.drained else None
    if someone_elses(row):
        end_verification(cfg)
        return Outcome(cfg.node, "left_alone", findings, f"drained by someone else: {row.reason}")
    if ours is None or ours.check != "verify":
        said = "never started" if newest == "PENDING" else f"ended {newest or 'out of sight'}"
        lost = reasons.DrainReason(reasons.NODE_PROBLEM, "verify", f"the verification job {said} without a verdict")
        if not replace_reason(cfg, lost):
            fresh = node_row(cfg)
            if fresh is None or not fresh.drained:
                # not drained and we could not drain it: keep the fence, try again next run
                return Outcome(cfg.node, "verifying", findings,
                               "could not drain after a verification without a verdict")
    end_verification(cfg)
    return Outcome(cfg.node, "failed", findings, row.reason if ours else f"job {newest}")


def verify(cfg: HookConfig) -> Outcome:
    """Inside the verification job, on the node: every check plus the probe. A failure drains the
    node with the evidence (unless an operator drained it meanwhile); the periodic run ends the
    reservation either way (a job cannot delete the reservation it runs in)."""
    findings = run_checks(Subject(cfg, job_id=int(os.environ.get("SLURM_JOB_ID") or 0), moment="verify"))
    failed = first_failure(findings)
    if failed is None and (broken := config_error(findings)) is not None:
        return Outcome(cfg.node, "config_error", findings, broken.detail)  # no verdict: the node stays drained
    if failed is None:
        return Outcome(cfg.node, "passed", findings)
    evidence = reasons.DrainReason(reasons.NODE_PROBLEM, "verify", f"{failed.check}: {failed.detail}")
    if not replace_reason(cfg, evidence):
        return Outcome(cfg.node, "failed", findings, "drained by someone else; their reason kept")
    return Outcome(cfg.node, "failed", findings, evidence.text())


def active(cfg: HookConfig) -> Outcome:
    """The scheduled active check, as a root job on an idle node: the all-reduce alone. A failure
    drains the node with our reason (never over another's drain); the periodic program then
    verifies it before it returns, like any node we drained."""
    findings = run_checks(Subject(cfg, job_id=int(os.environ.get("SLURM_JOB_ID") or 0), moment="active"))
    failed = first_failure(findings)
    if failed is None and (broken := config_error(findings)) is not None:
        return Outcome(cfg.node, "config_error", findings, broken.detail)  # the site's to fix: never a drain
    if failed is None:
        return Outcome(cfg.node, "passed" if findings else "none", findings,
                       "" if findings else "no torch python configured: nothing measured")
    return Outcome(cfg.node, drain(cfg, failed.reason()), findings, failed.reason().text())


def note_in_job(cfg: HookConfig, env, moment: str, outcome: Outcome) -> None:
    """Inside a health job (the verification job, the active check): its outcome into the job's own
    AdminComment (reasons.JobNote), where accounting keeps it for the operator's view and the
    exporter (lost.node_week): a configuration error drains nothing, this is how it is seen. Only
    an administrator can write that field, so no user's job can say it; a refusal is not retried."""
    job = env.get("SLURM_JOB_ID", "")
    note = reasons.JobNote(moment, outcome.action, cfg.node)
    if cfg.slurm is None or not job.isdigit() or reasons.parse_job_note(note.text()) != note:
        return
    try:
        cfg.slurm.update_job(int(job), AdminComment=note.text())
    except SlurmctlError as exc:
        print(f"slurmctl health: could not record the outcome in job {job}'s AdminComment: {exc}", file=sys.stderr)


def log_outcome(cfg: HookConfig, env, moment: str, outcome: Outcome, started: float) -> None:
    """One line in the hooks log (hooklog), and in the job's / slurmd's output."""
    from slurmctl.ops.hooks.hooklog import log_hook  # why: only the entry points log

    log_hook(env, f"health-{moment}", started, **outcome.to_dict())
    if outcome.action == "config_error":
        print(f"slurmctl health: CONFIGURATION ERROR on {outcome.node}, nothing measured and nothing drained: "
              f"{outcome.detail}", file=sys.stderr)
    print(json.dumps({"moment": moment, **outcome.to_dict(), "time": round(time.time(), 3)}))
