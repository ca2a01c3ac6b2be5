"""`ls` lists the newest runs by creation without reading every run.json of a busy day: a run dir's
mtime is never older than its run's `created`, so dirs are read newest-changed first and the read
stops once the rest changed before the newest runs were made."""

import json
import os

from slurmctl.rundir import layout
from slurmctl.rundir.registry import MTIME_SLACK, RunRegistry


def _runs(root, count: int, now: float) -> None:
    user = root / "me"
    user.mkdir(parents=True)
    for n in range(count):  # one a minute, all on one day; the dir changed when it was made
        run_id = f"r{n}-20261202-{n:04x}"
        path = user / run_id
        path.mkdir()
        created = now - (count - n) * 60
        (path / "run.json").write_text(json.dumps({"run_id": run_id, "created": created}))
        os.utime(path, (created, created))
    old = user / "r0-20261202-0000"  # the oldest run, still busy: its dir changed just now
    os.utime(old, (now, now))


def test_the_newest_runs_are_the_same_and_far_fewer_run_json_are_read(tmp_path, monkeypatch):
    now = 1796170000.0
    _runs(tmp_path, 300, now)
    registry = RunRegistry(tmp_path, user="me")
    reads = []
    real = layout.Run._json
    monkeypatch.setattr(layout.Run, "_json", lambda self, name: reads.append(self.run_id) or real(self, name))
    newest = registry.recent(20)
    read_by_recent = len(reads)  # each run read to choose, then the chosen once more to sort them
    every = sorted(registry.list(), key=lambda r: (r.meta.get("created") or 0, r.run_id))[-20:]
    assert [r.run_id for r in newest] == [r.run_id for r in every]
    assert "r0-20261202-0000" not in [r.run_id for r in newest]  # changed late, created first: not listed
    assert read_by_recent <= 2 * (20 + MTIME_SLACK / 60 + 2), read_by_recent  # not 300
