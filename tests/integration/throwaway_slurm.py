"""A throwaway Slurm cluster beside the shared one: its own MariaDB, slurmdbd, slurmctld and slurmds.

For tests that must run production's Slurm configuration (deploy/slurm/*.conf, accounting.sh) on
real daemons without touching the shared local cluster: own state directory, own ports, own
cluster name, own munge key and munged. Everything it starts is stopped by `close()`, by pid, and the
directory is removed.

Its ports are picked free, released and then bound by its daemons a few seconds later, and
slurm.conf (which names them) is world-readable: another user can bind one first and receive what
root's commands send there. With the machine's munge key, that is a root credential the real
slurmdbd or slurmctld accepts when replayed. So every cluster mints its credentials with a key made
for it alone, through its own munged (run as the `munge` account, its socket in a directory only
that account writes), and the real cluster refuses them; and before root's commands first talk to
slurmdbd or slurmctld, the port's listener must be root's.

Its MariaDB runs on the machine every user shares, for minutes per test, so it is set up as the
deployment's (deploy/local/up) and tighter: mariadbd runs as the `mysql` account, never root; DB root
is `unix_socket` only (the connecting process must BE root); the socket sits in a directory only
`mysql` can enter; TCP is bound to loopback for slurmdbd, whose account has a password made for this
cluster alone; `secure_file_priv` confines SELECT ... INTO OUTFILE and LOAD_FILE to a private directory.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from slurmctl.sockowner import listener_uid


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: every socket stays bound until all are picked, so the kernel
    cannot hand the same port out twice (one free_port() at a time could)."""
    held = []
    try:
        for _ in range(count):
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


START_TIMEOUT = 180  # seconds for a daemon to answer: the 2-core machine is often loaded by other sessions


class ThrowawayCluster:
    def __init__(self, name: str):
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix=f"slurmctl-{name}-"))
        self.dir.chmod(0o755)  # users reach slurm.conf and their job directory through it
        for sub in ("db", "run", "log", "state", "jobs"):
            (self.dir / sub).mkdir()
        (self.dir / "jobs").chmod(0o1777)
        # The database's own directories: the datadir, the socket's and INTO OUTFILE's, mysql's, 0700.
        self.db_run, self.db_files = self.dir / "db-run", self.dir / "db-files"
        self.db_socket = self.db_run / "db.sock"
        self.db_password = secrets.token_urlsafe(24)  # slurmdbd's account: this cluster's alone
        self.conf = self.dir / "slurm.conf"
        # This cluster's munged: its key, socket, pid and seed, in a directory of the munge account.
        self.munge_dir = self.dir / "munge"
        self.munge_socket = self.munge_dir / "munge.socket.2"
        self.db_port, self.dbd_port, self.ctld_port = free_ports(3)
        self.procs: list[subprocess.Popen] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # --- configuration -----------------------------------------------------------------------------
    def operator_lines(self) -> str:
        """What slurm-operator 1.1.2 writes first (controller_config.go, accounting and cgroup on), with
        this cluster's paths and ports, and this machine's 22.05 substitutes where 25.11 differs.

        Left out, 25.11-only or needing files this machine has not: AuthType/CredType auth/slurm
        (munge here), AuthAltTypes=auth/jwt + AuthAltParameters (JWT keys), AuthInfo=use_client_ids
        (an auth/slurm option), CommunicationParameters=block_null_hash, MetricsType=metrics/openmetrics.
        Replaced: proctrack/cgroup and task/cgroup (no cgroup delegation here), jobacct_gather/cgroup."""
        host = socket.gethostname().split(".")[0]
        return "\n".join([
            f"ClusterName={self.name}", "SlurmUser=root", f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}", f"StateSaveLocation={self.dir}/state", "SlurmdUser=root",
            f"SlurmdSpoolDir={self.dir}/state/slurmd-%n", "ReturnToService=2", "MaxNodeCount=1024", "GresTypes=gpu",
            f"SlurmctldLogFile={self.dir}/log/slurmctld.log", f"SlurmSchedLogFile={self.dir}/log/slurmctld.log",
            f"SlurmdLogFile={self.dir}/log/slurmd-%n.log", "LogTimeFormat=iso8601,format_stderr",
            f"SlurmctldPidFile={self.dir}/run/slurmctld.pid", f"SlurmdPidFile={self.dir}/run/slurmd-%n.pid",
            "AuthType=auth/munge", "CredType=cred/munge",  # operator: auth/slurm (25.11, sackd keys)
            f"AuthInfo=socket={self.munge_socket}",  # operator: use_client_ids; here this cluster's own munged
            f"AccountingStoragePass={self.munge_socket}",  # the munged for slurmdbd connections (22.05)
            "SelectTypeParameters=CR_Core_Memory",
            "SlurmctldParameters=enable_configless,enable_stepmgr",
            "ProctrackType=proctrack/linuxproc",  # operator: proctrack/cgroup (no cgroup delegation here)
            "PrologFlags=Contain",
            "TaskPlugin=task/none",               # operator: task/affinity,task/cgroup
            "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={self.dbd_port}", "AccountingStorageTRES=gres/gpu",
            "JobAcctGatherType=jobacct_gather/linux", "MailProg=/bin/true", "SlurmdParameters=config_overrides",
            "DefMemPerCPU=100",
            "#", "### EXTRA CONFIG ###", ""])

    def write(self, extra: str, nodes: dict[str, str]) -> None:
        """slurm.conf = the operator's lines + `extra` (our parts) + one NodeName line per node."""
        taken = {self.db_port, self.dbd_port, self.ctld_port}
        ports = [p for p in free_ports(len(nodes) + len(taken)) if p not in taken][:len(nodes)]
        lines = [f"NodeName={n} NodeAddr=127.0.0.1 Port={port} CPUs=1 RealMemory=1000 State=UNKNOWN"
                 for n, port in zip(nodes, ports)]
        self.conf.write_text(self.operator_lines() + extra + "\n" + "\n".join(lines) + "\n")
        self.conf.chmod(0o644)
        self.nodes = nodes
        (self.dir / "slurmdbd.conf").write_text("\n".join([
            "AuthType=auth/munge", f"AuthInfo={self.munge_socket}", "DbdHost=localhost", "DbdAddr=127.0.0.1",
            f"DbdPort={self.dbd_port}",
            "SlurmUser=root", f"LogFile={self.dir}/log/slurmdbd.log", f"PidFile={self.dir}/run/slurmdbd.pid",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={self.db_port}",
            "StorageUser=slurm", f"StoragePass={self.db_password}", "StorageLoc=slurm_acct_db", ""]))
        (self.dir / "slurmdbd.conf").chmod(0o600)

    # --- daemons ------------------------------------------------------------------------------------
    def _start(self, argv: list[str], log: str, **kw) -> subprocess.Popen:
        out = open(self.dir / "log" / log, "ab")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=self.env, start_new_session=True, **kw)
        self.procs.append(proc)
        return proc

    def _wait(self, what: str, check, timeout: float, log: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.3)
        raise AssertionError(f"{what} not ready after {timeout} s:\n" + self.log(log)[-3000:])

    def _wait_for_root_listener(self, what: str, port: int, log: str) -> None:
        """Wait until something listens on 127.0.0.1:`port`, and fail unless it is root's (our daemon):
        a listener of another uid took the port between free_ports() and the daemon's bind."""
        self._wait(f"{what}'s port {port}", lambda: listener_uid("127.0.0.1", port) is not None, START_TIMEOUT, log)
        uid = listener_uid("127.0.0.1", port)
        if uid != 0:
            raise AssertionError(f"{what}'s port {port} is held by uid {uid}, not by {what} (root): another user "
                                 "bound it first; nothing was sent to it. Run the test again (new ports).")

    def munge(self, *args: str, user: str | None = None) -> subprocess.CompletedProcess:
        """`munge` against this cluster's munged, as root or `user`."""
        argv = ["munge", f"--socket={self.munge_socket}", *args]
        if user:
            argv = ["runuser", "-u", user, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)

    def start_munge(self) -> None:
        """This cluster's own munged, as the `munge` account like the system one, with a key made now:
        1024 random bytes, 0400, the munge account's (munged refuses a key anyone else can read)."""
        munge = pwd.getpwnam("munge")
        self.munge_dir.mkdir(mode=0o755)  # 0755: every user's srun and sbatch reach the socket
        os.chown(self.munge_dir, munge.pw_uid, munge.pw_gid)
        key = self.munge_dir / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        try:
            os.write(fd, secrets.token_bytes(1024))
        finally:
            os.close(fd)
        os.chown(key, munge.pw_uid, munge.pw_gid)
        self._start(["munged", "--foreground", f"--key-file={key}", f"--socket={self.munge_socket}",
                     f"--pid-file={self.munge_dir}/munged.pid", f"--seed-file={self.munge_dir}/munged.seed"],
                    "munged.out",  # in the foreground munged logs to stderr
                    user=munge.pw_uid, group=munge.pw_gid, extra_groups=[])
        self._wait("munged", lambda: self.munge("-n").returncode == 0, 60, "munged.out")

    def sql(self, statement: str) -> subprocess.CompletedProcess:
        """`statement` as DB root, through the socket: root's only (unix_socket authentication)."""
        return subprocess.run(["mariadb", "--no-defaults", "--protocol=socket", f"--socket={self.db_socket}",
                               "-uroot", "-e", statement], capture_output=True, text=True, timeout=20)

    def start_db(self) -> None:
        mysql = pwd.getpwnam("mysql")  # the mariadb-server package's account (deploy/local/up installs it)
        for path in (self.dir / "db", self.db_run, self.db_files):
            path.mkdir(mode=0o700, exist_ok=True)
            os.chown(path, mysql.pw_uid, mysql.pw_gid)
        install = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.dir}/db", "--user=mysql",
                                  "--auth-root-authentication-method=socket", "--skip-test-db"],
                                 capture_output=True, text=True, timeout=120)
        assert install.returncode == 0, install.stdout + install.stderr
        self.mariadbd = self._start(
            ["mariadbd", "--no-defaults", f"--datadir={self.dir}/db", "--user=mysql", "--bind-address=127.0.0.1",
             f"--port={self.db_port}", f"--socket={self.db_socket}", f"--pid-file={self.db_run}/db.pid",
             f"--secure-file-priv={self.db_files}", "--innodb-buffer-pool-size=64M", "--skip-name-resolve"],
            "mariadbd.log")
        self._wait("mariadbd", lambda: self.sql("SELECT 1").returncode == 0, 60, "mariadbd.log")
        # As deploy/local/up: no root account but root@localhost (unix_socket), no anonymous account.
        accounts = self.sql("SELECT CONCAT(QUOTE(user), '@', QUOTE(host)) FROM mysql.user "
                            "WHERE (user = 'root' AND host <> 'localhost') OR user = ''")
        assert accounts.returncode == 0, accounts.stderr
        drops = "".join(f"DROP USER {a};" for a in accounts.stdout.splitlines()[1:])
        made = self.sql(f"{drops}ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket;"
                        f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{self.db_password}';"
                        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        assert made.returncode == 0, made.stderr

    def start(self) -> None:
        self.start_munge()
        self.start_db()
        self._start(["slurmdbd", "-D"], "slurmdbd.out")  # reads slurmdbd.conf beside $SLURM_CONF
        self._wait_for_root_listener("slurmdbd", self.dbd_port, "slurmdbd.log")
        self._wait("slurmdbd", lambda: self.run(["sacctmgr", "-n", "list", "cluster"]).returncode == 0, START_TIMEOUT,
                   "slurmdbd.log")
        added = self.run(["sacctmgr", "-i", "add", "cluster", self.name])
        assert added.returncode == 0, added.stdout + added.stderr

    def start_slurm(self) -> None:
        self._start_slurmctld()
        for node in self.nodes:
            self._start(["slurmd", "-D", "-N", node, "-f", str(self.conf)], f"slurmd-{node}.out")
        self._wait("slurmds", lambda: all(self.node_state(n) in ("idle", "mixed", "allocated") for n in self.nodes),
                   START_TIMEOUT, "slurmctld.log")

    def _start_slurmctld(self) -> None:
        self.slurmctld = self._start(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld.out")
        self._wait_for_root_listener("slurmctld", self.ctld_port, "slurmctld.log")
        self._wait("slurmctld", lambda: "is UP" in self.run(["scontrol", "ping"]).stdout, START_TIMEOUT,
                   "slurmctld.log")

    def restart_slurmctld(self) -> None:
        """Stop and start slurmctld, its state kept; the logs of the start before move to *.before."""
        self.slurmctld.terminate()
        self.slurmctld.wait(timeout=30)
        for name in ("slurmctld.out", "slurmctld.log"):
            path = self.dir / "log" / name
            if path.exists():
                path.rename(path.with_name(name + ".before"))
        self._start_slurmctld()
        self._wait("slurmds", lambda: all(self.node_state(n) in ("idle", "mixed", "allocated") for n in self.nodes),
                   START_TIMEOUT, "slurmctld.log")

    def first_start(self, timeout: float = 60) -> tuple[int | None, str]:
        """slurmctld's first start on a fresh database: (its exit code or None if it stayed up, its log).
        The logs of this start move to *.first."""
        proc = self._start(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld.out")
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
            proc.terminate()
            proc.wait(timeout=30)
        text = ""
        for name in ("slurmctld.out", "slurmctld.log"):
            path = self.dir / "log" / name
            if path.exists():
                text += path.read_text(errors="replace")
                path.rename(path.with_name(name + ".first"))
        return code, text

    def node_state(self, node: str) -> str:
        return self.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"]).stdout.strip().rstrip("*~#")

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env={**self.env, **kw.pop("env", {})}, capture_output=True, text=True,
                              timeout=kw.pop("timeout", 30), **kw)

    def log(self, name: str) -> str:
        path = self.dir / "log" / name
        return path.read_text(errors="replace") if path.exists() else f"({name} not written)"

    def close(self) -> None:
        ids = self.run(["squeue", "-h", "-o", "%A"]).stdout.split() if self.conf.exists() else []
        if ids:  # every job here is the test's: end them before the slurmds (their slurmstepds outlive slurmd)
            self.run(["scancel", "--full", *ids])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.run(["squeue", "-h", "-o", "%A"]).stdout.strip():
                time.sleep(0.5)
        for proc in reversed(self.procs):  # slurmds, slurmctld, slurmdbd, mariadbd, then munged
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        keep = os.environ.get("SLURMCTL_TEST_KEEP_LOGS")  # a directory: the daemons' logs outlive the cluster
        if keep and (self.dir / "log").is_dir():
            shutil.copytree(self.dir / "log", Path(keep) / self.dir.name, dirs_exist_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)
