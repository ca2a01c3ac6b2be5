"""Inside a `slurmctl dev --jupyter` job: JupyterLab on a free loopback port of the node.

Jupyter listens on 127.0.0.1 only: other users of the node cannot reach it, and the user reaches it
through `ssh -L` (via the login node to the node). The port is a free one, chosen here and given to
Jupyter with no retries: if another process takes it first, Jupyter fails to start and says so,
instead of moving to some other port the printed URL would not name. Jupyter writes its own
server file (`jpserver-<pid>.json`: port, url, token) into a runtime directory private to this job;
`slurmctl dev` reads the URL from that file only, never from what it asked for.

Standard library only (runs with the site's python on the node).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
import sys
from pathlib import Path

LOOPBACK = "127.0.0.1"
SERVER_FILE_GLOB = "jpserver-*.json"
MAX_SERVER_FILE_BYTES = 64 * 1024


def runtime_dir(home: Path, job_id: int) -> Path:
    """Where the job's Jupyter writes its server file (the user's home: the login node sees it)."""
    return home / ".local" / "state" / "slurmctl" / "jupyter" / str(int(job_id))


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def jupyter_argv(python: str, port: int, idle: int) -> list[str]:
    return [python, "-m", "jupyterlab", "--no-browser", f"--ip={LOOPBACK}", f"--port={port}", "--port-retries=0",
            f"--ServerApp.shutdown_no_activity_timeout={idle}",
            f"--MappingKernelManager.cull_idle_timeout={idle}", "--MappingKernelManager.cull_interval=60"]


def private_dir(path: Path) -> Path:
    """`path` as a fresh-or-own 0700 directory; refuses one that is a symlink or someone else's."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(f"{path} is not a directory of this user's")
    os.chmod(path, 0o700)
    return path


def read_server_file(directory: Path, uid: int) -> dict | None:
    """The server file Jupyter wrote in `directory` (the newest, if it restarted), or None. Only a
    regular file of `uid`'s, not writable by others, in a directory of theirs that only they can
    write, and naming a loopback URL on the port it says."""
    try:
        st = os.lstat(directory)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
        return None
    best: tuple[float, dict] | None = None
    for path in directory.glob(SERVER_FILE_GLOB):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != uid or info.st_mode & 0o022:
                continue
            data = fh.read(MAX_SERVER_FILE_BYTES + 1)
        try:
            server = json.loads(data) if len(data) <= MAX_SERVER_FILE_BYTES else None
        except ValueError:
            continue
        if not isinstance(server, dict) or not _loopback_server(server):
            continue
        if best is None or info.st_mtime > best[0]:
            best = (info.st_mtime, server)
    return best[1] if best else None


def _loopback_server(server: dict) -> bool:
    port, url = server.get("port"), server.get("url")
    return (isinstance(port, int) and 0 < port < 65536 and isinstance(url, str)
            and url.startswith((f"http://{LOOPBACK}:{port}/", f"http://localhost:{port}/")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurmctl.runtime.jupyter")
    parser.add_argument("--idle", type=int, required=True, help="seconds without activity before Jupyter stops")
    args = parser.parse_args(argv)
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if not job_id.isdigit():
        print("slurmctl: not inside a Slurm job (no SLURM_JOB_ID)", file=sys.stderr)
        return 2
    directory = private_dir(runtime_dir(Path.home(), int(job_id)))
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(directory)}
    port = free_loopback_port()
    print(f"slurmctl: starting JupyterLab on {LOOPBACK}:{port}", file=sys.stderr, flush=True)
    os.execve(sys.executable, jupyter_argv(sys.executable, port, args.idle), env)


if __name__ == "__main__":
    sys.exit(main())
