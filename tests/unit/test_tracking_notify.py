"""Tracked-run labelling, the job script's tracking lines, and notification delivery (dedup, rate limit,
signing) against a real loopback receiver. The cluster-level scenarios are tests/integration/
test_tracking_real.py and test_notify_real.py."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurmctl.config.models import NotifySpec, RunSpec
from slurmctl.notify import events
from slurmctl.notify.channels import SIGNATURE_HEADER, TIMESTAMP_HEADER, Channel, resolve_channels, sign, verify
from slurmctl.notify.journal import Message, deliver
from slurmctl.runtime.tracking import attempt_number, highest_logged_step, metric_key
from slurmctl.submit.render import render


def _jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_attempts_count_slurm_starts_and_in_allocation_restarts_since_the_last_submission(tmp_path):
    _jsonl(tmp_path / "attempts.jsonl", [
        {"event": "submitted"}, {"event": "start"}, {"event": "end"},
        {"event": "submitted"}, {"event": "start"}, {"event": "step-restart"}, {"event": "end"}, {"event": "start"}])
    assert attempt_number(tmp_path) == 3
    assert attempt_number(tmp_path / "none") == 1


def test_steps_at_or_below_the_highest_logged_are_resumed_lines(tmp_path):
    assert highest_logged_step(tmp_path) is None
    _jsonl(tmp_path / "metrics.jsonl", [{"step": s, "loss": 1.0} for s in (0, 1, 2, 3, 1, 2)])
    high = highest_logged_step(tmp_path)
    assert high == 3
    assert [metric_key("loss", s, high, 2) for s in (2, 3, 4)] == [
        "loss/resumed-attempt-2", "loss/resumed-attempt-2", "loss"]
    assert metric_key("loss", 0, None, 1) == "loss"


def _context(**overrides) -> dict:
    spec = RunSpec.model_validate({"name": "t", "entrypoint": "train.py", "partition": "p",
                                   "tracking": {"backend": "mlflow", "project": "exp one"}})
    context = {
        "run_id": "t-20261201-abcd", "run_dir": "/runs/t-20261201-abcd", "workdir": "/w", "partitions": ["p"],
        "qos": None, "account": None, "nodes": 1, "job_log": "/runs/t-20261201-abcd/logs/%j.out",
        "gpus_per_node": 1, "gpu_type": "h100", "cpus_per_task": 2,
        "time_limit": "00:10:00", "drain_margin": 60, "python": "python3", "nprocs_per_node": 1,
        "entrypoint": "train.py", "args": [], "env": {}, "nccl_env": {}, "tracking": spec.tracking,
        "tracking_uri": "http://127.0.0.1:5050", "tracked_run_id": "0123abcd", "notify": True, "secrets": [],
        "secrets_file": "/s", "checkpoint_dir": "/c", "checkpoint_interval": 10, "checkpoint_keep": 2, "umask": "077",
        "image": None, "container_runtime": "none", "enroot_image": None, "container_mounts": [],
        "container_workdir": None, "container_env": [], "podman": "podman", "mlflow_credentials_file": "",
        "datasets": [], "stage_data": False, "wandb_mode": "", "mlflow_server_user": "slurmctl-mlflow"}
    context.update(overrides)
    return context


def test_job_script_exports_the_tracked_run_and_sends_as_the_user(tmp_path):
    script = render("torchrun.sbatch.j2", _context())
    assert "export MLFLOW_RUN_ID=0123abcd\n" in script
    assert "export MLFLOW_TRACKING_URI=http://127.0.0.1:5050\n" in script
    assert "export SLURMCTL_MLFLOW_SERVER_USER=slurmctl-mlflow\n" in script  # whose port gets the login
    assert "export MLFLOW_EXPERIMENT_NAME='exp one'\n" in script
    assert '"$PY" -m slurmctl.runtime.tracking end\n' in script
    assert '"$PY" -m slurmctl.notify started &' in script and 'timeout 60 "$PY" -m slurmctl.notify ended' in script
    (tmp_path / "job.sbatch").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], check=True)
    quiet = render("torchrun.sbatch.j2", _context(notify=False, tracked_run_id=""))
    assert "slurmctl.notify" not in quiet and "MLFLOW_RUN_ID" not in quiet


def test_job_script_exports_the_mlflow_login_from_the_users_file_never_the_password(tmp_path):
    login = tmp_path / "mlflow"
    login.write_text("MLFLOW_TRACKING_USERNAME=alice\nMLFLOW_TRACKING_PASSWORD=pw-9f8e7d\n")
    login.chmod(0o600)
    script = render("torchrun.sbatch.j2", _context(mlflow_credentials_file=str(login)))
    assert "pw-9f8e7d" not in script and str(login) in script
    start, end = script.index("mlflow_login="), script.index("unset mlflow_login")
    fragment = f"PY={sys.executable}\n{script[start:end]}\necho \"$MLFLOW_TRACKING_USERNAME:$MLFLOW_TRACKING_PASSWORD\""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(["bash", "-c", fragment], capture_output=True, text=True, env=env, check=True)
    assert out.stdout == "alice:pw-9f8e7d\n"
    login.chmod(0o644)  # readable by others: refused, the attempt goes on untracked
    out = subprocess.run(["bash", "-c", fragment], capture_output=True, text=True, env=env, check=True)
    assert out.stdout == ":\n" and "no MLflow login" in out.stderr and "pw-9f8e7d" not in out.stderr
    assert "mlflow_login" not in render("torchrun.sbatch.j2", _context())


def test_notify_settings_name_secret_keys_never_urls():
    with pytest.raises(ValueError, match="secrets-file key"):
        NotifySpec.model_validate({"channels": ["https://hooks.slack.com/services/T/B/X"]})
    assert NotifySpec.model_validate({"channels": ["SLACK"]}).events[0] == "started"


def test_signature_verifies_and_refuses_tampering_other_secrets_and_old_timestamps():
    body, now = b'{"event": "failed"}', time.time()
    signature = sign("s3", str(int(now)), body)
    assert verify("s3", str(int(now)), body, signature, now=now)
    assert not verify("s4", str(int(now)), body, signature, now=now)
    assert not verify("s3", str(int(now)), body + b" ", signature, now=now)
    assert not verify("s3", str(int(now)), body, signature, now=now + 3600)


@pytest.fixture
def receiver():
    posts = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's method name
            posts.append((self.path, dict(self.headers), self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], posts
    server.shutdown()


def _secrets(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "secrets.env"
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


def test_deliver_signs_dedups_rate_limits_and_journals_no_url(tmp_path, receiver):
    port, posts = receiver
    secrets = _secrets(tmp_path, f"HOOK=signed+http://127.0.0.1:{port}/in?secret=abc\n")
    settings = {"channels": ["HOOK", "MISSING"], "events": ["started", "failed"], "max_per_hour": 2}
    first = deliver(tmp_path, "r-20261201-abcd", settings, Message("started", "started:1", "t", "b"), secrets)
    assert first["sent"]
    assert [c["error"] for c in first["channels"]] == [None, f"channel MISSING: no MISSING=URL in {secrets}"]
    path, headers, body = posts[0]
    assert path == "/in" and json.loads(body)["event"] == "started"
    assert verify("abc", headers[TIMESTAMP_HEADER], body, headers[SIGNATURE_HEADER])
    assert deliver(tmp_path, "r-20261201-abcd", settings, Message("started", "started:1", "t", "b"), secrets) is None
    assert deliver(tmp_path, "r-20261201-abcd", settings, Message("finished", "finished:1", "t", "b"), secrets) is None
    deliver(tmp_path, "r-20261201-abcd", settings, Message("failed", "failed:1", "t", "b"), secrets)
    limited = deliver(tmp_path, "r-20261201-abcd", settings, Message("failed", "failed:2", "t", "b"), secrets)
    assert limited["sent"] is False and "rate limit" in limited["suppressed"]
    assert len(posts) == 2
    journal = (tmp_path / "notifications.jsonl").read_text()
    assert "abc" not in journal and "127.0.0.1" not in journal


def test_channels_come_only_from_a_private_secrets_file(tmp_path):
    path = _secrets(tmp_path, "EMAIL=mailto://x\n")
    assert resolve_channels(["EMAIL"], path)[0] == [Channel("EMAIL", "mailto://x")]
    os.chmod(path, 0o644)
    channels, problems = resolve_channels(["EMAIL"], path)
    assert channels == [] and "readable by others" in problems[0]


def _run(tmp_path: Path, records: list[dict]):
    run_dir = tmp_path / "r-20261201-abcd"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_dir.name}))
    _jsonl(run_dir / "attempts.jsonl", records)
    return events.run_at(run_dir)


def test_a_preemption_and_its_recovery_are_one_message_and_a_requeue_says_nothing(tmp_path):
    run = _run(tmp_path, [
        {"event": "submitted", "job_id": 7}, {"event": "start", "job_id": 7, "restart_count": 0, "time": 1.0},
        {"event": "end", "job_id": 7, "restart_count": 0, "outcome": "preemption", "action": "requeue",
         "last_step": 19, "steps_lost": 0, "time": 50.0},
        {"event": "start", "job_id": 7, "restart_count": 1, "resume_step": 19, "time": 80.0}])
    assert events.ended_message(run) is None  # the requeue itself
    message = events.started_message(run)
    assert message.event == "recovered" and message.key == "recovered:7:1"
    assert "preempted at step 19" in message.body and "no step was lost" in message.body


def test_a_failure_message_names_category_evidence_checkpoint_and_next_command(tmp_path):
    run = _run(tmp_path, [
        {"event": "submitted", "job_id": 9}, {"event": "start", "job_id": 9, "restart_count": 0, "time": 1.0},
        {"event": "end", "job_id": 9, "restart_count": 0, "outcome": "failed", "action": "stop", "exit_code": 1,
         "checkpoint_step": 4, "reason": "two failures in a row", "time": 9.0}])
    (run.path / "logs" / "9.out").write_text("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to "
                                             "allocate 2.00 GiB\n")
    message = events.ended_message(run)
    assert message.event == "failed" and message.fields["category"] == "cuda_oom"
    assert "CUDA out of memory" in message.fields["evidence"]
    assert message.fields["next_command"] == f"slurmctl resume {run.run_id}"
    assert "Last valid checkpoint: step 4" in message.body


def test_a_cancel_sends_no_end_message(tmp_path):
    run = _run(tmp_path, [
        {"event": "submitted", "job_id": 3}, {"event": "start", "job_id": 3, "restart_count": 0, "time": 1.0},
        {"event": "end", "job_id": 3, "restart_count": 0, "outcome": "cancelled", "action": "stop", "time": 2.0}])
    assert events.ended_message(run) is None


def test_a_stopped_job_marks_its_mlflow_run_and_a_requeue_does_not(tmp_path, receiver):
    from slurmctl.runtime.tracking import end_mlflow_run

    port, posts = receiver
    env = {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}", "MLFLOW_RUN_ID": "r1"}
    _jsonl(tmp_path / "attempts.jsonl", [{"event": "end", "action": "requeue", "outcome": "preemption", "time": 5}])
    assert end_mlflow_run(tmp_path, env) is None and posts == []
    _jsonl(tmp_path / "attempts.jsonl", [{"event": "end", "action": "stop", "outcome": "failed", "time": 7}])
    assert end_mlflow_run(tmp_path, env) == "FAILED"
    path, _headers, body = posts[0]
    assert path == "/api/2.0/mlflow/runs/update"
    assert json.loads(body) == {"run_id": "r1", "status": "FAILED", "end_time": 7000}


def test_a_normal_finish_says_no_step_was_re_run(tmp_path):
    # the final end's steps_lost (steps past the newest checkpoint) were never run again
    run = _run(tmp_path, [
        {"event": "submitted", "job_id": 5}, {"event": "start", "job_id": 5, "restart_count": 0, "time": 1.0},
        {"event": "end", "job_id": 5, "restart_count": 0, "outcome": "completed", "action": "stop", "exit_code": 0,
         "last_step": 23, "checkpoint_step": 13, "steps_lost": 10, "time": 9.0}])
    message = events.ended_message(run)
    assert message.event == "finished" and "Efficiency: One attempt, no step re-run." in message.body
    assert "re-run after" not in message.body
    # a drained requeue lost nothing, the finish neither: two attempts, nothing re-run
    run = _run(tmp_path / "two", [
        {"event": "submitted", "job_id": 6}, {"event": "start", "job_id": 6, "restart_count": 0, "time": 1.0},
        {"event": "end", "job_id": 6, "restart_count": 0, "outcome": "preemption", "action": "requeue",
         "last_step": 9, "checkpoint_step": 9, "steps_lost": 0, "time": 5.0},
        {"event": "start", "job_id": 6, "restart_count": 1, "resume_step": 9, "time": 6.0},
        {"event": "end", "job_id": 6, "restart_count": 1, "outcome": "completed", "action": "stop", "exit_code": 0,
         "last_step": 23, "checkpoint_step": 19, "steps_lost": 4, "time": 9.0}])
    assert "2 Slurm attempt(s), 0 restart(s) inside an allocation, no step re-run." in events.ended_message(run).body
    # a crash restarted from an older checkpoint re-ran what it lost
    run = _run(tmp_path / "three", [
        {"event": "submitted", "job_id": 8}, {"event": "start", "job_id": 8, "restart_count": 0, "time": 1.0},
        {"event": "step-restart", "job_id": 8, "outcome": "failed", "last_step": 7, "checkpoint_step": 4,
         "steps_lost": 3, "time": 3.0},
        {"event": "end", "job_id": 8, "restart_count": 0, "outcome": "completed", "action": "stop", "exit_code": 0,
         "last_step": 23, "checkpoint_step": 19, "steps_lost": 4, "time": 9.0}])
    assert "1 restart(s) inside an allocation, 3 step(s) re-run" in events.ended_message(run).body


def test_a_failure_message_shows_the_exception_line_of_a_real_traceback_and_names_the_run(tmp_path):
    run = _run(tmp_path, [
        {"event": "submitted", "job_id": 11}, {"event": "start", "job_id": 11, "restart_count": 0, "time": 1.0},
        {"event": "end", "job_id": 11, "restart_count": 0, "outcome": "failed", "action": "stop", "exit_code": 1,
         "checkpoint_step": None, "reason": "no checkpoint to restart from", "time": 9.0}])
    train = tmp_path / "train.py"
    train.write_text("def step(lr):\n    if lr < 0:\n        raise ValueError(f'bad learning rate: {lr}')\n"
                     "step(0.1)\nstep(-1)\n")
    with open(run.path / "logs" / "11.out", "w") as log:  # a real interpreter's traceback, as the job logs it
        subprocess.run([sys.executable, str(train)], stdout=log, stderr=subprocess.STDOUT, check=False)
    assert (run.path / "logs" / "11.out").read_text().startswith("Traceback (most recent call last):")
    message = events.ended_message(run)
    assert message.fields["evidence"] == "ValueError: bad learning rate: -1"
    assert "Evidence: ValueError: bad learning rate: -1\n" in message.body
    assert "Traceback" not in message.body
    assert not re.search(r"\bRUN\b|\bJOB\b", message.body), message.body  # placeholders filled in
    assert f"slurmctl logs {run.run_id} " in message.body.split("Fix:", 1)[1], message.body


def test_a_plain_requeue_after_a_recovered_preemption_sends_no_second_recovered(tmp_path):
    run = _run(tmp_path, [
        {"event": "submitted", "job_id": 7}, {"event": "start", "job_id": 7, "restart_count": 0, "time": 1.0},
        {"event": "end", "job_id": 7, "restart_count": 0, "outcome": "preemption", "action": "requeue",
         "last_step": 19, "steps_lost": 0, "time": 50.0},
        {"event": "start", "job_id": 7, "restart_count": 1, "resume_step": 19, "time": 80.0},
        # `scontrol requeue`: the batch script is killed before `attempt end`, no end record
        {"event": "start", "job_id": 7, "restart_count": 2, "resume_step": 24, "time": 120.0}])
    assert events.started_message(run) is None
