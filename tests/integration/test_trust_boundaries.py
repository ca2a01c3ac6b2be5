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
import pwd
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

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
                 "from slurmctl.ops.health import checks\n"
                 "from slurmctl.ops.hooks.config import HookConfig\n"
                 "import os\n"
                 "cfg = HookConfig.from_env(dict(os.environ))\n"
                 "finding = checks.check_leftovers(checks.Subject(cfg, 999999, moment='prolog'))\n"
                 "print(json.dumps(finding.detail if finding else None))\n")
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


def test_a_throwaway_clusters_munge_credential_is_refused_by_the_machines_munge():
    """A throwaway cluster's ports are picked free and named in a world-readable slurm.conf seconds before
    its daemons bind them: bob bound the throwaway slurmdbd's port first, got root's sacctmgr credential
    and replayed it to the real slurmdbd, where it was valid (one munge key for both), and had a root
    session there. Now each throwaway cluster mints with a key of its own: the machine's munged refuses
    what root (or alice) gets from it, and its own munged still decodes it."""
    from .throwaway_slurm import ThrowawayCluster

    cluster = ThrowawayCluster("mungekey")
    try:
        cluster.start_munge()
        for user in (None, "alice"):
            minted = cluster.munge("-n", user=user)
            assert minted.returncode == 0 and minted.stdout.startswith("MUNGE:"), minted
            system = subprocess.run(["unmunge"], input=minted.stdout, capture_output=True, text=True, timeout=30)
            assert system.returncode != 0 and "Invalid credential" in system.stderr, (user, system)
            own = subprocess.run(["unmunge", f"--socket={cluster.munge_socket}"], input=minted.stdout,
                                 capture_output=True, text=True, timeout=30)
            uid = as_user(user).uid if user else 0
            assert own.returncode == 0 and f"UID:             {as_user(user or 'root').name} ({uid})" in own.stdout, own
        key = cluster.munge_dir / "munge.key"
        assert (key.stat().st_mode & 0o777, key.stat().st_uid) == (0o400, pwd.getpwnam("munge").pw_uid)
        assert cluster.munge_dir.stat().st_uid == pwd.getpwnam("munge").pw_uid
        assert cluster.munge_dir.stat().st_mode & 0o022 == 0
    finally:
        cluster.close()


def test_a_throwaway_daemons_port_taken_by_bob_stops_the_setup_before_root_sends_anything():
    """The other half: root's commands never connect to a throwaway daemon port that another user bound
    first (the setup fails, naming the port and the uid)."""
    from .throwaway_slurm import ThrowawayCluster

    bob = as_user("bob")
    cluster = ThrowawayCluster("squat")
    squatter = None
    try:
        cluster.write("SelectType=select/cons_tres\n", {})
        code = ("import select, socket, sys\n"
                "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(8)\n"
                "print('bound', flush=True)\n"
                "sys.stdin.read()\n"
                "print('connected' if select.select([s], [], [], 0)[0] else 'nothing', flush=True)\n")
        squatter = subprocess.Popen(bob.argv([sys.executable, "-c", code, str(cluster.dbd_port)]), cwd="/",
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert squatter.stdout.readline().strip() == "bound"
        with pytest.raises(AssertionError, match=f"port {cluster.dbd_port} is held by uid {bob.uid},"):
            cluster.start()
        out, _ = squatter.communicate("", timeout=30)
        assert out.strip() == "nothing", out
    finally:
        if squatter and squatter.poll() is None:
            squatter.kill()
        cluster.close()


def test_a_test_clusters_throwaway_database_is_not_bobs():
    """The throwaway cluster the integration tests start beside the shared one (throwaway_slurm.py) runs
    on the same machine, for minutes. Before: mariadbd ran as root with DB root passwordless over TCP and
    a 0777 socket, and the slurm password `throwaway` was in the repository; bob logged in as DB root and
    wrote a root-owned file into /root with SELECT ... INTO OUTFILE."""
    from .throwaway_slurm import ThrowawayCluster

    bob = as_user("bob")
    cluster = ThrowawayCluster("dblock")
    try:
        cluster.write("SelectType=select/cons_tres\n", {})
        cluster.start()  # mariadbd, then slurmdbd on it: the cluster's accounting still works
        tcp = ["--protocol=tcp", "-h127.0.0.1", f"-P{cluster.db_port}"]
        proof = f"/root/slurmctl-dblock-{uuid.uuid4().hex[:8]}"
        for who in (["-uroot"], ["-uroot", "-p"], ["-uslurm", "-pthrowaway"], ["-u", ""], ["-umysql"]):
            login = _mariadb(bob, *tcp, *who)
            assert login.returncode != 0 and "Access denied" in login.stderr, (who, login)
            outfile = bob.run(["mariadb", "--no-defaults", "--connect-timeout=5", *tcp, *who, "-e",
                               f"SELECT 'bob' INTO OUTFILE '{proof}'"], timeout=30)
            assert outfile.returncode != 0, (who, outfile)
        over_socket = _mariadb(bob, "--protocol=socket", f"--socket={cluster.db_socket}", "-uroot")
        assert over_socket.returncode != 0 and "' (13)" in over_socket.stderr, over_socket  # EACCES
        # Nothing runs as root, and not even DB root, nor slurmdbd's account, writes outside its own files.
        uid = int(next(line.split()[1] for line in Path(f"/proc/{cluster.mariadbd.pid}/status").read_text()
                       .splitlines() if line.startswith("Uid:")))
        assert uid == pwd.getpwnam("mysql").pw_uid
        assert "secure_file_priv" in cluster.sql(f"SELECT 'root' INTO OUTFILE '{proof}'").stderr.replace("-", "_")
        slurm_account = ROOT.run(["mariadb", "--no-defaults", *tcp, "-uslurm", f"-p{cluster.db_password}", "-e",
                                  f"SELECT 'slurm' INTO OUTFILE '{proof}'"], timeout=30)
        assert slurm_account.returncode != 0 and "Access denied" in slurm_account.stderr, slurm_account
        assert not Path(proof).exists()
        tracked = subprocess.run(["git", "-C", str(REPO), "grep", "-l", "-F", cluster.db_password],
                                 capture_output=True, text=True)
        assert tracked.stdout == "", tracked.stdout
    finally:
        cluster.close()


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


def _epilog_smoke_verdict(job_id: int, user, verdicts: Path) -> list[str]:
    """This checkout's epilog step, as root with the environment slurmd gives the Epilog of `job_id`
    (user, uid, gid, partition and exit code as Slurm recorded them). Returns the hook's notes."""
    from slurmctl.ops.hooks.config import HookConfig
    from slurmctl.ops.hooks.epilog import record_smoke_verdict
    from slurmctl.ops.hooks.jobinfo import query_job
    from slurmctl.ops.hooks.prolog import HookResult

    line = subprocess.run(["sacct", "-n", "-P", "-X", "-j", str(job_id), "-o", "Partition,ExitCode"],
                          capture_output=True, text=True, check=True).stdout.strip()
    partition, exit_code = line.split("|")
    env = {"SLURM_JOB_ID": str(job_id), "SLURM_JOB_USER": user.name, "SLURM_JOB_UID": str(user.uid),
           "SLURM_JOB_GID": str(user.gid), "SLURM_JOB_PARTITION": partition, "SLURM_JOB_EXIT_CODE2": exit_code,
           "SLURMD_NODENAME": "l4-1", "SLURMCTL_LOCAL_DIR": str(STATE), "SLURMCTL_SMOKE_VERDICTS_DIR": str(verdicts)}
    cfg = HookConfig.from_env(env)
    result = HookResult()
    record_smoke_verdict(cfg, env, query_job(cfg.slurm, job_id), result)
    return result.notes


def _wait_ended(job_id: int, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = subprocess.run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State"],
                               capture_output=True, text=True).stdout.strip()
        if state and state not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING"):
            return state
        time.sleep(2)
    raise AssertionError(f"job {job_id} did not end in {timeout} s")


def test_smoke_gate_opens_only_on_roots_verdict_not_on_a_forged_smoke_job(workdir):
    """bob copies alice's code, runs his own job under the smoke run's name on the smoke partition
    (it just exits 0) and plants a run dir whose attempts.jsonl names it. Before: his full submit
    passed the gate. After: only a verdict root's epilog wrote for a rendered smoke script opens
    it, and alice's verdict opens only alice's gate. The epilog step is this checkout's code, run as
    root with the hook's environment (the cluster's installed epilog runs the deployed checkout;
    test_preflight.py::test_smoke_on_l4_dev_gates_the_full_submit covers that path once deployed)."""
    import shutil
    import tempfile

    import yaml

    alice, bob = as_user("alice"), as_user("bob")
    verdicts = Path(tempfile.mkdtemp(prefix="slurmctl-smoke-verdicts-"))
    os.chmod(verdicts, 0o755)
    site = yaml.safe_load(Path("/etc/slurmctl/site.yaml").read_text())
    site_file = Path(tempfile.mkdtemp(prefix="slurmctl-site-")) / "site.yaml"
    site_file.write_text(yaml.safe_dump({**site, "require_smoke": True, "smoke_verdicts_dir": str(verdicts)}))
    os.chmod(site_file.parent, 0o755)
    os.chmod(site_file, 0o644)
    env = {**CODE, "SLURMCTL_SITE_CONFIG": str(site_file)}
    name = f"gate-{uuid.uuid4().hex[:6]}"
    files = {"train.py": (REPO / "examples" / "tiny-lm" / "train.py").read_text()}
    spec = {"name": name, "entrypoint": "train.py", "partition": "h100-ondemand", "gpus_per_node": 1,
            "time_limit": "5m"}
    alice_run = write_run(alice.make_dir("smoke-gate"), spec, files)
    bob_run = write_run(bob.make_dir("smoke-gate"), spec, files)
    forged_dir, forged_job, smoke_job = None, None, None
    try:
        code_hash = alice.slurmctl_json("submit", alice_run, "--dry-run", "--force", env=env)["code_hash"]
        assert bob.slurmctl_json("submit", bob_run, "--dry-run", "--force", env=env)["code_hash"] == code_hash

        # bob's forgery: the smoke name, the smoke partition, exit 0, a planted run dir
        run_id = f"{name}-smoke-{code_hash}-20261201-f0f0"
        forged_job = bob.sbatch("-p", site["smoke_partition"], "-t", "2", "-J", run_id, "--chdir=/tmp",
                                "--output=/dev/null", f"--comment=slurmctl:{run_id}", "--wrap", "exit 0")
        forged_dir = bob.runs_root / run_id
        bob.run(["mkdir", "-p", str(forged_dir)], check=True)
        bob.run([sys.executable, "-c", "import json, sys; d = sys.argv[1]; "
                 "json.dump({'run_id': sys.argv[2], 'name': sys.argv[2], 'smoke': True, 'code_hash': sys.argv[3]}, "
                 "open(d + '/run.json', 'w')); open(d + '/attempts.jsonl', 'w').write(json.dumps("
                 "{'event': 'submitted', 'job_id': int(sys.argv[4])}) + '\\n')",
                 str(forged_dir), run_id, code_hash, str(forged_job)], check=True)
        assert _wait_ended(forged_job) == "COMPLETED"
        notes = _epilog_smoke_verdict(forged_job, bob, verdicts)
        assert notes == ["smoke verdict NOT written: the batch script is not a rendered smoke script"], notes
        gated = bob.slurmctl("submit", bob_run, "--dry-run", "--json", env=env, check=False)
        assert gated.returncode == 2 and "smoke-required" in gated.stdout + gated.stderr, gated.stdout

        # alice's real smoke run; root's verdict opens her gate, and only hers
        smoke = alice.slurmctl_json("submit", alice_run, "--smoke", env=env, timeout=500)
        assert smoke["smoke"]["passed"], smoke["smoke"]
        smoke_job = int(smoke["job_id"])
        assert _wait_ended(smoke_job) == "COMPLETED"
        assert alice.slurmctl("submit", alice_run, "--dry-run", "--json", env=env, check=False).returncode == 2
        notes = _epilog_smoke_verdict(smoke_job, alice, verdicts)
        assert notes == [f"smoke verdict {code_hash} for alice"], notes
        user_dir = verdicts / "alice"
        assert (user_dir.stat().st_uid, user_dir.stat().st_mode & 0o777) == (0, 0o755)
        full = alice.slurmctl_json("submit", alice_run, "--dry-run", env=env)
        gate = next(c for c in full["checks"] if c["name"] == "smoke-gate")
        assert gate["status"] == "ok" and str(smoke_job) in gate["note"], gate
        again = bob.slurmctl("submit", bob_run, "--dry-run", "--json", env=env, check=False)
        assert again.returncode == 2 and "smoke-required" in again.stdout + again.stderr
        # nobody but root writes a verdict: bob neither into alice's directory nor a directory of his own
        assert bob.run(["cp", str(next(user_dir.iterdir())), str(user_dir / f"{code_hash}.1.json")]).returncode != 0
        assert bob.run(["mkdir", str(verdicts / "bob")]).returncode != 0
    finally:
        if forged_job:
            bob.scancel(forged_job)
        if forged_dir is not None:
            bob.run(["rm", "-rf", str(forged_dir)])
        shutil.rmtree(verdicts, ignore_errors=True)
        shutil.rmtree(site_file.parent, ignore_errors=True)
