"""A real, throwaway sshd on 127.0.0.1 acting as the cluster's login node (tests only).

It gets its own host key (root's), one authorized client key and a known_hosts file that trusts
it. Users log in as themselves (alice by default): the client key, known_hosts and sftp.log live in
a private directory of that user's, since the CLI and sftp-server run as the user. sftp-server logs
at INFO to sftp.log, so tests can see which files were written over SFTP.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import as_user


@dataclass
class LoginNode:
    port: int
    client_key: Path
    known_hosts: Path
    host_key_pub: Path
    log: Path
    sftp_log: Path
    proc: subprocess.Popen
    user: str
    client_dir: Path  # the user's private directory with the key, known_hosts and sftp.log

    @property
    def host(self) -> str:
        return f"{self.user}@127.0.0.1:{self.port}"

    def user_config(self, path: Path, **extra) -> Path:
        import yaml

        path.write_text(yaml.safe_dump({"ssh_key": str(self.client_key), "known_hosts": str(self.known_hosts),
                                        **extra}))
        os.chown(path, *_owner_ids(path.parent))
        return path


def _owner_ids(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture(scope="module")
def login_node(tmp_path_factory) -> LoginNode:
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(sshd).exists():
        pytest.fail("sshd is missing: apt-get install openssh-server (listed in deploy/local/apt-extras.txt)")
    d = tmp_path_factory.mktemp("sshd")  # root's: host key, config, sshd log
    user = as_user("alice")
    c = user.make_dir("ssh-client")       # the user's: client key, authorized_keys, known_hosts, sftp.log
    _keygen(d / "host_key")
    _keygen(c / "client_key")
    # sshd reads authorized_keys as the user logging in: like ~/.ssh/authorized_keys, it is theirs
    (c / "authorized_keys").write_text((c / "client_key.pub").read_text())
    port = _free_port()
    host_pub = (d / "host_key.pub").read_text().split()
    (c / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (c / "sftp.log").touch()
    for f in c.iterdir():
        os.chown(f, user.uid, user.gid)
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    (d / "sshd_config").write_text(f"""\
ListenAddress 127.0.0.1
Port {port}
HostKey {d}/host_key
PidFile {d}/sshd.pid
AuthorizedKeysFile {c}/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
Subsystem sftp /usr/lib/openssh/sftp-server -e -l INFO 2>>{c}/sftp.log
LogLevel VERBOSE
""")
    log = d / "sshd.log"
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(d / "sshd_config")], stderr=log.open("w"))
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"sshd did not start:\n{log.read_text()}")
            time.sleep(0.05)
    node = LoginNode(port, c / "client_key", c / "known_hosts", d / "host_key.pub", log, c / "sftp.log", proc,
                     user.name, c)
    yield node
    proc.terminate()
    proc.wait(timeout=10)
    shutil.rmtree(c, ignore_errors=True)
