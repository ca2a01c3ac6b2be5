"""The run's tracked run, created ONCE at submit, as the submitting user, on the site's MLflow server.

Its id goes into run.json (``tracking``) and into the job script as MLFLOW_RUN_ID, so every attempt,
every restart inside the allocation and `slurmctl resume` continue the same MLflow run
(slurmctl/runtime/tracking.py). A sweep gets a parent run named after the sweep; each element is
its own run under it (MLflow's ``mlflow.parentRunId`` tag). W&B needs nothing at submit: its run id
is the slurmctl run id and an offline run is created by the first attempt.

Submit speaks MLflow's REST API (/api/2.0/mlflow: experiments/get-by-name, experiments/create,
runs/create, runs/delete) with the standard library rather than through mlflow's client: importing
the client costs ~2.5 s of CPU, which made a tracked submit 12-19 s against 2-3 s untracked on the
loaded dev machine (measured side by side); these four calls are all submit needs. The job's side
(runtime/tracking.py) logs through mlflow's client, and the tests check the result through it too.

Every call carries the submitting user's MLflow login (HTTP basic auth) from their own 0600 file
(site.yaml ``tracking.mlflow_credentials``; deploy/local/mlflow-up writes it). On a server with
MLflow's authentication the creator of an experiment or run is its only manager and other users get
no access; so the default experiment is per user (``slurmctl-<user>``), and a ``tracking.project``
is used only if the submitting user created it: the server tags every experiment with its creator
(``slurmctl.creator``, slurmctl/ops/mlflow_server.py), and an experiment another user created is
refused even when that user granted access to it (else anyone could create a colleague's next project
name, grant them EDIT, and read every run filed there). The login goes to a loopback server only when
the kernel says the server's account holds the port (runtime/tracking.py check_server_owner).
"""

from __future__ import annotations

from slurmctl.errors import ConfigError, PreflightError
from slurmctl.runtime.tracking import (
    RUN_ID_TAG,
    SWEEP_TAG,
    MlflowError,
    UntrustedServer,
    login_from_file,
    mlflow_call,
)

PARENT_TAG = "mlflow.parentRunId"
DEFAULT_EXPERIMENT = "slurmctl-{user}"
CREATOR_TAG = "slurmctl.creator"  # set by the server (slurmctl/ops/mlflow_server.py), never by a client


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


def mlflow_login(site) -> tuple[str, str] | None:
    """The user's login on the site's MLflow server; None when they have no credentials file."""
    path = site.tracking.mlflow_credentials
    try:
        return login_from_file(path)
    except PreflightError as exc:
        raise ConfigError(f"your MLflow login file (site.yaml tracking.mlflow_credentials): {exc.message}",
                          exc.hint) from None


def _not_yours(name: str) -> ConfigError:
    return ConfigError(f"the MLflow experiment `{name}` (run.yaml tracking.project) was created by another user: "
                       "runs are filed only into an experiment you created yourself (its creator can read and "
                       "delete everything in it, whatever access they gave you); nothing was submitted.",
                       "Choose another tracking.project that nobody uses yet (or leave it out: your own "
                       "experiment slurmctl-<you> is used); to share a run, create the experiment yourself "
                       "and grant your colleagues READ on it.")


def owns_experiment(experiment: dict, name: str, user: str) -> bool:
    """Whether `user` created `experiment` (MLflow's get-by-name answer): the server's creator tag. An
    experiment from before the server set it counts as the user's only if it is their reserved default
    (slurmctl-<user>, which the server lets no one else create)."""
    tags = {t.get("key"): t.get("value") for t in experiment.get("tags") or [] if isinstance(t, dict)}
    if CREATOR_TAG in tags:
        return tags[CREATOR_TAG] == user
    return name == DEFAULT_EXPERIMENT.format(user=user)


def _experiment_id(uri: str, name: str, login, server_user: str | None = None) -> str:
    def lookup() -> str | None:
        try:
            experiment = mlflow_call(uri, "GET", "experiments/get-by-name", query={"experiment_name": name},
                                     login=login, server_user=server_user)["experiment"]
        except MlflowError as exc:
            if exc.code == "RESOURCE_DOES_NOT_EXIST":
                return None
            if exc.status == 403:  # a server that answers a foreign experiment with 403
                raise _not_yours(name) from None
            raise
        if login and not owns_experiment(experiment, name, login[0]):
            raise _not_yours(name)
        return experiment["experiment_id"]

    found = lookup()
    if found is not None:
        return found
    try:
        return mlflow_call(uri, "POST", "experiments/create", {"name": name}, login=login,
                           server_user=server_user)["experiment_id"]
    except MlflowError as exc:
        if exc.status == 403:  # a name the server reserves for someone else (slurmctl-<user>)
            raise ConfigError(f"the MLflow server refused to create the experiment `{name}` (run.yaml "
                              f"tracking.project): {exc.message} Nothing was submitted.",
                              "Choose another tracking.project, or leave it out: your own experiment "
                              "slurmctl-<you> is used.") from None
        if exc.code != "RESOURCE_ALREADY_EXISTS":
            raise
    found = lookup()  # another submit of yours created it in between; or it is someone else's
    if found is None:
        raise _not_yours(name)
    return found


def run_url(uri: str, experiment_id: str, run_id: str) -> str:
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def create_tracked_run(spec, site, run_id: str, *, parent: dict | None = None, sweep_id: str | None = None,
                       user: str = "") -> dict | None:
    """Create the MLflow run of slurmctl run `run_id`; the record run.json keeps (None: not tracked
    with MLflow). `parent`: the sweep's record, whose run this one is filed under."""
    uri = mlflow_uri(spec, site)
    if uri is None:
        return None
    import time

    login = mlflow_login(site)
    server_user = site.tracking.mlflow_server_user
    try:
        experiment = parent["experiment_id"] if parent else _experiment_id(
            uri, spec.tracking.project or DEFAULT_EXPERIMENT.format(user=user or "user"), login, server_user)
        tags = {RUN_ID_TAG: run_id, "mlflow.user": user, "mlflow.runName": run_id}
        if sweep_id:
            tags[SWEEP_TAG] = sweep_id
        if parent:
            tags[PARENT_TAG] = parent["run_id"]
        created = mlflow_call(uri, "POST", "runs/create", {
            "experiment_id": experiment, "run_name": run_id, "start_time": int(time.time() * 1000),
            "tags": [{"key": k, "value": v} for k, v in tags.items()]}, login=login, server_user=server_user)
        mlflow_run_id = created["run"]["info"]["run_id"]
    except UntrustedServer as exc:
        raise ConfigError(f"{exc} Nothing was submitted.",
                          "Ask the platform team to start the tracking server (deploy/local/mlflow-up), or set "
                          "tracking.backend to none for now.") from None
    except MlflowError as exc:
        if exc.status != 401:
            raise _not_created(uri, exc) from None
        where = site.tracking.mlflow_credentials or "site.yaml tracking.mlflow_credentials"
        raise ConfigError(f"the MLflow server at {uri} did not accept your login ({where}"
                          f"{'' if login else ': no such file'}); nothing was submitted.",
                          "Ask the platform team for your MLflow login (deploy/local/up writes it), or set "
                          "tracking.backend to none.") from None
    except (OSError, ValueError, KeyError) as exc:  # connection, a malformed answer
        raise _not_created(uri, exc) from None
    return {"backend": "mlflow", "uri": uri, "experiment_id": experiment, "run_id": mlflow_run_id,
            "url": run_url(uri, experiment, mlflow_run_id), **({"parent_run_id": parent["run_id"]} if parent else {})}


def _not_created(uri: str, exc: Exception) -> ConfigError:
    return ConfigError(f"could not create the MLflow run at {uri}: {type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''}; nothing was submitted.",
                       "Check that the tracking server answers (curl <uri>/health), or set tracking.backend to none.")


def wandb_record(spec, run_id: str) -> dict | None:
    if spec.tracking.backend != "wandb":
        return None
    return {"backend": "wandb", "run_id": run_id, "project": spec.tracking.project}


def tracked_run(spec, site, run_id: str, **kwargs) -> dict | None:
    return create_tracked_run(spec, site, run_id, **kwargs) or wandb_record(spec, run_id)


def forget_tracked_run(record: dict | None, site) -> None:
    """A submit that failed after creating the MLflow run: delete it (best effort), nothing ran."""
    if not record or record.get("backend") != "mlflow":
        return
    try:
        mlflow_call(record["uri"], "POST", "runs/delete", {"run_id": record["run_id"]}, login=mlflow_login(site),
                    server_user=site.tracking.mlflow_server_user)
    except (OSError, ValueError, MlflowError, UntrustedServer, ConfigError):  # the server may be what failed
        pass
