"""The SSH login-node path against a real sshd on 127.0.0.1 (see ssh_server.py) and the real cluster.
alice logs in with her key; whatever the login node touches (remote paths, the "cluster" side of the
fake laptop) is in her private directories, and the laptop's CLI runs as alice."""

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from slurmctl.rundir import new_run_id
from slurmctl.slurm.ssh import HostKeyRefused, SSHError, SSHRunner, SSHTarget

from .conftest import SLURMCTL, as_user, give, slurmctl, write_run
from .ssh_server import _keygen, login_node  # noqa: F401 - pytest fixture


def _runner(node, **kw) -> SSHRunner:
    kw.setdefault("key_filename", str(node.client_key))
    kw.setdefault("known_hosts", node.known_hosts)
    return SSHRunner(SSHTarget.parse(node.host), allow_agent=False, **kw)


def test_runs_slurm_commands_over_one_connection_and_quotes_every_argument(login_node, workdir):
    runner = _runner(login_node)
    try:
        partitions = runner.run(["sinfo", "-h", "-o", "%P"]).stdout.split()
        assert {"h100-ondemand", "h100-spot", "l4-dev*"} <= set(partitions)
        assert runner.run(["id", "-un"]).stdout.strip() == "alice"
        marker = workdir / "pwned"  # where alice could create it, if any argument reached a shell
        hostile = f"$(touch {marker}); touch {marker} 'q\" `touch {marker}`"
        echoed = runner.run(["printf", "%s", hostile])
        assert echoed.returncode == 0 and echoed.stdout == hostile and not marker.exists()
        failed = runner.run(["sh", "-c", "echo oops >&2; exit 3"])
        assert (failed.returncode, failed.stderr.strip()) == (3, "oops")
        assert runner.connections == 1
    finally:
        runner.close()


def test_sftp_upload_copies_a_tree_with_modes(login_node, tmp_path, workdir):
    src = tmp_path / "src"
    (src / "logs").mkdir(parents=True)
    (src / "job.sbatch").write_text("#!/bin/bash\necho hi\n")
    (src / "job.sbatch").chmod(0o755)
    (src / "logs" / "a.out").write_text("x")
    runner = _runner(login_node)
    try:
        copied = runner.upload_tree(src, str(workdir / "remote" / "run-1"))
    finally:
        runner.close()
    dst = workdir / "remote" / "run-1"
    assert dst.stat().st_uid == (dst / "job.sbatch").stat().st_uid == as_user("alice").uid
    assert copied == 2 and (dst / "job.sbatch").read_text() == "#!/bin/bash\necho hi\n"
    assert (dst / "job.sbatch").stat().st_mode & 0o777 == 0o755 and (dst / "logs" / "a.out").read_text() == "x"
    assert f'open "{dst}/job.sbatch" flags WRITE,CREATE,TRUNCATE' in login_node.sftp_log.read_text()



MIRROR_PROBE = """
import json, sys
from pathlib import Path
from slurmctl.rundir.remote import RemoteSlurmClient
from slurmctl.slurm.ssh import SSHRunner, SSHTarget
host, key, known_hosts, runs, run_id = sys.argv[1:]
runner = SSHRunner(SSHTarget.parse(host), allow_agent=False, key_filename=key, known_hosts=Path(known_hosts))
try:
    run = RemoteSlurmClient(runner).registry(Path(runs)).get(run_id)
    print(json.dumps({"heartbeat": run.heartbeat(), "refreshed": run.refresh(run.path / "heartbeat.json").exists()}))
finally:
    runner.close()
"""


def test_mirroring_stands_down_when_the_login_node_shares_the_runs_root(login_node, workdir):
    """Here sshd sees this very runs root: nothing is copied (a file copied onto itself could be
    truncated under a running job), and the probe file that told us so is gone again. The laptop
    side runs as alice too: her runs are hers on both sides."""
    run_id = new_run_id("shared-run")
    run_dir = workdir / "runs" / login_node.user / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text("{}")
    (run_dir / "heartbeat.json").write_text('{"step": 3}')
    give(workdir / "runs")
    run_dir.parent.chmod(0o700)
    probe = as_user(login_node.user).run([sys.executable, "-c", MIRROR_PROBE, login_node.host, login_node.client_key,
                                          login_node.known_hosts, workdir / "runs", run_id], check=True)
    assert json.loads(probe.stdout) == {"heartbeat": {"step": 3}, "refreshed": True}
    assert str(run_dir) not in login_node.sftp_log.read_text()
    assert [p.name for p in run_dir.parent.iterdir()] == [run_id]

def test_unknown_host_key_is_refused_with_its_fingerprint(login_node, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(HostKeyRefused) as refused:
        _runner(login_node, known_hosts=empty).run(["true"])
    assert "not in" in refused.value.message and "SHA256:" in refused.value.message
    assert "ssh-keyscan" in refused.value.hint


def test_changed_host_key_is_refused_as_a_possible_attack(login_node, tmp_path):
    _keygen(tmp_path / "other")
    other = (tmp_path / "other.pub").read_text().split()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{login_node.port} {other[0]} {other[1]}\n")
    with pytest.raises(HostKeyRefused) as refused:
        _runner(login_node, known_hosts=wrong).run(["true"])
    assert "CHANGED" in refused.value.message


def test_wrong_key_and_silent_host_give_clear_errors(login_node, tmp_path):
    _keygen(tmp_path / "stranger")
    with pytest.raises(SSHError) as denied:
        _runner(login_node, key_filename=str(tmp_path / "stranger")).run(["true"])
    assert denied.value.code == "ssh-auth-failed"
    # a port that accepts TCP but never speaks SSH: the connect timeout must fire
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    held = []  # keep the accepted connection open: a closed one would fail fast instead of timing out
    threading.Thread(target=lambda: held.append(silent.accept()), daemon=True).start()
    runner = SSHRunner(SSHTarget("127.0.0.1", login_node.user, silent.getsockname()[1]),
                       known_hosts=login_node.known_hosts,
                       allow_agent=False, key_filename=str(login_node.client_key), connect_timeout=1.5)
    started = time.monotonic()
    with pytest.raises(SSHError) as timed_out:
        runner.run(["true"])
    waited = time.monotonic() - started
    silent.close()
    assert "did not answer within 2 s" in timed_out.value.message, timed_out.value.message
    assert 1.4 < waited < 5


def fake_laptop(tmp_path, workdir, cluster, login_node, spec: dict, files: dict[str, str]):
    """Folders and a shell preamble for alice's "laptop": the CLI (as alice) in a private mount
    namespace whose runs root and code dir are tmpfs that sshd and Slurm (the "cluster") cannot see,
    with no Slurm tools on PATH. The same paths on the cluster's side are in alice's private
    directory (the runs root laid out as deploy/local/up does: root's, with alice's own 0700 dir).
    Returns (runs, code, out, cli, preamble); run the script (as root) with `unshare -m bash -c`."""
    alice = as_user(login_node.user)
    runs, code, out = workdir / "runs", workdir / "code", tmp_path / "out"  # out: root's redirections
    for d in (runs, runs / alice.name, code, out):
        d.mkdir()
    runs.chmod(0o755)
    for d in (runs / alice.name, code):
        d.chmod(0o700)
        os.chown(d, alice.uid, alice.gid)
    src = write_run(workdir / "src", spec, files).parent
    site = workdir / "site.yaml"
    site.write_text(yaml.safe_dump({**cluster.model_dump(mode="json"), "runs_root": str(runs)}))
    give(site)
    config = login_node.user_config(workdir / "config.yaml", login_host=login_node.host)
    cli = shlex.join(alice.argv(SLURMCTL, env={"PATH": "/nonexistent", "SLURMCTL_SITE_CONFIG": site,
                                               "SLURMCTL_USER_CONFIG": config}))
    owner = f"{alice.uid}:{alice.gid}"
    preamble = f"""set -e
mount -t tmpfs -o mode=0755 laptop-runs {runs}; mkdir -m 0700 {runs}/{alice.name}; chown {owner} {runs}/{alice.name}
mount -t tmpfs -o mode=0700,uid={alice.uid},gid={alice.gid} laptop-code {code}
cp -r {src}/. {code}/; chown -R {owner} {code}
"""
    return runs, code, out, cli, preamble


def test_cli_submits_reads_status_and_cancels_through_the_login_node(login_node, tmp_path, workdir, cluster):
    """The "laptop" is the CLI in a private mount namespace: its runs root and code dir are tmpfs
    that sshd and Slurm (the "cluster") cannot see, and it has no Slurm tools on PATH. So the
    job script and the code reach the cluster only if SFTP copies them, and every Slurm command
    only works over SSH."""
    runs, code, out, cli, preamble = fake_laptop(
        tmp_path, workdir, cluster, login_node, {"name": "ssh-test", "entrypoint": "train.py", "partition": "l4-dev",
                                        "gpus_per_node": 1, "time_limit": "5m"},
        {"train.py": "print('hi')\n", ".gitignore": "data/\n", "data/big.bin": "not for the cluster\n",
         ".slurmctlignore": "*.ckpt\n", "old.ckpt": "x\n"})
    laptop = preamble + f"""{cli} --host {login_node.host} submit {code}/run.yaml --json -- --hold > {out}/submit.json
run_id=$({sys.executable} -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' {out}/submit.json)
{cli} status "$run_id" --json > {out}/status.json   # login_host from the user config this time
{cli} --host {login_node.host} cancel "$run_id" --json > {out}/cancel.json
"""
    result = subprocess.run(["unshare", "-m", "bash", "-c", laptop], capture_output=True, text=True, timeout=120)
    submitted = json.loads((out / "submit.json").read_text()) if (out / "submit.json").stat().st_size else {}
    try:
        assert result.returncode == 0, result.stderr
        status = json.loads((out / "status.json").read_text())
        assert (status["job_id"], status["state"], status["reason"]) == (submitted["job_id"], "PENDING", "JobHeldUser")
        assert json.loads((out / "cancel.json").read_text())["final_state"] == "CANCELLED"
    finally:
        if submitted.get("job_id"):
            as_user("alice").scancel(submitted["job_id"])
    # what reached the cluster's filesystem came over SFTP, as alice
    run_dir = Path(submitted["run_dir"])
    assert run_dir.parent == runs / "alice" and run_dir.stat().st_uid == as_user("alice").uid
    assert (run_dir / "job.sbatch").read_text().startswith("#!") and (code / "train.py").read_text() == "print('hi')\n"
    sftp_log = login_node.sftp_log.read_text()
    assert f'open "{run_dir}/job.sbatch" flags WRITE' in sftp_log and f'open "{code}/train.py" flags WRITE' in sftp_log
    # what .gitignore and .slurmctlignore exclude stays on the laptop
    assert not (code / "data").exists() and not (code / "old.ckpt").exists() and "big.bin" not in sftp_log
    # the `submitted` record written after sbatch was pushed too, so the cluster side knows the job
    events = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    assert {"event": "submitted", "job_id": submitted["job_id"]}.items() <= events[0].items()


def test_cli_refuses_an_unknown_login_node_cleanly(login_node, workdir):
    empty = workdir / "known_hosts"
    empty.write_text("")
    give(empty)
    config = login_node.user_config(workdir / "config.yaml", known_hosts=str(empty))
    result = slurmctl("--host", login_node.host, "ls", "--json", check=False,
                      env={"SLURMCTL_USER_CONFIG": str(config)})
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert json.loads(result.stdout)["error"] == "ssh-host-key-refused"


def test_cli_reads_progress_checkpoints_and_logs_from_the_login_node(login_node, tmp_path, workdir, cluster):
    """Same fake laptop as above, but the job runs to the end: its heartbeat, checkpoints and log
    exist only on the cluster's filesystem, so `logs -f`, `status` and `logs` see them only if they
    are mirrored over SFTP (and the checkpoint payload must not be)."""
    steps_py = (Path(__file__).parent / "reliability" / "steps.py").read_text()
    runs, code, out, cli, preamble = fake_laptop(
        tmp_path, workdir, cluster, login_node,
        {"name": "ssh-read", "entrypoint": "steps.py", "args": ["--steps", "7", "--sleep", "0.3"],
         "partition": "h100-ondemand", "gpus_per_node": 1, "time_limit": "5m", "checkpoint": {"interval_steps": 3}},
        {"steps.py": steps_py})
    laptop = preamble + f"""{cli} submit {code}/run.yaml --json > {out}/submit.json
run_id=$({sys.executable} -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' {out}/submit.json)
# follow from before the job starts writing to its end
{shutil.which("timeout")} 100 {cli} logs "$run_id" -f > {out}/follow.txt
{cli} status "$run_id" --json > {out}/status.json
{cli} logs "$run_id" -n 0 > {out}/logs.txt
{cli} ls --json > {out}/ls.json
{sys.executable} -c 'import os,sys; print(*os.listdir(sys.argv[1]))' {runs}/alice/$run_id/checkpoints/checkpoint-6 \
    > {out}/mirrored-checkpoint.txt
"""
    result = subprocess.run(["unshare", "-m", "bash", "-c", laptop], capture_output=True, text=True, timeout=150)
    submitted = json.loads((out / "submit.json").read_text()) if (out / "submit.json").stat().st_size else {}
    try:
        assert result.returncode == 0, result.stderr
    finally:
        if submitted.get("job_id"):
            as_user("alice").scancel(submitted["job_id"])
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "COMPLETED", status
    assert (status["last_step"], status["latest_checkpoint_step"]) == (6, 6)
    assert status["checkpoint_age_seconds"] is not None and status["checkpoint_age_seconds"] < 120
    followed, logged = (out / "follow.txt").read_text(), (out / "logs.txt").read_text()
    for text in (followed, logged):
        assert "attempt 0 starts at step 0" in text and "finished" in text, text
    # the run's row (alice's plain sbatch jobs from other tests are listed too, as rows of their own)
    rows = json.loads((out / "ls.json").read_text())
    assert [r["last_step"] for r in rows if r.get("run_id") == submitted["run_id"]] == [6]
    # only the marker of the checkpoint came over, never its payload
    assert (out / "mirrored-checkpoint.txt").read_text().split() == [".complete"]
    assert "checkpoint-6/state.json" not in login_node.sftp_log.read_text()
