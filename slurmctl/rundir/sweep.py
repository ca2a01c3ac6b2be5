"""The one owner of a sweep's directory: ``<runs_root>/<user>/<sweep id>/``.

A sweep is one Slurm array whose elements are ordinary runs (``rundir.sweep_element_id`` names
them, each with its own run dir, checkpoints and tracked run). The sweep's own directory holds
what belongs to the whole array:

    sweep.json       sweep id, grid, elements (index, run id, values), array job id, metric
    sweep.sbatch     the array's job script: it runs element i's own job.sbatch for task i
    preflight.json   the one preflight report of the sweep

It has no run.json, so run listings skip it; lookups go through the same ownership checks as runs
(``RunRegistry``: the caller's own real directory, not group/other-writable). Standard library only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from slurmctl.errors import RunNotFound
from slurmctl.fsutil import read_json
from slurmctl.rundir import Run, RunRegistry, check_owned_dir, is_run_id

SWEEP_JSON = "sweep.json"
SWEEP_SCRIPT = "sweep.sbatch"
SWEEP_PREFLIGHT = "preflight.json"
MAX_ELEMENTS = 1000  # the default MaxArraySize of Slurm is 1001 (task ids 0-1000)


@dataclass
class SweepDir:
    sweep_id: str
    path: Path

    @property
    def meta_path(self) -> Path:
        return self.path / SWEEP_JSON

    @property
    def script_path(self) -> Path:
        return self.path / SWEEP_SCRIPT

    @property
    def preflight_path(self) -> Path:
        return self.path / SWEEP_PREFLIGHT

    @property
    def meta(self) -> dict:
        data = read_json(self.meta_path, 4 * 1024 * 1024)
        return data if isinstance(data, dict) else {}

    def elements(self, registry: RunRegistry) -> list[tuple[int, Run | None]]:
        """(array index, its run) for every element, in index order; None where the run dir is gone."""
        found = []
        for element in self.meta.get("elements") or []:
            index, run_id = element.get("index"), element.get("run_id")
            if not isinstance(index, int) or not is_run_id(run_id):
                continue
            try:
                found.append((index, registry.get(run_id)))
            except RunNotFound:
                found.append((index, None))
        return sorted(found, key=lambda pair: pair[0])


def create_sweep_dir(registry: RunRegistry, sweep_id: str, share_with_group: bool = False) -> SweepDir:
    """A fresh sweep directory (0700, or 0750 when runs are shared); FileExistsError when taken."""
    registry.user_dir(create=True)
    path = registry.root / sweep_id
    path.mkdir(mode=0o750 if share_with_group else 0o700)
    return SweepDir(sweep_id, path)


def find_sweep(registry: RunRegistry, ref: str) -> SweepDir | None:
    """The caller's sweep by id, or by name (its newest: a directory `<name>-<day>-<hex>` holding
    sweep.json); None when `ref` names no sweep. One scandir of the caller's runs directory and a
    stat per matching name: no run's files are read."""
    directory = registry.user_dir()
    if directory is None or "/" in ref or ref in {"", ".", ".."}:
        return None
    candidate = directory / ref
    if is_run_id(ref) and os.path.lexists(candidate / SWEEP_JSON):
        check_owned_dir(candidate, "sweep directory", registry.uid)
        return SweepDir(ref, candidate)
    named = re.compile(re.escape(ref) + r"-\d{8}-[0-9a-f]{4}")
    sweeps = [SweepDir(e.name, Path(e.path)) for e in registry.owned_entries(directory, named)
              if os.path.isfile(os.path.join(e.path, SWEEP_JSON))]
    sweeps = [s for s in sweeps if s.meta.get("name") == ref]
    return max(sweeps, key=lambda s: (s.meta.get("created") or 0, s.sweep_id)) if sweeps else None
