"""The ONE owner of the run directory: its file names, where its checkpoints are, its readers, and
who may open it.

Layout: ``<runs_root>/<user>/<run id>/``

    run.yaml         the frozen spec (workdir made absolute)
    run.json         metadata, incl. ``checkpoint_dir`` (absolute, fixed at submit)
    preflight.json   the preflight report of the submission
    job.sbatch       the rendered job script (no secret values)
    attempts.jsonl   one line per event: submitted / start / end / forked ...
    logs/<job id>.out  every attempt of a job, appended
    heartbeat.json   the training's last step (rewritten atomically)
    metrics.jsonl    one line per logged step (grows forever: read its tail)
    notifications.jsonl  messages sent about the run: event, channel key/kind, delivered or why not
    drain.request / drain.ack   the drain handshake
    checkpoints/     the default checkpoint dir (see ``resolve_checkpoint_dir``)
    watchdog/        the progress watchdog's state.json and its scenes (<job>-<time>/: stacks, log tail, GPUs)
    health/          live health: rank-<N>.json per rank (transport, data wait), idle.json (idle policy)

Standard library only at import (the job, the root node hooks and the CLI share this module);
pydantic/yaml are imported inside the one method that parses run.yaml. Every file read goes
through the non-blocking, size-capped readers of ``slurmctl.fsutil`` (a FIFO or /dev/zero planted
in a run dir never hangs a reader). The tail reader for logs is ``slurmctl.fsutil.tail_text_lines``.

Ownership: a run belongs to the user whose directory it is in. ``RunRegistry`` resolves names, ids
and explicit paths only among the caller's runs and refuses (``RunNotOwned``) a directory that is a
symlink, is not owned by the caller, or is writable by group/others.

The package: ``layout`` (every file name, run ids, ``Run``: one run's paths and readers) and
``registry`` (``RunRegistry``: finding the caller's runs, ``check_owned_dir``: the lstat check).
Import from the package; the split is by responsibility, not a second owner.
"""

from slurmctl.rundir.layout import (
    ADOPTED_SCRIPT,
    ARTIFACTS_DIR,
    ATTEMPT_HEADER,
    ATTEMPTS,
    CHECKPOINTS_DIR,
    COMMENT_PREFIX,
    COST_RECORDS_DIR,
    DATA_DIR,
    DATA_PLAN,
    DATA_STAGE,
    DIAGNOSIS_CACHE,
    DRAIN_ACK,
    DRAIN_REQUEST,
    HEALTH_DIR,
    HEALTH_IDLE,
    HEALTH_RANK,
    HEARTBEAT,
    JOB_LOG,
    JOB_SCRIPT,
    LOGS_DIR,
    METRICS,
    NOTIFICATIONS,
    PREFLIGHT_JSON,
    RUN_ID_RE,
    RUN_JSON,
    RUN_YAML,
    SCENE_GPUS,
    SCENE_LOG_TAIL,
    SCENE_STACKS,
    WATCHDOG_DIR,
    WATCHDOG_STATE,
    Run,
    attempt_header,
    attempt_ids,
    current_user,
    header_restart_count,
    is_health_rank_file,
    is_run_id,
    job_log_path,
    new_run_id,
    resolve_checkpoint_dir,
    run_dir_of_log,
    run_id_from_comment,
    run_path,
    step_rate,
    sweep_element_id,
    user_runs_dir,
    watchdog_scene_dir,
    watchdog_state_path,
    write_stage_record,
)
from slurmctl.rundir.registry import RunRegistry, check_owned_dir

__all__ = [
    "ATTEMPT_HEADER",
    "attempt_header",
    "header_restart_count",
    "ADOPTED_SCRIPT", "ARTIFACTS_DIR", "ATTEMPTS", "CHECKPOINTS_DIR", "COMMENT_PREFIX", "COST_RECORDS_DIR", "DATA_DIR",
    "DATA_PLAN", "DATA_STAGE", "DIAGNOSIS_CACHE", "DRAIN_ACK",
    "DRAIN_REQUEST", "HEALTH_DIR", "HEALTH_IDLE", "HEALTH_RANK", "HEARTBEAT", "JOB_LOG", "JOB_SCRIPT", "LOGS_DIR",
    "METRICS", "NOTIFICATIONS", "PREFLIGHT_JSON", "RUN_ID_RE", "RUN_JSON", "RUN_YAML", "SCENE_GPUS",
    "SCENE_LOG_TAIL", "SCENE_STACKS",
    "WATCHDOG_DIR", "WATCHDOG_STATE", "Run", "RunRegistry", "attempt_ids", "check_owned_dir", "current_user",
    "is_health_rank_file",
    "is_run_id", "job_log_path", "new_run_id", "resolve_checkpoint_dir", "run_dir_of_log", "run_id_from_comment",
    "run_path", "step_rate", "sweep_element_id", "user_runs_dir", "watchdog_scene_dir",
    "watchdog_state_path", "write_stage_record",
]
