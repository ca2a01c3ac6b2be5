"""What root records about a run when one of its attempts ends: the run id (from the job's comment,
checked against the run-id pattern), where the run directory should be, the run's drain flags and
newest valid checkpoint for the attempt's cost record, and, when the batch script was killed, the end
record it never wrote, the end of its MLflow run and its `ended` message. Root never opens a file in
the user's run directory: every read and write there happens in a child that dropped to the job's
uid (asuser.run_as), with non-blocking capped reads and a deadline.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from slurmctl.errors import AsUserError
from slurmctl.ops.hooks import asuser
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.ops.hooks.prolog import HookResult
from slurmctl.ops.hooks.records import CostRecord
from slurmctl.rundir import run_dir_of_log, run_id_from_comment, run_path
from slurmctl.slurm.records import JobInfo

USER_RE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")


def run_id_of(env) -> str | None:
    """The run id from the job's comment (the user's free text: `slurmctl:../..` names no path)."""
    return run_id_from_comment(env.get("SLURM_JOB_COMMENT"))


def run_dir_of(cfg: HookConfig, env, info: JobInfo | None, run_id: str) -> Path | None:
    """Where the run should be: <runs_root>/<user>/<run id>; without a configured runs root, the
    parent of the job's logs/ (StdOut). Either is only a guess until the child, as the job's
    user, finds run.json there naming this run id."""
    user = env.get("SLURM_JOB_USER") or ""
    if cfg.runs_root is not None and USER_RE.fullmatch(user) and user not in (".", ".."):
        return run_path(cfg.runs_root, user, run_id)
    if info is not None and info.std_out.startswith("/"):
        return run_dir_of_log(info.std_out)
    return None


def read_run_facts(run_dir: str, run_id: str, record: dict | None = None, filename: str | None = None) -> dict:
    """Runs in the child, as the job's user: drain flags and the newest valid checkpoint of the run
    whose run.json names `run_id` (rundir's readers: capped, non-blocking, no symlink followed).
    With `record`, the attempt's record completed by these facts is also left in the run dir for
    the user's own `slurmctl cost`; written as the user, it can harm nothing but the user's view."""
    # why: only a run's job reads these, in the child (the parent preloads them); other jobs' epilogs skip them
    from slurmctl.fsutil import read_json
    from slurmctl.rundir import Run  # why: as above
    from slurmctl.runtime.checkpoint import COMPLETE_MARKER, CheckpointManager  # why: as above

    run = Run(run_id, Path(run_dir))
    meta = run.meta
    if meta.get("run_id") != run_id:
        return {}
    facts = {"drain_requested": run.drain_requested(), "drain_acknowledged": run.drain_acked()}
    ck = CheckpointManager(run.checkpoint_dir).latest()
    if ck is not None:
        marker = read_json(ck.path / COMPLETE_MARKER, 64 * 1024)
        when = marker.get("time") if isinstance(marker, dict) else None
        if not isinstance(when, (int, float)):
            when = os.stat(ck.path / COMPLETE_MARKER, follow_symlinks=False).st_mtime
        facts.update(last_checkpoint_step=ck.step, last_checkpoint_time=float(when))
    facts.update(_program_checkpoint(meta))
    if record is not None and filename:
        _leave_user_copy(run.cost_records_dir, filename, {**record, **facts})
    return facts


def _program_checkpoint(meta: dict) -> dict:
    """An adopted program's own checkpoints (Lightning's last.ckpt, HF's checkpoint-N, nanoGPT's ckpt.pt):
    the one its next start restores is the work that survives the attempt (read as the job's user,
    through the adapter that judges it complete). {} for a run of ours or a program without an adapter."""
    from slurmctl.runtime.adapters import Resilience  # why: as in read_run_facts

    adopted = meta.get("adopted")
    block = Resilience.from_dict(adopted.get("resilience")) if isinstance(adopted, dict) else None
    if block is None:
        return {}
    try:
        kept = block.restored()
    except OSError:
        return {}
    if kept is None:
        return {}
    return {"last_checkpoint_step": kept.step, "last_checkpoint_time": float(kept.mtime)}


def _leave_user_copy(directory: Path, filename: str, record: dict) -> None:
    directory.mkdir(mode=0o700, exist_ok=True)
    tmp = directory / f".{filename}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
    os.replace(tmp, directory / filename)


def run_facts(cfg: HookConfig, env, info: JobInfo | None, run_id: str | None,
              record: CostRecord | None = None) -> tuple[dict, str | None]:
    """(facts, note): read_run_facts as the job's user, bounded by cfg.user_read_timeout."""
    uid_text = env.get("SLURM_JOB_UID") or ""
    if run_id is None or not uid_text.isdigit():
        return {}, None
    run_dir = run_dir_of(cfg, env, info, run_id)
    gid = asuser.user_gid(int(uid_text), env.get("SLURM_JOB_GID"))
    if run_dir is None or gid is None:
        return {}, "run facts skipped: run directory or job gid unknown"
    # Import what the child needs here, as root: the child inherits the modules, and as the job's
    # user it could not write their bytecode cache (it would recompile them on every epilog).
    import slurmctl.fsutil  # noqa: F401  # why: preloaded for the child, see above
    import slurmctl.runtime.adapters  # noqa: F401  # why: preloaded for the child, see above
    import slurmctl.runtime.checkpoint  # noqa: F401  # why: preloaded for the child, see above

    extra = (record.to_dict(), record.filename) if record is not None else ()
    try:
        facts = asuser.run_as(int(uid_text), gid, read_run_facts, str(run_dir), run_id, *extra,
                              timeout=cfg.user_read_timeout)
    except AsUserError as exc:
        return {}, f"run facts skipped: {exc}"
    return (facts if isinstance(facts, dict) else {}), None


def _record_end_as_user(run_dir: str, run_id: str, job_id: int, restart_count: int, state: str, exit_code: str,
                        sender_env: dict) -> str | None:
    """Runs in the child, as the job's user: the end record the killed batch script never wrote
    (runtime.attempt.record_killed_end); for a run tracked with MLflow, the end of its MLflow run
    (FAILED, KILLED) with the user's own login (`python -m slurmctl.runtime.tracking end --run-dir`);
    and, for a run with notify settings, its `ended` message (`python -m slurmctl.notify ended`: the
    user's secrets file, deduplicated by the journal). Each by a process of the user's own, detached,
    in the job's python, its words appended to the job's log. The outcome recorded."""
    import subprocess  # why: only an attempt whose batch script was killed gets here
    import sys

    from slurmctl.rundir import Run  # why: as above
    from slurmctl.runtime.attempt import record_killed_end  # why: as above

    run = Run(run_id, Path(run_dir))
    if run.meta.get("run_id") != run_id:
        return None
    record = record_killed_end(run.path, job_id, restart_count, state, exit_code)
    meta = run.meta
    notify, tracking = meta.get("notify"), meta.get("tracking")
    python = notify.get("python") if isinstance(notify, dict) and isinstance(notify.get("python"), str) \
        else sys.executable
    # The MLflow run even when the end was recorded already (by another epilog of this checkout or an
    # older one): the command ends only a run still RUNNING after a stop, so a second call changes nothing.
    commands = [["slurmctl.runtime.tracking", "end"]] if isinstance(tracking, dict) \
        and tracking.get("backend") == "mlflow" else []
    commands += [["slurmctl.notify", "ended"]] if isinstance(notify, dict) and record is not None else []
    for module in commands:
        fd = os.open(run.log_path(job_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            subprocess.Popen([python, "-m", *module, "--run-dir", str(run.path)],
                             stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=sender_env, cwd=run.path,
                             start_new_session=True)
        finally:
            os.close(fd)
    return record["outcome"] if record else None


def record_killed_attempt(cfg: HookConfig, env, info: JobInfo | None, record: CostRecord, now: float,
                          result: HookResult) -> None:
    """An attempt of a slurmctl run that ended FAILED, OUT_OF_MEMORY, TIMEOUT or CANCELLED without its batch
    script's `end` record (the script itself was killed): on the batch host only, never for an attempt
    being requeued, a child as the job's user records that end and sends the run's message."""
    uid_text = env.get("SLURM_JOB_UID") or ""
    if (record.run_id is None or not record.state_final or info is None or info.batch_host != cfg.node
            or record.state not in ("FAILED", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED") or not uid_text.isdigit()
            or (info.end_time and info.end_time > now + 1) or info.restarts != record.restart_count):
        return  # requeued (the end is the next attempt's), another node, or not a run's job
    run_dir = run_dir_of(cfg, env, info, record.run_id)
    gid = asuser.user_gid(int(uid_text), env.get("SLURM_JOB_GID"))
    user = env.get("SLURM_JOB_USER") or ""
    if run_dir is None or gid is None or not USER_RE.fullmatch(user):
        return
    import pwd  # why: as in _record_end_as_user

    import slurmctl.rundir  # noqa: F401  # why: preloaded for the child (see run_facts)
    import slurmctl.runtime.attempt  # noqa: F401  # why: the same

    try:
        home = pwd.getpwuid(int(uid_text)).pw_dir
    except KeyError:
        return
    package_root = str(Path(slurmctl.rundir.__file__).resolve().parents[2])
    sender_env = {"HOME": home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin",
                  "PYTHONPATH": package_root, "SLURM_JOB_ID": str(record.job_id),
                  **({"SLURMCTL_SITE_CONFIG": env["SLURMCTL_SITE_CONFIG"]} if env.get("SLURMCTL_SITE_CONFIG") else {})}
    try:
        outcome = asuser.run_as(int(uid_text), gid, _record_end_as_user, str(run_dir), record.run_id, record.job_id,
                                record.restart_count, record.state, record.exit_code or "", sender_env,
                                timeout=cfg.user_read_timeout)
    except AsUserError as exc:
        result.notes.append(f"end of the killed batch script not recorded: {exc}")
        return
    if outcome:
        result.notes.append(f"recorded the end the killed batch script did not write: {outcome}")
