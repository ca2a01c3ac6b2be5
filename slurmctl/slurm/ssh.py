"""SSHRunner: run Slurm commands on a login node, behind the same ``Runner`` seam as LocalRunner.

The transport only: connection, host keys, commands, SFTP transfers. What travels to and from the
cluster (the run dir, the workdir under its ignore rules, the mirrored run files) is slurmctl.rundir.remote.

- Strict host-key checking by default: the host must already be in known_hosts; an unknown or
  changed key is refused with the key's fingerprint and how to verify it (never auto-added).
- Key or agent authentication (no passwords are asked for: slurmctl runs non-interactively).
- One connection per slurmctl command, reused by every Slurm call and SFTP transfer it makes.
- argv is joined with ``shlex.join`` for the remote shell: user strings are always quoted.
- The login host is validated (a name or address, never something starting with '-'), and every
  OpenSSH argv puts ``--`` before the destination: `--host -oProxyCommand=...` cannot become an
  ssh option.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import posixpath
import re
import shlex
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import paramiko

from slurmctl.errors import HostKeyRefused, SlurmctlError, SlurmUnreachable, SSHError
from slurmctl.slurm.runner import CommandResult

# paramiko logs transport errors (with tracebacks) from its thread; slurmctl reports them itself
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint format, so users can compare it with `ssh-keygen -lf`."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _RefuseUnknownHost(paramiko.MissingHostKeyPolicy):
    def __init__(self, known_hosts: Path):
        self.known_hosts = known_hosts

    def missing_host_key(self, client, hostname, key):
        raise HostKeyRefused(
            f"The SSH host key of {hostname} is not in {self.known_hosts} "
            f"({key.get_name()} {fingerprint(key)}); slurmctl refuses unknown hosts.",
            "Verify the fingerprint with your admin, then add the host once with "
            f"`ssh-keyscan -p PORT HOST >> {self.known_hosts}` (or connect once with plain `ssh`).",
        )


# A DNS name (labels of letters, digits, '-', not starting with '-') or a dotted IPv4 address.
_HOST_RE = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}))*\.?")
_USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class SSHTarget:
    host: str
    user: str | None = None
    port: int = 22

    @classmethod
    def parse(cls, text: str) -> SSHTarget:
        """`[user@]host[:port]`; host a DNS name or an IPv4 address, user a login name: nothing that
        OpenSSH could read as an option (a leading '-') or a shell could split."""
        user, _, hostport = text.rpartition("@")
        host, sep, port = hostport.partition(":")
        if not _HOST_RE.fullmatch(host) or (user and not _USER_RE.fullmatch(user)) or \
                (sep and not (port.isdigit() and 0 < int(port) < 65536)):
            raise SlurmctlError(f"login host {text!r} is not of the form [user@]host[:port] (a host name or "
                                "address, a login name, a port number).",
                                "Pass e.g. `--host alice@login.example.org` or `--host login.example.org:2222` "
                                "(or set login_host in ~/.config/slurmctl/config.yaml).",
                                code="invalid-login-host")
        return cls(host=host, user=user or None, port=int(port) if sep else 22)

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}{':' + str(self.port) if self.port != 22 else ''}"


class SSHRunner:
    """Runs each argv on the login node over one reused SSH connection."""

    @classmethod
    def for_login(cls, host: str, config) -> SSHRunner:
        """The runner for `host` with the user's settings (a config.user UserConfig)."""
        return cls(SSHTarget.parse(host),
                   key_filename=str(Path(config.ssh_key).expanduser()) if config.ssh_key else None,
                   known_hosts=Path(config.known_hosts).expanduser(),
                   strict_host_key=config.strict_host_key_checking)

    def __init__(self, target: SSHTarget, *, key_filename: str | None = None, known_hosts: Path | None = None,
                 strict_host_key: bool = True, allow_agent: bool = True, connect_timeout: float = 10.0):
        self.target = target
        self.key_filename = key_filename
        self.known_hosts = known_hosts or Path("~/.ssh/known_hosts").expanduser()
        self.strict_host_key = strict_host_key
        self.allow_agent = allow_agent
        self.connect_timeout = connect_timeout
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self.connections = 0  # how many SSH connections this runner opened (one is the goal)

    # --- connection -------------------------------------------------------------------------

    def openssh_argv(self, command: list[str], environment: dict[str, str] | None = None) -> list[str]:
        """OpenSSH argv (with a terminal) running `command` on the login node under the same trust
        settings as the paramiko connection: paramiko cannot hand a local TTY to a remote pty."""
        argv = ["ssh", "-t", "-o", "StrictHostKeyChecking=yes" if self.strict_host_key else "StrictHostKeyChecking=no",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", f"ConnectTimeout={int(self.connect_timeout)}",
                "-p", str(self.target.port)]
        if self.key_filename:
            argv += ["-i", self.key_filename]
        remote = shlex.join([*(["env", *(f"{k}={v}" for k, v in environment.items())] if environment else []),
                             *command])
        # `--` ends ssh's options: whatever the destination says, it is the destination
        return [*argv, "--", f"{self.target.user + '@' if self.target.user else ''}{self.target.host}", remote]

    def attach(self, argv: list[str]) -> int:
        """Run an interactive command on the login node with this terminal attached."""
        try:
            return subprocess.call(self.openssh_argv(argv))
        except FileNotFoundError:
            raise SSHError("the OpenSSH client (`ssh`) is not installed here.",
                           "Install openssh-client to open interactive sessions through the login node.") from None
    def _connect(self) -> paramiko.SSHClient:
        if self._client is not None and self._client.get_transport() and self._client.get_transport().is_active():
            return self._client
        client = paramiko.SSHClient()
        if self.known_hosts.exists():
            client.load_host_keys(str(self.known_hosts))
        elif self.strict_host_key:
            raise HostKeyRefused(f"No known_hosts file at {self.known_hosts}, so {self.target.host} "
                                 "cannot be verified.",
                                 f"Create it with the login node's verified key: `ssh-keyscan -p {self.target.port} "
                                 f"{self.target.host} >> {self.known_hosts}`.")
        client.set_missing_host_key_policy(_RefuseUnknownHost(self.known_hosts) if self.strict_host_key
                                           else paramiko.WarningPolicy())
        where = str(self.target)
        try:
            client.connect(self.target.host, port=self.target.port, username=self.target.user,
                           key_filename=self.key_filename, allow_agent=self.allow_agent,
                           look_for_keys=self.key_filename is None, timeout=self.connect_timeout,
                           banner_timeout=self.connect_timeout, auth_timeout=self.connect_timeout)
        except SlurmctlError:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyRefused(
                f"The SSH host key of {self.target.host} CHANGED: it offered {fingerprint(exc.key)}, but "
                f"{self.known_hosts} expects {fingerprint(exc.expected_key)}. This can be an attack.",
                "Do not continue. Ask your admin whether the login node was rebuilt; only then remove the old "
                f"line with `ssh-keygen -R {self.target.host}` and add the new verified key.") from None
        except paramiko.AuthenticationException as exc:
            client.close()
            raise SSHError(f"The login node {where} refused authentication ({exc}).",
                           "Load your key into ssh-agent (`ssh-add`), or set `ssh_key` in "
                           "~/.config/slurmctl/config.yaml; check the user name in `--host user@host`.",
                           code="ssh-auth-failed") from None
        except (OSError, paramiko.SSHException) as exc:
            client.close()
            # TCP connects but no SSH handshake: paramiko says "banner" or, if its thread died first,
            # "No existing session"
            if isinstance(exc, TimeoutError) or "banner" in str(exc) or "No existing session" in str(exc):
                raise SSHError(f"The login node {where} did not answer within {self.connect_timeout:.0f} s ({exc}).",
                               "Check the host name, the port, your VPN, and that the login node is up.") from None
            raise SSHError(f"Cannot connect to the login node {where}: {exc}.",
                           "Check the host name and port (`--host user@host:port`), and that sshd runs there.",
                           ) from None
        self._client = client
        self.connections += 1
        return client

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # --- the Runner interface ------------------------------------------------------------------
    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        client = self._connect()
        command = shlex.join(argv)
        try:
            channel = client.get_transport().open_session(timeout=self.connect_timeout)
            channel.settimeout(timeout)
            channel.exec_command(command)
            stdout = channel.makefile("rb").read().decode(errors="replace")
            stderr = channel.makefile_stderr("rb").read().decode(errors="replace")
            code = channel.recv_exit_status()
            channel.close()
        except TimeoutError:
            raise SlurmUnreachable(f"`{argv[0]}` on {self.target} did not answer within {timeout:.0f} s.",
                                   "The Slurm controller or the login node may be overloaded; retry in a minute, "
                                   "then tell your admin.") from None
        except (OSError, paramiko.SSHException) as exc:
            self.close()
            raise SSHError(f"The SSH connection to {self.target} broke while running `{argv[0]}`: {exc}.",
                           "Retry; if it keeps happening, check your network and the login node.") from None
        if code == 127:
            raise SlurmUnreachable(f"`{argv[0]}` is not installed on the login node {self.target}.",
                                   "Point --host / login_host at the cluster's login node (it has the Slurm tools).")
        return CommandResult(tuple(argv), code, stdout, stderr)

    # --- SFTP ----------------------------------------------------------------------------------
    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = self._connect().open_sftp()
        return self._sftp

    def upload_tree(self, local: Path, remote: str) -> int:
        """Copy a file or directory tree to `remote` (created as needed); returns files copied.

        Modes are kept (job.sbatch stays executable). Symlinks are skipped: they would point at
        paths on this machine.
        """
        self.sftp()  # open the channel once; the helpers below reuse it
        self._makedirs(posixpath.dirname(remote.rstrip("/")) or "/")
        count = 0
        try:
            if local.is_file():
                return self._put_if_changed(local, remote)
            for dirpath, dirnames, filenames in os.walk(local):
                rel = Path(dirpath).relative_to(local)
                target = str(PurePosixPath(remote, *rel.parts))
                self._makedirs(target, stat.S_IMODE(Path(dirpath).stat().st_mode))
                dirnames[:] = [d for d in dirnames if not Path(dirpath, d).is_symlink() and d != "__pycache__"]
                for name in filenames:
                    src = Path(dirpath, name)
                    if src.is_symlink():
                        continue
                    count += self._put_if_changed(src, f"{target}/{name}")
        except OSError as exc:
            raise SSHError(f"Uploading {local} to {self.target}:{remote} failed: {exc}.",
                           "Check that the runs root exists on the cluster and that you may write there.",
                           code="ssh-upload-failed") from None
        return count

    def upload_files(self, local_root: Path, remote_root: str, rel_paths: list[str]) -> int:
        """Copy the listed files (posix paths relative to `local_root`) to the same places under
        `remote_root`; directories are created with their local modes. Returns files copied."""
        self.sftp()
        made: set[str] = set()
        count = 0
        try:
            self._makedirs(remote_root, stat.S_IMODE(local_root.stat().st_mode))
            for rel in rel_paths:
                parent = posixpath.dirname(rel)
                if parent and parent not in made:
                    for i, _ in enumerate(parts := parent.split("/")):
                        sub = "/".join(parts[:i + 1])
                        if sub not in made:
                            self._makedirs(f"{remote_root}/{sub}", stat.S_IMODE((local_root / sub).stat().st_mode))
                            made.add(sub)
                count += self._put_if_changed(local_root / rel, f"{remote_root}/{rel}")
        except OSError as exc:
            raise SSHError(f"Uploading {local_root} to {self.target}:{remote_root} failed: {exc}.",
                           "Check that the directory exists on the cluster and that you may write there.",
                           code="ssh-upload-failed") from None
        return count

    def _put_if_changed(self, src: Path, dst: str) -> int:
        """Copy unless dst has the same size and mtime (rsync's quick check). This also keeps a
        shared filesystem safe: writing a file onto itself would truncate it first."""
        sftp = self.sftp()
        local = src.stat()
        try:
            remote = sftp.stat(dst)
            if remote.st_size == local.st_size and int(remote.st_mtime or 0) == int(local.st_mtime):
                return 0
        except FileNotFoundError:
            pass
        sftp.put(str(src), dst)
        sftp.chmod(dst, stat.S_IMODE(local.st_mode))
        sftp.utime(dst, (int(local.st_atime), int(local.st_mtime)))
        return 1

    def fetch_if_changed(self, remote: str, local: Path, attr: paramiko.SFTPAttributes | None = None) -> int:
        """The reverse of `_put_if_changed`: copy remote to local unless size and mtime match; a file
        gone on the cluster goes here too. Growing append-only files (logs, *.jsonl) fetch only their
        new tail, so `logs -f` re-reads a few bytes per poll, not the whole log."""
        sftp = self.sftp()
        try:
            attr = attr or sftp.stat(remote)
        except FileNotFoundError:
            local.unlink(missing_ok=True)
            return 0
        have = local.stat() if local.is_file() else None
        if have and have.st_size == attr.st_size and int(have.st_mtime) == int(attr.st_mtime or 0):
            return 0
        local.parent.mkdir(parents=True, exist_ok=True)
        if have and local.suffix in (".jsonl", ".out") and attr.st_size > have.st_size:
            with sftp.open(remote, "rb") as src, open(local, "ab") as dst:
                src.seek(have.st_size)
                dst.write(src.read(attr.st_size - have.st_size))
        else:  # via a temporary file: a reader never sees half a heartbeat.json
            part = local.with_name(f".{local.name}.part")
            sftp.get(remote, str(part))
            os.replace(part, local)
        os.utime(local, (attr.st_mtime or 0, attr.st_mtime or 0))
        return 1

    def _makedirs(self, remote: str, mode: int = 0o755) -> None:
        sftp = self.sftp()
        parts = PurePosixPath(remote).parts
        for i in range(1, len(parts) + 1):
            path = str(PurePosixPath(*parts[:i]))
            try:
                sftp.stat(path)
            except FileNotFoundError:
                sftp.mkdir(path, mode)
