"""Slurm Prolog logic: node health, the job's scratch dir, the GPU->job mapping files.

A failed check returns ``ok=False`` with ONE readable line; the entry point drains the node with
that line as the reason (``sinfo -R`` shows it) and exits non-zero, so Slurm requeues the job held.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurmctl.errors import HealthError, UnsafeDirectory
from slurmctl.ops.hooks import jobinfo, procs
from slurmctl.ops.hooks.asuser import user_gid
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.ops.hooks.records import mark_attempt_start
from slurmctl.ops.hooks.rootfs import make_fresh_dir, open_trusted_dir, publish_file


@dataclass
class HookResult:
    ok: bool = True
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "reason": self.reason, "notes": self.notes}


def job_gpu_indices(env) -> list[str]:
    raw = env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES") or ""
    return [g.strip() for g in raw.split(",") if g.strip().isdigit()]


def check_test_trigger(cfg: HookConfig, env) -> None:
    """Local dev cluster only (SLURMCTL_LOCAL_DIR set): <state>/test-triggers/prolog-fail/<comment>."""
    comment = env.get("SLURM_JOB_COMMENT") or ""
    if cfg.test_trigger_dir is None or not comment or "/" in comment or "\0" in comment:
        return
    try:  # a regular file only: a comment of ".." must not name the directory itself
        planted = stat.S_ISREG(os.stat(cfg.test_trigger_dir / "prolog-fail" / comment, follow_symlinks=False).st_mode)
    except OSError:
        planted = False
    if planted:
        raise HealthError(f"test trigger prolog-fail/{comment} (local dev cluster)")


def check_gpus(cfg: HookConfig, env, result: HookResult) -> None:
    wanted = job_gpu_indices(env)
    if not cfg.nvidia_smi:
        result.notes.append("gpu check skipped: nvidia-smi not installed on this node")
        return
    try:
        proc = subprocess.run([cfg.nvidia_smi, "--query-gpu=index", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        raise HealthError("nvidia-smi hung for 20 s (driver or GPU fault)") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise HealthError(f"nvidia-smi failed: {detail[-1] if detail else f'exit {proc.returncode}'}")
    visible = {line.strip() for line in proc.stdout.splitlines() if line.strip()}
    missing = [g for g in wanted if g not in visible]
    if missing:
        raise HealthError(f"GPU(s) {','.join(missing)} allocated but not visible to nvidia-smi "
                          f"({len(visible)} visible)")
    result.notes.append(f"gpus visible: {len(visible)}")


def _free_mb(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize // (1024 * 1024)


def check_space(cfg: HookConfig, result: HookResult) -> None:
    for label, path, need in (("/dev/shm", cfg.shm_dir, cfg.min_free_shm_mb),
                              ("scratch", cfg.scratch_root, cfg.min_free_scratch_mb)):
        try:
            free = _free_mb(path)
        except FileNotFoundError:
            if label == "scratch":
                continue  # created (or refused) by make_scratch; nothing to measure yet
            raise
        if free < need:
            where = label if str(path) == label else f"{label} {path}"
            raise HealthError(f"{where} has {free} MB free, needs {need} MB")
    result.notes.append("space ok")


def check_leftovers(cfg: HookConfig, job_id: int, result: HookResult) -> None:
    """Processes of jobs that no longer run here: kill them; drain if they survive SIGKILL. Only
    processes slurmd started on THIS node count (procs.on_node): an interactive salloc's command
    carries SLURM_JOB_ID but no node, and is no one's leftover here."""
    others = [p for p in procs.job_processes() if p.job_id != job_id and procs.on_node(p, cfg.node)]
    if not others:
        return
    active = jobinfo.active_job_ids(cfg.slurm, cfg.node)
    if active is None:
        result.notes.append("leftover check skipped: squeue did not answer")
        return
    stale = [p for p in others if p.job_id not in active]
    if not stale:
        return
    survivors = procs.kill_all([p.pid for p in stale], cfg.kill_grace_seconds)
    jobs = sorted({str(p.job_id) for p in stale})
    if survivors:
        raise HealthError(f"leftover processes of ended job(s) {','.join(jobs)} survive SIGKILL: "
                          f"pids {','.join(map(str, survivors[:5]))}")
    result.notes.append(f"killed {len(stale)} leftover process(es) of ended job(s) {','.join(jobs)}")


def make_scratch(cfg: HookConfig, env, job_id: int) -> Path | None:
    """<scratch_root>/<job id>, created fresh and handed to the job's user through its fd.

    The scratch root must be root's and writable by nobody else: in a directory users can write
    (a 1777 /scratch), one of them could pre-plant <job id> as a symlink and have root create or
    chown whatever it points at. Such a root is refused (noted in the hooks log; the job runs
    without scratch) rather than draining the node for a site setting. Whatever sits at
    <job id> (a leftover of this job's previous attempt) is removed without following symlinks."""
    uid_text = env.get("SLURM_JOB_UID") or ""
    if not uid_text.isdigit() or job_id <= 0:
        return None
    uid = int(uid_text)
    gid = user_gid(uid, env.get("SLURM_JOB_GID"))
    if gid is None:
        raise HealthError(f"job user uid {uid} has no passwd entry on this node (cannot give it scratch)")
    root_fd = open_trusted_dir(cfg.scratch_root, create_mode=0o755)
    try:
        make_fresh_dir(root_fd, str(job_id), uid, gid, 0o700)
    finally:
        os.close(root_fd)
    return cfg.scratch_root / str(job_id)


def write_gpu_map(cfg: HookConfig, env, job_id: int) -> list[str]:
    """dcgm-exporter --hpc-job-mapping-dir format: file named by GPU index, content the job id.
    The map dir is root's (readable by exporters, writable by nobody else)."""
    indices = job_gpu_indices(env)
    if not indices:
        return []
    dir_fd = open_trusted_dir(cfg.gpu_map_dir, create_mode=0o755)
    try:
        for idx in indices:
            publish_file(dir_fd, idx, f"{job_id}\n".encode(), mode=0o644, durable=False)
    finally:
        os.close(dir_fd)
    return indices


def run_prolog(env, cfg: HookConfig | None = None) -> HookResult:
    cfg = cfg or HookConfig.from_env(env)
    result = HookResult()
    job_id = int(env.get("SLURM_JOB_ID") or 0)
    try:
        check_test_trigger(cfg, env)
        check_gpus(cfg, env, result)
        check_space(cfg, result)
        check_leftovers(cfg, job_id, result)
        try:
            scratch = make_scratch(cfg, env, job_id)
            result.notes.append(f"scratch {scratch}" if scratch else "scratch skipped: no job uid")
        except UnsafeDirectory as exc:
            result.notes.append(f"scratch skipped: {exc}")
        restarts = env.get("SLURM_JOB_RESTART_COUNT") or "0"
        try:  # the attempt's identity for its cost record (records.attempt_start)
            mark_attempt_start(cfg.cost_spool, job_id, int(restarts) if restarts.isdigit() else 0, time.time())
        except (UnsafeDirectory, OSError) as exc:
            result.notes.append(f"attempt start not recorded: {exc}")
        try:
            mapped = write_gpu_map(cfg, env, job_id)
            if mapped:
                result.notes.append(f"gpu map {cfg.gpu_map_dir}: {','.join(mapped)}")
        except UnsafeDirectory as exc:
            result.notes.append(f"gpu map skipped: {exc}")
    except HealthError as exc:
        result.ok, result.reason = False, str(exc)
    except OSError as exc:  # a broken scratch/shm filesystem is a node problem too
        result.ok, result.reason = False, f"{exc.strerror or exc} ({exc.filename or 'filesystem'})"
    return result


def drain_node(cfg: HookConfig, reason: str) -> bool:
    """Drain this node with "slurmctl prolog: <reason>" (sinfo -R); False if Slurm did not take it."""
    return jobinfo.drain_node(cfg.slurm, cfg.node, f"slurmctl prolog: {reason}")
