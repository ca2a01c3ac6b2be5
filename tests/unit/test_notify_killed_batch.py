"""A batch script killed before `attempt end` (scancel --batch --signal=KILL, the batch step's memory
limit): root's epilog, on the batch host, has a child running as the job's user record the end the
script never wrote and start the user's own `python -m slurmctl.notify ended`, which sends the
`failed` message (here to a real loopback webhook, signed). A requeued attempt's epilog, another
node's, or an attempt that recorded its own end leave everything as it was.

JobInfo values are the shapes the local cluster's epilogs saw (22.05.8): COMPLETING with the end in
the past for a finished job; Restarts one up and the end in the future for one being requeued."""

import http.server
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from slurmctl.ops.hooks import epilog, run_records
from slurmctl.ops.hooks.prolog import HookResult
from slurmctl.runtime.attempt import record_killed_end
from slurmctl.slurm.records import JobInfo

from .test_plugins import cfg_for

RUN_ID = "kill-20261201-ab12"
TRACEBACK_FREE_LOG = "step 3\nstep 4\n/var/spool/slurmd/job00091/slurm_script: line 120: 4242 Killed\n"


@pytest.fixture
def receiver():
    posts = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's method name
            posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], posts
    server.shutdown()


def _run_dir(tmp_path: Path, port: int, events: list[dict]) -> Path:
    tmp_path.mkdir(exist_ok=True)
    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"HOOK=signed+http://127.0.0.1:{port}/hook?secret=s3\n")
    secrets.chmod(0o600)
    run_dir = tmp_path / "runs" / "root" / RUN_ID
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": RUN_ID, "notify": {"channels": ["HOOK"], "events": ["failed", "finished"], "max_per_hour": 12,
                                     "secrets_file": str(secrets), "python": sys.executable}}))
    (run_dir / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run_dir / "logs" / "91.out").write_text(TRACEBACK_FREE_LOG)
    (run_dir / "heartbeat.json").write_text(json.dumps({"step": 4, "time": time.time(), "job_id": "91"}))
    return run_dir


STARTED = [{"event": "submitted", "job_id": 91}, {"event": "start", "job_id": 91, "restart_count": 0, "time": 1.0,
                                                 "nodes": "n1", "batch_host": "n1"}]
ENV = {"SLURM_JOB_ID": "91", "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_GID": str(os.getgid()),
       "SLURM_JOB_USER": "root", "SLURM_JOB_COMMENT": f"slurmctl:{RUN_ID}", "SLURM_JOB_RESTART_COUNT": "0",
       "SLURM_JOB_EXIT_CODE2": "0:9"}


def _epilog(tmp_path, info: JobInfo, env=ENV) -> HookResult:
    cfg = cfg_for(tmp_path)
    cfg.user_read_timeout = 10.0  # a loaded test machine; the cluster's default is enough for this small child
    result = HookResult()
    now = time.time()
    record = epilog.build_record(cfg, env, info, now, result)
    run_records.record_killed_attempt(cfg, env, info, record, now, result)
    return result


def _ends(run_dir: Path) -> list[dict]:
    return [e for e in map(json.loads, (run_dir / "attempts.jsonl").read_text().splitlines()) if e["event"] == "end"]


def test_a_killed_batch_script_gets_its_end_recorded_once_and_a_failed_message(tmp_path, receiver):
    port, posts = receiver
    run_dir = _run_dir(tmp_path, port, STARTED)
    now = time.time()
    done = JobInfo(91, state="COMPLETING", restarts=0, start_time=now - 30, end_time=now - 1, batch_host="n1")
    result = _epilog(tmp_path, done)
    assert any("recorded the end the killed batch script did not write: failed" in n for n in result.notes), \
        result.notes
    (end,) = _ends(run_dir)
    assert (end["outcome"], end["action"], end["exit_code"], end["recorded_by"]) == ("failed", "stop", 137, "epilog")
    assert end["last_step"] == 4 and "killed (signal 9)" in end["reason"]
    deadline = time.monotonic() + 60
    while not posts and time.monotonic() < deadline:
        time.sleep(0.2)
    (message,) = posts
    assert message["event"] == "failed" and message["run_id"] == RUN_ID and message["job_id"] == 91
    assert "exit code 137" in message["text"] and "killed (signal 9)" in message["text"]
    assert "sent to HOOK" in (run_dir / "logs" / "91.out").read_text().splitlines()[-1]
    # the epilog of another node of the job, or a second run of this one, records and sends nothing more
    _epilog(tmp_path, done)
    time.sleep(1)
    assert len(_ends(run_dir)) == 1 and len(posts) == 1


def test_a_requeued_attempt_another_node_or_a_recorded_end_is_left_alone(tmp_path, receiver):
    port, posts = receiver
    run_dir = _run_dir(tmp_path, port, STARTED)
    now = time.time()
    # `scontrol requeue`: the batch script was killed (0:15), Slurm already shows the next attempt
    requeued = JobInfo(91, state="COMPLETING", restarts=1, start_time=now + 40, end_time=now + 220, batch_host="n1")
    _epilog(tmp_path, requeued, {**ENV, "SLURM_JOB_RESTART_COUNT": "1", "SLURM_JOB_EXIT_CODE2": "0:15"})
    elsewhere = JobInfo(91, state="FAILED", restarts=0, start_time=now - 30, end_time=now - 1, batch_host="n2")
    _epilog(tmp_path, elsewhere)
    assert _ends(run_dir) == [] and posts == []
    # the batch script ran `end` itself: nothing to add
    stopped = {"event": "end", "job_id": 91, "restart_count": 0, "outcome": "failed", "action": "stop"}
    assert record_killed_end(_run_dir(tmp_path / "own", port, [*STARTED, stopped]), 91, 0, "FAILED", "1:0") is None
    # a job whose run never started, and a clean exit, neither
    assert record_killed_end(_run_dir(tmp_path / "never", port, STARTED[:1]), 91, 0, "FAILED", "0:9") is None
    assert record_killed_end(_run_dir(tmp_path / "fine", port, STARTED), 91, 0, "COMPLETED", "0:0") is None


def test_a_memory_killed_batch_step_and_a_cancel(tmp_path):
    run_dir = _run_dir(tmp_path, 9, STARTED)
    oom = record_killed_end(run_dir, 91, 0, "OUT_OF_MEMORY", "0:125")
    assert (oom["outcome"], oom["exit_code"], oom["slurm_state"]) == ("failed", 253, "OUT_OF_MEMORY")
    assert "memory limit" in oom["reason"]
    cancelled = record_killed_end(_run_dir(tmp_path / "c", 9, STARTED), 91, 0, "CANCELLED", "0:15")
    assert cancelled["outcome"] == "cancelled"  # quiet: the user asked for it (events.QUIET_STOPS)


def test_a_killed_batch_script_ends_its_mlflow_run_with_the_users_login(tmp_path):
    """The MLflow REST call the user's process makes (a real MLflow server gets the same call in
    tests/integration/test_notify_real.py): runs/update to KILLED, with the login from the user's file."""
    import base64

    import yaml

    calls, gets, status = [], [], ["RUNNING"]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's method name
            calls.append((self.path, self.headers.get("Authorization"),
                          json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def do_GET(self):  # noqa: N802 - runs/get: a run still RUNNING is ended, one ended already is left
            gets.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps({"run": {"info": {"status": status[0]}}}).encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}"
        login = tmp_path / "mlflow-login"
        login.write_text("MLFLOW_TRACKING_USERNAME=root\nMLFLOW_TRACKING_PASSWORD=pw\n")
        login.chmod(0o600)
        site = yaml.safe_load((Path(__file__).parents[2] / "deploy/local/site.yaml").read_text())
        # the test server is root's: a login goes only to a loopback port the configured account holds
        site["tracking"] = {"mlflow_uri": uri, "mlflow_credentials": str(login), "mlflow_server_user": "root"}
        (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
        run_dir = _run_dir(tmp_path, 9, STARTED)
        meta = json.loads((run_dir / "run.json").read_text())
        del meta["notify"]
        meta["tracking"] = {"backend": "mlflow", "uri": uri, "experiment_id": "3", "run_id": "abc123"}
        (run_dir / "run.json").write_text(json.dumps(meta))
        now = time.time()
        done = JobInfo(91, state="CANCELLED", restarts=0, start_time=now - 30, end_time=now - 1, batch_host="n1")
        _epilog(tmp_path, done, {**ENV, "SLURMCTL_SITE_CONFIG": str(tmp_path / "site.yaml")})
        deadline = time.monotonic() + 60
        while not calls and time.monotonic() < deadline:
            time.sleep(0.2)
        ((path, auth, body),) = calls
        assert path == "/api/2.0/mlflow/runs/update" and body["run_id"] == "abc123" and body["status"] == "KILLED"
        assert auth == "Basic " + base64.b64encode(b"root:pw").decode()
        assert "MLflow run abc123 marked KILLED" in (run_dir / "logs" / "91.out").read_text()
        assert gets and gets[0].startswith("/api/2.0/mlflow/runs/get?run_id=abc123")
        # a run ended already (the batch script's own end, or an earlier epilog): read, left as it is
        status[0] = "KILLED"
        (run_dir / "attempts.jsonl").write_text(json.dumps(_ends(run_dir)[0]) + "\n")
        _epilog(tmp_path, done, {**ENV, "SLURMCTL_SITE_CONFIG": str(tmp_path / "site.yaml")})
        deadline = time.monotonic() + 60
        while len(gets) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)
        assert len(gets) == 2 and len(calls) == 1
    finally:
        server.shutdown()
