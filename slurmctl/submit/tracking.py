"""The run's tracked run, created ONCE at submit (as the submitting user, through MLflow's client).

Its id goes into run.json (``tracking``) and into the job script as MLFLOW_RUN_ID, so every attempt,
every restart inside the allocation and `slurmctl resume` continue the same MLflow run
(slurmctl/runtime/tracking.py). A sweep gets a parent run named after the sweep; each element is
its own run under it (MLflow's ``mlflow.parentRunId`` tag). W&B needs nothing at submit: its run id
is the slurmctl run id and an offline run is created by the first attempt.

mlflow is imported only here and only for a run that tracks with it (the client is mlflow-skinny's;
the server package is needed only where the tracking server runs).
"""

from __future__ import annotations

from slurmctl.errors import ConfigError
from slurmctl.runtime.tracking import RUN_ID_TAG, SWEEP_TAG

PARENT_TAG = "mlflow.parentRunId"
DEFAULT_EXPERIMENT = "slurmctl"


def mlflow_uri(spec, site) -> str | None:
    """The tracking server of a run that tracks with MLflow; a clear error when the site names none."""
    if spec.tracking.backend != "mlflow":
        return None
    uri = site.tracking.mlflow_uri
    if not uri:
        raise ConfigError("run.yaml asks for `tracking: {backend: mlflow}` but site.yaml names no MLflow server "
                          "(`tracking: {mlflow_uri: ...}`).",
                          "Ask the platform team for the tracking server's address, or set tracking.backend to "
                          "none or wandb.")
    return uri


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def _experiment_id(client, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # noqa: BLE001 - another submit created it in between: use theirs
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


def run_url(uri: str, experiment_id: str, run_id: str) -> str:
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def create_tracked_run(spec, site, run_id: str, *, parent: dict | None = None, sweep_id: str | None = None,
                       user: str = "") -> dict | None:
    """Create the MLflow run of slurmctl run `run_id`; the record run.json keeps (None: not tracked
    with MLflow). `parent`: the sweep's record, whose run this one is filed under."""
    uri = mlflow_uri(spec, site)
    if uri is None:
        return None
    try:
        client = _client(uri)
        experiment = parent["experiment_id"] if parent else _experiment_id(client, spec.tracking.project
                                                                           or DEFAULT_EXPERIMENT)
        tags = {RUN_ID_TAG: run_id, "mlflow.user": user}
        if sweep_id:
            tags[SWEEP_TAG] = sweep_id
        if parent:
            tags[PARENT_TAG] = parent["run_id"]
        created = client.create_run(experiment, run_name=run_id, tags=tags)
    except ImportError:
        raise ConfigError("run.yaml tracks with MLflow but the mlflow client is not installed here.",
                          "Install slurmctl's tracking extra: pip install 'slurmctl[tracking]'.") from None
    except Exception as exc:  # noqa: BLE001 - MlflowException, connection errors: one clear message
        raise ConfigError(f"could not create the MLflow run at {uri}: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}; nothing was submitted.",
                          "Check that the tracking server answers (curl <uri>/health), or set "
                          "tracking.backend to none.") from None
    mlflow_run_id = created.info.run_id
    return {"backend": "mlflow", "uri": uri, "experiment_id": experiment, "run_id": mlflow_run_id,
            "url": run_url(uri, experiment, mlflow_run_id), **({"parent_run_id": parent["run_id"]} if parent else {})}


def wandb_record(spec, run_id: str) -> dict | None:
    if spec.tracking.backend != "wandb":
        return None
    return {"backend": "wandb", "run_id": run_id, "project": spec.tracking.project}


def tracked_run(spec, site, run_id: str, **kwargs) -> dict | None:
    return create_tracked_run(spec, site, run_id, **kwargs) or wandb_record(spec, run_id)


def forget_tracked_run(record: dict | None) -> None:
    """A submit that failed after creating the MLflow run: delete it (best effort), nothing ran."""
    if not record or record.get("backend") != "mlflow":
        return
    try:
        _client(record["uri"]).delete_run(record["run_id"])
    except Exception:  # noqa: BLE001 - the server may be what failed
        pass
