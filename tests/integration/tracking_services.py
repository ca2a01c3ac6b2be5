"""Real services for the tracking and notification tests, run by the test process on 127.0.0.1.

* ``start_mlflow``: deploy/local/mlflow-up on a free port with a state dir of its own (SQLite,
  artifacts through the server, MLflow's authentication with a login per test user written to a file
  of the test's own), stopped afterwards. Never the cluster's own server or login files.
* ``MailBox``: aiosmtpd's SMTP server; every message it receives, parsed.
* ``HookReceiver``: a loopback HTTP server that keeps every POST (path, headers, body): the Slack-
  compatible incoming webhook (apprise's mmost://, which posts Slack's {"text": ...}) and the signed
  generic webhook.
* ``wandb_records``: the history records of W&B's offline run files (the .wandb files are LevelDB-log
  framed protobuf ``Record`` messages; wandb 0.31 ships no Python reader, its core is Go).
"""

from __future__ import annotations

import email
import email.policy
import http.server
import json
import os
import pwd
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}


def job_state(job_id: int) -> str:
    """The job's state from the controller (sacct once it forgot it), read as bytes: other tests' jobs may
    carry any byte in their names, and this read must not depend on them."""
    out = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, timeout=30)
    for word in out.stdout.decode(errors="replace").split():
        if word.startswith("JobState="):
            return word.split("=", 1)[1]
    out = subprocess.run(["sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State"], capture_output=True,
                         timeout=30)
    states = out.stdout.decode(errors="replace").split()
    return states[-1].split(" ")[0] if states else "UNKNOWN"


def wait_job_state(job_id: int, states: set[str], timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = job_state(job_id)
        if state in states:
            return state
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not reach {states} in {timeout} s (last: {state})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def credentials_name(state: Path) -> str:
    """Where (under each user's home) this server's logins go: never the cluster server's own file."""
    return f".config/slurmctl/mlflow-test-{state.name}"


def mlflow_state(name: str) -> Path:
    """A state dir for a test server under /tmp: the server's account (slurmctl-mlflow) must pass through
    every folder above it, which pytest's root-only tmp folders do not allow."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"slurmctl-{name}-"))


def start_mlflow(state: Path, users: tuple[str, ...] = ("alice",)) -> str:
    """The server with authentication; each of `users` gets a login in ~/credentials_name(state) (site.yaml
    tracking.mlflow_credentials: "~/" + that)."""
    port = free_port()
    env = {**os.environ, "SLURMCTL_MLFLOW": str(Path(os.sys.executable).parent / "mlflow"),
           "SLURMCTL_MLFLOW_CREDENTIALS_NAME": credentials_name(state)}
    out = subprocess.run([str(REPO / "deploy/local/mlflow-up"), str(state), str(port), *users], capture_output=True,
                         text=True, timeout=400, env=env)
    if out.returncode != 0:
        raise AssertionError(f"mlflow-up failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout.strip()


def login_of(state: Path, user: str) -> dict[str, str]:
    """`user`'s MLFLOW_TRACKING_USERNAME/PASSWORD on the test server (read by the test, as root)."""
    from slurmctl.runtime.secrets import parse_secrets_file

    return parse_secrets_file(Path(pwd.getpwnam(user).pw_dir, credentials_name(state)))


def stop_mlflow(state: Path, users: tuple[str, ...] = ("alice",)) -> None:
    import shutil

    subprocess.run([str(REPO / "deploy/local/mlflow-up"), "--stop", str(state)], timeout=60)
    shutil.rmtree(state, ignore_errors=True)
    for user in users:
        Path(pwd.getpwnam(user).pw_dir, credentials_name(state)).unlink(missing_ok=True)


@dataclass
class MailBox:
    messages: list = field(default_factory=list)
    port: int = 0

    def start(self) -> MailBox:
        from aiosmtpd.controller import Controller

        box = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook name
                box.messages.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
                return "250 OK"

        self.port = free_port()
        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def about(self, run_id: str) -> list:
        return [m for m in self.messages if run_id in str(m["Subject"])]


@dataclass
class HookReceiver:
    posts: list = field(default_factory=list)
    port: int = 0

    def start(self) -> HookReceiver:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's method name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.posts.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()

    def about(self, run_id: str, path: str) -> list[dict]:
        found = []
        for post in self.posts:
            if post["path"] != path:
                continue
            data = json.loads(post["body"])
            if run_id in json.dumps(data):
                found.append({**post, "json": data})
        return found


def _wandb_file_records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    ident, _magic, _version = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B", f"{path} is not a W&B run file"
    block, pos, buf, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (2, 3):
            continue
        record = pb.Record()
        record.ParseFromString(buf)
        out.append(record)
    return out


def wandb_runs(run_dir: Path) -> list[dict]:
    """One dict per offline run directory (one per attempt), oldest first: its run id and history rows."""
    runs = []
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        run_id, history = None, []
        for record in _wandb_file_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run_id = record.run.run_id
            elif kind == "history":
                history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in record.history.item})
        runs.append({"file": str(path), "run_id": run_id, "history": history})
    return runs
