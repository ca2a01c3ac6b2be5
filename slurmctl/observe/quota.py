"""The numbers behind a QOS*/Assoc* pending reason: which limit blocks, its value, and current usage.

Read only when a pending job's reason is a quota reason: one sacctmgr (the limit) and one squeue
(every active job's user/account/QOS/TRES, to sum the usage the limit counts). Assoc limits are read
from the job's account row and the user's row in it; limits inherited from parent accounts are not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from slurmctl.observe.explain import LimitFamily, parse_limit_family
from slurmctl.slurm.client import Job, QuotaJob, SlurmClient
from slurmctl.slurm.parsing import parse_tres

# structural resource -> TRES name in sacctmgr/squeue strings
_TRES = {"Cpu": "cpu", "CPU": "cpu", "Mem": "mem", "Memory": "mem", "Node": "node", "GRES": "gres/gpu",
         "Billing": "billing", "Energy": "energy"}
_JOB_COUNTS = {"Jobs", "Job", "SubmitJobs", "SubmitJob"}


@dataclass
class Quota:
    """One limit and what counts against it now (None where Slurm has no number)."""

    reason: str
    scope: str  # QOS | Assoc | Account
    holder: str  # the QOS name, or the account (user@account for a per-user assoc row)
    field: str  # the sacctmgr field, e.g. MaxTRESPU
    resource: str  # e.g. gres/gpu, cpu, jobs
    limit: float | None
    usage: float | None
    counted: str  # whose usage: "your running jobs", "account ml-research", ...
    request: float | None = None  # what this job alone asks for of the resource

    @property
    def unit(self) -> str:
        return {"gres/gpu": "GPUs", "cpu": "CPUs", "mem": "MB memory", "node": "nodes", "jobs": "jobs"}.get(
            self.resource, self.resource)

    @property
    def never_fits(self) -> bool:
        """The job alone asks for more than the limit: it waits forever, however much room frees up."""
        return self.limit is not None and self.request is not None and self.request > self.limit

    def to_dict(self) -> dict:
        return asdict(self)

    def sentence(self) -> str:
        unit = self.unit
        limit = "not found" if self.limit is None else f"{self.limit:g} {unit}"
        used = "" if self.usage is None else f"; {self.counted} use {self.usage:g} now"
        return f"limit {self.field} of {self.scope} {self.holder}: {limit}{used}"


def sacctmgr_field(family: LimitFamily) -> str | None:
    """The sacctmgr column that holds the limit a reason names (None: no single number)."""
    if family.kind == "Min" or family.resource in {"Wall", "WallDuration", "Unknown", "License", "BB"}:
        return None
    if family.resource in _JOB_COUNTS:
        submit = "Submit" if family.resource.startswith("Submit") else ""
        if family.kind == "Grp":
            return f"Grp{submit or 'Jobs'}"
        if family.scope == "Assoc":
            return f"Max{submit or 'Jobs'}"
        return f"Max{submit}Jobs{'PA' if family.per == 'Account' else 'PU'}".replace("MaxSubmitJobs", "MaxSubmit")
    minutes = {"Minutes": "Mins", "RunMinutes": "RunMins"}.get(family.minutes, "")
    if family.kind == "Grp":
        return f"GrpTRES{minutes}"
    per = {"User": "PU", "Account": "PA", "Node": "PerNode", "Job": "", "": ""}[family.per]
    if minutes:
        return f"MaxTRES{minutes}"  # MaxTRESMins: per job
    return f"MaxTRES{per}"


def quota_for(job: Job, client: SlurmClient) -> Quota | None:
    """The limit behind job.reason with current usage; None when the reason is no quota reason."""
    family = parse_limit_family(job.reason)
    field = sacctmgr_field(family) if family else None
    if family is None or field is None:
        return None
    queue = client.quota_jobs()
    me = next((j for j in queue if j.job_id == job.job_id), None)
    if me is None:
        return None
    if family.scope == "Assoc":
        rows = client.assoc_limits(me.account, [field])
        user_limit = rows.get(me.user, {}).get(field, "")
        holder, raw = ((f"{me.user}@{me.account}", user_limit) if user_limit
                       else (me.account, rows.get("", {}).get(field, "")))
        same = [j for j in queue if j.account == me.account and (j.user == me.user or holder == me.account)]
    else:
        holder, raw = me.qos, client.qos_limits(me.qos, [field]).get(field, "")
        same = [j for j in queue if j.qos == me.qos]
        if family.per == "User":
            same = [j for j in same if j.user == me.user]
        elif family.per == "Account":
            same = [j for j in same if j.account == me.account]
    return _measure(job.reason, family, field, holder, raw, me, same)


def _measure(reason: str, family: LimitFamily, field: str, holder: str, raw: str, me: QuotaJob,
             same: list[QuotaJob]) -> Quota:
    counted = {"User": "your running jobs", "Account": f"account {me.account}'s running jobs"}.get(
        family.per, f"running jobs in {family.scope} {holder}")
    if family.resource in _JOB_COUNTS:
        submit = family.resource.startswith("Submit")
        limit = float(raw) if raw.strip().isdigit() else None
        usage = float(sum(1 for j in same if j.job_id != me.job_id and (submit or j.state == "RUNNING")))
        return Quota(reason, family.scope, holder, field, "jobs", limit, usage,
                     counted.replace("running jobs", "queued and running jobs" if submit else "running jobs"))
    tres = _TRES.get(family.resource, family.resource.lower())
    limit = parse_tres(raw).get(tres)
    if family.per in {"Job", "Node"} or family.minutes:
        # a per-job/per-node or minutes limit: the job's own request is what counts
        asked = parse_tres(me.tres).get(tres)
        return Quota(reason, family.scope, holder, field, tres, limit, asked, "this job would", asked)
    usage = sum(parse_tres(j.tres).get(tres, 0.0) for j in same if j.state == "RUNNING")
    return Quota(reason, family.scope, holder, field, tres, limit, usage, counted, parse_tres(me.tres).get(tres))
