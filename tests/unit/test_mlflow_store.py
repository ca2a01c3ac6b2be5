"""The cluster MLflow server's tracking store (slurmctl/ops/mlflow_store.py) on a real SQLite database:
client-chosen artifact locations are refused, an experiment or run stored with one (as a database made
before this store would hold) is unusable, and `slurmctl-<user>` is the caller's only."""

from __future__ import annotations

import base64

import pytest

pytest.importorskip("mlflow.store.tracking.sqlalchemy_store")

from flask import Flask  # noqa: E402
from mlflow.entities import Metric, RunTag  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # noqa: E402

from slurmctl.ops.mlflow_store import store_from_uri  # noqa: E402


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return tmp_path_factory.mktemp("mlflow") / "mlflow.db"


@pytest.fixture(scope="module")
def store(db):
    return store_from_uri(f"slurmctl-sqlite:///{db}", "mlflow-artifacts:/")


def refused(call, *args, **kwargs) -> str:
    with pytest.raises(MlflowException) as caught:
        call(*args, **kwargs)
    assert caught.value.error_code == "PERMISSION_DENIED"
    return caught.value.message


def test_an_experiment_gets_the_servers_store_and_works(store):
    experiment = store.create_experiment("plain")
    assert store.get_experiment(experiment).artifact_location == f"mlflow-artifacts:/{experiment}"
    run = store.create_run(experiment, "carol", 0, [], "r").info
    store.log_metric(run.run_id, Metric("loss", 0.5, 0, 1))
    assert store.get_run(run.run_id).data.metrics == {"loss": 0.5}
    assert [r.info.run_id for r in store.search_runs([experiment], None, 1)] == [run.run_id]


@pytest.mark.parametrize("location", ["file:///home/bob/x", "/home/bob/x", "mlflow-artifacts:/../x",
                                      "mlflow-artifacts:/1"])
def test_a_chosen_artifact_location_is_refused(store, location):
    assert "takes no artifact_location" in refused(store.create_experiment, f"mine-{location}", location)


def test_an_experiment_stored_outside_the_store_is_unusable(store, db):
    plain = SqlAlchemyStore(f"sqlite:///{db}", "mlflow-artifacts:/")
    experiment = plain.create_experiment("old", artifact_location="file:///home/bob/x")
    run = plain.create_run(experiment, "bob", 0, [], "old").info.run_id
    assert "outside the server's store (file:///home/bob/x)" in refused(store.get_experiment, experiment)
    refused(store.create_run, experiment, "bob", 0, [], "new")
    refused(store.get_run, run)
    refused(store.log_metric, run, Metric("x", 1.0, 0, 0))
    refused(store.set_tag, run, RunTag("owner", "bob"))
    assert store.search_runs([experiment], None, 1) == []


def test_the_personal_experiment_name_is_the_callers_only(store):
    app = Flask(__name__)

    def as_user(user):
        login = base64.b64encode(f"{user}:pw".encode()).decode()
        return app.test_request_context(headers={"Authorization": f"Basic {login}"})

    with as_user("bob"):
        assert "reserved for the user `carol`" in refused(store.create_experiment, "slurmctl-carol")
        mine = store.create_experiment("slurmctl-bob")
        refused(store.rename_experiment, mine, "slurmctl-carol")
    with as_user("admin"):
        store.create_experiment("slurmctl-alice")


def test_the_store_needs_the_proxied_artifact_store(db):
    with pytest.raises(MlflowException, match="proxied artifact store"):
        store_from_uri(f"slurmctl-sqlite:///{db}", "/srv/artifacts")


def test_a_default_experiment_made_by_an_older_server_is_moved_to_the_store(tmp_path):
    """A server started before this store made experiment 0 with its local artifact root: the store
    starts on that database (the upgrade of a running site) and points experiment 0 at its store."""
    db = tmp_path / "old.db"
    SqlAlchemyStore(f"sqlite:///{db}", str(tmp_path / "artifacts"))  # the older server's first start
    store = store_from_uri(f"sqlite:///{db}".replace("sqlite", "slurmctl-sqlite", 1), "mlflow-artifacts:/")
    assert store.get_experiment("0").artifact_location == "mlflow-artifacts:/0"
    assert store_from_uri(f"slurmctl-sqlite:///{db}", "mlflow-artifacts:/").get_experiment("0") \
        .artifact_location == "mlflow-artifacts:/0"  # committed, not only in that session


def _trace(experiment: str, trace_id: str, tags: dict | None = None):
    from mlflow.entities import TraceInfo, TraceLocation, TraceState

    return TraceInfo(trace_id=trace_id, trace_location=TraceLocation.from_experiment_id(experiment),
                     request_time=1, state=TraceState.OK, tags=dict(tags or {}))


def test_a_client_never_chooses_where_a_trace_lives(store, db):
    """The attacks on traces: a `..` in the trace's artifact location set by tag, and an archive
    location given at creation (read through get-trace-artifact, deleted by delete-traces)."""
    import sqlite3

    experiment = store.create_experiment("traces")
    own = f"mlflow-artifacts:/{experiment}"
    good = store.start_trace(_trace(experiment, "tr-" + "a" * 32))
    assert store.get_trace_info(good.trace_id).tags["mlflow.artifactLocation"] == \
        f"{own}/traces/{good.trace_id}/artifacts"
    for tags in ({"mlflow.artifactLocation": f"{own}/../../../tmp/evil"},
                 {"mlflow.trace.archiveLocation": "file:///tmp/arch"},
                 {"mlflow.trace.spansLocation": "ARCHIVE_REPO"}):
        assert "decides where a trace's data lives" in refused(store.start_trace, _trace(experiment, "tr-" + "b" * 32,
                                                                                          tags))
        assert "decides where a trace's data lives" in refused(store.set_trace_tag, good.trace_id, *next(iter(
            tags.items())))
    # a row planted before this store (or by a path it does not see): never loaded, never a file deleted
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE trace_tags SET value = ? WHERE request_id = ? AND key = 'mlflow.artifactLocation'",
                     (f"{own}/traces/../../../tmp/evil", good.trace_id))
    assert "outside the server's store" in refused(store.get_trace_info, good.trace_id)
