"""Slurm Epilog logic: kill orphans, clean /dev/shm and scratch, drop the GPU map, classify a failed
job and check the node's health, write the per-attempt cost record, and end the run of an attempt
whose batch script was killed. Cleanup failures are noted, never raised: a failing epilog drains the
node. What the record needs about the run, and the killed attempt's end, come from run_records.py,
whose every read and write in the user's run directory happens as the job's user.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from slurmctl.errors import AsUserError, SlurmctlError
from slurmctl.ops.health import blame
from slurmctl.ops.health.agent import drain, suspect_reason
from slurmctl.ops.health.checks import Subject, first_failure, run_checks
from slurmctl.ops.hooks import asuser, jobinfo, procs
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.ops.hooks.prolog import HookResult, job_gpu_indices
from slurmctl.ops.hooks.records import CostRecord, attempt_start, write_record
from slurmctl.ops.hooks.rootfs import UnsafeDirectory, open_trusted_dir, publish_file, read_small, remove_entry
from slurmctl.ops.hooks.run_records import USER_RE, record_killed_attempt, run_facts, run_id_of
from slurmctl.slurm.records import JobInfo
from slurmctl.submit import smoke_verdicts


def kill_orphans(cfg: HookConfig, env, job_id: int, result: HookResult) -> None:
    """The job user's processes on this node that belong to no running job (this one has ended)."""
    uid = env.get("SLURM_JOB_UID")
    mine = [p for p in procs.job_processes(int(uid) if uid and uid.isdigit() else None)
            if procs.on_node(p, cfg.node)]
    doomed = [p for p in mine if p.job_id == job_id]
    if any(p.job_id != job_id for p in mine):
        active = jobinfo.active_job_ids(cfg.slurm, cfg.node)
        if active is not None:
            doomed += [p for p in mine if p.job_id != job_id and p.job_id not in active]
    if not doomed:
        return
    survivors = procs.kill_all([p.pid for p in doomed], cfg.kill_grace_seconds)
    result.notes.append(f"killed {len(doomed) - len(survivors)} orphan(s): "
                        + ",".join(f"{p.pid}({p.comm})" for p in doomed[:10]))
    if survivors:
        result.notes.append(f"orphans surviving SIGKILL: {survivors}")


def _open_paths(prefix: str, device: int) -> tuple[set[str], set[int]]:
    """What some live process has open or mapped under `prefix`: the paths, and the inode numbers of
    those on `device` (the filesystem under `prefix`). The inode is what counts for a file: a named
    POSIX semaphore (Python's multiprocessing locks) is mapped under the temporary name sem_open made
    it as (`sem.XXXXXX (deleted)`) and lives on as `sem.<name>`, the same inode."""
    paths, inodes = set(), set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fd_dir = f"/proc/{name}/fd"
        try:
            for fd in os.listdir(fd_dir):
                try:
                    target = os.readlink(f"{fd_dir}/{fd}")
                    if target.startswith(prefix):
                        paths.add(target.removesuffix(" (deleted)"))
                        st = os.stat(f"{fd_dir}/{fd}")  # the open file itself, whatever its name now
                        if st.st_dev == device:
                            inodes.add(st.st_ino)
                except OSError:
                    continue
            with open(f"/proc/{name}/maps") as fh:
                for line in fh:
                    if prefix in line:
                        fields = line.split(None, 5)
                        paths.add(fields[-1].strip().removesuffix(" (deleted)"))
                        major, minor = (int(x, 16) for x in fields[3].split(":"))
                        if os.makedev(major, minor) == device:
                            inodes.add(int(fields[4]))
        except (OSError, ValueError, IndexError):
            continue
    return paths, inodes


def clean_shm(cfg: HookConfig, env, since: float | None, result: HookResult) -> None:
    """Files the job left in /dev/shm: owned by the job's user, created or changed during the job,
    and held open by no live process (so a concurrent job of the same user keeps its segments).
    "During the job" is the inode's ctime: the owner can set mtime to any past moment (touch -d),
    never ctime (every write, chmod, rename or utime sets it to now). /dev/shm is world-writable:
    entries are judged by lstat and removed through its fd, never followed."""
    uid = env.get("SLURM_JOB_UID")
    if not uid or not uid.isdigit() or since is None:
        return
    try:
        shm_fd = os.open(cfg.shm_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        candidates = []
        for name in os.listdir(shm_fd):
            try:
                st = os.stat(name, dir_fd=shm_fd, follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid == int(uid) and st.st_ctime >= since - 2:
                candidates.append((name, st.st_ino))
        if not candidates:
            return
        prefix = str(cfg.shm_dir).rstrip("/") + "/"
        held, held_inodes = _open_paths(prefix, os.fstat(shm_fd).st_dev)
        removed = 0
        for name, inode in candidates:
            path = prefix + name
            if inode in held_inodes or path in held or any(h.startswith(path + "/") for h in held):
                continue
            try:
                removed += remove_entry(shm_fd, name)
            except OSError:
                continue
    finally:
        os.close(shm_fd)
    if removed:
        result.notes.append(f"removed {removed} /dev/shm entr{'y' if removed == 1 else 'ies'}")


def remove_scratch(cfg: HookConfig, job_id: int) -> None:
    """The job's scratch dir, removed through the (root-owned, checked) scratch root's fd."""
    if job_id <= 0:
        return
    try:
        root_fd = open_trusted_dir(cfg.scratch_root)
    except FileNotFoundError:
        return
    try:
        remove_entry(root_fd, str(job_id))
    finally:
        os.close(root_fd)


def remove_gpu_map(cfg: HookConfig, env, job_id: int) -> None:
    indices = job_gpu_indices(env)
    if not indices:
        return
    try:
        dir_fd = open_trusted_dir(cfg.gpu_map_dir)
    except FileNotFoundError:
        return
    try:
        for idx in indices:
            try:
                if read_small(dir_fd, idx, 64).split() == [str(job_id).encode()]:  # never the next job's
                    os.unlink(idx, dir_fd=dir_fd)
            except OSError:
                continue
    finally:
        os.close(dir_fd)


def final_state(info: JobInfo | None, env) -> tuple[str | None, bool, str | None]:
    """(state, final?, "code:signal"). The epilog usually runs while the controller still says
    COMPLETING with ExitCode 0:0; then the env's exit code decides FAILED, and a clean exit stays
    COMPLETING (not final: a cancel also exits 0 here) for the ledger to settle with sacct."""
    env_code = env.get("SLURM_JOB_EXIT_CODE2")
    if info and info.state and info.state not in ("COMPLETING", "RUNNING", "CONFIGURING"):
        return info.state, True, info.exit_code or env_code
    if env_code and env_code != "0:0":
        return "FAILED", True, env_code
    return (info.state if info else None), False, env_code or (info.exit_code if info else None)


def build_record(cfg: HookConfig, env, info: JobInfo | None, now: float,
                 result: HookResult | None = None) -> CostRecord:
    job_id = int(env.get("SLURM_JOB_ID") or 0)
    restarts = env.get("SLURM_JOB_RESTART_COUNT") or ""
    start = info.start_time if info else None
    end = (info.end_time if info and info.end_time else None) or now
    count = int(restarts) if restarts.isdigit() else (info.restarts if info else 0)
    if info is not None and ((info.end_time and info.end_time > now + 1) or (info.start_time is None and count > 0)):
        # An end in the future, or no start at all: the attempt is being requeued and scontrol (and the
        # environment's restart count) already describe the next one: after a preemption StartTime = the
        # requeue time, EndTime = that + the time limit; after the job's own `scontrol requeue` (Lightning's
        # on SIGUSR1) no start and no end yet. This attempt is the previous count; its start is the prolog's record of
        # it (records.attempt_start), or unknown when slurmd skipped the prolog (a requeued job
        # restarted on the same node seconds later) -- the ledger then matches it by restart count.
        restarts = str(max(0, count - 1))
        seen = attempt_start(cfg.cost_spool, job_id)
        start = seen[1] if seen is not None and str(seen[0]) == restarts else None
        end = now
    gpu_count = info.gpu_count if info else len(job_gpu_indices(env))
    run_id = run_id_of(env)
    state, state_final, exit_code = final_state(info, env)
    elapsed = max(0.0, end - start) if start else None
    record = CostRecord(
        job_id=job_id,
        restart_count=int(restarts) if restarts.isdigit() else (info.restarts if info else 0),
        run_id=run_id,
        user=env.get("SLURM_JOB_USER"),
        account=env.get("SLURM_JOB_ACCOUNT"),
        partition=env.get("SLURM_JOB_PARTITION"),
        gpu_model=info.gpu_model if info else None,
        gpu_count=gpu_count,
        num_nodes=int(env.get("SLURM_JOB_NUM_NODES") or 1),
        nodelist=info.nodelist if info else None,
        start_time=start,
        end_time=end,
        elapsed_seconds=elapsed,
        gpu_seconds=elapsed * gpu_count if elapsed is not None else None,
        state=state,
        state_final=state_final,
        exit_code=exit_code,
        drain_requested=False,
        drain_acknowledged=False,
        last_checkpoint_step=None,
        last_checkpoint_time=None,
        written_by=cfg.node,
        written_at=now,
    )
    facts, note = run_facts(cfg, env, info, run_id, record)
    if note and result is not None:
        result.notes.append(note)
    step, step_time = facts.get("last_checkpoint_step"), facts.get("last_checkpoint_time")
    record.drain_requested = bool(facts.get("drain_requested"))
    record.drain_acknowledged = bool(facts.get("drain_acknowledged"))
    record.last_checkpoint_step = step if isinstance(step, int) else None
    record.last_checkpoint_time = step_time if isinstance(step_time, (int, float)) else None
    return record


def record_smoke_verdict(cfg: HookConfig, env, info: JobInfo | None, result: HookResult) -> None:
    """A passed smoke job, in root's verdict spool (see slurmctl/submit/smoke_verdicts.py): only a
    job whose name is a smoke run's, that exited 0:0 and whose stored batch script is a rendered
    smoke script. Every other job costs one regex match here."""
    match = smoke_verdicts.SMOKE_JOB_NAME_RE.fullmatch(info.name) if info is not None else None
    user, uid_text = env.get("SLURM_JOB_USER") or "", env.get("SLURM_JOB_UID") or ""
    if match is None or env.get("SLURM_JOB_EXIT_CODE2") != "0:0" or not uid_text.isdigit():
        return
    if not USER_RE.fullmatch(user) or user in (".", ".."):
        return
    script = jobinfo.batch_script(cfg.slurm, info.job_id)
    if script is None or len(script) > smoke_verdicts.MAX_SCRIPT_BYTES:
        result.notes.append("smoke verdict NOT written: Slurm gave no batch script")
        return
    data = script.encode(errors="surrogateescape")
    if not smoke_verdicts.is_smoke_script(data):
        result.notes.append("smoke verdict NOT written: the batch script is not a rendered smoke script")
        return
    import hashlib

    verdict = {"job_id": info.job_id, "user": user, "uid": int(uid_text), "code_hash": match["hash"],
               "partition": env.get("SLURM_JOB_PARTITION"), "exit_code": "0:0",
               "script_sha256": hashlib.sha256(data).hexdigest(), "node": cfg.node, "written_at": time.time()}
    try:
        top = open_trusted_dir(cfg.smoke_verdicts_dir, create_mode=0o755)
        try:
            user_fd = _own_user_dir(top, user)
        finally:
            os.close(top)
        try:
            publish_file(user_fd, smoke_verdicts.verdict_name(match["hash"], info.job_id),
                         (json.dumps(verdict, sort_keys=True) + "\n").encode(), mode=0o644)
        finally:
            os.close(user_fd)
    except OSError as exc:
        result.notes.append(f"smoke verdict NOT written: {exc}")
    else:
        result.notes.append(f"smoke verdict {match['hash']} for {user}")


def _own_user_dir(top: int, user: str) -> int:
    """`<verdicts>/<user>`: root's, 0755 (created if missing); an entry of that name that is not
    such a directory of root's is refused, never followed or reused."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.mkdir(user, 0o700, dir_fd=top)
    except FileExistsError:
        pass
    try:
        fd = os.open(user, flags, dir_fd=top)
    except OSError as exc:
        raise UnsafeDirectory(user, f"cannot be opened as a directory ({exc.strerror})") from None
    st = os.fstat(fd)
    if st.st_uid != 0 or st.st_mode & 0o022:
        os.close(fd)
        raise UnsafeDirectory(user, "is not root's own directory")
    os.fchmod(fd, 0o755)
    return fd


# slurmstepd's line in the job's log when an attempt is requeued (scontrol requeue, our `end`)
_REQUEUE_BANNER = re.compile(r"\*\*\* JOB \d+ ON \S+ CANCELLED AT \S+ DUE TO JOB REQUEUE \*\*\*")


def diagnose_category(log_path: str, slurm_state: str, exit_code: str) -> str:
    """Runs in the child, as the job's user: the category `diagnose` gives the job's log."""
    from slurmctl.observe.run_diagnosis import diagnose_file  # why: the child's; preloaded by classify_failure

    return diagnose_file(Path(log_path), slurm_state, exit_code).category


def requeued_attempt_category(log_path: str) -> str:
    """Runs in the child, as the job's user: the category of the attempt being requeued, read from
    its own lines only -- after the previous requeue's banner, before its own (the banner says
    "requeue", which `diagnose` rightly calls a preemption; what failed comes before it)."""
    from slurmctl.observe.diagnose import diagnose_text  # why: the child's, as above
    from slurmctl.observe.log_reading import read_tail  # why: as above

    lines = read_tail(Path(log_path)).splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if _REQUEUE_BANNER.search(line)]
    if marks:
        lines = lines[marks[-2] + 1 if len(marks) > 1 else 0:marks[-1]]
    return diagnose_text("".join(lines)).category


def being_requeued(info: JobInfo | None) -> bool:
    """The attempt ending here is being requeued: Slurm already describes the next attempt, whose
    end (requeue time + time limit) lies in the future (see build_record)."""
    return info is not None and info.end_time is not None and info.end_time > time.time() + 1


def classify_failure(cfg: HookConfig, env, info: JobInfo | None, result: HookResult) -> str | None:
    """A failed job's category on this node (health/blame.py scores them; the cost record keeps it
    for the GPU-hours lost to the node, health/lost.py): its log read as the job's user, bounded by
    cfg.user_read_timeout. Jobs that ended well cost one comparison. An attempt that is being
    requeued shows exit code 0:0 whatever killed it (the run's `end` requeues a failed attempt
    itself): its log decides, and only a failure it shows is recorded."""
    code = env.get("SLURM_JOB_EXIT_CODE2") or ""
    state = info.state if info else ""
    requeued = being_requeued(info)
    if info is None or (code in ("", "0:0") and state not in ("FAILED", "NODE_FAIL") and not requeued):
        return None
    uid_text, user = env.get("SLURM_JOB_UID") or "", env.get("SLURM_JOB_USER") or ""
    log = info.std_out.replace("%j", str(info.job_id)).replace("%A", str(info.job_id)).replace("%u", user)
    if not uid_text.isdigit() or not log.startswith("/") or "%" in log:
        return None
    gid = asuser.user_gid(int(uid_text), env.get("SLURM_JOB_GID"))
    if gid is None:
        return None
    from slurmctl.observe import run_diagnosis  # why: preloaded for the child that classifies  # noqa: F401
    from slurmctl.observe.diagnosis_rules import CATEGORIES  # why: only a failed job's epilog classifies

    try:
        if requeued:
            category = asuser.run_as(int(uid_text), gid, requeued_attempt_category, log, timeout=cfg.user_read_timeout)
        else:
            said = state if state in ("FAILED", "NODE_FAIL") else "FAILED"
            category = asuser.run_as(int(uid_text), gid, diagnose_category, log, said, code,
                                     timeout=cfg.user_read_timeout)
    except AsUserError as exc:
        result.notes.append(f"failure not classified: {exc}")
        return None
    if category not in CATEGORIES:  # the child ran as the user: its answer is checked, not trusted
        return None
    if requeued and category == "unknown":
        return None  # a requeue whose log shows no failure: a drain, a preemption
    nodes: list[str] = []
    if info.nodelist and cfg.slurm is not None:
        try:  # the job's peers: blame singles out the node its failing jobs have in common
            nodes = cfg.slurm.hostnames(info.nodelist)[:256]
        except SlurmctlError:
            nodes = []
    blame.record(cfg.health_failures_dir, blame.Failure(info.job_id, category, time.time(), int(uid_text),
                                                        tuple(nodes or [cfg.node])))
    result.notes.append(f"failure classified: {category}")
    return category


def exclude_if_suspect(cfg: HookConfig, info: JobInfo | None, category: str | None, result: HookResult) -> None:
    """A GPU/NCCL-class failure was just recorded here: judge this node now, not at the periodic
    program's next run, so the job's requeue (its attempt ends in this epilog) cannot be placed back
    on a suspect. A suspect is drained, and added to the requeued job's ExcNodeList -- its own job,
    as its expediter adds a lost node; the job's later attempts never run here."""
    if category not in blame.GPU_CLASS or info is None or cfg.slurm is None:
        return
    why = suspect_reason(cfg, time.time())
    if why is None:
        return
    result.notes.append(f"health: {why.text()} -> {drain(cfg, why)}")
    view = cfg.slurm.requeue_wait(info.job_id)
    if view is None or view[0] not in ("COMPLETING", "PENDING") or not being_requeued(info):
        return
    have = cfg.slurm.hostnames(view[2]) if view[2] and view[2] != "(null)" else []
    excluded = ",".join(dict.fromkeys([*have, cfg.node]))
    try:
        cfg.slurm.update_job(info.job_id, ExcNodeList=excluded)
        result.notes.append(f"requeued job excludes the suspect: ExcNodeList={excluded}")
    except SlurmctlError as exc:
        result.notes.append(f"could not exclude the suspect from the requeued job: {exc.message}")


# The requeued job's BeginTime wait is cred_expire (121 s on 22.05) after this epilog ends.
EPILOG_EXPEDITER_SECONDS = 300


def expediter_env(env) -> dict[str, str]:
    """The expediter's whole environment: fixed, plus the hook's own cluster (SLURM_CONF)."""
    child_env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": "/"}
    if env.get("SLURM_CONF") and "\n" not in env["SLURM_CONF"]:
        child_env["SLURM_CONF"] = env["SLURM_CONF"]
    return child_env


def start_requeue_expediter(cfg: HookConfig, env, info: JobInfo | None, result: HookResult) -> None:
    """Under proctrack/cgroup the job's cgroup is killed whole, and with it the expediter the batch
    script detached (runtime/expediter.start_expediter): the requeued run would wait Slurm's BeginTime.
    The epilog runs outside that cgroup, so for a run's attempt that is being requeued it starts the
    expediter here, as the job's user: its own session, the user's ids set in the child itself (no
    runuser/su around it, which would end it when the epilog ends). It runs outside every job's
    cgroup, so nothing of the user's may run in it or reach it: it runs as root, not as the user (a
    process of the user's outside the cgroup is one the user can ptrace and make run anything, where
    Yama does not forbid it), `python -I` (no user site-packages, .pth or usercustomize, no PYTHON*
    variables, no current directory on the path), a fixed environment, cwd /, and a bounded life
    (EPILOG_EXPEDITER_SECONDS, then SIGALRM). It acts only on this job, the one Slurm is requeueing,
    as the epilog itself already may. On where the site turns it on (SLURMCTL_EPILOG_EXPEDITER=1, for
    slurmd with proctrack/cgroup)."""
    if not cfg.epilog_expediter or info is None or not being_requeued(info) or run_id_of(env) is None:
        return
    import subprocess  # why: this and the runtime's command line only for the requeue of a run

    from slurmctl.runtime.expediter import expediter_argv  # why: the epilog of every job would pay its import

    try:
        child = subprocess.Popen(
            expediter_argv(info.job_id, limit=EPILOG_EXPEDITER_SECONDS, python=sys.executable),
            start_new_session=True, cwd="/", env=expediter_env(env), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as exc:
        result.notes.append(f"requeue expediter not started: {exc}")
        return
    result.notes.append(f"requeue expediter started as root (pid {child.pid}), outside the job's cgroup")


def check_node(cfg: HookConfig, job_id: int, result: HookResult) -> None:
    """The epilog's health checks, after the cleanup: a failure drains the node with our reason
    (the epilog itself still exits 0: Slurm's own "Epilog error" drain would hide the cause)."""
    try:
        failed = first_failure(run_checks(Subject(cfg, job_id, moment="epilog")))
        if failed is not None:
            result.notes.append(f"health: {failed.reason().text()} -> {drain(cfg, failed.reason())}")
    except Exception as exc:  # noqa: BLE001 - the record must still be written
        result.notes.append(f"health checks failed to run: {type(exc).__name__}: {exc}")


def run_epilog(env, cfg: HookConfig | None = None) -> HookResult:
    cfg = cfg or HookConfig.from_env(env)
    result = HookResult()
    job_id = int(env.get("SLURM_JOB_ID") or 0)
    info = jobinfo.query_job(cfg.slurm, job_id)
    classified: dict[str, str | None] = {}
    if info is None:
        result.notes.append("Slurm did not describe the job; record has no state/times")
    steps = (
        ("orphans", lambda: kill_orphans(cfg, env, job_id, result)),
        ("shm", lambda: clean_shm(cfg, env, info.start_time if info else None, result)),
        ("scratch", lambda: remove_scratch(cfg, job_id)),
        ("gpu map", lambda: remove_gpu_map(cfg, env, job_id)),
        ("smoke verdict", lambda: record_smoke_verdict(cfg, env, info, result)),
        ("failure class", lambda: classified.update(category=classify_failure(cfg, env, info, result))),
        ("suspect", lambda: exclude_if_suspect(cfg, info, classified.get("category"), result)),
        ("expediter", lambda: start_requeue_expediter(cfg, env, info, result)),
    )
    for label, step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - cleanup must go on; the record must be written
            result.notes.append(f"{label} cleanup failed: {type(exc).__name__}: {exc}")
    check_node(cfg, job_id, result)
    now = time.time()
    record = build_record(cfg, env, info, now, result)
    record.failure_category = classified.get("category")
    try:
        record_killed_attempt(cfg, env, info, record, now, result)
    except Exception as exc:  # noqa: BLE001 - the cost record must be written
        result.notes.append(f"killed-attempt record failed: {type(exc).__name__}: {exc}")
    try:
        path = write_record(cfg.cost_spool, record)
    except OSError as exc:  # no unsafe fallback: sacct still costs the attempt; the log says why
        result.notes.append(f"cost record NOT written: {exc}")
    else:
        result.notes.append(f"cost record {path}")
    return result
