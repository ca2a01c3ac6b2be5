"""Slurm Prolog logic: node health, the job's scratch dir, the GPU->job mapping files.

The health checks are slurmctl.ops.health's (the prolog's fast set). A failed check returns
``ok=False`` with the drain reason `slurmctl:[node_problem] <check>: <detail>`; the entry point
drains the node with it (``sinfo -R`` shows it) and exits non-zero, so Slurm requeues the job
(not held where SchedulerParameters has nohold_on_prolog_fail, as deploy/slurm/scheduling.conf sets).
"""

from __future__ import annotations

import os
import pwd
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurmctl.errors import HealthError, UnsafeDirectory
from slurmctl.ops.health.checks import Subject, first_failure, run_checks
from slurmctl.ops.health.reasons import NODE_PROBLEM, DrainReason
from slurmctl.ops.health.reasons import parse as parse_reason
from slurmctl.ops.hooks.asuser import user_gid
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.ops.hooks.datacache import prepare_caches
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


def prepare_data_caches(cfg: HookConfig, env) -> list[str]:
    """The job user's directory in each node data cache, and every user's measured usage there
    (slurmctl/ops/hooks/datacache.py)."""
    uid_text = env.get("SLURM_JOB_UID") or ""
    if not cfg.data_cache_dirs or not uid_text.isdigit():
        return []
    uid = int(uid_text)
    gid = user_gid(uid, env.get("SLURM_JOB_GID"))
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        return [f"data cache skipped: uid {uid} has no passwd entry"]
    return prepare_caches(cfg.data_cache_dirs, uid, gid if gid is not None else uid, user)


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
        findings = run_checks(Subject(cfg, job_id, tuple(job_gpu_indices(env)), "prolog"), stop_at_first_failure=True)
        result.notes.extend(f"{f.check}: {f.detail}" for f in findings if f.ok)
        failed = first_failure(findings)
        if failed is not None:
            result.ok, result.reason = False, failed.reason().text()
            return result
        try:
            scratch = make_scratch(cfg, env, job_id)
            result.notes.append(f"scratch {scratch}" if scratch else "scratch skipped: no job uid")
        except UnsafeDirectory as exc:
            result.notes.append(f"scratch skipped: {exc}")
        try:
            result.notes.extend(prepare_data_caches(cfg, env))
        except (UnsafeDirectory, OSError) as exc:  # the job still runs; its staging says what is missing
            result.notes.append(f"data cache skipped: {exc}")
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
        result.ok, result.reason = False, DrainReason(NODE_PROBLEM, "trigger", str(exc)).text()
    except OSError as exc:  # a broken scratch filesystem is a node problem too
        detail = f"{exc.strerror or exc} ({exc.filename or 'filesystem'})"
        result.ok, result.reason = False, DrainReason(NODE_PROBLEM, "scratch", detail).text()
    return result


def drain_node(cfg: HookConfig, reason: str) -> bool:
    """Drain this node with `reason` (ours: slurmctl:[...]) unless someone else's drain is on it;
    False if Slurm did not take it."""
    from slurmctl.ops.health.agent import drain  # why: only a failing prolog drains; most never import it

    parsed = parse_reason(reason) or DrainReason(NODE_PROBLEM, "prolog", reason)
    return drain(cfg, parsed) != "failed"
