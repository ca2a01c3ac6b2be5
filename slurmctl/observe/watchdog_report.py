"""What the progress watchdog (slurmctl.runtime.watchdog) did to a run, read from ``<run dir>/watchdog/``: its
``state.json`` and the scene folders ``<job>-<time>/`` (stacks, log tails) it leaves when it ends a hung step.
``watchdog_report`` puts that in words for ``diagnose`` and ``status``; ``add_watchdog`` leads a diagnosis
with it."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from slurmctl import rundir
from slurmctl.fsutil import read_json

if TYPE_CHECKING:
    from slurmctl.observe.diagnose import Diagnosis

_SCENE_DIR = re.compile(r"^(?P<job>\d+|local)-(?P<time>\d+)$")
_WATCHDOG_LINE = re.compile(
    r"slurmctl watchdog \[[\d:]+\]: (?:WARNING|HUNG|CONFIGURATION PROBLEM|no ACK|progress resumed)")


def _clock(epoch) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(epoch)))
    except (TypeError, ValueError, OverflowError):
        return "an unknown time"


def watchdog_report(run_dir: Path, job_id: int | str | None = None) -> dict | None:
    """What the watchdog did (to `job_id`, if given): None when it never warned or acted.

    Keys: state (config-problem | drain-requested | drained | killed), time, job_id, message (plain
    words), scene (newest scene folder or None), scenes (all of them, oldest first)."""
    folder = run_dir / rundir.WATCHDOG_DIR
    if not folder.is_dir():
        return None
    state = read_json(rundir.watchdog_state_path(run_dir))  # None when missing, not JSON, or not a regular file
    if not isinstance(state, dict) or (job_id is not None and str(state.get("job_id")) != str(job_id)):
        state = {}
    scenes = []
    for entry in folder.iterdir():
        m = _SCENE_DIR.match(entry.name)
        if m and entry.is_dir() and (job_id is None or m["job"] == str(job_id)):
            scenes.append((int(m["time"]), entry))
    scenes = [str(p) for _, p in sorted(scenes)]
    if not state and not scenes:
        return None
    kind, when = state.get("state", ""), _clock(state.get("time"))
    scene = state.get("scene") or (scenes[-1] if scenes else None)
    described = f"'{state.get('field', '?')}' in {state.get('source', '?')}"
    listed = state.get("evidence")
    evidence = [e[:300] for e in listed[:5] if isinstance(e, str)] if isinstance(listed, list) else []
    if kind == "killed" and evidence:  # the peer check: the step waited for another node
        message = (f"the watchdog ended the training step at {when}: "
                   f"{state.get('summary') or 'its ranks here were gone'}; evidence: {'; '.join(evidence)}; "
                   f"scene in {scene}")
    elif kind == "killed":
        message = (f"the watchdog ended the hung training step at {when} (no progress in {described}, and no "
                   f"answer to its drain request); stacks, log tail and nvidia-smi are in {scene}")
    elif kind == "drain-requested":
        message = (f"the watchdog saw no progress ({state.get('summary') or described}) and asked the training "
                   f"to checkpoint and stop at {when}")
    elif kind == "drained":
        message = f"the watchdog asked the stalled training to stop; it checkpointed and acknowledged at {when}"
    elif kind == "warned":
        message = (f"no progress in {described} for {state.get('stalled_seconds', '?')} s at {when}; the watchdog "
                   f"asks the training to drain after {state.get('window_seconds', '?')} s without progress")
    elif kind == "watching" and not scenes:
        return None  # a warning that progress has since cleared
    elif kind == "config-problem":
        message = (f"the watchdog never found its progress field {described}, so it cannot detect a hang "
                   "(set SLURMCTL_WATCHDOG_STEP_FIELD / SLURMCTL_WATCHDOG_SOURCE; it never ends a job for this)")
    else:
        message = f"the watchdog ended a hung training step earlier; its scene is in {scene}"
        kind = "killed"
    return {"state": kind, "time": state.get("time"), "job_id": state.get("job_id"), "message": message,
            "scene": scene, "scenes": scenes}


def add_watchdog(result: Diagnosis, report: dict | None, log_text: str) -> None:
    """Lead the evidence with what the watchdog did; a kill explains an otherwise unknown failure."""
    if report is None:
        return
    result.watchdog = report
    said = [ln.strip() for ln in log_text.splitlines() if _WATCHDOG_LINE.search(ln)][-3:]
    lines = [f"watchdog: {report['message']}", *said, *result.evidence]
    result.evidence = list(dict.fromkeys(lines))[:8]  # the watchdog's log lines may be evidence already
    if result.category == "unknown" and report["state"] == "killed":
        result.summary = ("The training stopped making progress and the watchdog ended the hung step "
                          "(no step advanced in its stall window and the drain request went unanswered).")
        result.hint = (f"Open {report['scene']}/{rundir.SCENE_STACKS}: it shows where each rank was stuck (a "
                       "collective, data loading, I/O). Resubmitting resumes from the last valid checkpoint.")
