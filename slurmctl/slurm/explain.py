"""Slurm job states and reasons -> plain language and what to do about them.

Researchers should never need a Slurm manual: every state and pending reason slurmctl shows comes
with a sentence and an action. Unknown codes still get a sentence (never the bare code).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Explanation:
    headline: str  # what is happening, in plain words
    action: str  # what to do (may be "nothing to do")


STATES: dict[str, Explanation] = {
    "PENDING": Explanation("Waiting in the queue; no GPUs are in use yet.", "Nothing to do; it starts by itself."),
    "CONFIGURING": Explanation("GPUs are allocated and the nodes are being prepared.", "Nothing to do; training starts in moments."),
    "RUNNING": Explanation("Training is running.", "Follow it with `slurmctl logs RUN -f`."),
    "COMPLETING": Explanation("The job has ended and Slurm is cleaning up the nodes.", "Nothing to do."),
    "COMPLETED": Explanation("Finished successfully (exit code 0).", "Nothing to do; results are in the run directory."),
    "FAILED": Explanation("The training exited with an error.", "Read the end of the log: `slurmctl logs RUN`."),
    "CANCELLED": Explanation("The job was cancelled.", "Start again with `slurmctl submit` (or resume from its checkpoint)."),
    "TIMEOUT": Explanation("The job hit its time limit and was stopped.", "Resume from the last checkpoint, or raise `time_limit` in run.yaml."),
    "PREEMPTED": Explanation("Spot capacity was taken back, so the job was preempted.", "Resume from the last checkpoint, or use an on-demand partition."),
    "NODE_FAIL": Explanation("A node of the job failed (hardware or node agent), not your code.", "Resume from the last checkpoint; the platform team is alerted by the node's state."),
    "OUT_OF_MEMORY": Explanation("A process ran out of host memory and was killed.", "Lower the batch size or data-loader workers, or ask for more memory."),
    "BOOT_FAIL": Explanation("The nodes failed to boot, not your code.", "Submit again; tell the platform team if it repeats."),
    "DEADLINE": Explanation("The job missed its deadline and was removed.", "Submit again with a later deadline or a shorter time limit."),
    "REQUEUED": Explanation("The job was put back in the queue and will start again.", "Nothing to do; it resumes from its last checkpoint."),
    "REQUEUE_HOLD": Explanation("The job was requeued and is on hold.", "Release it (`scontrol release JOBID`) or cancel it."),
    "SUSPENDED": Explanation("The job is suspended by an administrator.", "Ask the platform team why."),
    "STOPPED": Explanation("The job is stopped (SIGSTOP) and keeps its GPUs.", "Ask the platform team, or cancel it."),
    "SIGNALING": Explanation("Slurm is delivering a signal to the job.", "Nothing to do."),
    "RESIZING": Explanation("The job's allocation is being resized.", "Nothing to do."),
    "SPECIAL_EXIT": Explanation("The job was requeued after a special exit code and is held.", "Check the log, then release or cancel it."),
    "REVOKED": Explanation("The job was revoked (it started on another cluster).", "Nothing to do here."),
}

# Pending reasons (the most common first). Keys are Slurm reason strings.
REASONS: dict[str, Explanation] = {
    "Priority": Explanation("Other jobs are ahead of yours in the queue.", "Nothing to do; or use a smaller shape or another partition to start sooner."),
    "Resources": Explanation("Your job is next, but not enough GPUs are free yet.", "Nothing to do; it starts when the GPUs free up, or pick a smaller shape."),
    "JobHeldUser": Explanation("The job is on hold (held by you).", "Release it with `scontrol release JOBID` when it should start, or cancel it."),
    "JobHeldAdmin": Explanation("An administrator put the job on hold.", "Ask the platform team why."),
    "BeginTime": Explanation("The job is waiting for its scheduled start time (requeued jobs wait briefly).", "Nothing to do; it starts by itself."),
    "Dependency": Explanation("The job waits for another job it depends on.", "Nothing to do while that job runs."),
    "DependencyNeverSatisfied": Explanation("The job it depends on failed, so this job can never start.", "Cancel it and submit again without the dependency."),
    "PartitionDown": Explanation("The partition is down (maintenance or an outage).", "Wait, or submit to another partition; the platform team knows."),
    "PartitionInactive": Explanation("The partition does not accept new work right now.", "Submit to another partition."),
    "PartitionNodeLimit": Explanation("The job asks for more nodes than the partition allows.", "Lower `nodes` in run.yaml, or use a larger partition."),
    "PartitionTimeLimit": Explanation("The time limit is above what the partition allows.", "Lower `time_limit` in run.yaml, or use another partition."),
    "ReqNodeNotAvail": Explanation("Nodes the job needs are unavailable (drained, down or reserved).", "Wait for the nodes, or submit without pinning nodes."),
    "NodeDown": Explanation("A node the job needs is down.", "Wait, or submit again; the platform team is alerted."),
    "Reservation": Explanation("The job waits for its reservation to begin.", "Nothing to do."),
    "ReservationDeleted": Explanation("The reservation the job asked for was deleted.", "Cancel it and submit again without the reservation."),
    "QOSMaxGRESPerUser": Explanation("You already use your GPU quota; the job waits for your other jobs.", "Wait for your other jobs, or cancel one."),
    "QOSGrpGRES": Explanation("Your team's GPU quota is in use.", "Wait, or ask your team lead about quota."),
    "QOSMaxJobsPerUserLimit": Explanation("You have as many running jobs as allowed.", "Wait for one to finish."),
    "AssocGrpGRES": Explanation("Your account's GPU quota is in use.", "Wait, or ask your team lead about quota."),
    "AssocMaxJobsLimit": Explanation("Your account runs as many jobs as allowed.", "Wait for one to finish."),
    "AssocGrpBillingMinutes": Explanation("Your account's GPU budget is spent.", "Ask your team lead to raise the budget."),
    "InvalidAccount": Explanation("The job's account is not valid for you.", "Ask the platform team to add you to the account."),
    "InvalidQOS": Explanation("The job's QOS is not valid for you.", "Submit without a QOS, or ask the platform team."),
    "BadConstraints": Explanation("No node can ever satisfy the request.", "Check the GPU type and count in run.yaml."),
    "launch failed requeued held": Explanation("The job failed to launch (a node problem) and is held.", "Release it with `scontrol release JOBID`; tell the platform team."),
    "Prolog": Explanation("The node's start-up checks (prolog) are running.", "Nothing to do."),
    "NonZeroExitCode": Explanation("The training exited with an error.", "Read the end of the log: `slurmctl logs RUN`."),
    "TimeLimit": Explanation("The job hit its time limit.", "Resume from the last checkpoint, or raise `time_limit`."),
    "Cleaning": Explanation("The job's previous attempt is still being cleaned up.", "Nothing to do; it restarts shortly."),
}


def explain_state(state: str) -> Explanation:
    return STATES.get(state, Explanation(f"Slurm reports the job as {state.lower().replace('_', ' ')}.",
                                         "Ask the platform team if this persists."))


def explain_reason(reason: str) -> Explanation | None:
    if not reason or reason in {"None", "(null)"}:
        return None
    if reason in REASONS:
        return REASONS[reason]
    if reason.startswith("ReqNodeNotAvail"):
        return REASONS["ReqNodeNotAvail"]
    if reason.startswith(("QOS", "Assoc")):
        return Explanation(f"A quota or limit of your account or QOS holds the job ({reason}).",
                           "Wait for your other jobs, or ask your team lead about quota.")
    return Explanation(f"Slurm holds the job back for this reason: {reason}.",
                       "Ask the platform team if it does not start soon.")
