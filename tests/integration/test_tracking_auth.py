"""The shared MLflow server is per-user safe: real HTTP, as the real users, against a server started by
deploy/local/mlflow-up (MLflow's basic-auth app) on a port of the test's own.

carol creates an experiment and a run through slurmctl's own submit code (her login from her 0600
file), logs a metric and uploads an artifact through the server. bob, with his own valid login,
is refused every read, write and delete of them (403); no login or a wrong password is 401; carol's
own calls all work. The artifact lands in the server's own state dir, written by the server, which runs as
the unprivileged slurmctl-mlflow account. bob cannot make the server touch files outside its store: an
experiment with an artifact location of his choosing is refused (REST and ajax-api), and so is every read,
list and upload of a run whose artifacts are a folder of his with a symlink in it (an experiment made
before the guard existed, put in the server's database directly); nor can he take `slurmctl-carol`.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO, User
from .tracking_services import credentials_name, mlflow_state, start_mlflow, stop_mlflow

# Run as a cluster user: each request of stdin's JSON list with the login from the file argv[2] ("-": none,
# "wrong": the file's user with a wrong password); prints [status, ...] per request.
PROBE = r'''
import base64, json, sys, urllib.error, urllib.request
from slurmctl.runtime.tracking import login_from_file
uri, how = sys.argv[1], sys.argv[2]
login = None if how == "-" else login_from_file(sys.argv[3])
if how == "wrong":
    login = (login[0], "not-" + login[1])
out = []
for r in json.load(sys.stdin):
    headers = {"Content-Type": "application/json"}
    if login:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
    data = json.dumps(r["body"]).encode() if r.get("body") is not None else r.get("data", "").encode() or None
    req = urllib.request.Request(uri + r["path"], data=data, method=r["method"], headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            out.append([resp.status, resp.read().decode(errors="replace")])
    except urllib.error.HTTPError as exc:
        out.append([exc.code, exc.read().decode(errors="replace")[:200]])
print(json.dumps(out))
'''

# As a cluster user: slurmctl's submit-time creation of a tracked run (argv: run id, user, tracking.project or "").
CREATE = r'''
import json, sys
from slurmctl.config.models import RunSpec, load_site_config
from slurmctl.errors import ConfigError
from slurmctl.submit.tracking import create_tracked_run
run_id, user, project = sys.argv[1:4]
spec = RunSpec.model_validate({"name": "secret-run", "entrypoint": "train.py", "partition": "h100-ondemand",
                               "tracking": {"backend": "mlflow", "project": project or None}})
try:
    print(json.dumps(create_tracked_run(spec, load_site_config(), run_id, user=user)))
except ConfigError as exc:
    print(json.dumps({"error": exc.message, "hint": exc.hint}))
'''


def create(server, user: str, run_id: str, project: str = "") -> dict:
    out = User(user).run([os.sys.executable, "-c", CREATE, run_id, user, project], check=True, timeout=180,
                         env={"PYTHONPATH": str(REPO), "SLURMCTL_SITE_CONFIG": str(server["site"])})
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def server():
    import yaml

    from slurmctl.config.locate import find_site_config

    state = mlflow_state("mlflow-auth")
    users = ("bob", "carol")
    uri = start_mlflow(state, users)
    folder = Path(f"/tmp/slurmctl-tracking-auth-{os.getpid()}")
    folder.mkdir(mode=0o755, exist_ok=True)
    site = yaml.safe_load(find_site_config().read_text())
    site["tracking"] = {"mlflow_uri": uri, "mlflow_credentials": "~/" + credentials_name(state)}
    (folder / "site.yaml").write_text(yaml.safe_dump(site))
    (folder / "site.yaml").chmod(0o644)
    yield {"uri": uri, "state": state, "site": folder / "site.yaml"}
    stop_mlflow(state, users)
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()


def calls(server, user: str, requests: list[dict], how: str = "own") -> list[list]:
    cred = f"~/{credentials_name(server['state'])}"
    out = User(user).run([os.sys.executable, "-c", PROBE, server["uri"], how, cred], check=True,
                         input=json.dumps(requests), env={"PYTHONPATH": str(REPO)}, timeout=180)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def carols_run(server):
    record = create(server, "carol", "secret-run-1")
    exp, run = record["experiment_id"], record["run_id"]
    art = f"/api/2.0/mlflow-artifacts/artifacts/{exp}/{run}/artifacts/notes.txt"
    done = calls(server, "carol", [
        {"method": "POST", "path": "/api/2.0/mlflow/runs/log-metric",
         "body": {"run_id": run, "key": "loss", "value": 0.5, "timestamp": 1, "step": 1}},
        {"method": "PUT", "path": art, "data": "carol's private notes"}])
    assert [c[0] for c in done] == [200, 200], done
    return {"experiment_id": exp, "run_id": run, "artifact": art}


def every_kind_of_access(run: dict) -> dict[str, dict]:
    exp, rid, art = run["experiment_id"], run["run_id"], run["artifact"]
    listing = f"/api/2.0/mlflow-artifacts/artifacts?path={exp}/{rid}/artifacts"
    return {
        "read run": {"method": "GET", "path": f"/api/2.0/mlflow/runs/get?run_id={rid}"},
        "read metric history": {"method": "GET",
                                "path": f"/api/2.0/mlflow/metrics/get-history?run_id={rid}&metric_key=loss"},
        "read experiment": {"method": "GET", "path": f"/api/2.0/mlflow/experiments/get?experiment_id={exp}"},
        "search runs": {"method": "POST", "path": "/api/2.0/mlflow/runs/search", "body": {"experiment_ids": [exp]}},
        "list artifacts": {"method": "GET", "path": listing},
        "download artifact": {"method": "GET", "path": art},
        "tag run": {"method": "POST", "path": "/api/2.0/mlflow/runs/set-tag",
                    "body": {"run_id": rid, "key": "owner", "value": "bob"}},
        "rename run": {"method": "POST", "path": "/api/2.0/mlflow/runs/update",
                       "body": {"run_id": rid, "run_name": "x"}},
        "log metric": {"method": "POST", "path": "/api/2.0/mlflow/runs/log-metric",
                       "body": {"run_id": rid, "key": "loss", "value": 9.0, "timestamp": 2, "step": 2}},
        "rename experiment": {"method": "POST", "path": "/api/2.0/mlflow/experiments/update",
                              "body": {"experiment_id": exp, "new_name": "taken"}},
        "overwrite artifact": {"method": "PUT", "path": art, "data": "bob was here"},
        "delete artifact": {"method": "DELETE", "path": art},
        "delete run": {"method": "POST", "path": "/api/2.0/mlflow/runs/delete", "body": {"run_id": rid}},
        "delete experiment": {"method": "POST", "path": "/api/2.0/mlflow/experiments/delete",
                              "body": {"experiment_id": exp}},
    }


def test_login_files_are_each_users_own_and_the_admin_secrets_root_only(server):
    for user in ("bob", "carol"):
        path = User(user).home / credentials_name(server["state"])
        st = path.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (User(user).uid, 0o600), path
        assert f"MLFLOW_TRACKING_USERNAME={user}\n" in path.read_text()
    for name in ("admin.password", "flask.secret", "users"):
        st = (server["state"] / name).stat()
        assert st.st_uid == 0 and not stat.S_IMODE(st.st_mode) & 0o077, name
    service = pwd.getpwnam("slurmctl-mlflow")
    ini = (server["state"] / "basic_auth.ini").stat()  # the server read it while it started; now only root can
    assert (ini.st_uid, ini.st_gid, stat.S_IMODE(ini.st_mode)) == (0, service.pw_gid, 0o600)
    read = subprocess.run(["setpriv", "--reuid=slurmctl-mlflow", "--regid=slurmctl-mlflow", "--init-groups",
                           "cat", str(server["state"] / "basic_auth.ini")], capture_output=True, text=True)
    assert read.returncode != 0 and "admin_password" not in read.stdout
    top = server["state"].stat()
    assert (top.st_uid, top.st_gid, stat.S_IMODE(top.st_mode)) == (0, service.pw_gid, 0o710)
    data = (server["state"] / "server").stat()
    assert (data.st_uid, stat.S_IMODE(data.st_mode)) == (service.pw_uid, 0o700)


def test_the_server_runs_as_its_own_unprivileged_account(server):
    pid = (server["state"] / "mlflow.pid").read_text().strip()
    group = subprocess.run(["ps", "-o", "user=", "--ppid", pid, "-p", pid], capture_output=True, text=True)
    assert set(group.stdout.split()) == {"slurmctl-mlflow"}, group.stdout
    assert pwd.getpwnam("slurmctl-mlflow").pw_shell.endswith("nologin")


def test_bob_is_refused_every_read_write_and_delete_of_carols_run(server, carols_run):
    access = every_kind_of_access(carols_run)
    answers = dict(zip(access, calls(server, "bob", list(access.values())), strict=True))
    searched = answers.pop("search runs")  # a search is filtered to what the caller may read: nothing here
    assert searched[0] == 200 and not json.loads(searched[1]).get("runs"), searched
    assert {what: status for what, (status, _) in answers.items()} == dict.fromkeys(answers, 403), answers
    # nothing bob tried changed carol's run: her view is as she left it
    (run, history, notes) = calls(server, "carol", [access["read run"], access["read metric history"],
                                                    access["download artifact"]])
    assert run[0] == 200 and json.loads(run[1])["run"]["info"]["run_name"] == "secret-run-1"
    assert "owner" not in {t["key"] for t in json.loads(run[1])["run"]["data"].get("tags", [])}
    assert [m["value"] for m in json.loads(history[1])["metrics"]] == [0.5]
    assert notes == [200, "carol's private notes"]


def test_no_login_or_a_wrong_password_is_401(server, carols_run):
    access = every_kind_of_access(carols_run)
    for how in ("-", "wrong"):
        statuses = [status for status, _ in calls(server, "bob", [access["read run"], access["delete run"]], how)]
        assert statuses == [401, 401], how


def test_artifacts_are_stored_by_the_server_in_its_root_only_state(server, carols_run):
    exp, rid = carols_run["experiment_id"], carols_run["run_id"]
    (experiment,) = calls(server, "carol", [{"method": "GET",
                                             "path": f"/api/2.0/mlflow/experiments/get?experiment_id={exp}"}])
    assert json.loads(experiment[1])["experiment"]["artifact_location"] == f"mlflow-artifacts:/{exp}"
    stored = server["state"] / "server" / "artifacts" / exp / rid / "artifacts"
    # the server wrote it, not carol's process
    assert stored.is_dir() and stored.stat().st_uid == pwd.getpwnam("slurmctl-mlflow").pw_uid


def test_carol_reads_writes_and_deletes_her_own_run(server, carols_run):
    access = every_kind_of_access(carols_run)
    order = ["read run", "read metric history", "read experiment", "search runs", "list artifacts",
             "download artifact", "tag run", "rename run", "log metric", "overwrite artifact", "delete artifact",
             "delete run"]
    answers = dict(zip(order, calls(server, "carol", [access[k] for k in order]), strict=True))
    assert {k: v[0] for k, v in answers.items()} == dict.fromkeys(order, 200), answers


def test_bobs_submit_into_carols_experiment_is_refused_and_his_own_works(server, carols_run):
    refused = create(server, "bob", "bob-run-1", "slurmctl-carol")
    assert "`slurmctl-carol` (run.yaml tracking.project)" in refused["error"], refused
    assert "reserved for the user `carol`" in refused["error"] and "Nothing was submitted" in refused["error"]
    own = create(server, "bob", "bob-run-2")
    assert own["backend"] == "mlflow" and own["experiment_id"] != carols_run["experiment_id"]


# As the server's account: an experiment whose artifacts are a folder of bob's, as the server's database would
# hold one created before the guard existed, and bob's MANAGE on it (argv: state dir, bob's folder).
OLD_EXPERIMENT = r'''
import sys
from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore as AuthStore
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
state, folder = sys.argv[1:3]
store = SqlAlchemyStore(f"sqlite:///{state}/server/mlflow.db", "mlflow-artifacts:/")
experiment = store.create_experiment("made-before-the-guard", artifact_location="file://" + folder)
run = store.create_run(experiment, "bob", 0, [], "old")
auth = AuthStore()
auth.init_db(f"sqlite:///{state}/server/basic_auth.db")
auth.create_experiment_permission(experiment, "bob", "MANAGE")
print(experiment, run.info.run_id)
'''


@pytest.fixture(scope="module")
def old_experiment(server):
    """An experiment of bob's whose artifacts are a folder of his (as the server's database would hold one
    created before the server refused that), with a run whose artifacts folder is a symlink to the server's
    state: {"folder", "experiment_id", "run_id"}."""
    folder = Path(f"/tmp/slurmctl-bob-artifacts-{os.getpid()}")
    User("bob").run(["mkdir", "-p", str(folder)], check=True)
    out = subprocess.run(["setpriv", "--reuid=slurmctl-mlflow", "--regid=slurmctl-mlflow", "--init-groups",
                          os.sys.executable, "-c", OLD_EXPERIMENT, str(server["state"]), str(folder)],
                         capture_output=True, text=True, check=True, timeout=120)
    experiment, run = out.stdout.split()
    User("bob").run(["sh", "-c", 'mkdir -p "$1" && ln -s "$2" "$1/artifacts"', "sh", f"{folder}/{run}",
                     str(server["state"] / "server")], check=True)
    yield {"folder": folder, "experiment_id": experiment, "run_id": run}
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def test_bob_cannot_point_the_server_at_a_folder_of_symlinks(server, carols_run, old_experiment):
    folder = old_experiment["folder"]
    created = calls(server, "bob", [
        {"method": "POST", "path": f"{api}/experiments/create",
         "body": {"name": f"mine-{n}", "artifact_location": location}}
        for n, (api, location) in enumerate([("/api/2.0/mlflow", f"file://{folder}"),
                                             ("/ajax-api/2.0/mlflow", f"file://{folder}"),
                                             ("/api/2.0/mlflow", str(folder))])])
    assert [status for status, _ in created] == [400, 400, 400], created
    assert all("takes no artifact_location" in body for _, body in created)
    # an old experiment of that kind: its run's artifacts folder a symlink to the server's state
    experiment, run = old_experiment["experiment_id"], old_experiment["run_id"]
    tried = calls(server, "bob", [
        {"method": "GET", "path": f"/get-artifact?run_id={run}&path=basic_auth.db"},
        {"method": "GET", "path": f"/get-artifact?run_uuid={run}&path=basic_auth.db"},
        {"method": "GET", "path": f"/api/2.0/mlflow/artifacts/list?run_id={run}"},
        {"method": "GET", "path": f"/ajax-api/2.0/mlflow/artifacts/list?run_uuid={run}"},
        {"method": "POST", "path": f"/ajax-api/2.0/mlflow/upload-artifact?run_uuid={run}&path=planted",
         "data": "bob was here"},
        {"method": "POST", "path": "/api/2.0/mlflow/runs/create", "body": {"experiment_id": experiment}},
        {"method": "POST", "path": "/graphql",
         "body": {"query": "query { mlflowListArtifacts(input: {runId: " + json.dumps(run)
                           + "}) { files { path } } }"}},
        {"method": "POST", "path": "/graphql",
         "body": {"query": "query Q($r: String) { mlflowListArtifacts(input: {runId: $r}) { files { path } } }",
                  "variables": {"r": run}}}])
    assert [status for status, _ in tried] == [403] * 8, tried
    assert not (server["state"] / "server" / "planted").exists()


def twice(body: dict) -> str:
    """The body as a JSON string holding the JSON object: MLflow's parser decodes it to the object."""
    return json.dumps(json.dumps(body))


def test_the_store_refuses_however_the_request_is_spelled(server, carols_run, old_experiment):
    """An independent attacker's requests that slipped past a check of the request's fields: the body JSON
    encoded twice, camelCase field names, the query string and the body naming different objects, a GraphQL
    run id spelled with a JSON escape. The tracking store refuses them all, whatever the spelling."""
    folder, experiment, run = (old_experiment[k] for k in ("folder", "experiment_id", "run_id"))
    decoy = {"run_id": "0" * 32}
    escaped = "\\u00" + format(ord(run[0]), "x") + run[1:]
    tried = calls(server, "bob", [
        {"method": "POST", "path": "/api/2.0/mlflow/experiments/create",
         "data": twice({"name": "twice", "artifact_location": f"file://{folder}"})},
        {"method": "POST", "path": "/api/2.0/mlflow/experiments/create",
         "body": {"name": "camel", "artifactLocation": f"file://{folder}"}},
        {"method": "POST", "path": "/api/2.0/mlflow/runs/create?experiment_ids=x",
         "body": {"experiment_id": experiment, "start_time": 1}},
        {"method": "GET", "path": f"/get-artifact?run_id={run}&path=basic_auth.db", "body": decoy},
        {"method": "GET", "path": f"/ajax-api/2.0/mlflow/artifacts/list?run_id={run}&path=", "body": decoy},
        {"method": "POST", "path": f"/ajax-api/2.0/mlflow/upload-artifact?run_uuid={run}&path=planted",
         "body": decoy},
        {"method": "POST", "path": "/api/2.0/mlflow/experiments/create",
         "data": twice({"name": "slurmctl-carol"})},
        {"method": "POST", "path": "/graphql",
         "data": '{"query": "query q($r: String!) { mlflowListArtifacts(input: {runId: $r, path: \\"\\"}) '
                 '{ files { path } } }", "variables": {"r": "' + escaped + '"}}'}])
    statuses = [status for status, _ in tried]
    assert statuses[:7] == [403] * 7, tried
    assert all("PERMISSION_DENIED" in body for _, body in tried[:7]), tried
    assert "takes no artifact_location" in tried[0][1] and "takes no artifact_location" in tried[1][1]
    assert "outside the server's store" in tried[2][1] and "reserved for the user `carol`" in tried[6][1]
    # GraphQL answers 200 with the field empty: the store refused the run, nothing was listed
    assert statuses[7] == 200 and json.loads(tried[7][1])["data"]["mlflowListArtifacts"] is None, tried[7]
    assert not (server["state"] / "server" / "planted").exists()
    assert sorted(p.name for p in folder.iterdir()) == [run]
    (found,) = calls(server, "bob", [{"method": "POST", "path": "/api/2.0/mlflow/experiments/search",
                                     "body": {"max_results": 1000}}])
    names = {e["name"]: e["artifact_location"] for e in json.loads(found[1]).get("experiments", [])}
    assert "twice" not in names and "camel" not in names, names


def test_nobody_takes_another_users_personal_experiment_name(server):
    squat = calls(server, "bob", [{"method": "POST", "path": "/api/2.0/mlflow/experiments/create",
                                   "body": {"name": "slurmctl-alice"}}])
    assert squat[0][0] == 403 and "reserved for the user `alice`" in squat[0][1], squat
    own = create(server, "bob", "bob-run-3")
    assert own["backend"] == "mlflow", own


def test_a_project_bob_created_and_shared_with_carol_does_not_take_her_runs(server):
    """bob creates carol's next project name and grants her EDIT (MLflow 3's grant API, which answers an
    owner): before, her submit filed its run into his experiment, where he read and deleted it."""
    made = calls(server, "bob", [{"method": "POST", "path": "/api/2.0/mlflow/experiments/create",
                                  "body": {"name": "carols-next-project"}}])
    experiment = json.loads(made[0][1])["experiment_id"]
    granted = calls(server, "bob", [
        {"method": "POST", "path": "/api/3.0/mlflow/users/permissions/grant",
         "body": {"username": "carol", "resource_type": "experiment", "resource_id": experiment,
                  "permission": "MANAGE"}},
        {"method": "POST", "path": "/api/2.0/mlflow/experiments/set-experiment-tag",
         "body": {"experiment_id": experiment, "key": "slurmctl.creator", "value": "carol"}}])
    assert granted[0][0] == 200 and granted[1][0] == 403, granted  # the grant works; the creator tag is the server's
    refused = create(server, "carol", "carol-hijack-1", "carols-next-project")
    assert "`carols-next-project` (run.yaml tracking.project) was created by another user" in \
        refused.get("error", ""), refused
    assert "nothing was submitted" in refused["error"]
    (runs,) = calls(server, "bob", [{"method": "POST", "path": "/api/2.0/mlflow/runs/search",
                                     "body": {"experiment_ids": [experiment]}}])
    assert json.loads(runs[1]).get("runs") is None, runs
    # her own project still works, and the server recorded her as its creator
    own = create(server, "carol", "carol-own-1", "carols-own-project")
    assert own["backend"] == "mlflow", own
    (got,) = calls(server, "carol", [{"method": "GET",
                                      "path": f"/api/2.0/mlflow/experiments/get?experiment_id={own['experiment_id']}"}])
    assert {"key": "slurmctl.creator", "value": "carol"} in json.loads(got[1])["experiment"]["tags"], got


def test_a_foreign_experiment_name_looks_missing(server, carols_run):
    lookups = calls(server, "bob", [
        {"method": "GET", "path": "/api/2.0/mlflow/experiments/get-by-name?experiment_name=slurmctl-carol"},
        {"method": "GET", "path": "/api/2.0/mlflow/experiments/get-by-name?experiment_name=slurmctl-nobody"}])
    assert lookups[0][0] == lookups[1][0] == 404, lookups
    assert lookups[0][1].replace("slurmctl-carol", "X") == lookups[1][1].replace("slurmctl-nobody", "X"), lookups


def test_routes_the_platform_does_not_use_are_refused_and_sources_stay_on_the_server(server):
    answers = calls(server, "bob", [
        {"method": "GET", "path": "/ajax-api/3.0/mlflow/gateway/supported-models"},
        {"method": "POST", "path": "/api/3.0/mlflow/gateway/endpoints/create", "body": {"name": "x"}},
        {"method": "POST", "path": "/gateway/x/mlflow/invocations", "body": {}},
        {"method": "POST", "path": "/api/3.0/mlflow/scorers/register", "body": {}},
        {"method": "POST", "path": "/api/2.0/mlflow/registered-models/create", "body": {"name": "bobs-model"}},
        {"method": "POST", "path": "/api/2.0/mlflow/model-versions/create",
         "body": {"name": "bobs-model", "source": "s3://bucket/model"}},
        {"method": "POST", "path": "/api/2.0/mlflow/model-versions/create",
         "body": {"name": "bobs-model", "source": "gs://bucket/model"}}])
    assert [a[0] for a in answers] == [404, 404, 404, 404, 200, 400, 400], answers


# As alice: register a prompt through MLflow's own client (argv: tracking URI).
PROMPT = r'''
import sys, mlflow
mlflow.set_tracking_uri(sys.argv[1])
version = mlflow.genai.register_prompt(name="carols-prompt", template="Summarise {{text}}.")
print(mlflow.genai.load_prompt(f"prompts:/carols-prompt/{version.version}").template)
'''


def test_a_prompt_registers(server):
    cred = Path(User("carol").home, credentials_name(server["state"]))
    from slurmctl.runtime.secrets import parse_secrets_file

    out = User("carol").run([os.sys.executable, "-c", PROMPT, server["uri"]], timeout=180,
                            env={"PYTHONPATH": str(REPO), **parse_secrets_file(cred)})
    assert out.returncode == 0 and "Summarise {{text}}." in out.stdout, out.stderr[-2000:]


# As bob: a server of his own on a free loopback port that records every Authorization header (argv: file).
SQUATTER = r'''
import http.server, socket, sys
seen = open(sys.argv[1], "a")
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        seen.write(repr(self.headers.get("Authorization")) + "\n"); seen.flush()
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"OK")
    do_GET = do_POST = do_PATCH = answer
    def log_message(self, *a): pass
server = http.server.HTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
'''


def test_a_squatter_on_the_port_gets_no_login(server, tmp_path):
    """bob holds a loopback port first: mlflow-up (the admin's and every user's password) and carol's submit
    refuse to send him anything. Before, mlflow-up took his /health answer for its server's."""
    import subprocess

    from .tracking_services import credentials_name as name_of

    seen = Path(f"/tmp/slurmctl-squat-{os.getpid()}.log")
    seen.write_text("")
    seen.chmod(0o666)
    squatter = subprocess.Popen(User("bob").argv([os.sys.executable, "-c", SQUATTER, str(seen)]),
                                stdout=subprocess.PIPE, text=True)
    try:
        port = int(squatter.stdout.readline())
        state = tmp_path / "state"
        state.mkdir()
        out = subprocess.run([str(REPO / "deploy/local/mlflow-up"), str(state), str(port), "carol"],
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "SLURMCTL_MLFLOW": str(Path(os.sys.executable).parent / "mlflow"),
                                  "SLURMCTL_MLFLOW_CREDENTIALS_NAME": name_of(state)})
        assert out.returncode != 0 and f"127.0.0.1:{port} is held by bob" in out.stderr, out.stderr
        site = Path(server["site"]).read_text().replace(server["uri"], f"http://127.0.0.1:{port}")
        squat_site = Path(server["site"]).with_name("squat-site.yaml")
        squat_site.write_text(site)
        squat_site.chmod(0o644)
        refused = create({**server, "site": squat_site}, "carol", "carol-squat-1")
        assert "is held by `bob`, not by the MLflow server's account" in refused.get("error", ""), refused
        assert seen.read_text() == "", seen.read_text()  # nothing at all reached bob's server
    finally:
        squatter.kill()
        squatter.wait()
        seen.unlink()
        Path(server["site"]).with_name("squat-site.yaml").unlink(missing_ok=True)
        Path(User("carol").home, name_of(tmp_path / "state")).unlink(missing_ok=True)  # had the old code written it
