"""bob against alice across the other trust boundaries, on the real local cluster: identity is
(user, run id) in the exporter, root's exporter never reads a directory bob's run.json names, the
node hooks touch only their own node's job processes, and the shared services refuse bob.

The hooks slurmd runs are installed from the cluster's checkout: the prolog's leftover check is
also called directly here, as root, with a hook's environment against a real process, so the code
of this checkout is tested whatever the installed hooks run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from slurmctl.config.models import load_site_config

from .conftest import REPO, ROOT, as_user, slurmctl, slurmctl_json, write_run

CODE = {"PYTHONPATH": str(REPO)}
STATE = Path(os.environ.get("SLURMCTL_LOCAL_DIR", "/var/lib/slurmctl-local"))


def _metric_lines(text: str, name: str, run_id: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{") and f'run="{run_id}"' in line]


def test_exporter_keeps_two_users_runs_of_one_id_apart_and_never_reads_alices_checkpoints(workdir):
    """bob makes `runs/bob/<alice's run id>` for a held job of his with her run id in its comment, and
    his run.json names alice's checkpoint dir (0700, hers). Before: one label set for two runs, and
    root's exporter published alice's checkpoint step as bob's run's."""
    alice, bob = as_user("alice"), as_user("bob")
    jobs: dict[str, list[int]] = {"alice": [], "bob": []}
    spec = write_run(workdir, {"name": f"ident-{uuid.uuid4().hex[:4]}", "entrypoint": "train.py",
                               "partition": "l4-dev", "gpus_per_node": 1, "time_limit": "5m"},
                     {"train.py": "print('hi')\n"})
    bobs_dir = None
    try:
        submitted = slurmctl_json("submit", spec, "--", "--hold", env=CODE)
        run_id, run_dir = submitted["run_id"], Path(submitted["run_dir"])
        jobs["alice"].append(int(submitted["job_id"]))
        checkpoints = json.loads((run_dir / "run.json").read_text())["checkpoint_dir"]
        alice.run([sys.executable, "-c", "import sys; from slurmctl.runtime.checkpoint import CheckpointManager; "
                   "CheckpointManager(sys.argv[1]).save(7, lambda d: (d / 'state.txt').write_text('7'))",
                   checkpoints], env=CODE, check=True)

        bobs_dir = load_site_config().runs_root_path / "bob" / run_id
        bob.run(["mkdir", str(bobs_dir)], check=True)
        bob.run([sys.executable, "-c", "import json, sys; json.dump({'run_id': sys.argv[2], "
                 "'checkpoint_dir': sys.argv[3]}, open(sys.argv[1] + '/run.json', 'w'))",
                 str(bobs_dir), run_id, checkpoints], check=True)
        jobs["bob"].append(bob.sbatch("--hold", "-p", "l4-dev", "-t", "5", "--chdir=/tmp", "--output=/dev/null",
                                      "-J", run_id, f"--comment=slurmctl:{run_id}", "--wrap", "true"))

        text = slurmctl("exporter", "--once", user="root", env=CODE).stdout
        info = _metric_lines(text, "slurmctl_run_info", run_id)
        assert len(info) == 2 and {('user="alice"' in line, 'user="bob"' in line) for line in info} == \
            {(True, False), (False, True)}, info
        steps = _metric_lines(text, "slurmctl_run_checkpoint_step", run_id)
        assert len(steps) == 1 and 'user="alice"' in steps[0] and steps[0].endswith(" 7.0"), steps
    finally:
        bob.scancel(*jobs["bob"])
        alice.scancel(*jobs["alice"])
        if bobs_dir is not None:
            bob.run(["rm", "-rf", str(bobs_dir)])


def _salloc_sleep(user, seconds: int = 300) -> tuple[subprocess.Popen, int, int]:
    """`salloc -p l4-dev ... sleep` as `user`: (the salloc process, its job id, the sleep's pid)."""
    marker = f"{seconds}.{uuid.uuid4().int % 1000:03d}"
    proc = subprocess.Popen(user.argv(["salloc", "-p", "l4-dev", "-N", "1", "-t", "5", "sleep", marker]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                env = dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                           if b"=" in item)
            except OSError:
                continue
            if cmdline[:2] == [b"sleep", marker.encode()] and b"SLURM_JOB_ID" in env:
                assert b"SLURMD_NODENAME" not in env  # salloc's command runs outside any slurmd
                return proc, int(env[b"SLURM_JOB_ID"]), pid
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)
    raise AssertionError(f"salloc's sleep did not start within 120 s: {proc.communicate(timeout=10)}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_prolog_leftover_check_spares_another_users_interactive_salloc():
    """This checkout's prolog code, as root with a hook's environment on node h100-1 (where alice's
    allocation is not): alice's salloc command carries SLURM_JOB_ID and no node, and survives."""
    alice = as_user("alice")
    proc, job_id, sleep_pid = _salloc_sleep(alice)
    try:
        check = ("import json, sys\n"
                 "from slurmctl.ops.hooks import prolog\n"
                 "from slurmctl.ops.hooks.config import HookConfig\n"
                 "import os\n"
                 "cfg = HookConfig.from_env(dict(os.environ))\n"
                 "result = prolog.HookResult()\n"
                 "prolog.check_leftovers(cfg, 999999, result)\n"
                 "print(json.dumps(result.notes))\n")
        env = {**CODE, "SLURMD_NODENAME": "h100-1", "SLURM_JOB_ID": "999999", "SLURM_JOB_UID": str(as_user("bob").uid),
               "SLURM_JOB_USER": "bob", "SLURMCTL_SLURM_BIN_DIR": "/usr/bin"}
        notes = ROOT.run([sys.executable, "-c", check], env=env, check=True, timeout=60).stdout
        assert _alive(sleep_pid), f"alice's salloc sleep (job {job_id}) was killed: {notes}"
        assert "leftover" not in notes, notes
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        alice.scancel(job_id)
        proc.wait(timeout=30)


def test_real_prolog_and_epilog_of_bobs_job_spare_alices_salloc():
    """The installed hooks (the cluster's checkout) on bob's real job: passes once they run this code."""
    alice, bob = as_user("alice"), as_user("bob")
    proc, job_id, sleep_pid = _salloc_sleep(alice)
    bobs = []
    try:
        bobs.append(bob.sbatch("-p", "h100-ondemand", "-w", "h100-1", "--gres=gpu:h100:1", "-t", "2",
                               "--chdir=/tmp", "--output=/dev/null", "--wrap", "sleep 1"))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and ROOT.squeue("-h", "-j", str(bobs[0]), "-o", "%T").strip():
            time.sleep(1)
        assert _alive(sleep_pid), f"bob's job {bobs[0]}'s prolog/epilog killed alice's salloc sleep (job {job_id})"
    finally:
        bob.scancel(*bobs)
        os.killpg(proc.pid, signal.SIGTERM)
        alice.scancel(job_id)
        proc.wait(timeout=30)


# --- shared services of the local deployment (deploy/local/up) ----------------------------------

def _mariadb(user, *args) -> subprocess.CompletedProcess:
    return user.run(["mariadb", "--no-defaults", "--connect-timeout=5", *args, "-e", "SELECT CURRENT_USER()"],
                    timeout=30)


def test_mariadb_root_is_roots_alone_and_its_socket_is_not_bobs():
    bob, port = as_user("bob"), os.environ.get("SLURMCTL_LOCAL_DB_PORT", "3316")
    over_tcp = _mariadb(bob, "--protocol=tcp", "-h127.0.0.1", f"-P{port}", "-uroot")
    assert over_tcp.returncode != 0 and "Access denied" in over_tcp.stderr, over_tcp
    socket = STATE / "run" / "mariadbd.sock"
    over_socket = _mariadb(bob, "--protocol=socket", f"--socket={socket}", "-uroot")
    assert over_socket.returncode != 0, over_socket
    assert (os.stat(socket).st_mode & 0o777) == 0o600
    as_root = _mariadb(ROOT, "--protocol=socket", f"--socket={socket}", "-uroot")  # the operator still can
    assert as_root.returncode == 0 and "root@localhost" in as_root.stdout, as_root


def test_the_slurm_db_secret_is_generated_root_only_and_not_in_the_repository():
    secret_file = STATE / "etc" / "slurmdbd-storage.pass"
    st = os.stat(secret_file)
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600)
    secret = secret_file.read_text().strip()
    assert len(secret) >= 32
    assert as_user("bob").run(["cat", str(secret_file)]).returncode != 0
    tracked = subprocess.run(["git", "-C", str(REPO), "grep", "-l", "-F", secret], capture_output=True, text=True)
    assert tracked.stdout == "", tracked.stdout
    bob_slurm = _mariadb(as_user("bob"), "--protocol=tcp", "-h127.0.0.1",
                         f"-P{os.environ.get('SLURMCTL_LOCAL_DB_PORT', '3316')}", "-uslurm", "-pslurmctl-local")
    assert bob_slurm.returncode != 0, "the old fixed password still opens the slurm account"


# --- the operators' ledger ----------------------------------------------------------------------

def test_report_as_a_researcher_is_a_clear_refusal_or_only_their_own_showback(user_dir):
    """Before: `internal error: OperationalError: attempt to write a readonly database` (or
    PermissionError) for every researcher."""
    alice = as_user("alice")
    refused = alice.slurmctl("report", check=False, env=CODE)
    assert refused.returncode == 1 and "(operators-only)" in refused.stderr, refused
    assert "Traceback" not in refused.stderr and "internal error" not in refused.stderr
    site = (REPO / "deploy" / "local" / "site.yaml").read_text().replace(
        "\naccounting:\n", "\naccounting:\n  researcher_showback: true\n")
    site_file = user_dir("alice") / "site.yaml"
    site_file.write_text(site)
    os.chown(site_file, alice.uid, alice.gid)
    shown = json.loads(alice.slurmctl("report", "--by", "user", "--since", "2d", "--format", "json",
                                      env={**CODE, "SLURMCTL_SITE_CONFIG": str(site_file)}).stdout)
    assert {g["group"] for g in shown["groups"]} <= {"alice"}, shown["groups"]
