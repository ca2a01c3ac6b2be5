"""The Slurm vocabulary firewall: job states and reason codes -> plain language + what to do.

Researchers should never need a Slurm manual. Every state (base states, flags and squeue's short
codes) and every entry of Slurm's ``job_state_reason`` table (tests/fixtures/slurm_job_state_reasons.json,
copied from SchedMD/slurm src/common/job_state_reason.c) gets a sentence and an action. The big
limit families (scope QOS/Assoc/Account x Grp/Max/Min x resource x Minutes/RunMinutes x
PerJob/PerNode/PerUser/PerAccount) are parsed structurally, so a combination missing from the
table is still explained correctly. Words we do not know are reported as unknown, never guessed.
"""

# The tables below keep one Slurm word per line (grep-able, diff-able), so long lines are allowed here.
# ruff: noqa: E501
from __future__ import annotations

import re
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Explanation:
    headline: str  # what is happening, in plain words
    action: str  # what to do (may be "nothing to do")
    # wait: starts by itself | blocked: never starts as submitted | hold: needs a release |
    # ended: the job is over | info | unknown: we do not know this word
    kind: str = "info"
    known: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def _e(headline: str, action: str, kind: str = "info") -> Explanation:
    return Explanation(headline, action, kind)


STATES: dict[str, Explanation] = {
    "PENDING": _e("Waiting in the queue; no GPUs are in use yet.", "Nothing to do; it starts by itself.", "wait"),
    "CONFIGURING": _e("GPUs are allocated and the nodes are being prepared.", "Nothing to do; training starts in moments."),
    "RUNNING": _e("Training is running.", "Follow it with `slurmctl logs RUN -f`."),
    "COMPLETING": _e("The job has ended and Slurm is cleaning up the nodes.", "Nothing to do."),
    "COMPLETED": _e("Finished successfully (exit code 0).", "Nothing to do; results are in the run directory.", "ended"),
    "FAILED": _e("The training exited with an error.", "See why with `slurmctl diagnose RUN`.", "ended"),
    "CANCELLED": _e("The job was cancelled.", "Start again with `slurmctl submit` (or resume from its checkpoint).", "ended"),
    "TIMEOUT": _e("The job hit its time limit and was stopped.", "Resume from the last checkpoint, or raise `time_limit` in run.yaml.", "ended"),
    "PREEMPTED": _e("Spot capacity was taken back, so the job was preempted.", "Resume from the last checkpoint, or use an on-demand partition.", "ended"),
    "NODE_FAIL": _e("A node of the job failed (hardware or node agent), not your code.", "Resume from the last checkpoint; the platform team is alerted by the node's state.", "ended"),
    "OUT_OF_MEMORY": _e("A process ran out of host memory and was killed.", "Lower the batch size or data-loader workers, or ask for more memory.", "ended"),
    "BOOT_FAIL": _e("The nodes failed to boot, not your code.", "Submit again; tell the platform team if it repeats.", "ended"),
    "DEADLINE": _e("The job missed its deadline and was removed.", "Submit again with a later deadline or a shorter time limit.", "ended"),
    "REQUEUED": _e("The job was put back in the queue and will start again.", "Nothing to do; it resumes from its last checkpoint.", "wait"),
    "REQUEUE_HOLD": _e("The job was requeued and is on hold.", "Release it (`scontrol release JOBID`) or cancel it.", "hold"),
    "REQUEUE_FED": _e("The job is being requeued by another cluster of the federation.", "Nothing to do.", "wait"),
    "RESV_DEL_HOLD": _e("The job's reservation was deleted, so it is on hold.", "Release it (`scontrol release JOBID`) or cancel it.", "hold"),
    "SUSPENDED": _e("The job is suspended by an administrator (or a higher-priority job).", "Ask the platform team why.", "wait"),
    "STOPPED": _e("The job is stopped (SIGSTOP) and keeps its GPUs.", "Ask the platform team, or cancel it."),
    "SIGNALING": _e("Slurm is delivering a signal to the job.", "Nothing to do."),
    "STAGE_OUT": _e("The job ended and its burst-buffer data is being copied out.", "Nothing to do."),
    "RESIZING": _e("The job's allocation is being resized.", "Nothing to do."),
    "SPECIAL_EXIT": _e("The job was requeued after a special exit code and is held.", "Check the log, then release or cancel it.", "hold"),
    "REVOKED": _e("The job was revoked (it started on another cluster).", "Nothing to do here.", "ended"),
    "LAUNCH_FAILED": _e("The job could not be launched on its nodes.", "Submit again; tell the platform team if it repeats.", "ended"),
    "RECONFIG_FAIL": _e("The node failed to reconfigure for the job.", "Submit again; tell the platform team.", "ended"),
    "POWER_UP_NODE": _e("A powered-down node is booting for the job.", "Nothing to do; it starts when the node is up.", "wait"),
    "UPDATE_DB": _e("Slurm is sending the job's update to the accounting database.", "Nothing to do."),
    "EXPEDITING": _e("The job is being requeued with top priority (expedited).", "Nothing to do.", "wait"),
}

# squeue's %t short codes.
SHORT_STATES = {
    "PD": "PENDING", "R": "RUNNING", "CF": "CONFIGURING", "CG": "COMPLETING", "CD": "COMPLETED", "F": "FAILED",
    "CA": "CANCELLED", "TO": "TIMEOUT", "PR": "PREEMPTED", "NF": "NODE_FAIL", "OOM": "OUT_OF_MEMORY",
    "BF": "BOOT_FAIL", "DL": "DEADLINE", "RQ": "REQUEUED", "RH": "REQUEUE_HOLD", "RF": "REQUEUE_FED",
    "RD": "RESV_DEL_HOLD", "RS": "RESIZING", "RV": "REVOKED", "S": "SUSPENDED", "ST": "STOPPED",
    "SE": "SPECIAL_EXIT", "SI": "SIGNALING", "SO": "STAGE_OUT",
}

_ASK_QUOTA = "Wait for other jobs to finish, or ask your team lead to raise the limit."
_SHRINK = "Ask for less (fewer GPUs/nodes or a shorter `time_limit` in run.yaml), or ask for a higher limit."

# Reasons that are not part of a limit family. Keys are the exact strings squeue/sacct print.
REASONS: dict[str, Explanation] = {
    "None": _e("Slurm gives no reason: the job is not held back by anything.", "Nothing to do."),
    "Priority": _e("Other jobs are ahead of yours in the queue.", "Nothing to do; or use a smaller shape or another partition to start sooner.", "wait"),
    "Resources": _e("Your job is next, but not enough GPUs are free yet.", "Nothing to do; it starts when the GPUs free up, or pick a smaller shape.", "wait"),
    "Prolog": _e("The node's start-up checks (prolog) are running.", "Nothing to do.", "wait"),
    "Dependency": _e("The job waits for another job it depends on.", "Nothing to do while that job runs.", "wait"),
    "DependencyNeverSatisfied": _e("The job it depends on failed, so this job can never start.", "Cancel it and submit again without the dependency.", "blocked"),
    "JobHeldUser": _e("The job is on hold (held by you).", "Release it with `scontrol release JOBID` when it should start, or cancel it.", "hold"),
    "JobHeldAdmin": _e("An administrator put the job on hold.", "Ask the platform team why.", "hold"),
    "JobHoldMaxRequeue": _e("The job was requeued too many times and is held so it stops looping.", "Read why it keeps failing (`slurmctl diagnose RUN`), fix it, then release or resubmit.", "hold"),
    "BeginTime": _e("The job is waiting for its start time: one given at submission (--begin), or, after a requeue, the about 2 minutes for which Slurm holds a requeued job before it may start again.", "Nothing to do; it starts by itself.", "wait"),
    "PartitionDown": _e("The partition is down (maintenance or an outage).", "Wait, or submit to another partition; the platform team knows.", "wait"),
    "PartitionInactive": _e("The partition is inactive: it accepts jobs but starts none.", "Submit to another partition, or ask the platform team when it reopens.", "wait"),
    "PartitionNodeLimit": _e("The job asks for more (or fewer) nodes than the partition allows.", "Change `nodes` in run.yaml, or use another partition.", "blocked"),
    "PartitionTimeLimit": _e("The time limit is above what the partition allows.", "Lower `time_limit` in run.yaml, or use another partition.", "blocked"),
    "PartitionConfig": _e("The request does not fit the partition's configuration (e.g. allowed accounts or QOS).", "Use another partition, or ask the platform team.", "blocked"),
    "ReqNodeNotAvail": _e("Nodes the job needs are unavailable (drained, down or reserved).", "Wait for the nodes, or submit without pinning nodes.", "wait"),
    "NodeDown": _e("A node the job needs is down.", "Wait, or submit again; the platform team is alerted.", "wait"),
    "FrontEndDown": _e("The front-end node that launches jobs is down.", "Wait; the platform team is alerted.", "wait"),
    "Reservation": _e("The job waits for its reservation to begin.", "Nothing to do.", "wait"),
    "ReservationDeleted": _e("The reservation the job asked for was deleted.", "Cancel it and submit again without the reservation.", "blocked"),
    "ReservationInvalid": _e("The reservation the job asked for is not valid for it.", "Cancel it and submit again without (or with a valid) reservation.", "blocked"),
    "Licenses": _e("The software licenses the job asks for are all in use.", "Nothing to do; it starts when a license frees up.", "wait"),
    "AssociationJobLimit": _e("Your account has as many jobs running as it may.", _ASK_QUOTA, "wait"),
    "AssociationResourceLimit": _e("Your account's resource limit is reached.", _ASK_QUOTA, "wait"),
    "AssociationTimeLimit": _e("Your account's time limit is reached.", _SHRINK, "blocked"),
    "QOSJobLimit": _e("The QOS (quality-of-service tier) has as many jobs running as it may.", _ASK_QUOTA, "wait"),
    "QOSResourceLimit": _e("The QOS's resource limit is reached.", _ASK_QUOTA, "wait"),
    "QOSTimeLimit": _e("The QOS's time limit is reached.", _SHRINK, "blocked"),
    "QOSUsageThreshold": _e("The QOS's usage threshold (fair-share) is reached.", "Wait for your team's usage to decay, or use another QOS.", "wait"),
    "QOSNotAllowed": _e("The job's QOS may not be used in this partition.", "Submit without a QOS, or to another partition.", "blocked"),
    "AccountNotAllowed": _e("Your account may not use this partition.", "Use another partition, or ask the platform team for access.", "blocked"),
    "InvalidAccount": _e("The job's account is not valid for you.", "Ask the platform team to add you to the account.", "blocked"),
    "InvalidQOS": _e("The job's QOS is not valid for you.", "Submit without a QOS, or ask the platform team.", "blocked"),
    "AccountingPolicy": _e("An accounting limit of your account or QOS holds the job.", _ASK_QUOTA, "wait"),
    "MaxMemPerLimit": _e("The job asks for more memory per CPU/node than the partition allows.", "Ask for less memory, or use another partition.", "blocked"),
    "JobArrayTaskLimit": _e("The job array already runs as many tasks at once as you allowed (%N).", "Nothing to do; or raise the array's task limit.", "wait"),
    "BurstBufferResources": _e("Not enough burst-buffer storage is free.", "Nothing to do; it starts when storage frees up.", "wait"),
    "BurstBufferStageIn": _e("Data is being staged in to the burst buffer.", "Nothing to do.", "wait"),
    "BurstBufferOperation": _e("A burst-buffer operation failed.", "Submit again; tell the platform team if it repeats.", "ended"),
    "PowerNotAvail": _e("The cluster's power budget has no room for the job now.", "Nothing to do; it starts when power frees up.", "wait"),
    "PowerReserved": _e("Power is reserved for other jobs.", "Nothing to do.", "wait"),
    "FedJobLock": _e("The job is locked while the federation decides where it runs.", "Nothing to do.", "wait"),
    "Cleaning": _e("The job's previous attempt is still being cleaned up.", "Nothing to do; it restarts shortly.", "wait"),
    "SchedDefer": _e("The scheduler deferred the job (immediate allocation was not possible).", "Submit again without --immediate.", "wait"),
    "BadConstraints": _e("No node can ever satisfy the request.", "Check the GPU type and count in run.yaml.", "blocked"),
    "Constraints": _e("No available node has the features (constraints) the job asks for.", "Check the constraints/GPU type, or wait for such nodes.", "blocked"),
    "SystemFailure": _e("Slurm itself failed while handling the job, not your code.", "Submit again; tell the platform team.", "ended"),
    "JobLaunchFailure": _e("The job could not be launched on its nodes (a node or file-system problem).", "Submit again; tell the platform team if it repeats.", "ended"),
    "NonZeroExitCode": _e("The training exited with an error.", "See why with `slurmctl diagnose RUN`.", "ended"),
    "RaisedSignal": _e("The training was killed by a signal.", "See why with `slurmctl diagnose RUN`.", "ended"),
    "TimeLimit": _e("The job hit its time limit.", "Resume from the last checkpoint, or raise `time_limit`.", "ended"),
    "InactiveLimit": _e("The job was idle too long (its launcher went away) and was ended.", "Submit again; keep the submitting session alive for interactive jobs.", "ended"),
    "DeadLine": _e("The job could not finish before its deadline and was removed.", "Submit again with a later deadline or a shorter time limit.", "ended"),
    "MaxPoweredUpNodes": _e("The cluster's cap on powered-up nodes is reached, so the powered-down node the job needs cannot boot yet.", "Nothing to do; it starts when another node powers down.", "wait"),
    "MpiPortsBusy": _e("The ports Slurm reserves for MPI on the nodes are all in use by other jobs.", "Nothing to do; it starts when ports free up.", "wait"),
    "NvidiaImexChannels": _e("No NVIDIA IMEX channel (multi-node NVLink) is free for the job yet.", "Nothing to do; it starts when a channel frees up.", "wait"),
    "OutOfMemory": _e("A process ran out of host memory and was killed.", "Lower the batch size or data-loader workers, or ask for more memory.", "ended"),
    # Not in the reason table but printed by squeue/scontrol as the reason text.
    "launch failed requeued held": _e("The job failed to launch (a node problem) and is held.", "Release it with `scontrol release JOBID`; tell the platform team.", "hold"),
    "Prolog error": _e("The node's start-up checks failed; the job was requeued and held.", "Release it with `scontrol release JOBID`; tell the platform team.", "hold"),
    "job requeued in held state": _e("The job was requeued and held.", "Release it with `scontrol release JOBID`, or cancel it.", "hold"),
}

_RESOURCES = {  # structural name -> (plain noun, is a GPU-like resource)
    "Cpu": "CPUs", "CPU": "CPUs", "Mem": "memory", "Memory": "memory", "Node": "nodes",
    "GRES": "GPUs (generic resources)", "Billing": "billed usage (GPU-hours weighted by price)",
    "License": "licenses", "Energy": "energy", "BB": "burst-buffer storage",
    "Unknown": "a resource Slurm does not name", "Jobs": "running jobs", "Job": "running jobs",
    "SubmitJobs": "queued and running jobs", "SubmitJob": "queued and running jobs",
    "Wall": "wall-clock time", "WallDuration": "wall-clock time",
}
_FAMILY_RE = re.compile(
    r"^(?P<scope>QOS|Assoc)?(?P<kind>Grp|Max|Min)"
    r"(?P<resource>CPU|Cpu|Memory|Mem|Node|GRES|Billing|License|Energy|BB|Unknown|SubmitJobs|SubmitJob|Jobs|Job|"
    r"WallDuration|Wall)"
    r"(?P<minutes>RunMinutes|RunMins|Minutes|Mins)?(?:Per(?P<per>Job|Node|User|Account))?(?P<suffix>Limit|NotSatisfied)?$"
)


@dataclass(frozen=True)
class LimitFamily:
    """One limit reason parsed into its parts, e.g. QOSMaxGRESPerUser -> (QOS, Max, GRES, '', User)."""

    scope: str  # QOS | Assoc | Account (bare Max...PerAccount reasons are QOS limits per account)
    kind: str  # Grp | Max | Min
    resource: str
    minutes: str  # '' | Minutes | RunMinutes
    per: str  # '' | Job | Node | User | Account

    def explanation(self) -> Explanation:
        noun = _RESOURCES[self.resource]
        who = {"QOS": "the job's QOS (quality-of-service tier)", "Assoc": "your account",
               "Account": "your account under its QOS"}[self.scope]
        counted = noun
        if self.minutes == "Minutes":
            counted = f"{noun} x minutes (a usage budget)"
        elif self.minutes == "RunMinutes":
            counted = f"{noun} x remaining time limit of running jobs"
        if self.kind == "Min":
            return _e(f"The job asks for fewer {noun} than the minimum {who} requires.",
                      f"Ask for more {noun} in run.yaml, or use another QOS/partition.", "blocked")
        if self.kind == "Grp":
            if self.minutes == "Minutes":
                return _e(f"The {counted} budget shared by everyone in {who} is used up.",
                          "Ask your team lead to raise or reset the budget; the job waits until then.", "blocked")
            return _e(f"Everyone in {who} together is at the cap on {counted}; your job waits for room.",
                      _ASK_QUOTA, "wait")
        # Max
        if self.resource in {"Wall", "WallDuration"}:
            return _e(f"The job's time limit is above the maximum {who} allows per job.",
                      "Lower `time_limit` in run.yaml (resume from checkpoints in several jobs).", "blocked")
        if self.per in {"", "User", "Account"} and self.resource in {"Jobs", "Job", "SubmitJobs", "SubmitJob"}:
            owner = {"User": "You have", "Account": "Your account has", "": "Your account has"}[self.per]
            return _e(f"{owner} as many {noun} as {who} allows.", "Wait for one to finish, or cancel one.", "wait")
        if self.per == "Job" or (self.per == "" and self.minutes):
            return _e(f"The job asks for more {counted} than {who} allows for a single job; it cannot start as is.",
                      _SHRINK, "blocked")
        if self.per == "Node":
            return _e(f"The job asks for more {counted} per node than {who} allows.",
                      "Spread the job over more nodes with fewer GPUs each, or ask for less.", "blocked")
        if self.minutes == "RunMinutes" and self.per in {"User", "Account"}:
            whose = "Your running jobs" if self.per == "User" else "Your account's running jobs"
            return _e(f"{whose} already hold as much {noun} x remaining time limit as {who} allows per "
                      f"{self.per.lower()}.",
                      "Nothing to do: the budget frees up as those jobs run down their time; a shorter `time_limit` "
                      "in run.yaml makes the job fit sooner.", "wait")
        if self.per == "User":
            return _e(f"Your running jobs already use the most {counted} {who} allows per user.",
                      "Wait for your other jobs to finish, or cancel one.", "wait")
        if self.per == "Account":
            return _e(f"Your account's running jobs already use the most {counted} its QOS allows per account.",
                      "Wait for your team's other jobs, or ask your team lead about the limit.", "wait")
        return _e(f"A maximum on {counted} of {who} holds the job.", _ASK_QUOTA, "wait")


def explain_beyond_limit(asked: float, limit: float, unit: str, limit_name: str) -> Explanation:
    """A pending job that alone asks for more than a limit allows: no amount of waiting starts it."""
    return _e(f"The job asks for {asked:g} {unit}, more than the limit allows at all ({limit_name}: {limit:g} {unit}): "
              "it can never start as submitted, however long it waits.",
              f"Cancel it (`slurmctl cancel RUN`) and submit it asking for at most {limit:g} {unit} (fewer nodes or GPUs "
              "per node in run.yaml; keep the global batch with gradient accumulation), or ask the platform team for "
              "a QOS or account with a higher limit.", "blocked")


def parse_limit_family(reason: str) -> LimitFamily | None:
    m = _FAMILY_RE.match(reason)
    if not m:
        return None
    # Reasons without a scope word are QOS limits (Slurm's WAIT_QOS_MAX_*_PER_USER / _PER_ACCT entries).
    scope = m["scope"] or {"Account": "Account", "User": "QOS"}.get(m["per"] or "", "")
    if not scope or (m["suffix"] == "NotSatisfied" and m["kind"] != "Min"):
        return None
    minutes = {"Mins": "Minutes", "RunMins": "RunMinutes"}.get(m["minutes"] or "", m["minutes"] or "")
    return LimitFamily(scope, m["kind"], m["resource"], minutes, m["per"] or "")


def normalise_word(word: str) -> str:
    """Strip what squeue wraps around a reason: '(ReqNodeNotAvail, UnavailableNodes:h100-1)'."""
    word = word.strip().strip("()").strip()
    return word.split(",")[0].strip() if word.startswith("ReqNodeNotAvail") else word


def explain_state(state: str) -> Explanation:
    """A state, a short code (PD, R, CG...), or a combined state such as 'PENDING+REQUEUED'."""
    word = state.strip().upper().split(" ")[0]  # sacct: "CANCELLED by 0"
    word = SHORT_STATES.get(word, word)
    if word in STATES:
        return STATES[word]
    if "+" in word:
        parts = [STATES[p] for p in word.split("+") if p in STATES]
        if parts:
            return Explanation(" ".join(p.headline for p in parts), parts[-1].action, parts[-1].kind)
    return Explanation(f"'{state}' is not a Slurm job state slurmctl knows.",
                       "Ask the platform team if this persists.", "unknown", known=False)


def explain_reason(reason: str) -> Explanation | None:
    """None for an empty reason; an Explanation (known=False when we do not know the word) otherwise."""
    word = normalise_word(reason or "")
    if not word or word == "null":
        return None
    if word in REASONS:
        return REASONS[word]
    lowered = {k.lower(): v for k, v in REASONS.items()}
    if word.lower() in lowered:  # Slurm matches reason names case-insensitively
        return lowered[word.lower()]
    family = parse_limit_family(word)
    if family:
        return family.explanation()
    return Explanation(f"Slurm holds the job back for a reason slurmctl does not know: {word}.",
                       "Ask the platform team if it does not start soon.", "unknown", known=False)


def explain_job_reason(job) -> Explanation | None:
    """Why `job` (a slurm Job) waits, in the words its own record allows: BeginTime is a requeued job's
    hold before it may start again only when Slurm restarted it (its restart count), else the start
    time it was given at submission (--begin), with that time. Any other reason: explain_reason."""
    if normalise_word(job.reason or "") != "BeginTime":
        return explain_reason(job.reason)
    when = f" ({job.start_time:%Y-%m-%d %H:%M:%S})" if job.start_time else ""
    if job.restarts:
        return _e(f"Requeued (Slurm restart {job.restarts}) and waiting to start again: Slurm holds a requeued job "
                  f"about 2 minutes before it may start{when}.",
                  "Nothing to do; it starts again by itself (from its newest checkpoint, where it has one).", "wait")
    return _e(f"Waiting for the start time it was given at submission (--begin){when}; it has not run yet.",
              "Nothing to do; it starts by itself then (`scontrol update JobId=JOBID StartTime=now` starts it "
              "sooner).", "wait")


def reason_now(job) -> str:
    """Slurm's reason for `job` (a slurm Job) as it stands: a live job's as Slurm gives it; an ended job
    keeps only a reason that tells how it ended (NonZeroExitCode, TimeLimit), not the pending reason
    accounting leaves on it (an array task that waited: JobArrayTaskLimit), which no longer holds. Only
    squeue tells a live job: accounting's last record of a job squeue no longer has may still read
    REQUEUED or PENDING with the reason it had then (BeginTime)."""
    if job.active and job.source != "sacct":
        return job.reason
    explained = explain_reason(job.reason)
    return job.reason if explained is not None and explained.kind == "ended" else ""


def explain_word(word: str) -> tuple[str, Explanation]:
    """For `slurmctl explain`: ('state' | 'reason' | 'unknown', explanation) of any Slurm word."""
    state = explain_state(word)
    if state.known:
        return "state", state
    reason = explain_reason(word)
    if reason is not None and reason.known:
        return "reason", reason
    return "unknown", Explanation(f"'{word}' is neither a Slurm job state nor a pending/failure reason slurmctl knows.",
                                  "Check the spelling (it is case-sensitive in squeue output), or ask the platform team.",
                                  "unknown", known=False)
