"""Status of an adopted program (`slurmctl adopt`): it sends no heartbeat and writes no checkpoints of
ours, so its progress is read from its own output (the adopt block's step pattern) and its last
checkpoint from its own files (slurmctl.runtime.adapters)."""

from __future__ import annotations

from slurmctl.durations import human_duration
from slurmctl.fsutil import tail_text_lines
from slurmctl.rundir import Run
from slurmctl.runtime.adapters import Resilience

LOG_TAIL_BYTES = 256 * 1024  # the newest progress line is near the end


def apply_adopted(status, run: Run, job, now: float) -> None:
    """Fill what build_status cannot know for an adopted run: phase, last step, the program's checkpoint."""
    adopted = run.meta.get("adopted")
    if not isinstance(adopted, dict):
        return
    block = Resilience.from_dict(adopted.get("resilience"))
    status.details = [d for d in status.details if d != "No valid checkpoint yet."]
    status.details.append(f"Adopted sbatch script {adopted.get('script')}, run as written"
                          + (f"; checkpoints: {block.framework} in {block.checkpoint_dir}" if block else
                             "; no checkpoint adapter (adopt with --framework to have cancel and resume use them)"))
    if status.phase == "starting":  # no heartbeat is expected from it
        status.phase = "training"
    if block is None or status.job_id is None:
        return
    try:
        lines = tail_text_lines(run.log_path(status.job_id), 0, LOG_TAIL_BYTES, nofollow=True)
    except OSError:
        lines = []
    step = block.last_step(lines)
    if step is not None:
        status.last_step = step
        try:  # the output's last write stands in for a heartbeat
            status.heartbeat_age_seconds = max(0.0, now - run.log_path(status.job_id).stat().st_mtime)
        except OSError:
            pass
        status.details.append(f"Last progress in its output: step {step}.")
    latest = block.latest()
    if latest is not None:
        status.latest_checkpoint_step = latest.step
        status.checkpoint_age_seconds = max(0.0, now - latest.mtime)
        status.details.append(f"Newest checkpoint of its own: {latest.path}"
                              f"{f' (step {latest.step})' if latest.step is not None else ''}, "
                              f"{human_duration(status.checkpoint_age_seconds)} old.")
