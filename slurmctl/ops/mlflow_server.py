"""The cluster MLflow server's app (`mlflow server --app-name slurmctl-auth`, deploy/local/mlflow-up):
MLflow's basic-auth app, plus a guard that keeps every artifact inside the server's own store.

The server reads and writes artifacts, with its own rights, wherever an experiment's artifact_location
points, and MLflow accepts any location a client names at experiments/create (`file:///home/bob/x`).
A user who owns that folder can then plant symlinks in it and have the server read or write any file
the server can reach. MLflow 3 has no server option that limits client-chosen locations, so here:

* experiments/create with an artifact_location is refused: experiments get the server's proxied
  store (`mlflow-artifacts:`, --artifacts-destination) and nothing else;
* a request naming a run, experiment, logged model, model version or trace whose artifacts live
  outside that store (one created before this guard) is refused;
  (the tracking store, slurmctl/ops/mlflow_store.py, enforces the first two again however a request is
  spelled: this guard answers the spellings it knows with a clear reason, the store refuses the rest;
  the model registry is MLflow's own store, so a model version's source is checked only here)
* a model version's source must be on this server (mlflow-artifacts:, runs:, models:): a local path
  would be read by the server, a cloud URI (s3://, gs://, ...) fetched with whatever identity the
  server's host has; a prompt's version carries MLflow's own placeholder source, which MLflow checks;
* the experiment name `slurmctl-<user>` (each user's default, slurmctl/submit/tracking.py) may be
  created or taken by a rename only by that user, so nobody can squat a colleague's experiment;
* every new experiment gets the tag CREATOR_TAG = the login that created it, set by the server; no
  client may set or delete that tag. A user can grant a colleague access to an experiment (MANAGE
  included), but cannot make it theirs: `slurmctl submit` files runs only into an experiment whose
  creator is the submitting user;
* experiments/get-by-name of an experiment the caller may not read answers as for a missing one, so
  the name lookup is no oracle of other users' experiment names (experiments/create still answers
  RESOURCE_ALREADY_EXISTS for a taken name: the namespace is global).

The guard runs after MLflow's authentication (a request without a valid login is 401 before it looks);
the admin is not exempt from the artifact rules.
"""

from __future__ import annotations

import json

PROXIED = "mlflow-artifacts:"
PERSONAL_PREFIX = "slurmctl-"
CREATOR_TAG = "slurmctl.creator"
MODEL_SOURCE_SCHEMES = ("mlflow-artifacts:", "runs:", "models:")
PROMPT_TAG = "mlflow.prompt.is_prompt"


def _refuse(message: str, status: int = 400):
    from flask import Response

    mlflow_code = "INVALID_PARAMETER_VALUE" if status == 400 else "PERMISSION_DENIED"
    return Response(json.dumps({"error_code": mlflow_code, "message": message}), status=status,
                    mimetype="application/json")


def _fields() -> dict:
    """The request's parameters: query string and JSON body together."""
    from flask import request

    fields = dict(request.args.items())
    if request.is_json:
        body = request.get_json(silent=True)
        if isinstance(body, dict):
            fields.update(body)
    return fields


def _outside_store(location: str | None) -> bool:
    return bool(location) and not str(location).startswith(PROXIED)


def _outside_message(what: str, location: str | None) -> str:
    return (f"this {what}'s artifacts are outside the server's store ({location}); the server does not serve "
            "them. Create a new experiment without an artifact_location.")


def _stored_location(fields: dict, path: str) -> tuple[str, str | None] | None:
    """(what, artifact location) of the object the request names, for the first one it names; None when none."""
    from mlflow.exceptions import MlflowException
    from mlflow.server.handlers import _get_model_registry_store, _get_tracking_store

    store = _get_tracking_store()
    try:
        run_id = fields.get("run_id") or fields.get("run_uuid")
        if run_id and isinstance(run_id, str):
            return "run", store.get_run(run_id).info.artifact_uri
        if "/logged-models/" in path:
            model_id = path.split("/logged-models/", 1)[1].split("/", 1)[0]
            if model_id and model_id != "search":
                return "logged model", store.get_logged_model(model_id).artifact_location
        experiment_ids = fields.get("experiment_ids") or [fields.get("experiment_id")]
        for experiment_id in experiment_ids if isinstance(experiment_ids, list) else []:
            if experiment_id and isinstance(experiment_id, str | int):
                location = store.get_experiment(str(experiment_id)).artifact_location
                if _outside_store(location):
                    return "experiment", location
        request_id = fields.get("request_id") or fields.get("trace_id")
        if request_id and isinstance(request_id, str) and "trace" in path:
            from mlflow.tracing.utils.artifact_utils import get_artifact_uri_for_trace

            return "trace", get_artifact_uri_for_trace(store.get_trace_info(request_id))
        if "/model-versions/" in path and fields.get("name") and fields.get("version"):
            version = _get_model_registry_store().get_model_version(fields["name"], str(fields["version"]))
            return "model version", version.storage_location or version.source
    except (MlflowException, LookupError, ValueError, TypeError, AttributeError):
        return None  # no such object: MLflow's own handler answers
    return None


def _graphql_refusal(body: bytes) -> str | None:
    """Why the server refuses the first run named in a GraphQL request (mlflowListArtifacts takes a run id,
    as an inline argument or a variable of any name) whose artifacts are outside the store; None when none
    is. Every 32-hex word is tried as a run id: the query is not parsed. (A run id spelled with JSON escapes
    slips by here, but the tracking store refuses to load the run, slurmctl/ops/mlflow_store.py; GraphQL
    then answers 200 with no data, this answers 403 with the reason.)"""
    import re

    from mlflow.exceptions import MlflowException
    from mlflow.server.handlers import _get_tracking_store

    store = _get_tracking_store()
    for word in dict.fromkeys(re.findall(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", body[:65536])):
        try:
            location = store.get_run(word.decode()).info.artifact_uri
        except MlflowException as exc:
            if exc.error_code == "PERMISSION_DENIED":
                return exc.message
            continue
        if _outside_store(location):
            return _outside_message("run", location)
    return None


def _foreign_model_source(fields: dict) -> bool:
    """A model version's source that is not on this server. A prompt's version (MLflow's tag, last value
    wins as MLflow reads it) carries a placeholder source that MLflow itself accepts or refuses."""
    source = fields.get("source")
    if not isinstance(source, str):
        return False
    tags = fields.get("tags") if isinstance(fields.get("tags"), list) else []
    flags = [t.get("value") for t in tags if isinstance(t, dict) and t.get("key") == PROMPT_TAG]
    if flags and str(flags[-1]).lower() == "true":
        return False
    return not source.startswith(MODEL_SOURCE_SCHEMES)


def _touches_creator_tag(path: str, fields: dict) -> bool:
    if path.endswith("/experiments/create"):
        tags = fields.get("tags") if isinstance(fields.get("tags"), list) else []
        return any(isinstance(t, dict) and t.get("key") == CREATOR_TAG for t in tags)
    if path.endswith(("/experiments/set-experiment-tag", "/experiments/delete-experiment-tag")):
        return fields.get("key") == CREATOR_TAG
    return False


def record_creator(response):
    """Flask after-request hook: tag a newly created experiment with its creator (the login), and answer
    get-by-name of an experiment the caller may not read as MLflow answers a missing one."""
    from flask import request

    path = request.path
    if path.endswith("/experiments/get-by-name") and response.status_code == 403:
        from flask import Response
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST

        # the very answer MLflow gives for a name nobody uses
        missing = MlflowException(f"Could not find experiment with name {request.args.get('experiment_name', '')}",
                                  RESOURCE_DOES_NOT_EXIST)
        return Response(missing.serialize_as_json(), status=missing.get_http_status_code(),
                        mimetype="application/json")
    if not path.endswith("/experiments/create") or response.status_code != 200 or not request.authorization:
        return response
    from mlflow.entities import ExperimentTag
    from mlflow.server.handlers import _get_tracking_store

    try:
        experiment_id = json.loads(response.get_data())["experiment_id"]
    except (ValueError, KeyError, TypeError):
        return response
    _get_tracking_store().set_experiment_tag(str(experiment_id),
                                             ExperimentTag(CREATOR_TAG, request.authorization.username))
    return response


def guard():
    """Flask before-request hook: refuse what would let the server touch files outside its store."""
    from flask import request

    path = request.path
    if not (path.startswith(("/api/", "/ajax-api/", "/get-artifact", "/model-versions/", "/graphql"))):
        return None
    fields = _fields()
    caller = request.authorization.username if request.authorization else ""
    if path.endswith("/mlflow/experiments/create") and fields.get("artifact_location"):
        return _refuse("this MLflow server keeps every experiment's artifacts in its own store: "
                       "experiments/create takes no artifact_location (leave it out).")
    name = fields.get("name") if path.endswith("/experiments/create") else (
        fields.get("new_name") if path.endswith("/experiments/update") else None)
    if (isinstance(name, str) and name.startswith(PERSONAL_PREFIX) and name != PERSONAL_PREFIX + caller
            and caller != "admin"):
        return _refuse(f"the experiment name `{name}` is reserved for the user "
                       f"`{name[len(PERSONAL_PREFIX):]}`; choose a name that does not start with "
                       f"`{PERSONAL_PREFIX}` (yours is `{PERSONAL_PREFIX}{caller}`).", 403)
    if path.endswith("/model-versions/create") and _foreign_model_source(fields):
        return _refuse("a model version's source must be a runs:/, models:/ or mlflow-artifacts:/ URI on "
                       f"this server, not a local path or another store ({str(fields['source'])[:200]}).")
    if _touches_creator_tag(path, fields):
        return _refuse(f"the experiment tag `{CREATOR_TAG}` is set by the server to the experiment's creator; "
                       "no one may set or delete it.", 403)
    if path.startswith("/graphql"):
        refusal = _graphql_refusal(request.get_data(cache=True))
        return _refuse(refusal, 403) if refusal else None
    found = _stored_location(fields, path)
    if found and _outside_store(found[1]):
        return _refuse(_outside_message(*found), 403)
    return None


def create_app():
    """The app factory of the `mlflow.app` entry point `slurmctl-auth`."""
    from mlflow.server import app as flask_app
    from mlflow.server.auth import create_app as create_auth_app

    from slurmctl.ops.mlflow_limits import RequestLimits  # why: imported by the server process only, with mlflow

    served = create_auth_app(flask_app)
    flask_app.before_request(guard)  # after the auth app's own hook: only authenticated requests get here
    flask_app.after_request(record_creator)
    return RequestLimits(served)


def tracking_store(store_uri: str, artifact_uri: str | None = None):
    """The `mlflow.tracking_store` entry point `slurmctl-sqlite` (slurmctl/ops/mlflow_store.py). Its import
    waits until a store is built: MLflow loads the entry points while `mlflow.tracking` is still being
    imported, in every process that imports it, and the store's module needs `mlflow.tracking` whole."""
    from slurmctl.ops.mlflow_store import store_from_uri  # why: see the docstring (an import cycle in MLflow)

    return store_from_uri(store_uri, artifact_uri)
