"""Integration tests run against the REAL local cluster (deploy/local/up; scripts/test starts it),
as the cluster's real users: alice and bob (account vision) and carol (account nlp).

Every CLI call, sbatch and scancel of a test runs as a user (`runuser -u alice -- env -i ...`, a
clean environment with the user's own HOME); root only does what an operator does (hooks, cron,
`scontrol` admin updates, reading run directories to check what happened). Files a test gives a
user live in a private directory under that user's home, owned by the user and removed afterwards.

The cluster is shared: tests must tolerate other jobs, use their own run names, and cancel only
the jobs they created.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

from slurmctl.config.models import load_site_config

REPO = Path(__file__).resolve().parents[2]
SLURMCTL = [sys.executable, "-m", "slurmctl.cli"]
USERS = {"alice": "vision", "bob": "vision", "carol": "nlp"}  # user -> Slurm account (deploy/local/up)
DEFAULT_USER = "alice"
# Passed from the test process into the user's clean environment when set: they select the cluster, and
# PYTHONPATH the code under test (a worktree put first; jobs inherit it from the submitting CLI).
PASS_ENV = ("SLURM_CONF", "SLURMCTL_SITE_CONFIG", "SLURMCTL_LOCAL_DIR", "PYTHONPATH")
TEST_DIR_NAME = "slurmctl-tests"  # under each user's home


@dataclass(frozen=True)
class User:
    """A Unix user of the local cluster; `run` executes argv as that user with a clean environment."""

    name: str

    @cached_property
    def pw(self) -> pwd.struct_passwd:
        return pwd.getpwnam(self.name)

    @property
    def uid(self) -> int:
        return self.pw.pw_uid

    @property
    def gid(self) -> int:
        return self.pw.pw_gid

    @property
    def home(self) -> Path:
        return Path(self.pw.pw_dir)

    @property
    def account(self) -> str | None:
        return USERS.get(self.name)

    @property
    def runs_root(self) -> Path:
        """This user's own runs directory, `<runs_root>/<user>` (read it as root; it is 0700)."""
        return load_site_config().runs_root_path / self.name

    def environment(self, extra: dict | None = None) -> dict[str, str]:
        env = {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "LANG": "C.UTF-8",
               "PATH": f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        env.update({k: os.environ[k] for k in PASS_ENV if k in os.environ})
        env.update({k: str(v) for k, v in (extra or {}).items()})
        return env

    def argv(self, argv, env: dict | None = None) -> list[str]:
        """`runuser -u USER -- env -i K=V... ARGV`: nothing of root's environment leaks in."""
        assignments = [f"{k}={v}" for k, v in self.environment(env).items()]
        return ["runuser", "-u", self.name, "--", "env", "-i", *assignments, *map(str, argv)]

    def run(self, argv, *, check: bool = False, env: dict | None = None, timeout: float = 300,
            cwd: Path | None = None, input: str | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run(self.argv(argv, env), capture_output=True, text=True, timeout=timeout,
                                cwd=str(cwd or self.home), input=input)
        if check and result.returncode != 0:
            raise AssertionError(f"[{self.name}] {' '.join(map(str, argv))} -> {result.returncode}\n"
                                 f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        return result

    def slurmctl(self, *args, check: bool = True, env: dict | None = None, timeout: float = 300,
                 cwd: Path | None = None) -> subprocess.CompletedProcess:
        """The real CLI, as this user would type it."""
        return self.run([*SLURMCTL, *args], check=check, env=env, timeout=timeout, cwd=cwd)

    def slurmctl_json(self, *args, **kwargs):
        args = list(args)
        at = args.index("--") if "--" in args else len(args)  # after `--` everything goes to sbatch
        return json.loads(self.slurmctl(*args[:at], "--json", *args[at:], **kwargs).stdout)

    def sbatch(self, *args: str, timeout: float = 90) -> int:
        """Submit as this user; returns the job id."""
        out = self.run(["sbatch", "--parsable", *args], check=True, timeout=timeout).stdout
        return int(out.strip().split(";")[0])

    def scancel(self, *job_ids) -> None:
        ids = [str(j) for j in job_ids if j]
        if ids:
            self.run(["scancel", *ids], timeout=60)

    def squeue(self, *args: str) -> str:
        return self.run(["squeue", *args], check=True, timeout=60).stdout

    def make_dir(self, label: str) -> Path:
        """A fresh directory only this user can reach: ~/slurmctl-tests/<label>-<hex>, 0700."""
        base = self.home / TEST_DIR_NAME
        if not base.is_dir():
            base.mkdir(mode=0o700)
            os.chown(base, self.uid, self.gid)
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)[:60]
        path = base / f"{safe}-{uuid.uuid4().hex[:6]}"
        path.mkdir(mode=0o700)
        os.chown(path, self.uid, self.gid)
        return path


ROOT = User("root")  # the operator


def as_user(name: str = DEFAULT_USER) -> User:
    return ROOT if name == "root" else User(name)


@pytest.fixture(scope="session", autouse=True)
def cluster():
    """Fail (never skip) when the cluster or its users are missing: CI must be red if Slurm is broken."""
    if shutil.which("sinfo") is None:
        pytest.fail("Slurm is not installed; run deploy/local/up (scripts/test does).")
    probe = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.fail(f"the local Slurm cluster is not answering ({probe.stderr.strip()}); run deploy/local/up")
    for name in USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            pytest.fail(f"user {name} does not exist; run deploy/local/up (it creates alice, bob and carol)")
    return load_site_config()


@pytest.fixture(scope="session")
def alice() -> User:
    return User("alice")


@pytest.fixture(scope="session")
def bob() -> User:
    return User("bob")


@pytest.fixture(scope="session")
def carol() -> User:
    return User("carol")


@pytest.fixture
def user_dir(request):
    """`user_dir("bob")` -> a fresh private directory of bob's; every one is removed after the test."""
    made: list[Path] = []

    def make(name: str = DEFAULT_USER) -> Path:
        made.append(as_user(name).make_dir(request.node.name))
        return made[-1]

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workdir(user_dir) -> Path:
    """alice's private directory for this test (the default user's code, run.yaml files, outputs)."""
    return user_dir(DEFAULT_USER)


def slurmctl(*args, check=True, env=None, timeout=300, user: str = DEFAULT_USER,
             cwd=None) -> subprocess.CompletedProcess:
    """Run the real CLI as `user` (default alice; "root" for operator commands)."""
    return as_user(user).slurmctl(*args, check=check, env=env, timeout=timeout, cwd=cwd)


def slurmctl_json(*args, user: str = DEFAULT_USER, **kwargs):
    return as_user(user).slurmctl_json(*args, **kwargs)


def sbatch(*args: str, user: str = DEFAULT_USER) -> int:
    return as_user(user).sbatch(*args)


def scancel(*job_ids, user: str = DEFAULT_USER) -> None:
    as_user(user).scancel(*job_ids)


def wait_for_state(run_id: str, states: set[str], timeout: float = 240, poll: float = 2.0,
                   user: str = DEFAULT_USER) -> dict:
    """Poll `slurmctl status --json` (as the run's owner) until the run's state is one of `states`."""
    deadline = time.monotonic() + timeout
    status = {}
    while time.monotonic() < deadline:
        status = slurmctl_json("status", run_id, user=user)
        if status["state"] in states:
            return status
        time.sleep(poll)
    raise AssertionError(f"{run_id} did not reach {states} in {timeout} s; last status: {status}")


def _owner(path: Path) -> tuple[int, int]:
    """uid, gid of the nearest existing ancestor (new files get the owner of where they are made)."""
    while not path.exists():
        path = path.parent
    st = path.stat()
    return st.st_uid, st.st_gid


def give(path: Path, owner: tuple[int, int] | None = None) -> Path:
    """chown `path` (recursively) to `owner`, default the owner of its parent directory."""
    uid, gid = owner or _owner(path.parent)
    for p in [path, *(path.rglob("*") if path.is_dir() and not path.is_symlink() else [])]:
        os.chown(p, uid, gid, follow_symlinks=False)
    return path


def write_run(directory: Path, spec: dict, files: dict[str, str] | None = None) -> Path:
    """A run.yaml (from a dict) plus code files in `directory`; returns the run.yaml path. Everything
    written belongs to the owner of the directory it is made in (a user's test dir: that user)."""
    import yaml

    owner = _owner(directory)
    missing = []
    at = directory
    while not at.exists():
        missing.append(at)
        at = at.parent
    directory.mkdir(parents=True, exist_ok=True)
    written = [*missing]
    for name, text in (files or {}).items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
        written.append(directory / name)
    path = directory / "run.yaml"
    path.write_text(yaml.safe_dump(spec))
    written.append(path)
    for p in written:
        os.chown(p, *owner, follow_symlinks=False)
    return path


def _previous_steps_finished(job_id: int) -> bool:
    """Every step of earlier attempts has an End in accounting (its processes are gone from the node)."""
    out = subprocess.run(["sacct", "-j", str(job_id), "--duplicates", "-n", "-P", "-o", "JobID,End"],
                         capture_output=True, text=True).stdout
    steps = [line.split("|") for line in out.splitlines() if "." in line.split("|")[0]]
    return all(end not in {"Unknown", ""} for _, end in steps)


def start_requeued_now(job_id: int, timeout: float = 120, restarts: int = 1) -> None:
    """Operator action (root): skip the ~120 s BeginTime of a requeued job, in case the run's own
    requeue expediter (slurmctl.runtime.attempt) has not already done so -- it usually has, and then
    the job is seen running again with Slurm's restart count at `restarts` (the requeue this call is
    about; 1 for a job's first). Starting it while the previous attempt's step is still winding down
    on the node makes slurmd refuse the launch ("Job credential revoked"), so wait for PENDING
    (BeginTime) AND for every earlier step to have ended. slurmd also refuses a credential issued in
    the same second as the previous attempt's revocation (whole-second timestamps), so the start
    comes at least two seconds after both are seen."""
    from slurmctl.errors import SlurmctlError
    from slurmctl.slurm.client import SlurmClient

    client = SlurmClient()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = client.requeue_wait(job_id)
        if view is None:
            return  # ended: nothing left to start
        state, reason, _ = view
        if state == "PENDING" and reason == "BeginTime":
            if _previous_steps_finished(job_id):
                time.sleep(2.0)
                try:
                    client.update_job(job_id, StartTime="now")
                except SlurmctlError:  # the expediter was first: the job is no longer pending
                    pass
                return
        elif state in {"RUNNING", "CONFIGURING"}:
            info = client.job_info(job_id)
            if info is not None and info.restarts >= restarts:
                return  # already past the wait (the expediter)
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} was neither requeued into PENDING (BeginTime, steps ended) nor running "
                         f"again after requeue {restarts} within {timeout} s")


def wait_ended_in_sacct(jobs: dict[int, str], timeout: float = 120) -> None:
    """Wait until slurmdbd holds an ended record for each job id with that job name. The name matters:
    a cluster whose controller state was reset reuses job ids, and until the new record reaches
    slurmdbd `sacct -j` answers with the old job of the same id."""
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        out = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-o", "JobIDRaw,JobName,State,End", "-j",
                              ",".join(map(str, jobs))], capture_output=True, text=True).stdout
        ended = {int(f[0]) for f in (line.split("|") for line in out.splitlines())
                 if len(f) == 4 and f[0].isdigit() and f[1] == jobs.get(int(f[0])) and f[3] not in ("Unknown", "")
                 and f[2].split(" ")[0] not in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED")}
        if ended == set(jobs):
            return
        time.sleep(1)
    raise AssertionError(f"jobs {sorted(jobs)} did not end in sacct within {timeout} s:\n{out}")
