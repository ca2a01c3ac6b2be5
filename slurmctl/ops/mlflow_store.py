"""The cluster MLflow server's tracking store (`--backend-store-uri slurmctl-sqlite:///PATH`,
deploy/local/mlflow-up): MLflow's SqlAlchemyStore on `sqlite:///PATH`, confined to the server's own
artifact store.

The server reads and writes an experiment's artifacts, with its own rights, wherever its stored
artifact_location points; a location a client chose (`file:///home/bob/x`) lets the owner of that folder
plant symlinks in it and have the server read or write any file the server can reach. Checking this
where the request is parsed failed: MLflow accepts the same field in several spellings and places.
Here, where every handler ends up, nothing depends on how a request was spelled:

* create_experiment takes no artifact_location: every experiment gets the default one under the server's
  root (`mlflow-artifacts:/<id>`, served through --serve-artifacts);
* an experiment, run, logged model or trace whose stored location is not the default one for its id is
  refused (PERMISSION_DENIED) wherever the store loads it, so one made before this store is unusable;
* the experiment name `slurmctl-<user>` (each user's default, slurmctl/submit/tracking.py) may be
  created or taken by a rename only by that user (or the admin): the caller is the login MLflow's auth
  app checked for this request.
"""

from __future__ import annotations

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import PERMISSION_DENIED
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.tracing.constant import SpansLocation, TraceTagKey
from mlflow.utils.mlflow_tags import MLFLOW_ARTIFACT_LOCATION
from mlflow.utils.uri import append_to_uri_path

SCHEME = "slurmctl-sqlite"
PROXIED = "mlflow-artifacts:"
PERSONAL_PREFIX = "slurmctl-"
ADMIN = "admin"


def _caller() -> str | None:
    """The login of the HTTP request being served (MLflow's auth app has checked it); None outside one."""
    try:
        from flask import has_request_context, request
    except ImportError:
        return None
    if not has_request_context():
        return None
    return request.authorization.username if request.authorization else ""


def _check_name(name: str | None) -> None:
    caller = _caller()
    if caller is None or caller == ADMIN or not isinstance(name, str) or not name.startswith(PERSONAL_PREFIX):
        return
    if name != PERSONAL_PREFIX + caller:
        raise MlflowException(
            f"the experiment name `{name}` is reserved for the user `{name[len(PERSONAL_PREFIX):]}`; choose a "
            f"name that does not start with `{PERSONAL_PREFIX}` (yours is `{PERSONAL_PREFIX}{caller}`).",
            PERMISSION_DENIED)


def _outside(what: str, location: str | None) -> MlflowException:
    return MlflowException(
        f"this {what}'s artifacts are outside the server's store ({location}); the server does not use it. "
        "Create a new experiment without an artifact_location.", PERMISSION_DENIED)




def _names_an_archive(tags: dict) -> bool:
    """A trace whose spans are said to live in an archive (a path): this server archives none."""
    return (TraceTagKey.ARCHIVE_LOCATION in tags
            or tags.get(TraceTagKey.SPANS_LOCATION) == SpansLocation.ARCHIVE_REPO.value)


class ConfinedSqlAlchemyStore(SqlAlchemyStore):
    """SqlAlchemyStore whose every experiment, run, logged model and trace keeps its artifacts at the
    default place in the server's proxied artifact store."""

    def __init__(self, db_uri, default_artifact_root, read_db_uri=None):
        if not str(default_artifact_root or "").startswith(PROXIED):
            raise MlflowException(
                f"the {SCHEME} store needs the server's proxied artifact store ({PROXIED}/, from "
                f"--serve-artifacts without --default-artifact-root), not {default_artifact_root!r}.")
        super().__init__(db_uri, default_artifact_root, read_db_uri)

    def _own_location(self, experiment_id) -> str:
        return self._get_artifact_location(experiment_id)

    def create_experiment(self, name, artifact_location=None, tags=None):
        if artifact_location:
            raise MlflowException(
                "this MLflow server keeps every experiment's artifacts in its own store: creating an "
                f"experiment takes no artifact_location (leave it out; {artifact_location!r} was given).",
                PERMISSION_DENIED)
        _check_name(name)
        return super().create_experiment(name, None, tags)

    def rename_experiment(self, experiment_id, new_name):
        _check_name(new_name)
        return super().rename_experiment(experiment_id, new_name)

    def _get_experiment(self, session, experiment_id, view_type, eager=False):
        experiment = super()._get_experiment(session, experiment_id, view_type, eager)
        if experiment.artifact_location != self._own_location(experiment.experiment_id):
            raise _outside("experiment", experiment.artifact_location)
        return experiment

    def _initialize_store_state(self):
        # The server makes the Default experiment itself at its first start; one made by an older
        # server (before this store) points at that server's local artifact root, not at anything a
        # user chose: it moves to the proxied store before MLflow reads it.
        from mlflow.store.tracking.dbmodels.models import SqlExperiment  # why: MLflow's ORM, only here

        own = self._own_location(self.DEFAULT_EXPERIMENT_ID)
        with self.ManagedSessionMaker(read_only=False) as session:
            default = session.query(SqlExperiment).filter(
                SqlExperiment.experiment_id == int(self.DEFAULT_EXPERIMENT_ID)).one_or_none()
            if default is not None and default.artifact_location != own:
                default.artifact_location = own
        super()._initialize_store_state()

    def _run_confined(self, experiment_id, run_id, artifact_uri) -> bool:
        return artifact_uri == append_to_uri_path(self._own_location(experiment_id), run_id,
                                                  SqlAlchemyStore.ARTIFACTS_FOLDER_NAME)

    def _get_run(self, session, run_uuid, eager=False):
        run = super()._get_run(session, run_uuid, eager)
        if not self._run_confined(run.experiment_id, run.run_uuid, run.artifact_uri):
            raise _outside("run", run.artifact_uri)
        return run

    def _search_runs(self, *args, **kwargs):
        runs, token = super()._search_runs(*args, **kwargs)
        return [r for r in runs
                if self._run_confined(r.info.experiment_id, r.info.run_id, r.info.artifact_uri)], token

    def get_logged_model(self, model_id, allow_deleted=False):
        model = super().get_logged_model(model_id, allow_deleted)
        expected = append_to_uri_path(self._own_location(model.experiment_id), SqlAlchemyStore.MODELS_FOLDER_NAME,
                                      model.model_id, SqlAlchemyStore.ARTIFACTS_FOLDER_NAME)
        if model.artifact_location != expected:
            raise _outside("logged model", model.artifact_location)
        return model

    def get_trace_info(self, trace_id):
        from mlflow.tracing.utils.artifact_utils import get_artifact_uri_for_trace

        info = super().get_trace_info(trace_id)
        if _names_an_archive(info.tags):
            raise _outside("trace", str(info.tags.get(TraceTagKey.ARCHIVE_LOCATION) or "an archive"))
        try:
            location = get_artifact_uri_for_trace(info)
        except MlflowException:
            return info  # no artifact location: the trace lives in the database only
        expected = append_to_uri_path(self._own_location(info.experiment_id), SqlAlchemyStore.TRACE_FOLDER_NAME,
                                      info.trace_id, SqlAlchemyStore.ARTIFACTS_FOLDER_NAME)
        if location != expected:  # exactly: a prefix would let `..` out
            raise _outside("trace", location)
        return info

    def start_trace(self, trace_info):
        _refuse_location_tags(trace_info.tags or {})
        return super().start_trace(trace_info)

    def set_trace_tag(self, trace_id, key, value):
        _refuse_location_tags({key: value})
        return super().set_trace_tag(trace_id, key, value)

    def _select_archived_traces_for_delete(self, *, session, trace_ids):
        # This server archives no trace; a row claiming an archive names a path a client chose:
        # deleting the trace deletes its rows, never a file at that path.
        return []


def _refuse_location_tags(tags: dict) -> None:
    """Where a trace's data lives is the server's choice: a client that names it (the artifact
    location, a spans or archive location) is refused, on create and on set-tag alike."""
    chosen = sorted(key for key in tags if key in (MLFLOW_ARTIFACT_LOCATION, TraceTagKey.ARCHIVE_LOCATION))
    if _names_an_archive(tags):
        chosen.append(TraceTagKey.SPANS_LOCATION)
    if chosen:
        raise MlflowException(f"this MLflow server decides where a trace's data lives: the tag(s) {chosen} "
                              "cannot be set by a client (leave them out).", PERMISSION_DENIED)


def store_from_uri(store_uri: str, artifact_uri: str | None = None) -> ConfinedSqlAlchemyStore:
    """The store of `slurmctl-sqlite:///PATH` (the SQLite database PATH); built by the `mlflow.tracking_store`
    entry point `slurmctl-sqlite` (slurmctl/ops/mlflow_server.py's tracking_store)."""
    if not store_uri.startswith(SCHEME + ":"):
        raise MlflowException(f"not a {SCHEME} URI: {store_uri!r}")
    return ConfinedSqlAlchemyStore("sqlite:" + store_uri[len(SCHEME) + 1:], artifact_uri)
