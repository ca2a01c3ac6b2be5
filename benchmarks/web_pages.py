"""`slurmctl web`'s Runs page with 1,000 runs and Queue page with 1,000 jobs, side by side with the same
work done in-process by the CLI (`ls -n 1000`, `queue`), which it must not exceed by more than 2x.

    .venv/bin/python benchmarks/web_pages.py [--jobs 1000] [--repeat 9]

Started as root it re-runs itself as alice (see _as_user.py); everything below runs as that user:
  - --jobs held jobs of its own (name benchweb-<pid>, cancelled at the end, also on error), each the
    latest job of one run dir in a temporary runs root (SLURMCTL_SITE_CONFIG points at a copy of the
    site config with that runs_root);
  - the server is the real one (web/server.py on 127.0.0.1, a port of its own, in a thread of this
    process), asked over HTTP with the session cookie its one-time token gave; its time is the whole
    request, response read;
  - the CLI rows call `slurmctl.cli.main.main([...])` in this process (click, Context, the same core,
    the table printed to a discarded stdout), so both sides skip interpreter start-up alike;
  - each pair runs alternately (A B, B A, ...) --repeat times; medians and the ratio are printed.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import http.cookiejar
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from _as_user import bench_user, cancel, reexec_as_user, submit_held

GOAL = 2.0


def make_run(root: Path, run_id: str, created: float, job_id: int, partition: str) -> None:
    path = root / run_id
    (path / "checkpoints").mkdir(parents=True, mode=0o700)
    name = run_id.rsplit("-", 2)[0]
    (path / "run.json").write_text(json.dumps({"run_id": run_id, "name": name, "created": created}))
    (path / "run.yaml").write_text(f"name: {name}\nentrypoint: train.py\npartition: {partition}\n"
                                   "gpus_per_node: 1\ntime_limit: 5m\n")
    (path / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "job_id": job_id, "time": created}) + "\n")


def cli_in_process(argv: list[str]) -> None:
    from slurmctl.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"slurmctl {' '.join(argv)} -> {code}")


def main() -> int:
    reexec_as_user()
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--partition", default="l4-dev")
    args = parser.parse_args()

    import yaml

    from slurmctl.config.locate import find_site_config

    tag = f"benchweb-{os.getpid()}"
    tmp = Path(tempfile.mkdtemp(prefix=f"{tag}-"))
    site = yaml.safe_load(find_site_config().read_text())
    user = bench_user().pw_name
    (tmp / "runs" / user).mkdir(parents=True, mode=0o700)
    (tmp / "site.yaml").write_text(yaml.safe_dump({**site, "runs_root": str(tmp / "runs")}))
    os.environ["SLURMCTL_SITE_CONFIG"] = str(tmp / "site.yaml")
    os.environ["SLURMCTL_USER_CONFIG"] = str(tmp / "no-user-config.yaml")  # local Slurm, whatever ~/.config says
    ids: list[int] = []
    try:
        started = time.perf_counter()
        now = time.time()
        for i in range(args.jobs):
            created = now - 60 * (args.jobs - i)
            run_id = f"{tag}-{datetime.fromtimestamp(created, UTC):%Y%m%d}-{i % 65536:04x}"
            job_id = submit_held(run_id, ids, partition=args.partition, comment=f"slurmctl:{run_id}")
            make_run(tmp / "runs" / user, run_id, created, job_id, args.partition)
        print(f"{args.jobs} held jobs of {user}'s, one run dir each, made in {time.perf_counter() - started:.1f} s")

        from slurmctl.cli.context import Context
        from slurmctl.web.app import WebApp
        from slurmctl.web.auth import Sessions
        from slurmctl.web.server import make_server

        sessions = Sessions()
        server = make_server(WebApp(Context(), sessions), "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        opener.open(f"{base}/?token={sessions.token}&n=1", timeout=60).read()

        def page(path: str, expect: str) -> None:
            with opener.open(base + path, timeout=120) as response:
                body = response.read().decode()
            assert response.status == 200 and expect in body, body[:500]

        last_run = f"{tag}-{datetime.fromtimestamp(now - 60, UTC):%Y%m%d}-{(args.jobs - 1) % 65536:04x}"
        rows = [("Runs page vs ls -n N", lambda: page(f"/?n={args.jobs}&live=0", last_run),
                 lambda: cli_in_process(["ls", "-n", str(args.jobs)])),
                ("Queue page vs queue", lambda: page("/queue", str(ids[-1])), lambda: cli_in_process(["queue"]))]
        for name, web, cli in rows:
            web(), cli()  # warm: imports, the site config, templates compiled
            times: dict[str, list[float]] = {"web": [], "cli": []}
            for round_ in range(args.repeat):
                pair = [("web", web), ("cli", cli)]
                for label, fn in (pair if round_ % 2 == 0 else reversed(pair)):
                    t = time.perf_counter()
                    fn()
                    times[label].append(time.perf_counter() - t)
            w, c = statistics.median(times["web"]), statistics.median(times["cli"])
            verdict = "ok" if w / c <= GOAL else "OVER GOAL"
            print(f"{name:<24} ({args.jobs:>5}): web {w * 1000:7.1f} ms   cli {c * 1000:7.1f} ms   "
                  f"ratio {w / c:.2f}x  (goal <= {GOAL}x) {verdict}")
        server.shutdown()
        return 0
    finally:
        cancel(ids)


if __name__ == "__main__":
    sys.exit(main())
