"""Who holds a loopback port, in the kernel's view, and the MLflow login that goes only to the server's
account: real sockets, a real listener of this test's own standing in for a squatter."""

from __future__ import annotations

import http.server
import os
import pwd
import socket
import threading

import pytest

from slurmctl.runtime.tracking import UntrustedServer, check_server_owner, mlflow_call
from slurmctl.sockowner import is_loopback, listener_uid


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_listener_uid_is_the_owner_of_the_listening_socket_and_none_when_free():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert listener_uid("127.0.0.1", port) == os.getuid()
    assert listener_uid("127.0.0.1", _free_port()) is None


def test_a_wildcard_listener_counts_for_loopback():
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        assert listener_uid("127.0.0.1", listener.getsockname()[1]) == os.getuid()


def test_loopback_names():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("127.3.4.5")
    assert not is_loopback("mlflow.example.com") and not is_loopback("10.0.0.1")


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        _Recorder.seen.append(self.headers.get("Authorization"))
        body = b'{"experiment": {"experiment_id": "1"}}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def squatter():
    """A server on a loopback port held by this test's account (not the MLflow server's)."""
    _Recorder.seen = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_login_is_never_sent_to_a_port_another_account_holds(squatter):
    other = "nobody" if pwd.getpwuid(os.getuid()).pw_name != "nobody" else "root"
    with pytest.raises(UntrustedServer, match="not by the MLflow server's account"):
        mlflow_call(squatter, "GET", "experiments/get-by-name", query={"experiment_name": "x"},
                    login=("alice", "secret"), server_user=other)
    assert _Recorder.seen == []  # nothing reached the squatter, not even a request line


def test_the_servers_own_account_gets_the_login(squatter):
    me = pwd.getpwuid(os.getuid()).pw_name
    assert mlflow_call(squatter, "GET", "experiments/get-by-name", query={"experiment_name": "x"},
                       login=("alice", "secret"), server_user=me)["experiment"]["experiment_id"] == "1"
    assert _Recorder.seen and _Recorder.seen[0].startswith("Basic ")


def test_a_down_server_and_an_unknown_account_are_refused_before_sending():
    with pytest.raises(UntrustedServer, match="nothing listens"):
        check_server_owner(f"http://127.0.0.1:{_free_port()}", pwd.getpwuid(os.getuid()).pw_name)
    with pytest.raises(UntrustedServer, match="does not exist"):
        check_server_owner("http://127.0.0.1:1", "no-such-account-here")
    check_server_owner("https://mlflow.example.com", "no-such-account-here")  # another machine: not checked here
    check_server_owner("http://127.0.0.1:1", None)  # the site turned the check off


def test_the_jobs_tracker_sends_no_step_to_a_squatter(squatter, tmp_path, capsys):
    from slurmctl.runtime.tracking import SERVER_USER_ENV, TrackerBridge

    other = "nobody" if pwd.getpwuid(os.getuid()).pw_name != "nobody" else "root"
    bridge = TrackerBridge(tmp_path, "mlflow", env={
        "MLFLOW_TRACKING_URI": squatter, "MLFLOW_RUN_ID": "0123", "MLFLOW_TRACKING_USERNAME": "alice",
        "MLFLOW_TRACKING_PASSWORD": "secret", SERVER_USER_ENV: other})
    bridge.log(1, {"loss": 1.0})
    assert bridge.failed and _Recorder.seen == []
    assert "not by the MLflow server's account" in capsys.readouterr().err
