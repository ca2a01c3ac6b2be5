"""The run registry on the shared filesystem: one directory per run.

Layout (see README "Design"): run.yaml (frozen spec), run.json (metadata), job.sbatch,
attempts.jsonl (one line per event: submitted / start / end), logs/<job id>.out (append mode,
every attempt of a job in one file), heartbeat.json, metrics.jsonl, drain.request / drain.ack,
checkpoints/.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml

from slurmctl.errors import ConfigError, RunNotFound
from slurmctl.fsutil import append_jsonl, read_jsonl
from slurmctl.submit.spec import RunSpec

# #SBATCH lines are not parsed by a shell, so paths in them must not need quoting.
_SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9/._+@-]+$")


def new_run_id(name: str, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return f"{name}-{now:%Y%m%d}-{secrets.token_hex(2)}"


@dataclass
class Run:
    run_id: str
    path: Path

    @property
    def meta(self) -> dict:
        try:
            return json.loads((self.path / "run.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def spec(self) -> RunSpec:
        return RunSpec.model_validate(yaml.safe_load((self.path / "run.yaml").read_text()))

    @property
    def attempts_path(self) -> Path:
        return self.path / "attempts.jsonl"

    def events(self) -> list[dict]:
        return read_jsonl(self.attempts_path)

    def job_ids(self) -> list[int]:
        ids = [int(e["job_id"]) for e in self.events() if e.get("event") == "submitted"]
        return list(dict.fromkeys(ids))

    def latest_job_id(self) -> int | None:
        ids = self.job_ids()
        return ids[-1] if ids else None

    def log_path(self, job_id: int) -> Path:
        return self.path / "logs" / f"{job_id}.out"

    def refresh(self, path: Path) -> Path:
        """Make a file of this run current before reading it again (a growing log): a no-op on the
        shared filesystem; a run read through an SSH login node re-fetches it (slurm/ssh.py)."""
        return path

    def heartbeat(self) -> dict | None:
        try:
            return json.loads((self.path / "heartbeat.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def record(self, event: str, **fields) -> None:
        append_jsonl(self.attempts_path, {"event": event, "time": time.time(), **fields})


class RunRegistry:
    def __init__(self, root: Path):
        self.root = root.expanduser()

    def create(self, spec: RunSpec) -> Run:
        if not _SAFE_PATH_RE.match(str(self.root)):
            raise ConfigError(
                f"runs_root {self.root} contains characters (spaces, quotes, ...) that #SBATCH lines cannot carry.",
                "Set runs_root in site.yaml to a path of letters, digits, '/', '.', '_' or '-'.",
            )
        run_id = new_run_id(spec.name)
        path = self.root / run_id
        (path / "logs").mkdir(parents=True, exist_ok=False)
        (path / "checkpoints").mkdir()
        return Run(run_id, path)

    def list(self) -> list[Run]:
        if not self.root.is_dir():
            return []
        runs = [Run(p.name, p) for p in self.root.iterdir() if (p / "run.json").exists()]
        return sorted(runs, key=lambda r: r.meta.get("created", 0))

    def get(self, ref: str) -> Run:
        """A run by id, unique id prefix, run name (its newest run) or run directory path."""
        candidate = Path(ref).expanduser()
        if "/" in ref and (candidate / "run.json").exists():
            return Run(candidate.name, candidate.resolve())
        if (self.root / ref / "run.json").exists():
            return Run(ref, self.root / ref)
        runs = self.list()
        by_name = [r for r in runs if r.meta.get("name") == ref]
        if by_name:
            return by_name[-1]
        prefixed = [r for r in runs if r.run_id.startswith(ref)]
        if len(prefixed) == 1:
            return prefixed[0]
        if len(prefixed) > 1:
            names = ", ".join(r.run_id for r in prefixed[:5])
            raise RunNotFound(f"'{ref}' matches several runs: {names}.", "Give more of the run id.")
        raise RunNotFound(f"no run '{ref}' under {self.root}.", "`slurmctl ls` lists your runs.")
