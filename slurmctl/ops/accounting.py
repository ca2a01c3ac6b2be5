"""The cost ledger: every attempt of every job (sacct --duplicates) priced, plus epilog records.

Ingestion is incremental from a high-water mark and idempotent (an attempt's key is
cluster + job id + start time; re-ingesting the same window replaces rows with equal rows).
Two ingesters at once are serialised by an exclusive lock on a file next to the ledger.
sacct output is streamed record by record, never loaded whole, and sealed per call
(slurmctl.slurm.parsing.new_seal): a job name or comment cannot forge a record, and a row already
in the ledger is never replaced by a record that names another user for the same attempt.
"""

from __future__ import annotations

import fcntl
import grp
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta
from functools import lru_cache
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING

from slurmctl.config.pricing import Discounts, allocated_cost
from slurmctl.durations import human_duration
from slurmctl.errors import ForgedSlurmOutput
from slurmctl.ops.hooks.records import read_records
from slurmctl.rundir import run_id_from_comment
from slurmctl.slurm.client import SlurmClient, parse_slurm_duration
from slurmctl.slurm.records import tres_cpus  # cached: one call per sacct row
from slurmctl.slurm.records import tres_gpus as parse_gpus  # cached: one call per sacct row

if TYPE_CHECKING:  # annotations only: pydantic's models cost ~0.3 s to import, status need not pay it
    from slurmctl.config.models import SiteConfig

_time_limit = lru_cache(maxsize=1024)(parse_slurm_duration)  # a handful of distinct limits per cluster

# The two fields users write (job name, comment) are sealed in like the others (see all_attempts).
SACCT_FIELDS = ["JobIDRaw", "User", "Account", "Partition", "AllocTRES", "NNodes", "Submit", "Eligible", "Start",
                "End", "ElapsedRaw", "Timelimit", "State", "ExitCode", "JobName", "Comment"]
_SUBMIT, _ELIGIBLE = SACCT_FIELDS.index("Submit"), SACCT_FIELDS.index("Eligible")
_START, _STATE = SACCT_FIELDS.index("Start"), SACCT_FIELDS.index("State")
ENDED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
                "DEADLINE", "BOOT_FAIL", "REQUEUED"}
# States where the work done since the last valid checkpoint is lost.
LOSSY_STATES = {"FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "REQUEUED", "BOOT_FAIL"}


@dataclass(slots=True)
class Attempt:
    """One allocation of one job: the unit of cost."""

    cluster: str
    job_id: int
    start: str
    end: str
    submit: str
    run_id: str
    job_name: str
    user: str
    account: str
    partition: str
    gpu_type: str
    gpus: int
    nodes: int
    elapsed_s: int
    timelimit_s: int | None
    state: str
    exit_code: str
    queue_wait_s: int
    gpu_hours: float = 0.0
    cost_usd: float = 0.0
    epilog_record: int = 0
    missing_epilog: int = 0
    drain_requested: int = 0
    drain_acked: int = 0
    last_ckpt_step: int | None = None
    waste_gpu_hours: float = 0.0
    waste_usd: float = 0.0
    waste_cause: str = ""

    @property
    def shape(self) -> str:
        """What it held, as `cost` prints it: '8xh100', or 'CPU only' for a job priced by its CPUs."""
        return f"{self.gpus}x{self.gpu_type or 'GPU'}" if self.gpus else "CPU only"

    def to_dict(self) -> dict:
        return asdict(self)


_NO_TIME = frozenset({"Unknown", "None", ""})


def parse_sacct_record(values: list[str], site: SiteConfig, discounts: Discounts | None = None) -> Attempt | None:
    """One sacct record (the SACCT_FIELDS values, as SlurmClient.all_attempts yields them) -> an
    ended, allocated, priced Attempt (or None).

    Written for speed (a report may read a million of these): plain unpacking, each timestamp
    parsed once."""
    if len(values) != len(SACCT_FIELDS) or not values[0].split("_")[0].split(".")[0].isdigit():
        return None
    (job_id, user, account, partition, tres, nnodes, submit_s, eligible_s, start_s, end_s, _elapsed,
     limit, state, exit_code, name, comment) = values
    state = state.split(" ", 1)[0]  # "CANCELLED by 0" -> CANCELLED
    if state not in ENDED_STATES or start_s in _NO_TIME or end_s in _NO_TIME:
        return None
    gpus, model = parse_gpus(tres)
    start, end = datetime.fromisoformat(start_s), datetime.fromisoformat(end_s)
    submit = datetime.fromisoformat(submit_s)
    eligible = submit if eligible_s in _NO_TIME else datetime.fromisoformat(eligible_s)
    elapsed = max(0, int((end - start).total_seconds()))
    part = site.partitions.get(partition)
    cost = allocated_cost(gpus, tres_cpus(tres) if not gpus else 0, start, end, part, discounts)
    if exit_code == "0:0" and state != "COMPLETED":
        exit_code = ""  # what Slurm writes for an attempt it ended itself (requeued, preempted, cancelled): unknown
    return Attempt(
        site.cluster, int(job_id.split("_")[0].split(".")[0]), start_s, end_s, submit_s,
        run_id_from_comment(comment) or "", name, user, account, partition,
        model or (part.gpu_type if part and gpus else ""), gpus, int(nnodes or 0), elapsed, _time_limit(limit), state,
        exit_code, max(0, int((start - max(submit, eligible)).total_seconds())),
        gpu_hours=gpus * elapsed / 3600,
        cost_usd=cost,
    )


def assess_waste(attempt: Attempt, record: dict | None) -> Attempt:
    """Waste = GPU time whose work did not survive: the whole attempt if it ended badly before any
    valid checkpoint (preempted: Slurm's PREEMPTED, or the run's own end record of the attempt, the
    reading status gives; else failed), else the time since the last checkpoint; unacknowledged drains
    are flagged. When the run's own end record says at most the step in flight was lost since that
    checkpoint, that time was the drain's grace (the program kept the GPUs until Slurm ended it), not
    lost work: `drain-grace`. A loss shorter than accounting's one-second times (a drained program
    that ran a few steps past its save before the cancel ended it) prices at nothing and names no cause."""
    if record:
        attempt.epilog_record = 1
        attempt.drain_requested = int(bool(record.get("drain_requested")))
        attempt.drain_acked = int(bool(record.get("drain_acknowledged", record.get("drain_acked"))))
        attempt.last_ckpt_step = record.get("last_checkpoint_step")
    # A cancel whose drain the program never acknowledged (it saved nothing), or one that stopped it at
    # once with steps lost since its checkpoint (`cancel --now`), loses its work like a kill.
    lost_on_cancel = attempt.state == "CANCELLED" and bool(record and record.get("lost_on_cancel"))
    lossy = attempt.state in LOSSY_STATES or lost_on_cancel or (
        attempt.state == "CANCELLED" and attempt.drain_requested and not attempt.drain_acked)
    if not lossy or attempt.elapsed_s == 0 or (attempt.gpus == 0 and attempt.cost_usd == 0):
        return attempt  # a CPU-only job is wasted money too, at its CPU price
    if not record:
        return attempt  # without the epilog's checkpoint facts, do not guess
    ckpt_time = record.get("last_checkpoint_time")
    start, end = datetime.fromisoformat(attempt.start), datetime.fromisoformat(attempt.end)
    saved_in_attempt = ckpt_time is not None and datetime.fromtimestamp(float(ckpt_time)) >= start
    if not saved_in_attempt:
        preempted = attempt.state == "PREEMPTED" or bool(record.get("preempted"))
        lost, cause = attempt.elapsed_s, "preempted-before-checkpoint" if preempted else "failed-before-checkpoint"
    else:
        lost = max(0, int((end - datetime.fromtimestamp(float(ckpt_time))).total_seconds()))
        cause = "lost-since-checkpoint"
    if attempt.drain_requested and not attempt.drain_acked:
        cause = "drain-grace" if saved_in_attempt and _at_most_one_step(record.get("steps_lost")) \
            else "drain-unacknowledged"
    elif lost_on_cancel:
        cause = "lost-on-cancel"
    if lost == 0:
        return attempt
    attempt.waste_gpu_hours = attempt.gpus * lost / 3600
    attempt.waste_usd = attempt.cost_usd * lost / attempt.elapsed_s
    attempt.waste_cause = cause
    return attempt


def _at_most_one_step(steps_lost) -> bool:
    """The run's own count of steps lost since the checkpoint (its end record) is 0 or 1: the step in
    flight when the drain's signal came, at most."""
    return isinstance(steps_lost, int) and not isinstance(steps_lost, bool) and 0 <= steps_lost <= 1


def read_epilog_records(spool: Path | None, run_copies: Iterable[Path] = ()) -> dict[tuple[int, str], dict]:
    """Epilog cost records (slurmctl.ops.hooks.records, one file per attempt), keyed by
    (job id, start time as sacct prints it) and by (job id, restart count).

    `run_copies`: the runs' own cost-records dirs, the copies the epilog leaves there as the job's
    user. Only a user's view of their own runs reads them (the spool is root's); the spool's copy
    wins where both exist, and the ledger never reads them."""
    out: dict[tuple[int, str], dict] = {}
    records = [r for d in run_copies for r in read_records(d)]
    if spool:
        records += read_records(spool)
    for record in records:
        rec = record.to_dict()
        out[(record.job_id, str(record.restart_count))] = rec
        if record.start_time:
            out[(record.job_id, datetime.fromtimestamp(record.start_time).isoformat(timespec="seconds"))] = rec
    return out


def stream_sacct(client: SlurmClient, start: datetime, end: datetime,
                 job_ids: Iterable[int] = ()) -> Iterator[list[str]]:
    """All attempts (--duplicates) of all users' allocations in the window, as sealed records.

    An attempt (job id, start) that one answer lists twice is a forged record: which copy Slurm
    wrote cannot be told, so ForgedSlurmOutput ends the ingest and nothing of it is committed. A job
    resized while it ran (its owner's shrink after a node loss, `scontrol update NumNodes=`) keeps
    its earlier allocation as a RESIZING record, which 22.05 lists with the same start as the job's
    next record (other jobs' records between them): Slurm's own bookkeeping, never an ended attempt
    to price, so it is passed over, not taken for a forgery. Only it keeps the job's own submit
    time: the next record's Submit (and Eligible) is the resize's, so those are taken from it."""
    seen: set[tuple[str, str]] = set()
    resized: dict[tuple[str, str], tuple[str, str]] = {}  # (job, start) -> its RESIZING record's Submit, Eligible
    for values in client.all_attempts(SACCT_FIELDS, start=start, end=end, job_ids=job_ids):
        if values[_START] in _NO_TIME:
            # never started (requeued or cancelled while pending): no allocation, nothing to price, and
            # a job requeued twice before it starts lists several such records of its own
            continue
        key = (values[0], values[_START])
        if values[_STATE].startswith("RESIZING"):
            # resized twice: the earliest is the job's (ISO times, compared as text)
            resized[key] = min(resized.get(key, (values[_SUBMIT], values[_ELIGIBLE])),
                               (values[_SUBMIT], values[_ELIGIBLE]))
            continue
        if key in resized:
            values[_SUBMIT], values[_ELIGIBLE] = resized.pop(key)
        if key in seen:
            client.rejects.add("all_attempts:duplicate", values[0])
            raise ForgedSlurmOutput(
                f"sacct listed attempt {values[_START]} of job {values[0]} twice: a job name or comment "
                "carries a forged record, so this answer is not used.",
                f"`sacct -j {values[0]} --duplicates -o JobIDRaw,User,Start` shows whose job it is.")
        seen.add(key)
        yield values


def _daily_windows(client: SlurmClient, start: datetime, end: datetime) -> Iterator[list[str]]:
    """One sacct call per day of the window, so memory is bounded by a day of jobs, not the window.
    A job spanning windows appears twice; the ledger's upsert makes that harmless."""
    at = start
    while at < end:
        nxt = min(at + timedelta(days=1), end)
        yield from stream_sacct(client, at, nxt)
        at = nxt


def attempts_from_records(sacct_records: Iterable[list[str]], site: SiteConfig, records: dict) -> Iterator[Attempt]:
    current_job, index = None, -1
    discounts = site.accounting.discounts
    for values in sacct_records:
        attempt = parse_sacct_record(values, site, discounts)
        if attempt is None:
            continue
        # sacct --duplicates lists a job's attempts together, oldest first: their order is the restart
        # count. Only the current job is remembered, so memory stays constant over a million rows.
        index = index + 1 if attempt.job_id == current_job else 0
        current_job = attempt.job_id
        record = records.get((attempt.job_id, attempt.start[:19])) or records.get((attempt.job_id, str(index)))
        assess_waste(attempt, record)
        attempt.missing_epilog = int(record is None and attempt.gpus > 0 and bool(records))
        yield attempt


def _restrict_to_operators(path: Path, group: str | None, made_dir: bool) -> None:
    """The ledger file (and its directory, when the ledger made it) root's and the group's only."""
    gid = grp.getgrnam(group).gr_gid if group else 0
    targets = [(path, 0o640 if group else 0o600)]
    if made_dir:
        targets.append((path.parent, 0o750 if group else 0o700))
    for target, mode in targets:
        os.chown(target, 0, gid, follow_symlinks=False)
        os.chmod(target, mode)


_COLUMNS = [f.name for f in fields(Attempt)]
_AS_ROW = attrgetter(*_COLUMNS)
_KEY = ("cluster", "job_id", "start")


# Filesystems whose clients share no memory: SQLite's WAL index (the -shm file) is an mmap that is not
# coherent between two hosts, so WAL "does not work over a network filesystem" (sqlite.org/wal.html).
_NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "9p", "ceph", "glusterfs", "lustre", "fuse.gcsfuse")


def on_network_filesystem(path: Path, mounts: str = "/proc/self/mounts") -> bool:
    """Whether `path` lies on a network filesystem: the filesystem type of the longest mount point
    above it (/proc/self/mounts; False when that cannot be read)."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return False
    target, best, fstype = str(path.resolve()), "", ""
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, parts[2]
    return fstype in _NETWORK_FS


class Ledger:
    """The attempts of every user, priced: the operators' (root's, and the site's operators_group's
    when it names one), never the users'. A ledger root makes gets a 0700 (0750) directory and a
    0600 (0640) file: every user's spend is in it."""

    def __init__(self, path: Path, operators_group: str | None = None):
        self.path = path.expanduser()
        made_dir = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.db = sqlite3.connect(self.path)
        if os.geteuid() == 0:
            _restrict_to_operators(self.path, operators_group, made_dir)
        # WAL: readers (reports) never block the cron ingester, but only on one host's own disk. On
        # Filestore (GKE: the cron pods and the login pods' readers on different VMs) the rollback
        # journal, whose locks are the NFS server's: a reader waits out an ingest's commit.
        mode = "DELETE" if on_network_filesystem(self.path.parent) else "WAL"
        self.db.execute(f"PRAGMA journal_mode={mode}")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(f"CREATE TABLE IF NOT EXISTS attempts ({', '.join(_COLUMNS)}, "
                        f"PRIMARY KEY ({', '.join(_KEY)}))")
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.db.commit()

    @contextmanager
    def exclusive(self):
        """Serialise ingesters (cron + a human) with a lock file; readers need no lock."""
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def high_water_mark(self) -> datetime | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'high_water_mark'").fetchone()
        return datetime.fromisoformat(row[0]) if row else None

    def upsert(self, attempts: Iterable[Attempt], batch: int = 5000) -> int:
        """Insert attempts; re-ingesting one replaces its row only when the row names the same user:
        a record for someone else's attempt (cluster, job, start) never overwrites it. All or nothing."""
        updates = ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in _KEY)
        sql = (f"INSERT INTO attempts VALUES ({', '.join('?' * len(_COLUMNS))}) "
               f"ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET {updates} WHERE attempts.user = excluded.user")
        count, rows = 0, []
        try:
            for attempt in attempts:
                rows.append(_AS_ROW(attempt))
                if len(rows) >= batch:
                    self.db.executemany(sql, rows)
                    count, rows = count + len(rows), []
            self.db.executemany(sql, rows)
        except BaseException:
            self.db.rollback()
            raise
        self.db.commit()
        return count + len(rows)

    def set_high_water_mark(self, when: datetime) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('high_water_mark', ?)", (when.isoformat(),))
        self.db.commit()


@dataclass
class IngestResult:
    window_start: str
    window_end: str
    attempts: int
    missing_epilog: int

    def to_dict(self) -> dict:
        return asdict(self)


# Re-read a margin before the high-water mark: jobs that ended late in the last window but whose
# records reached slurmdbd afterwards are picked up; the upsert makes the overlap harmless.
OVERLAP = timedelta(hours=2)


def ingest(site: SiteConfig, client: SlurmClient, *, since: datetime | None = None, now: datetime | None = None,
           spool: Path | None = None, rows: Iterable[list[str]] | None = None) -> IngestResult:
    ledger = Ledger(Path(site.accounting.ledger_path), site.accounting.operators_group)
    now = now or datetime.now().replace(microsecond=0)
    with ledger.exclusive():
        hwm = ledger.high_water_mark()
        start = since or ((hwm - OVERLAP) if hwm else now - timedelta(days=30))
        records = read_epilog_records(spool)
        source = rows if rows is not None else _daily_windows(client, start, now)
        missing = 0

        def counted():
            nonlocal missing
            for attempt in attempts_from_records(source, site, records):
                missing += attempt.missing_epilog
                yield attempt

        count = ledger.upsert(counted())
        ledger.set_high_water_mark(max(now, hwm) if hwm else now)
    return IngestResult(start.isoformat(timespec="seconds"), now.isoformat(timespec="seconds"), count, missing)


def may_write_ledger(site: SiteConfig) -> bool:
    """Whether this process may ingest into the site's ledger (root, or an operator it lets write)."""
    path = Path(site.accounting.ledger_path).expanduser()
    if os.geteuid() == 0:
        return True
    # os.access, not path.exists(): the latter raises PermissionError under a root-only directory
    return os.access(path, os.W_OK) or (not os.path.lexists(path) and os.access(path.parent, os.W_OK))


@contextmanager
def own_showback_ledger(site: SiteConfig, client: SlurmClient, user: str, start: datetime, end: datetime):
    """A private, temporary ledger of `user`'s own attempts in the window, priced from sacct as the
    site's ledger prices them: a researcher's showback where the site allows it (the site's ledger
    holds every user's spend and is the operators')."""
    with tempfile.TemporaryDirectory(prefix="slurmctl-showback-") as tmp:
        private = site.model_copy(update={"accounting": site.accounting.model_copy(
            update={"ledger_path": str(Path(tmp) / "ledger.sqlite"), "operators_group": None})})
        ingest(private, client, since=start, now=end)
        ledger = Ledger(Path(tmp) / "ledger.sqlite")
        try:
            ledger.db.execute("DELETE FROM attempts WHERE user != ?", (user,))
            ledger.db.commit()
            yield ledger
        finally:
            ledger.db.close()


def run_attempts(site: SiteConfig, client: SlurmClient, job_ids: list[int], spool: Path | None = None,
                 run_copies: Iterable[Path] = (), drain_acknowledged: Iterable[tuple[int, int]] = (),
                 lost_on_cancel: Iterable[tuple[int, int]] = (),
                 ends: Mapping[tuple[int, int], dict] | None = None) -> list[Attempt]:
    """Fresh (not ledger) cost of specific jobs, every attempt: what `slurmctl cost RUN` shows.
    `drain_acknowledged`: (job id, restart count) of the attempts whose run records an acknowledged
    drain (Run.drain_acknowledged_attempts); `lost_on_cancel`: those a cancel ended with steps lost
    (Run.lost_on_cancel_attempts); `ends`: the run's own end record of each attempt (Run.attempt_ends):
    preempted (Slurm records a requeued one REQUEUED), steps lost since the checkpoint, and the exit
    status of an attempt Slurm ended itself, whose record says 0:0."""
    ends = ends or {}
    if not job_ids:
        return []
    now = datetime.now()
    records = read_epilog_records(spool, run_copies)
    for job_id, restart in drain_acknowledged:
        if (record := records.get((job_id, str(restart)))) is not None and record.get("drain_requested"):
            record["drain_acknowledged"] = True  # the same dict is keyed by its start time too
    for job_id, restart in lost_on_cancel:
        if (record := records.get((job_id, str(restart)))) is not None:
            record["lost_on_cancel"] = True
    for (job_id, restart), end in ends.items():
        if (record := records.get((job_id, str(restart)))) is not None:
            record["preempted"] = end.get("outcome") == "preemption"
            record["steps_lost"] = end.get("steps_lost")
    # `sacct -j <array id>` lists every task of the array (each has its own id): keep the asked
    # ids, each attempt once (a task asked by its own id and through its array's id).
    wanted, seen, attempts, restarts = set(job_ids), set(), [], {}
    for attempt in attempts_from_records(stream_sacct(client, now, now, job_ids), site, records):
        if attempt.job_id in wanted and (attempt.job_id, attempt.start) not in seen:
            seen.add((attempt.job_id, attempt.start))
            attempts.append(attempt)
            # the restart count the epilog recorded for this start, else the attempt's place in sacct's
            # list (oldest first), as attempts_from_records finds its record
            index = restarts[attempt.job_id] = restarts.get(attempt.job_id, -1) + 1
            restart = (records.get((attempt.job_id, attempt.start[:19])) or {}).get("restart_count", index)
            code = ends.get((attempt.job_id, restart), {}).get("exit_code")
            if not attempt.exit_code and isinstance(code, int) and not isinstance(code, bool):
                attempt.exit_code = f"{code}:0"  # the batch script's exit status, as Slurm writes one
    return attempts


def cost_records_dir(site: SiteConfig) -> Path | None:
    """The epilog's per-attempt record spool, when the site configures one."""
    return Path(site.cost_records_dir).expanduser() if site.cost_records_dir else None


@dataclass
class RunCost:
    run_id: str
    related_runs: list[str]
    attempts: list[Attempt]
    gpu_hours: float
    cost_usd: float
    waste_gpu_hours: float
    waste_usd: float
    notes: list[str]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["attempts"] = [a.to_dict() for a in self.attempts]
        return d

    @property
    def held(self) -> str:
        """What it held, in words for `cost`: its GPU-hours, or 'CPU only' (priced by its CPUs, no GPU-hours)."""
        if self.attempts and not any(a.gpus for a in self.attempts):
            return "CPU only (priced by its CPUs)"
        return f"{self.gpu_hours:.2f} GPU-hours"


def run_cost(run_ids: list[str], job_ids: list[int], site: SiteConfig, client: SlurmClient,
             run_copies: Iterable[Path] = (), drain_acknowledged: Iterable[tuple[int, int]] = (),
             lost_on_cancel: Iterable[tuple[int, int]] = (),
             ends: Mapping[tuple[int, int], dict] | None = None) -> RunCost:
    """Cost of a logical run: every attempt of every job of the run and of its resumes/forks.
    `run_copies`: the runs' cost-records dirs (see read_epilog_records); `drain_acknowledged`,
    `lost_on_cancel`, `ends`: see run_attempts."""
    attempts = run_attempts(site, client, job_ids, cost_records_dir(site), run_copies, drain_acknowledged,
                            lost_on_cancel, ends)
    notes = []
    for a in attempts:
        if a.timelimit_s and a.state == "COMPLETED" and a.elapsed_s and a.timelimit_s > 4 * a.elapsed_s:
            notes.append(f"job {a.job_id} asked for {human_duration(a.timelimit_s)} but used "
                         f"{human_duration(a.elapsed_s)}: a tighter time_limit starts sooner (backfill) and blocks "
                         "less capacity.")
        if a.waste_cause == "drain-grace":
            notes.append(f"job {a.job_id}: a drain was requested but never acknowledged, yet at most the step in "
                         f"flight was lost since checkpoint step {a.last_ckpt_step}: the time after it was the drain's "
                         "grace (the program kept the GPUs until Slurm ended it), its waste drain-grace.")
        elif a.drain_requested and not a.drain_acked:
            notes.append(f"job {a.job_id}: a drain was requested but never acknowledged; work since the last "
                         "checkpoint was lost.")
        if a.missing_epilog:
            notes.append(f"job {a.job_id} has no epilog record (node lost?); costed from sacct alone.")
    return RunCost(run_ids[0], run_ids[1:], attempts, sum(a.gpu_hours for a in attempts),
                   sum(a.cost_usd for a in attempts), sum(a.waste_gpu_hours for a in attempts),
                   sum(a.waste_usd for a in attempts), notes)
