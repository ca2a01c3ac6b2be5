"""The tracked run inside the job: every attempt continues the ONE run submit created.

The job script exports the tracker's run id (MLFLOW_RUN_ID, created once at submit by
slurmctl/submit/tracking.py; WANDB_RUN_ID = the slurmctl run id) to every attempt, every restart
inside the allocation and every sweep element. ``Runtime.log`` hands each step to ``TrackerBridge``,
which writes it to the tracker as one run:

* a step above the highest step any earlier attempt logged goes under the metric's own name, so
  each metric stays one line that only moves forward;
* a step at or below it (re-run after a resume from an older checkpoint) goes under
  ``<name>/resumed-attempt-<k>``: one extra line per attempt instead of a zigzag;
* each attempt sets the tags ``slurmctl.attempt`` (its number, 1 = the first launch),
  ``slurmctl.attempt.<k>.highest_step_before`` (the highest step logged before it) and
  ``slurmctl.attempt.<k>.job_id``, and logs ``slurmctl/attempt`` at its first step.

Attempts are counted from attempts.jsonl: every ``start`` (a Slurm attempt) and every
``step-restart`` (a launch again inside the allocation) since the last submission.

W&B (offline here: no server): wandb.init(id=WANDB_RUN_ID, resume="allow") and a step axis of our
own (``slurmctl/step``, wandb.define_metric) -- W&B's internal _step must only grow and an
offline attempt cannot know the previous attempt's _step, so rewinding it (``resume_from``, a
server feature) is not used; replayed steps go under the resumed names as for MLflow. The drain
(``Runtime.should_stop``) finishes the W&B run before the checkpoint is written, so a drained
preemption or time limit loses nothing; a SIGTERM without a drain first (``scontrol requeue``, a
preemption whose grace time ended before the training polled) kills W&B's writer at once, and only
the records of its last WANDB_FLUSH_SECONDS are lost.

A tracker that fails never stops the training: the first error is printed once and the bridge
turns itself off for the rest of the attempt. Standard library at import; mlflow/wandb only when
the run tracks with them (rank 0 only).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from slurmctl import rundir
from slurmctl.errors import SlurmctlError
from slurmctl.fsutil import read_jsonl, tail_jsonl
from slurmctl.sockowner import is_loopback, listener_uid

ATTEMPT_TAG = "slurmctl.attempt"
RUN_ID_TAG = "slurmctl.run_id"
SWEEP_TAG = "slurmctl.sweep_id"
ATTEMPT_METRIC = "slurmctl/attempt"
STEP_METRIC = "slurmctl/step"  # W&B's x axis (its own _step must only grow)
RESUMED = "{name}/resumed-attempt-{attempt}"
_HIGH_WATER_RECORDS = 2000  # metrics.jsonl records read for the highest step logged so far
WANDB_FLUSH_SECONDS = 1.0  # how often W&B's writer puts records into the run file (see _start_wandb)


REST_TIMEOUT_SECONDS = 15
# The account the site's MLflow server runs as (site.yaml tracking.mlflow_server_user; the job script
# exports it). A loopback port is anyone's to take while the server is down: a login goes to a loopback
# URI only when the kernel says this account holds the port.
SERVER_USER_ENV = "SLURMCTL_MLFLOW_SERVER_USER"
DEFAULT_SERVER_USER = "slurmctl-mlflow"
# The login MLflow's client reads from the environment (basic auth); the job script exports both from
# the user's 0600 credentials file at job start (site.yaml tracking.mlflow_credentials).
LOGIN_KEYS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


class MlflowError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class UntrustedServer(Exception):
    """The tracking URI is on this machine but its port is not held by the server's account."""


def check_server_owner(uri: str | None, server_user: str | None) -> None:
    """Raise UntrustedServer unless a loopback `uri`'s port is held by `server_user` (in the kernel's
    view: the owner of the listening socket). A URI on another machine is not checked here: that is
    the network's and TLS's business. No `server_user`: the site turned the check off."""
    import pwd
    import urllib.parse

    if not uri or not server_user:
        return
    parts = urllib.parse.urlsplit(uri)
    if not parts.hostname or not is_loopback(parts.hostname):
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        expected = pwd.getpwnam(server_user).pw_uid
    except KeyError:
        raise UntrustedServer(f"the MLflow server account `{server_user}` (site.yaml tracking.mlflow_server_user) "
                              "does not exist on this machine; no login was sent.") from None
    address = parts.hostname if parts.hostname[0].isdigit() or ":" in parts.hostname else "127.0.0.1"  # localhost
    holder = listener_uid(address, port)
    if holder == expected:
        return
    if holder is None:
        raise UntrustedServer(f"nothing listens on {parts.hostname}:{port} (the MLflow server at {uri} is down); "
                              "no login was sent.")
    try:
        who = pwd.getpwuid(holder).pw_name
    except KeyError:
        who = f"uid {holder}"
    raise UntrustedServer(f"{parts.hostname}:{port} is held by `{who}`, not by the MLflow server's account "
                          f"`{server_user}` (site.yaml tracking.mlflow_server_user): another process took the "
                          "server's port; your MLflow login was not sent to it.")


def server_user_from_env(env=None) -> str | None:
    env = os.environ if env is None else env
    return env.get(SERVER_USER_ENV, DEFAULT_SERVER_USER) or None


def login_from_env(env=None) -> tuple[str, str] | None:
    env = os.environ if env is None else env
    user, password = (env.get(k) for k in LOGIN_KEYS)
    return (user, password) if user and password else None


def login_from_file(path: str | Path | None) -> tuple[str, str] | None:
    """(user, password) from the caller's own 0600 credentials file; None when there is no such file
    (a server without authentication needs none). A file that is not safe raises PreflightError."""
    if not path:
        return None
    from slurmctl.runtime.secrets import check_secrets_file  # why: only MLflow submits read a login

    path = Path(path).expanduser()
    if not path.exists():
        return None
    values = check_secrets_file(path, list(LOGIN_KEYS))
    return values[LOGIN_KEYS[0]], values[LOGIN_KEYS[1]]


def mlflow_call(uri: str, method: str, endpoint: str, body: dict | None = None, query: dict | None = None,
                login: tuple[str, str] | None = None, server_user: str | None = DEFAULT_SERVER_USER) -> dict:
    """One MLflow REST call (as `login`, HTTP basic auth); the JSON answer, or MlflowError with MLflow's
    error_code. A login goes to a loopback URI only when `server_user` holds its port (UntrustedServer)."""
    import base64
    import urllib.error  # here: read commands import this package; urllib.request costs ~50 ms
    import urllib.parse
    import urllib.request

    url = f"{uri.rstrip('/')}/api/2.0/mlflow/{endpoint}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if login:
        check_server_owner(uri, server_user)
        headers["Authorization"] = "Basic " + base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=REST_TIMEOUT_SECONDS) as response:  # noqa: S310 - site's URI
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            error = json.loads(exc.read() or b"{}")
        except ValueError:
            error = {}
        code = error.get("error_code", "") or {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}.get(exc.code, "")
        raise MlflowError(exc.code, code, error.get("message", exc.reason)) from None


def attempt_number(run_dir: Path) -> int:
    """1 for the run's first launch; +1 for every Slurm attempt and every in-allocation restart."""
    events = read_jsonl(Path(run_dir) / rundir.ATTEMPTS)
    last_submit = max((i for i, e in enumerate(events) if e.get("event") == "submitted"), default=-1)
    launches = sum(1 for e in events[last_submit + 1:] if e.get("event") in ("start", "step-restart"))
    return max(1, launches)


def highest_logged_step(run_dir: Path) -> int | None:
    """The highest step in metrics.jsonl before this attempt logs anything (its newest records)."""
    steps = [r.get("step") for r in tail_jsonl(Path(run_dir) / rundir.METRICS, _HIGH_WATER_RECORDS, 1024 * 1024)]
    steps = [s for s in steps if isinstance(s, (int, float)) and not isinstance(s, bool)]
    return int(max(steps)) if steps else None


def metric_key(name: str, step: int, high_water: int | None, attempt: int) -> str:
    return name if high_water is None or step > high_water else RESUMED.format(name=name, attempt=attempt)


class TrackerBridge:
    """Forwards Runtime.log's steps to the run's tracker (mlflow or wandb), labelled by attempt."""

    def __init__(self, run_dir: Path, backend: str, env=None):
        self.env = os.environ if env is None else env
        self.run_dir = Path(run_dir)
        self.backend = backend
        self.attempt = attempt_number(self.run_dir)
        self.high_water = highest_logged_step(self.run_dir)
        self.first_step_logged = False
        self.failed = False
        self._client = None
        self._wandb_run = None

    @classmethod
    def from_env(cls, run_dir: Path) -> TrackerBridge | None:
        backend = os.environ.get("SLURMCTL_TRACKING", "none")
        if backend == "mlflow" and os.environ.get("MLFLOW_RUN_ID"):
            return cls(run_dir, "mlflow")
        if backend == "wandb" and os.environ.get("WANDB_RUN_ID"):
            return cls(run_dir, "wandb")
        return None

    # --- the trackers ----------------------------------------------------------------------------
    def _check_server(self) -> None:
        """Before MLflow's client sends the login from the environment: the loopback port must still be the
        server's (it may have gone down and someone else taken it since the last step)."""
        if login_from_env(self.env):
            check_server_owner(self.env.get("MLFLOW_TRACKING_URI"), server_user_from_env(self.env))

    def _start_mlflow(self) -> None:
        from mlflow.tracking import MlflowClient

        self._check_server()

        self._client = MlflowClient(self.env.get("MLFLOW_TRACKING_URI"))
        run_id = self.env["MLFLOW_RUN_ID"]
        resume = "" if self.high_water is None else str(self.high_water)
        tags = {ATTEMPT_TAG: str(self.attempt),
                f"{ATTEMPT_TAG}.{self.attempt}.job_id": self.env.get("SLURM_JOB_ID", ""),
                f"{ATTEMPT_TAG}.{self.attempt}.highest_step_before": resume}
        for key, value in tags.items():
            self._client.set_tag(run_id, key, value)

    def _start_wandb(self) -> None:
        import atexit

        import wandb

        # wandb-core (W&B's writer, a Go process in the job step) dies at once on the SIGTERM Slurm sends
        # every process of a step at a requeue, a preemption's end or a cancel, losing what it has not
        # written to the run file: it writes every WANDB_FLUSH_SECONDS instead of W&B's 15 s.
        settings = ({} if "WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL" in self.env
                    else {"settings": wandb.Settings(x_transaction_log_flush_interval=WANDB_FLUSH_SECONDS)})
        self._wandb_run = wandb.init(id=self.env["WANDB_RUN_ID"], resume="allow", dir=str(self.run_dir),
                                     project=self.env.get("WANDB_PROJECT") or None,
                                     mode=self.env.get("WANDB_MODE") or None, **settings)
        self._wandb_run.define_metric(STEP_METRIC)
        self._wandb_run.define_metric("*", step_metric=STEP_METRIC)
        self._wandb_run.config.update({f"{ATTEMPT_TAG}.{self.attempt}.highest_step_before": self.high_water,
                                       f"{ATTEMPT_TAG}.{self.attempt}.job_id": self.env.get("SLURM_JOB_ID")},
                                      allow_val_change=True)
        atexit.register(self.close)  # the offline run's files are complete only after finish()

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self.failed:
            return
        try:
            if not self.first_step_logged:
                self._start_mlflow() if self.backend == "mlflow" else self._start_wandb()
            named = {metric_key(k, step, self.high_water, self.attempt): float(v) for k, v in metrics.items()}
            if not self.first_step_logged:
                named[ATTEMPT_METRIC] = float(self.attempt)
            self.first_step_logged = True
            if self.backend == "mlflow":
                from mlflow.entities import Metric

                now = int(time.time() * 1000)
                self._check_server()
                self._client.log_batch(self.env["MLFLOW_RUN_ID"],
                                       metrics=[Metric(k, v, now, step) for k, v in named.items()])
            else:
                self._wandb_run.log({**named, STEP_METRIC: step})
        except Exception as exc:  # noqa: BLE001 - a tracker must never stop the training
            self.failed = True
            print(f"slurmctl: experiment tracking ({self.backend}) failed, not logging to it for the rest of this "
                  f"attempt: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Finish the W&B run (its offline file is complete only then); nothing more is logged after."""
        self.failed = True
        run, self._wandb_run = self._wandb_run, None
        if run is not None:
            try:
                run.finish()
            except Exception:  # noqa: BLE001 - best effort: a drain or exit goes on regardless
                pass


# How a stopped run's last `end` (attempts.jsonl) ends its MLflow run.
_MLFLOW_STATUS = {"completed": "FINISHED", "cancelled": "KILLED", "idle": "KILLED"}


def end_mlflow_run(run_dir: Path, env=None, *, only_running: bool = False) -> str | None:
    """The job script, after `attempt end` decided to stop: mark the MLflow run FINISHED, KILLED or
    FAILED (a requeue never gets here: the next attempt continues the run). The status set, or None.
    `only_running`: leave a run that is not RUNNING (ended already) as it is."""
    env = os.environ if env is None else env
    uri, run_id = env.get("MLFLOW_TRACKING_URI"), env.get("MLFLOW_RUN_ID")
    ends = [e for e in read_jsonl(Path(run_dir) / rundir.ATTEMPTS) if e.get("event") == "end"]
    if not uri or not run_id or not ends or ends[-1].get("action") != "stop":
        return None
    login, server_user = login_from_env(env), server_user_from_env(env)
    if only_running and mlflow_call(uri, "GET", "runs/get", query={"run_id": run_id}, login=login,
                                    server_user=server_user)["run"]["info"].get("status") != "RUNNING":
        return None
    status = _MLFLOW_STATUS.get(ends[-1].get("outcome"), "FAILED")
    mlflow_call(uri, "POST", "runs/update", {"run_id": run_id, "status": status,
                                             "end_time": int(float(ends[-1].get("time") or time.time()) * 1000)},
                login=login, server_user=server_user)
    return status


def killed_run_env(run_dir: Path) -> dict[str, str]:
    """What the job script would have had for end_mlflow_run, for a run whose batch script was killed
    before it could end its MLflow run: the server and run id from run.json's ``tracking`` record, and
    the caller's own login (site.yaml tracking.mlflow_credentials). Empty when the run is not tracked
    with MLflow."""
    data = rundir.Run(Path(run_dir).name, Path(run_dir)).meta.get("tracking")
    if not isinstance(data, dict) or data.get("backend") != "mlflow" or not data.get("uri") or not data.get("run_id"):
        return {}
    from slurmctl.config.models import load_site_config  # why: only the epilog's child after a kill reads it

    site = load_site_config()
    login = login_from_file(site.tracking.mlflow_credentials)
    return {"MLFLOW_TRACKING_URI": str(data["uri"]), "MLFLOW_RUN_ID": str(data["run_id"]),
            SERVER_USER_ENV: site.tracking.mlflow_server_user or "",
            **(dict(zip(LOGIN_KEYS, login, strict=True)) if login else {})}


def main(argv: list[str] | None = None) -> int:
    """`python -m slurmctl.runtime.tracking end`: see end_mlflow_run, inside the job. With `--run-dir DIR`:
    the epilog's process as the job's user, after the batch script was killed (killed_run_env). Never
    fails the job."""
    args = sys.argv[1:] if argv is None else argv
    env: dict | os._Environ = os.environ
    run_dir = os.environ.get("SLURMCTL_RUN_DIR")
    if len(args) == 3 and args[:2] == ["end", "--run-dir"]:
        run_dir = args[2]
    elif args != ["end"]:
        run_dir = None
    if not run_dir:
        print("usage: python -m slurmctl.runtime.tracking end [--run-dir DIR] (inside a slurmctl job)", file=sys.stderr)
        return 0
    try:
        if len(args) == 3:
            env = killed_run_env(Path(run_dir))
        status = end_mlflow_run(Path(run_dir), env, only_running=len(args) == 3)
    except (OSError, ValueError, KeyError, MlflowError, UntrustedServer, SlurmctlError) as exc:
        print(f"slurmctl: could not mark the MLflow run ended: {exc}", file=sys.stderr)
        return 0
    if status:
        print(f"slurmctl: MLflow run {env.get('MLFLOW_RUN_ID')} marked {status}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
