"""Slurm Epilog logic: kill orphans, clean /dev/shm and scratch, drop the GPU map, write the
per-attempt cost record. Cleanup failures are noted, never raised: a failing epilog drains the node.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
from pathlib import Path

from slurmctl.slurm.scontrol import JobInfo
from slurmctl.ops.hooks import jobinfo, procs
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.ops.hooks.prolog import HookResult, job_gpu_indices
from slurmctl.ops.hooks.records import CostRecord, write_record

# Where a record goes when the shared spool is down; the ledger's ingest also sweeps it.
FALLBACK_SPOOL = Path("/var/tmp/slurmctl-cost-records")


def kill_orphans(cfg: HookConfig, env, job_id: int, result: HookResult) -> None:
    """The job user's processes on this node that belong to no running job (this one has ended)."""
    uid = env.get("SLURM_JOB_UID")
    mine = [p for p in procs.job_processes(int(uid) if uid and uid.isdigit() else None)
            if p.node in (cfg.node, None)]
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


def _open_paths(prefix: str) -> set[str]:
    """Paths under `prefix` that some live process has open or mapped."""
    held = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fd_dir = f"/proc/{name}/fd"
        try:
            for fd in os.listdir(fd_dir):
                try:
                    target = os.readlink(f"{fd_dir}/{fd}")
                except OSError:
                    continue
                if target.startswith(prefix):
                    held.add(target.removesuffix(" (deleted)"))
            with open(f"/proc/{name}/maps") as fh:
                for line in fh:
                    if prefix in line:
                        held.add(line.split(None, 5)[-1].strip().removesuffix(" (deleted)"))
        except OSError:
            continue
    return held


def clean_shm(cfg: HookConfig, env, since: float | None, result: HookResult) -> None:
    """Files the job left in /dev/shm: owned by the job's user, created during the job, and held
    open by no live process (so a concurrent job of the same user keeps its segments)."""
    uid = env.get("SLURM_JOB_UID")
    if not uid or not uid.isdigit() or since is None:
        return
    candidates = []
    try:
        entries = list(os.scandir(cfg.shm_dir))
    except OSError:
        return
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid == int(uid) and st.st_mtime >= since - 2:
            candidates.append(entry.path)
    if not candidates:
        return
    held = _open_paths(str(cfg.shm_dir) + "/")
    removed = 0
    for path in candidates:
        if path in held or any(h.startswith(path + "/") for h in held):
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed += 1
        except OSError:
            continue
    if removed:
        result.notes.append(f"removed {removed} /dev/shm entr{'y' if removed == 1 else 'ies'}")


def remove_gpu_map(cfg: HookConfig, env, job_id: int) -> None:
    for idx in job_gpu_indices(env):
        path = cfg.gpu_map_dir / idx
        try:
            if path.read_text().split() == [str(job_id)]:  # never remove the next job's mapping
                path.unlink()
        except OSError:
            continue


def find_run_dir(info: JobInfo | None) -> Path | None:
    """The job writes <run dir>/logs/<job>.out (see sbatch_templates/torchrun.sbatch.j2)."""
    if info is None or not info.std_out:
        return None
    candidate = Path(info.std_out).parent.parent
    return candidate if (candidate / "run.json").is_file() else None


def _checkpoint_dir(run_dir: Path) -> Path:
    try:
        for line in (run_dir / "job.sbatch").read_text().splitlines():
            if line.startswith("export SLURMCTL_CHECKPOINT_DIR="):
                return Path(shlex.split(line.split("=", 1)[1])[0])
    except (OSError, ValueError, IndexError):
        pass
    return run_dir / "checkpoints"


def last_valid_checkpoint(run_dir: Path) -> tuple[int | None, float | None]:
    from slurmctl.runtime.checkpoint import COMPLETE_MARKER, CheckpointManager

    ck = CheckpointManager(_checkpoint_dir(run_dir)).latest()
    if ck is None:
        return None, None
    try:
        when = float(json.loads((ck.path / COMPLETE_MARKER).read_text())["time"])
    except (OSError, ValueError, KeyError, TypeError):
        when = (ck.path / COMPLETE_MARKER).stat().st_mtime
    return ck.step, when


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


def build_record(cfg: HookConfig, env, info: JobInfo | None, now: float) -> CostRecord:
    job_id = int(env.get("SLURM_JOB_ID") or 0)
    comment = env.get("SLURM_JOB_COMMENT") or ""
    restarts = env.get("SLURM_JOB_RESTART_COUNT") or ""
    start = info.start_time if info else None
    end = (info.end_time if info and info.end_time else None) or now
    gpu_count = info.gpu_count if info else len(job_gpu_indices(env))
    run_dir = find_run_dir(info)
    step, step_time = last_valid_checkpoint(run_dir) if run_dir else (None, None)
    state, state_final, exit_code = final_state(info, env)
    elapsed = max(0.0, end - start) if start else None
    return CostRecord(
        job_id=job_id,
        restart_count=int(restarts) if restarts.isdigit() else (info.restarts if info else 0),
        run_id=comment.removeprefix("slurmctl:") if comment.startswith("slurmctl:") else None,
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
        drain_requested=bool(run_dir and (run_dir / "drain.request").exists()),
        drain_acknowledged=bool(run_dir and (run_dir / "drain.ack").exists()),
        last_checkpoint_step=step,
        last_checkpoint_time=step_time,
        written_by=cfg.node,
        written_at=now,
    )


def run_epilog(env, cfg: HookConfig | None = None) -> HookResult:
    cfg = cfg or HookConfig.from_env(env)
    result = HookResult()
    job_id = int(env.get("SLURM_JOB_ID") or 0)
    info = jobinfo.query_job(cfg.slurm, job_id)
    if info is None:
        result.notes.append("scontrol did not describe the job; record has no state/times")
    steps = (
        ("orphans", lambda: kill_orphans(cfg, env, job_id, result)),
        ("shm", lambda: clean_shm(cfg, env, info.start_time if info else None, result)),
        ("scratch", lambda: shutil.rmtree(cfg.scratch_root / str(job_id), ignore_errors=True)),
        ("gpu map", lambda: remove_gpu_map(cfg, env, job_id)),
    )
    for label, step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - cleanup must go on; the record must be written
            result.notes.append(f"{label} cleanup failed: {type(exc).__name__}: {exc}")
    record = build_record(cfg, env, info, time.time())
    try:
        path = write_record(cfg.cost_spool, record)
    except OSError as exc:  # shared spool unreachable: keep the record on the node, never drop it
        path = write_record(FALLBACK_SPOOL, record)
        result.notes.append(f"spool {cfg.cost_spool} failed ({exc.strerror}); kept locally")
    result.notes.append(f"cost record {path}")
    return result
