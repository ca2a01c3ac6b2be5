"""Status of an adopted program (`slurmctl adopt`): it sends no heartbeat and writes no checkpoints of
ours, so its progress is read from its own output (the adopt block's step pattern) and its last
checkpoint from its own files (slurmctl.runtime.adapters)."""

from __future__ import annotations

import functools
import re
import shlex

from slurmctl.durations import human_duration
from slurmctl.fsutil import tail_text_lines
from slurmctl.rundir import Run
from slurmctl.runtime.adapters import Resilience

LOG_TAIL_BYTES = 256 * 1024  # the newest progress line is near the end

# The advice written for run.yaml runs, in the words of a job that has only its sbatch script: each
# run.yaml field as the #SBATCH option (or script line) that says the same, tried in this order.
_SCRIPT_WORDS: tuple[tuple[str, str], ...] = (
    (r"`time_limit` in run\.yaml", "`#SBATCH --time` in the script"),
    (r"`nodes` in run\.yaml", "`#SBATCH --nodes` in the script"),
    (r"`gpus_per_node` in run\.yaml / `--gres=gpu:N`", "`#SBATCH --gres=gpu:N` in the script"),
    (r"`gpus_per_node` in run\.yaml", "`#SBATCH --gres=gpu:N` in the script"),
    (r"the GPU type and count in run\.yaml", "the GPU type and count of `#SBATCH --gres` in the script"),
    (r"\(env: in run\.yaml\)", "(an `export` line in the script)"),
    (r"run\.yaml env", "the script's `export` lines"),
    (r"`python:` in run\.yaml / the image", "the script's module/conda/venv lines"),
    (r"`args:` \(run\.yaml\)", "the program's arguments in the script"),
    (r"`args:`/the config file", "the program's arguments in the script/the config file"),
    (r"the override in `args:`", "the override in the program's arguments"),
    (r"`args:`", "the program's arguments in the script"),
    (r" \(list it under `config_files:` in run\.yaml so submit checks it\)", ""),
    (r"\(relative to `workdir`\)", "(relative to the job's working directory: the script's --chdir, else where "
                                   "it was submitted)"),
    (r"results are in the run directory", "results are where the script writes them"),
    (r"`(?:checkpoint\.keep_last|model\.precision)` in run\.yaml", "the program's own setting"),
    (r"`slurmctl submit` again", "`slurmctl resume RUN`"),
    (r"\bin run\.yaml\b", "in the sbatch script"),
    (r"\brun\.yaml\b", "the sbatch script"),
)


@functools.cache
def _script_words() -> tuple[tuple[re.Pattern, str], ...]:
    """_SCRIPT_WORDS compiled, once, when advice is first reworded (not at import: `status` of a plain
    job or an adopted run that needs no rewording never compiles them)."""
    return tuple((re.compile(pattern), words) for pattern, words in _SCRIPT_WORDS)


_RUN_YAML_TERMS = ("run.yaml", "slurmctl submit", "args:", "workdir", "config_files:", "run directory")


def in_script_words(text: str, resubmit: str = "`slurmctl resume RUN`", script: str = "SCRIPT") -> str:
    """`text` (advice for run.yaml runs) for a job adopted from, or submitted as, an sbatch script;
    `resubmit` says how that job is started again."""
    if not any(word in text for word in _RUN_YAML_TERMS):
        return text
    for pattern, words in _script_words():
        text = pattern.sub(resubmit if words == "`slurmctl resume RUN`" else words, text)
    if "#SBATCH" in text and "slurmctl adopt" not in text:
        text += f" Then run the script again with `slurmctl adopt {script}`."
    return text


def script_advice(status, resubmit: str, script: str = "SCRIPT") -> None:
    """Every piece of advice of `status` (a run's or a plain job's) in the script's words."""
    for name in ("action", "headline", "why"):
        if hasattr(status, name):
            setattr(status, name, in_script_words(getattr(status, name), resubmit, script))
    for name in ("suggestions", "details", "health_notes"):
        if hasattr(status, name):
            setattr(status, name, [in_script_words(t, resubmit, script) for t in getattr(status, name)])
    if status.diagnosis and isinstance(status.diagnosis.get("hint"), str):
        status.diagnosis = {**status.diagnosis, "hint": in_script_words(status.diagnosis["hint"], resubmit, script)}


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
    shape = adopted.get("shape") if isinstance(adopted.get("shape"), dict) else {}
    if not status.gpus and isinstance(shape.get("gpus_total"), int) and shape["gpus_total"] > 0:
        status.gpus = shape["gpus_total"]  # the script's own ask, as adopt read it (ls's GPUS column)
    script = shlex.quote(str(adopted.get("script") or "SCRIPT"))
    script_advice(status, f"`slurmctl resume {run.run_id}`", script)
    if block is None or status.job_id is None:
        _nothing_to_resume(status, script, "slurmctl knows no checkpoint of its own (adopted without --framework)")
        return
    try:
        lines = tail_text_lines(run.log_path(status.job_id), 0, LOG_TAIL_BYTES, nofollow=True)
    except OSError:
        lines = []
    step = block.last_step(lines)
    found = block.checkpoints()  # one scan: opening a program's checkpoints is the costly part
    saved = max((c.step for c in found if c.step is not None), default=None)
    source = "its output"
    if saved is not None and (step is None or saved > step):
        step, source = saved, "its newest checkpoint"  # its output stopped saying (no progress bar) as it saved on
    if step is not None:
        status.last_step = step
        try:  # the output's last write stands in for a heartbeat
            status.heartbeat_age_seconds = max(0.0, now - run.log_path(status.job_id).stat().st_mtime)
        except OSError:
            pass
        status.details.append(f"Last progress in {source}: step {step}.")
    latest, restored = (found[-1] if found else None), block.restored(found)
    if block.restore and (restored is None or latest is None or restored.path != latest.path):
        status.details.append(f"Its next start restores {restored.path if restored else 'no checkpoint'} "
                              f"({block.framework}'s rule for this program: {block.restore}).")
    latest = restored if block.restore else latest  # what status and resume name: what will be restored
    label = "the checkpoint its next start restores" if block.restore else "its newest checkpoint of its own"
    if status.phase == "cancelled":
        status.headline += (f" {label.capitalize()}: {latest.path}"
                            + (f" (step {latest.step})." if latest.step is not None else ".")
                            if latest is not None else " It had written no checkpoint of its own.")
    if latest is None:
        _nothing_to_resume(status, script, "its next start would restore no checkpoint of its own")
    if latest is not None:
        status.latest_checkpoint_step = latest.step
        status.checkpoint_age_seconds = max(0.0, now - latest.mtime)
        status.details.append(f"{label.capitalize()}: {latest.path}"
                              f"{f' (step {latest.step})' if latest.step is not None else ''}, "
                              f"{human_duration(status.checkpoint_age_seconds)} old.")


def _nothing_to_resume(status, script: str, why: str) -> None:
    """`slurmctl resume` refuses a run with nothing to restore: advice that names what does work."""
    if "slurmctl resume" in status.action:
        status.action = f"{why[0].upper()}{why[1:]}, so `slurmctl resume` would refuse: run the script again " \
                        f"from the beginning with `slurmctl adopt {script}`."
