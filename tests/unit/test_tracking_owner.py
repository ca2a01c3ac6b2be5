"""Submit files runs only into an experiment the submitting user created (the server's creator tag):
a colleague's experiment that grants you EDIT, or even MANAGE, is refused. The real server's tag and
the end-to-end refusal: tests/integration/test_tracking_auth.py."""

from __future__ import annotations

import http.server
import json
import os
import pwd
import threading

import pytest

from slurmctl.errors import ConfigError
from slurmctl.submit.tracking import CREATOR_TAG, _experiment_id, owns_experiment


def experiment(creator: str | None, experiment_id: str = "30") -> dict:
    tags = [{"key": CREATOR_TAG, "value": creator}] if creator else []
    return {"experiment_id": experiment_id, "name": "resnet", "tags": tags}


def test_ownership_is_the_servers_creator_tag():
    assert owns_experiment(experiment("alice"), "resnet", "alice")
    assert not owns_experiment(experiment("bob"), "resnet", "alice")
    # from before the server set the tag: only the reserved personal experiment counts as one's own
    assert not owns_experiment(experiment(None), "resnet", "alice")
    assert owns_experiment(experiment(None), "slurmctl-alice", "alice")
    assert not owns_experiment(experiment(None), "slurmctl-bob", "alice")


@pytest.fixture
def server_with(request):
    """A loopback MLflow stand-in of this test's account whose get-by-name answers `request.param`'s experiment."""
    answer = experiment(request.param)
    created = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self._reply(200, {"experiment": answer})

        def do_POST(self):  # noqa: N802
            created.append(self.path)
            self._reply(400, {"error_code": "RESOURCE_ALREADY_EXISTS", "message": "exists"})

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", created
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("server_with", ["bob"], indirect=True)
def test_a_colleagues_experiment_that_granted_you_access_is_refused(server_with):
    uri, created = server_with
    me = pwd.getpwuid(os.getuid()).pw_name
    with pytest.raises(ConfigError) as refused:
        _experiment_id(uri, "resnet", ("alice", "pw"), server_user=me)
    assert "tracking.project" in refused.value.message and "created by another user" in refused.value.message
    assert created == []


@pytest.mark.parametrize("server_with", ["alice"], indirect=True)
def test_your_own_experiment_is_used(server_with):
    uri, _ = server_with
    assert _experiment_id(uri, "resnet", ("alice", "pw"), server_user=pwd.getpwuid(os.getuid()).pw_name) == "30"
