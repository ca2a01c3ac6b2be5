"""Orphan cleanup (`slurmctl cleanup`, also from root's cron): what holds GPUs or queue slots without value.

* held jobs (user/admin hold, requeue hold) of slurmctl runs that ended with no valid checkpoint,
  or whose run directory is gone: nothing can resume from them;
* dev-partition jobs running longer than ``dev_allocation_ttl`` (site config);
* stale drain requests: ``drain.request`` in a run that has no live job (the next attempt would
  otherwise start draining at once).

Dry run by default (a listing for admins); ``apply=True`` releases them (scancel / unlink).

Run by root, this touches every user's jobs and runs, so it trusts nothing a user wrote:
* the queue listing only nominates candidates; each job is confirmed with the controller
  (``SlurmClient.confirm_job``: owner uid, state, comment, no forgeable free text before them)
  when found and again right before the scancel, and the decision uses the confirmed values;
* runs live at ``<runs_root>/<user>/<run id>``; a user directory counts only when it is a real
  directory (lstat, no symlink) owned by the user it is named after, a run only when its id is
  well-formed, it is a real directory owned by that user and its run.json names that id;
* the user's files are read, and a stale ``drain.request`` removed, by a child that dropped to the
  user's uid (ops/hooks/asuser.py), with capped non-blocking reads and a deadline: a FIFO or
  /dev/zero planted in a run costs the cleanup pass at most a few seconds and a note.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurmctl.config.models import SiteConfig
from slurmctl.durations import parse_duration
from slurmctl.errors import AsUserError, SlurmctlError
from slurmctl.ops.hooks import asuser
from slurmctl.rundir import DRAIN_REQUEST, Run, RunRegistry, is_run_id, run_id_from_comment, run_path, user_runs_dir
from slurmctl.runtime.checkpoint import CheckpointManager
from slurmctl.slurm.client import Job, SlurmClient

DEV_COMMENT_PREFIX = "slurmctl-dev:"  # control/dev.py's --comment
USER_READ_TIMEOUT = 5.0  # one child per user reads all of that user's runs


@dataclass
class Orphan:
    kind: str            # held-job | dev-ttl | stale-drain-request
    reason: str
    run_id: str | None = None
    job_id: int | None = None
    path: str | None = None
    user: str | None = None
    released: bool = False
    error: str | None = None
    # what the controller confirmed when the orphan was found; release() demands the same again
    confirmed: Job | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("confirmed")
        return d


@dataclass
class CleanupPass:
    """What one cleanup pass saw besides orphans: lines and directories it refused to trust."""

    notes: list[str] = field(default_factory=list)


def find_orphans(site: SiteConfig, client: SlurmClient, registry: RunRegistry | None = None,
                 only_run: str | None = None, cleanup_pass: CleanupPass | None = None) -> list[Orphan]:
    cleanup_pass = cleanup_pass if cleanup_pass is not None else CleanupPass()
    runs_root = Path(site.runs_root).expanduser()
    me = os.geteuid()
    queue = client.queue(mine=False)  # nominates candidates only; see confirm_job below
    run_ids = {j.job_id: run_id_from_comment(j.comment) for j in queue}  # checked ids only
    live = {(j.user, run_ids[j.job_id]) for j in queue if run_ids[j.job_id]}
    live_unheld = {(j.user, run_ids[j.job_id]) for j in queue if run_ids[j.job_id] and not j.held}
    found: list[Orphan] = []

    for job in queue:
        run_id = run_ids[job.job_id]
        if only_run and run_id != only_run:
            continue
        if job.held and run_id:
            confirmed = _confirm(client, job.job_id, me, cleanup_pass)
            if confirmed is None or not confirmed.held or run_id_from_comment(confirmed.comment) != run_id:
                continue
            user = _user_name(int(confirmed.user))
            if user is None or (user, run_id) in live_unheld:
                continue  # not a user we know, or the run is still going: this hold is its plan
            facts = _as_owner(int(confirmed.user), inspect_run, str(run_path(runs_root, user, run_id)), run_id,
                              cleanup_pass=cleanup_pass)
            if facts is None or facts.get("foreign"):
                continue
            if not facts.get("exists"):
                found.append(Orphan("held-job", f"held job of run {run_id}, whose run directory is gone",
                                    run_id, job.job_id, user=user, confirmed=confirmed))
            elif facts.get("ended") and not facts.get("has_checkpoint"):
                found.append(Orphan("held-job", f"held job of run {run_id}, which ended (exit "
                                    f"{facts.get('exit_code')}) with no valid checkpoint to resume from",
                                    run_id, job.job_id, user=user, confirmed=confirmed))
        elif job.state == "RUNNING" and _is_dev(site, job):
            confirmed = _confirm(client, job.job_id, me, cleanup_pass)
            if confirmed is None or not _past_dev_ttl(site, confirmed):
                continue
            found.append(Orphan("dev-ttl", f"dev allocation in {confirmed.partition} running "
                                f"{confirmed.elapsed_seconds // 60} min, past the {site.dev_allocation_ttl} TTL",
                                run_id_from_comment(confirmed.comment), job.job_id,
                                user=_user_name(int(confirmed.user)),
                                confirmed=confirmed))

    for user, uid in _user_dirs(runs_root, me, cleanup_pass):
        requests = _as_owner(uid, stale_drain_candidates, str(user_runs_dir(runs_root, user)), only_run,
                             cleanup_pass=cleanup_pass) or []
        for run_id in requests:
            if (user, run_id) not in live:
                path = Run(run_id, run_path(runs_root, user, run_id)).drain_request_path
                found.append(Orphan("stale-drain-request", "drain.request left in a run with no live job",
                                    run_id, path=str(path), user=user))
    return found


def _confirm(client: SlurmClient, job_id: int, me: int, cleanup_pass: CleanupPass) -> Job | None:
    """The controller's own view of the job; a user cleaning up sees only their own jobs."""
    try:
        confirmed = client.confirm_job(job_id)
    except SlurmctlError as exc:
        cleanup_pass.notes.append(f"job {job_id}: not confirmed by Slurm ({exc.message}); left alone")
        return None
    if confirmed is None:
        return None
    if me != 0 and int(confirmed.user) != me:
        return None
    return confirmed


def _past_dev_ttl(site: SiteConfig, job: Job) -> bool:
    """A running allocation slurmctl made (`slurmctl dev`, or a run) in a dev partition, past the TTL;
    other people's dev-partition jobs are not ours to end."""
    ours = job.comment.startswith(DEV_COMMENT_PREFIX) or run_id_from_comment(job.comment) is not None
    return (ours and job.state == "RUNNING" and _is_dev(site, job) and job.elapsed_seconds is not None
            and job.elapsed_seconds > parse_duration(site.dev_allocation_ttl))


def _is_dev(site: SiteConfig, job: Job) -> bool:
    return any(site.partitions.get(p) is not None and site.partitions[p].capacity == "dev"
               for p in job.partition.split(","))


def _user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _user_dirs(runs_root: Path, me: int, cleanup_pass: CleanupPass) -> list[tuple[str, int]]:
    """(user, uid) per real directory under the runs root owned by the user it is named after.
    Root looks at every user; anyone else only their own directory."""
    try:
        root_fd = os.open(runs_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        names = sorted(os.listdir(root_fd))
        out = []
        for name in names:
            try:
                owner = pwd.getpwnam(name).pw_uid
                st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            except (KeyError, OSError):
                continue  # not a user's runs directory (an older flat run, a stray file)
            if me != 0 and owner != me:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != owner:
                cleanup_pass.notes.append(f"{runs_root / name}: not a directory owned by {name}; skipped")
                continue
            out.append((name, owner))
        return out
    finally:
        os.close(root_fd)


def _as_owner(uid: int, func, *args, cleanup_pass: CleanupPass):
    import slurmctl.runtime.checkpoint  # noqa: F401  # why: imported once as root, inherited by every child

    gid = asuser.user_gid(uid)
    if gid is None:
        cleanup_pass.notes.append(f"uid {uid} has no passwd entry; its runs were skipped")
        return None
    try:
        return asuser.run_as(uid, gid, func, *args, timeout=USER_READ_TIMEOUT)
    except AsUserError as exc:
        cleanup_pass.notes.append(f"uid {uid}: {exc}; its runs were skipped")
        return None


# --- these run in the child, as the run's owner ----------------------------------------------------
def _own_dir(path: Path) -> bool:
    """A real directory (not a symlink) owned by us, the run's owner."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _is_run(path: Path, run_id: str) -> bool:
    """A run slurmctl made: our own real directory (and user directory), run.json naming the id."""
    if not _own_dir(path.parent) or not _own_dir(path):
        return False
    return Run(run_id, path).meta.get("run_id") == run_id


def inspect_run(run_dir: str, run_id: str) -> dict:
    """exists / foreign (something is there but not a run we made) / ended, exit_code / has_checkpoint."""
    path = Path(run_dir)
    try:
        os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return {"exists": False}
    if not _is_run(path, run_id):
        return {"exists": True, "foreign": True}
    run = Run(run_id, path)
    ended = [e for e in run.recent_events() if e.get("event") == "end"]  # the newest end decides
    return {"exists": True, "ended": bool(ended), "exit_code": ended[-1].get("exit_code") if ended else None,
            "has_checkpoint": CheckpointManager(run.checkpoint_dir).latest() is not None}


def stale_drain_candidates(user_dir: str, only_run: str | None) -> list[str]:
    """Run ids under the user's directory holding a drain.request (a regular file, not followed)."""
    root = Path(user_dir)
    if not _own_dir(root):
        return []
    out = []
    for name in sorted(os.listdir(root)):
        if not is_run_id(name) or (only_run and name != only_run):
            continue
        run = root / name
        try:
            st = os.stat(run / DRAIN_REQUEST, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and _is_run(run, name):
            out.append(name)
    return out


def remove_drain_request(user_dir: str, run_id: str) -> bool:
    """Unlink <run>/drain.request through the run directory's fd, after checking it is our own
    real directory and the entry a regular file (never a symlink's target)."""
    run = Path(user_dir) / run_id
    if not is_run_id(run_id) or not _is_run(run, run_id):
        return False
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            return False
        try:
            st = os.stat(DRAIN_REQUEST, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return True
        if not stat.S_ISREG(st.st_mode):
            return False
        os.unlink(DRAIN_REQUEST, dir_fd=fd)
        return True
    finally:
        os.close(fd)


# --- releasing ------------------------------------------------------------------------------------
def release(orphans: list[Orphan], client: SlurmClient) -> list[Orphan]:
    """Re-confirm every orphaned job with the controller (same owner, same run, still held / still
    past its TTL), cancel the confirmed ones in one batched scancel, then remove stale drain
    requests as their owners."""
    me = os.geteuid()
    to_cancel = []
    for orphan in (o for o in orphans if o.job_id is not None):
        now = _confirm(client, orphan.job_id, me, CleanupPass())
        if not _still_same(orphan, now):
            orphan.error = "not confirmed by Slurm any more (state, owner or run changed); left alone"
            continue
        to_cancel.append(orphan)
    if to_cancel:
        try:
            client.cancel_many(o.job_id for o in to_cancel)
            for orphan in to_cancel:
                orphan.released = True
        except SlurmctlError as exc:
            for orphan in to_cancel:
                orphan.error = exc.message
    for orphan in orphans:
        if orphan.kind != "stale-drain-request" or not orphan.user or not orphan.run_id:
            continue
        try:
            uid = pwd.getpwnam(orphan.user).pw_uid
        except KeyError:
            orphan.error = f"no user {orphan.user}"
            continue
        cleanup_pass = CleanupPass()
        user_dir = str(Path(orphan.path).parent.parent)
        done = _as_owner(uid, remove_drain_request, user_dir, orphan.run_id, cleanup_pass=cleanup_pass)
        orphan.released = bool(done)
        if not done:
            orphan.error = ("; ".join(cleanup_pass.notes)
                            or "not a regular drain.request in a run of its owner; left alone")
    return orphans


def _still_same(orphan: Orphan, now: Job | None) -> bool:
    before = orphan.confirmed
    if now is None or before is None or now.user != before.user or now.comment != before.comment:
        return False
    if orphan.kind == "held-job":
        return now.held
    if orphan.kind == "dev-ttl":  # still running in the same dev partition, for at least as long
        return (now.state == "RUNNING" and now.partition == before.partition
                and (now.elapsed_seconds or 0) >= (before.elapsed_seconds or 0))
    return False
