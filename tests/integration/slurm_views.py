"""Every reader of squeue/sacct that decides something, as one JSON document: run as a cluster user
(`python tests/integration/slurm_views.py JOB_ID...`) it prints what that user's slurmctl sees of
those jobs; with `--exporter USER RUN` (as root) the exporter's series of one user's run.

test_forged_records.py compares these views before and after another user submits jobs whose names
and comments carry random bytes and whole forged records: they must not change.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace


def _job(j) -> list:
    return [j.job_id, j.state, j.reason, j.user, j.name, j.comment, j.partition]


def user_views(job_ids: list[int]) -> dict:
    from slurmctl.errors import SlurmctlError
    from slurmctl.slurm.client import SlurmClient
    from slurmctl.web.pages import queue_page

    wanted = set(job_ids)
    views: dict = {}

    def view(name, fn):
        try:
            views[name] = fn()
        except SlurmctlError as exc:  # a refused answer is a changed answer: the test shows it
            views[name] = {"error": exc.code, "message": exc.message}

    client = SlurmClient()
    view("queue", lambda: sorted(_job(j) for j in client.queue(mine=False) if j.job_id in wanted))
    view("queue_mine", lambda: sorted(_job(j) for j in client.queue(mine=True) if j.job_id in wanted))
    view("jobs", lambda: sorted(_job(j) for j in client.jobs(job_ids).values()))  # status, cancel, logs
    view("run_comments", lambda: sorted([j.job_id, j.comment] for j in client.my_job_comments("slurmctl:")[0]
                                        if j.job_id in wanted))
    view("queue_view", lambda: sorted(_job(j) for j in client.queue_view(job_ids).jobs.values()))
    # ls's path: the queue my_job_comments saw, handed to queue_view as its snapshot
    view("queue_view_snapshot", lambda: sorted(
        _job(j) for j in client.queue_view(job_ids, client.my_job_comments("slurmctl:")[1]).jobs.values()))
    view("snapshot", lambda: sorted([j.job_id, j.state, j.user, j.comment, j.tres] for j in client.queue_snapshot()
                                    if j.job_id in wanted))
    view("quota", lambda: sorted([j.job_id, j.state, j.user, j.tres] for j in client.quota_jobs()
                                 if j.job_id in wanted))
    view("job_info", lambda: [[i.job_id, i.state, i.exit_code, i.gpu_count, i.std_out, i.work_dir]
                              for i in (client.job_info(j) for j in sorted(wanted)) if i is not None])
    view("web_queue", lambda: sorted(_job(row[0]) for row in queue_page(SimpleNamespace(client=client))["rows"]
                                     if row[0].job_id in wanted))
    return views


def exporter_series(user: str, run_id: str) -> list[str]:
    """The exporter's series of `user`'s run `run_id` (one scrape; volatile values left out). Other
    runs of the same user may belong to other tests on the shared cluster: not compared."""
    from prometheus_client import generate_latest

    from slurmctl.config.models import load_site_config
    from slurmctl.ops.exporter import build

    registry, _ = build(load_site_config())
    lines = generate_latest(registry).decode().splitlines()
    return sorted(line.rsplit(" ", 1)[0] if "timestamp" in line or "age" in line else line
                  for line in lines if f'user="{user}"' in line and f'run="{run_id}"' in line)


if __name__ == "__main__":
    if sys.argv[1] == "--exporter":
        print(json.dumps(exporter_series(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(user_views([int(a) for a in sys.argv[1:]])))
