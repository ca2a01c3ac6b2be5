"""deploy/slurm's parts composed with the operator's slurm.conf, read back from a REAL slurmctld.

A throwaway slurmctld (own port, state dir and cluster name; never the shared local cluster) runs
the lines slurm-operator 1.1.2 writes (controller_config.go, as far as this machine's Slurm 22.05
runs them) followed by scheduling.conf and partitions.conf, exactly as the operator appends
extraConf. `scontrol show config` then shows what wins, and the daemon's log shows every key set
twice ("specified more than once, latest value used" is an error line): there must be none.
The operator's SlurmctldParameters survives, its PrologFlags=Contain brings Alloc with it, and the
old `SlurmctldParameters=preempt_send_user_signal` line would replace the operator's.
Lines left out, and why: PreemptParameters (Slurm >= 23.02, not in 22.05), and the enforcement
lines that need a slurmdbd (tests/integration/test_deploy_preemption.py runs them with one).
"""

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SLURM = REPO / "deploy" / "slurm"
NOT_IN_22_05 = ("PreemptParameters=",)
# Error lines that come from this machine or the throwaway set-up, whatever our config says:
HOST_ERRORS = re.compile("|".join([
    r"mpi/pmix|pmi/pmix|MPI: Cannot create context",  # Debian's 22.05 loads mpi/pmix_v4; no PMIx library here
    r"PrologFlags=Contain for pam_slurm_adopt",       # the operator's proctrack/cgroup is linuxproc here
]))
NEEDS_SLURMDBD = ("AccountingStorageEnforce=", "AccountingStoreFlags=", "PriorityWeightTRES=")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def operator_base(tmp: Path, port: int) -> str:
    """slurm-operator 1.1.2's own lines (cgroup on), with what 22.05 on this machine cannot run swapped."""
    return "\n".join([
        "ClusterName=deploytest", "SlurmUser=root", f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
        f"SlurmctldPort={port}", f"StateSaveLocation={tmp}/state", "SlurmdUser=root", f"SlurmdPort={port + 1}",
        f"SlurmdSpoolDir={tmp}/spool", f"SlurmctldPidFile={tmp}/slurmctld.pid", f"SlurmctldLogFile={tmp}/log",
        "ReturnToService=2", "MaxNodeCount=1024", "GresTypes=gpu", "AuthType=auth/munge", "CredType=cred/munge",
        "SelectTypeParameters=CR_Core_Memory",
        "SlurmctldParameters=enable_configless,enable_stepmgr",
        "ProctrackType=proctrack/linuxproc",  # operator: proctrack/cgroup (no cgroup v2 delegation here)
        "PrologFlags=Contain",
        "TaskPlugin=task/affinity",            # operator: task/affinity,task/cgroup
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
        "Prolog=prolog-slurmctl.sh", "Epilog=epilog-slurmctl.sh", "MailProg=/bin/true",
        "NodeName=h100-spot-0 CPUs=4 RealMemory=4000 Gres=gpu:h100:8 State=FUTURE",
        "#", "### EXTRA CONFIG ###", ""])


def extra_conf() -> str:
    lines = [line for line in (SLURM / "scheduling.conf").read_text().splitlines()
             if not line.startswith(NOT_IN_22_05 + NEEDS_SLURMDBD)]
    for line in (SLURM / "partitions.conf").read_text().splitlines():
        if line.startswith("PartitionName="):  # the chart adds Nodes=<the node set>
            name, rest = line.split(" ", 1)
            lines.append(f"{name} Nodes=ALL {rest}")
    return "\n".join(lines) + "\n"


def read_back(tmp: Path, conf_text: str) -> tuple[str, str, str]:
    """(scontrol show config, scontrol show partition, its log) of a slurmctld started on conf_text."""
    if os.geteuid() != 0 or not shutil.which("slurmctld"):
        pytest.fail("needs root and slurmctld (scripts/setup installs Slurm)")
    (tmp / "state").mkdir(parents=True)
    conf = tmp / "slurm.conf"
    conf.write_text(conf_text)
    conf.chmod(0o644)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    # the config is parsed before the log file opens: its errors go to the daemon's stderr
    stderr = tmp / "stderr"
    with stderr.open("w") as out:
        daemon = subprocess.Popen(["slurmctld", "-D", "-f", str(conf)], stdout=out, stderr=subprocess.STDOUT)
    logs = lambda: stderr.read_text(errors="replace") + (tmp / "log").read_text(errors="replace")  # noqa: E731
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and daemon.poll() is None:
            ping = subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True)
            if "is UP" in ping.stdout:
                break
            time.sleep(0.3)
        else:
            daemon.kill()
            daemon.wait()
            pytest.fail("throwaway slurmctld did not come up:\n" + logs()[-2000:])
        config = subprocess.run(["scontrol", "show", "config"], env=env, capture_output=True, text=True).stdout
        parts = subprocess.run(["scontrol", "show", "partition"], env=env, capture_output=True, text=True).stdout
        return config, parts, logs()
    finally:
        if daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


def error_lines(log: str) -> list[str]:
    return [line for line in log.splitlines()
            if re.search(r"\b(error|fatal):", line) and not HOST_ERRORS.search(line)]


def _setting(config: str, key: str) -> str:
    for line in config.splitlines():
        if line.split("=", 1)[0].strip() == key:
            return line.split("=", 1)[1].strip()
    raise AssertionError(f"{key} not in scontrol show config")


def test_our_parts_keep_the_operators_settings_and_preempt_by_qos(tmp_path):
    port = _free_port()
    config, parts, log = read_back(tmp_path, operator_base(tmp_path, port) + extra_conf())
    # no key twice (without a slurmdbd this daemon logs other errors: no QOS, no fair share)
    assert [line for line in log.splitlines() if "specified more than once" in line] == []
    assert _setting(config, "SlurmctldParameters") == "enable_configless,enable_stepmgr"
    assert set(_setting(config, "PrologFlags").split(",")) == {"Alloc", "Contain"}  # Contain implies Alloc
    assert (_setting(config, "PreemptType"), _setting(config, "PreemptMode")) == ("preempt/qos", "REQUEUE")
    assert _setting(config, "Prolog") == "prolog-slurmctl.sh"  # the operator's line, not ours
    assert _setting(config, "SlurmdTimeout") == "120 sec" and _setting(config, "JobRequeue") == "1"
    assert "PartitionName=l4-dev" in parts and "QoS=dev" in parts
    assert "AllowQos=production\n" in parts.replace(" ", "\n")  # h100-ondemand: no tier that can be preempted


def test_the_old_slurmctld_parameters_line_would_replace_the_operators(tmp_path):
    """The mistake this layout avoids, shown on the real daemon: configless mode would be gone."""
    port = _free_port()
    text = operator_base(tmp_path, port) + extra_conf() + "SlurmctldParameters=preempt_send_user_signal\n"
    config, _, log = read_back(tmp_path, text)
    assert _setting(config, "SlurmctldParameters") == "preempt_send_user_signal"
    assert "SlurmctldParameters 1 specified more than once" in log  # and the daemon says so, as an error
