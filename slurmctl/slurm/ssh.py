"""SSHRunner: run Slurm commands on a login node, behind the same ``Runner`` seam as LocalRunner.

- Strict host-key checking by default: the host must already be in known_hosts; an unknown or
  changed key is refused with the key's fingerprint and how to verify it (never auto-added).
- Key or agent authentication (no passwords are asked for: slurmctl runs non-interactively).
- One connection per slurmctl command, reused by every Slurm call and SFTP transfer it makes.
- argv is joined with ``shlex.join`` for the remote shell: user strings are always quoted.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import posixpath
import secrets
import shlex
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import paramiko

from slurmctl import rundir
from slurmctl.errors import HostKeyRefused, SlurmctlError, SlurmUnreachable, SSHError
from slurmctl.rundir import Run, RunRegistry, current_user
from slurmctl.slurm.client import SlurmClient
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


@dataclass(frozen=True)
class SSHTarget:
    host: str
    user: str | None = None
    port: int = 22

    @classmethod
    def parse(cls, text: str) -> SSHTarget:
        """`[user@]host[:port]`."""
        user, _, hostport = text.rpartition("@")
        host, sep, port = hostport.partition(":")
        if not host or (sep and not port.isdigit()):
            raise SlurmctlError(f"login host '{text}' is not of the form [user@]host[:port].",
                                "Pass e.g. `--host alice@login.example.org` or `--host login.example.org:2222`.",
                                code="invalid-login-host")
        return cls(host=host, user=user or None, port=int(port) if sep else 22)

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}{':' + str(self.port) if self.port != 22 else ''}"


class SSHRunner:
    """Runs each argv on the login node over one reused SSH connection."""

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
        return [*argv, f"{self.target.user + '@' if self.target.user else ''}{self.target.host}", remote]

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
            raise HostKeyRefused(f"No known_hosts file at {self.known_hosts}, so {self.target.host} cannot be verified.",
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
                           "Check the host name and port (`--host user@host:port`), and that sshd runs there.") from None
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


class RemoteSlurmClient(SlurmClient):
    """SlurmClient whose submissions first copy the run directory and the code to the login node.

    Paths are mirrored: the run dir lives at the same absolute path (the site's shared
    ``runs_root``) on both sides, and so does the workdir, so the rendered sbatch script is
    valid on the cluster unchanged.
    """

    runner: SSHRunner

    def __init__(self, runner: SSHRunner):
        super().__init__(runner)
        self.uploaded_files = 0
        self._run_dirs: list[Path] = []
        self._mirror: RunMirror | None = None

    def submit(self, script: Path, extra_args=()) -> int:
        run_dir = script.parent
        self._run_dirs.append(run_dir)
        self.uploaded_files += self.runner.upload_tree(run_dir, str(run_dir))
        workdir = _frozen_workdir(run_dir)
        if workdir is not None and workdir != run_dir and workdir.is_dir():
            self.uploaded_files += self.runner.upload_tree(workdir, str(workdir))
        return super().submit(script, extra_args)

    def mirrored_registry(self, root: Path) -> MirroredRunRegistry:
        """The caller's runs (<runs_root>/<cluster user>), read from the cluster (see RunMirror);
        one mirror per command."""
        user = self.runner.target.user or current_user()
        user_root = root.expanduser() / user
        if self._mirror is None or self._mirror.root != user_root:
            self._mirror = RunMirror(self.runner, user_root)
        return MirroredRunRegistry(self._mirror, root.expanduser(), user)

    def close(self) -> None:
        """Push what was written after sbatch (the `submitted` line of attempts.jsonl), then hang up."""
        try:
            for run_dir in self._run_dirs:
                if run_dir.is_dir():  # a failed submission removes its run dir
                    self.uploaded_files += self.runner.upload_tree(run_dir, str(run_dir))
        finally:
            self.runner.close()


def _frozen_workdir(run_dir: Path) -> Path | None:
    import yaml

    try:
        workdir = (yaml.safe_load((run_dir / rundir.RUN_YAML).read_text()) or {}).get("workdir")
    except (OSError, yaml.YAMLError):
        return None
    return Path(workdir) if workdir else None


# --- reading run directories that live on the cluster ------------------------------------------
# Mirroring, not a read abstraction: status, ls, logs, cost, diagnose and compare read `run.path`
# through plain pathlib (Run, CheckpointManager, watchdog_report, logs.tail_lines). Copying the few
# small files they read to the same local path, right before they read them, leaves all of that
# code unchanged; a read abstraction would have to be threaded through every one of them.

_LISTING_FILES = (rundir.RUN_JSON, rundir.ATTEMPTS, rundir.HEARTBEAT)  # what `ls` and `cost` read per run
_STATUS_FILES = (*_LISTING_FILES, rundir.RUN_YAML, rundir.METRICS, rundir.DRAIN_REQUEST, rundir.DRAIN_ACK)


class RunMirror:
    """Copies the small files of remote run dirs to the same local paths, only when they changed.

    Never checkpoint payloads: of checkpoints/ only the `.complete` markers (their mtime is the
    checkpoint's age) and `latest`; of logs/ only the log a command actually reads.
    """

    def __init__(self, runner: SSHRunner, root: Path):
        self.runner = runner
        self.root = root
        self._shared: bool | None = None
        self._listed = False

    def _active(self) -> bool:
        """False when the login node sees this machine's runs root (a shared filesystem): then the
        files are already here, and copying a file onto itself could truncate a live log."""
        if self._shared is None:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                probe = self.root / f".slurmctl-probe-{secrets.token_hex(4)}"
                probe.touch()
            except OSError as exc:
                raise SSHError(f"Cannot keep a local copy of the runs root {self.root}: {exc}.",
                               "Make runs_root writable here (slurmctl mirrors run files from the login node "
                               "to the same path).", code="ssh-mirror-failed") from None
            try:
                self.runner.sftp().stat(str(probe))
                self._shared = True
            except FileNotFoundError:
                self._shared = False
            finally:
                probe.unlink(missing_ok=True)
        return not self._shared

    def _guard(self, what: str, action) -> int:
        try:
            return action()
        except (OSError, paramiko.SSHException) as exc:
            raise SSHError(f"Reading {what} from the login node {self.runner.target} failed: {exc}.",
                           "Retry; check that the runs root on the cluster is readable by you.",
                           code="ssh-mirror-failed") from None

    def sync_listing(self) -> None:
        """run.json, attempts.jsonl and heartbeat.json of every run on the cluster (once per command)."""
        if self._listed or not self._active():
            return
        self._listed = True

        def sync() -> int:
            try:
                entries = self.runner.sftp().listdir_attr(str(self.root))
            except FileNotFoundError:
                return 0
            return sum(self._sync_files(self.root / e.filename, _LISTING_FILES) is not None
                       for e in entries if stat.S_ISDIR(e.st_mode or 0))
        self._guard(f"the runs in {self.root}", sync)

    def sync_run(self, path: Path) -> bool:
        """What `status` reads of one run; False when the cluster has no such run dir."""
        if not self._active():
            return (path / rundir.RUN_JSON).exists()
        return bool(self._guard(f"run {path.name}", lambda: self._sync_run(path)))

    def fetch(self, path: Path) -> Path:
        """One file (a log) read now: re-fetched on every call, so a followed log keeps growing."""
        if self._active():
            self._guard(str(path), lambda: self.runner.fetch_if_changed(str(path), path))
        return path

    def _sync_files(self, run_dir: Path, names: tuple[str, ...]) -> set[str] | None:
        """`names` of one run dir (one listing, then only what changed); None if it is no run."""
        try:
            present = {a.filename: a for a in self.runner.sftp().listdir_attr(str(run_dir))}
        except FileNotFoundError:
            return None
        if rundir.RUN_JSON not in present:
            return None
        for name in names:
            if name in present:
                self.runner.fetch_if_changed(str(run_dir / name), run_dir / name, present[name])
            else:  # gone on the cluster (a handled drain.request)
                (run_dir / name).unlink(missing_ok=True)
        return set(present)

    def _sync_run(self, run_dir: Path) -> int:
        present = self._sync_files(run_dir, _STATUS_FILES)
        if present is None:
            return 0
        checkpoints = Run(run_dir.name, run_dir).checkpoint_dir  # from the run.json just fetched
        try:
            remote_entries = self.runner.sftp().listdir_attr(str(checkpoints))
        except FileNotFoundError:
            remote_entries = []
        checkpoints.mkdir(parents=True, exist_ok=True)
        names = set()
        for entry in remote_entries:
            names.add(entry.filename)
            if entry.filename == "latest":
                self.runner.fetch_if_changed(str(checkpoints / "latest"), checkpoints / "latest", entry)
            elif stat.S_ISDIR(entry.st_mode or 0):  # empty here but for its marker: that is all status needs
                (checkpoints / entry.filename).mkdir(exist_ok=True)
                marker = checkpoints / entry.filename / ".complete"
                self.runner.fetch_if_changed(str(marker), marker)
        for stale in checkpoints.iterdir():  # pruned or renamed (.tmp) on the cluster
            if stale.name not in names and stale.is_dir():
                (stale / ".complete").unlink(missing_ok=True)
                try:
                    stale.rmdir()
                except OSError:
                    pass  # holds more than a mirrored marker: not ours to delete
        if "watchdog" in present:
            state = run_dir / "watchdog" / "state.json"
            self.runner.fetch_if_changed(str(state), state)
        return 1


class MirroredRun(Run):
    """A Run whose logs are fetched from the login node when they are read."""

    def __init__(self, run: Run, mirror: RunMirror):
        super().__init__(run.run_id, run.path)
        self._mirror = mirror

    def log_path(self, job_id: int) -> Path:
        return self.refresh(super().log_path(job_id))

    def refresh(self, path: Path) -> Path:
        return self._mirror.fetch(path)


class MirroredRunRegistry(RunRegistry):
    """The registry as the cluster sees it: listing and lookup first mirror the remote run dirs."""

    def __init__(self, mirror: RunMirror, runs_root: Path, user: str):
        super().__init__(runs_root, user)
        self.mirror = mirror

    def list(self) -> list[Run]:
        self.mirror.sync_listing()
        return [MirroredRun(r, self.mirror) for r in super().list()]

    def get(self, ref: str) -> Run:
        by_id = "/" not in ref and self.mirror.sync_run(self.root / ref)
        if not by_id:  # a run name, an id prefix or a path: resolve it against every run
            self.mirror.sync_listing()
        run = super().get(ref)
        if not by_id:
            self.mirror.sync_run(run.path)
        return MirroredRun(run, self.mirror)
