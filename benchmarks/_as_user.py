"""Benchmarks that touch Slurm do it as a cluster user (alice on the local cluster), never as root,
and act only on the jobs they submitted themselves.

Run as root (the operator), every Slurm command goes through `runuser -u <user> --`; run as a
normal user, it runs as that user. The user is $SLURMCTL_BENCH_USER (default: alice, which
deploy/local/up creates).
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys

USER = os.environ.get("SLURMCTL_BENCH_USER", "alice")


def bench_user() -> pwd.struct_passwd:
    """The account the benchmark submits as; a clear exit when it does not exist."""
    name = USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise SystemExit(f"benchmark user '{name}' does not exist: run deploy/local/up (it creates alice, bob and "
                         "carol), or set SLURMCTL_BENCH_USER to a user with a Slurm association.") from None


def reexec_as_user() -> None:
    """Started as root: run this whole benchmark again as the benchmark user (what a researcher
    runs is timed as a researcher runs it). The venv and the repo are readable by every user."""
    if os.geteuid() == 0:
        user, script = bench_user().pw_name, os.path.abspath(sys.argv[0])
        os.chdir("/tmp")
        os.execvp("runuser", ["runuser", "-u", user, "--", sys.executable, script, *sys.argv[1:]])


def as_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", bench_user().pw_name, "--", *argv]


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """A Slurm command as the benchmark user, from a directory every user can enter."""
    kwargs.setdefault("cwd", "/tmp")
    return subprocess.run(as_user(argv), capture_output=True, text=True, **kwargs)


def submit_held(name: str, ids: list[int], *, partition: str = "l4-dev", comment: str | None = None,
                extra: tuple[str, ...] = ()) -> int:
    """One held job (it never starts, so no process of it ever runs); its id is appended to `ids`
    as soon as Slurm returns it, so the caller's `finally` cancels it even if a later submit fails."""
    argv = ["sbatch", "--parsable", "--hold", "-p", partition, "-J", name, "-o", "/dev/null",
            *(["--comment", comment] if comment else []), *extra, "--wrap", "true"]
    out = run(argv, check=False)
    if out.returncode != 0:
        raise SystemExit(f"sbatch as {bench_user().pw_name} failed: {out.stderr.strip()}")
    job_id = int(out.stdout.strip().split(";")[0])
    ids.append(job_id)
    return job_id


def cancel(ids: list[int]) -> None:
    """Cancel exactly these jobs, as their owner (Slurm refuses a user another user's job anyway)."""
    if ids:
        run(["scancel", *map(str, ids)], check=False)
