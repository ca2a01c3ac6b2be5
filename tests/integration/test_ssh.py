"""The SSH login-node path against a real sshd on 127.0.0.1 (see ssh_server.py) and the real cluster."""

import json
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

from slurmctl.slurm.ssh import HostKeyRefused, RemoteSlurmClient, SSHError, SSHRunner, SSHTarget

from .conftest import slurmctl, write_run
from .ssh_server import _keygen, login_node  # noqa: F401 - pytest fixture


def _runner(node, **kw) -> SSHRunner:
    kw.setdefault("key_filename", str(node.client_key))
    kw.setdefault("known_hosts", node.known_hosts)
    return SSHRunner(SSHTarget.parse(node.host), allow_agent=False, **kw)


def test_runs_slurm_commands_over_one_connection_and_quotes_every_argument(login_node, tmp_path):
    runner = _runner(login_node)
    try:
        partitions = runner.run(["sinfo", "-h", "-o", "%P"]).stdout.split()
        assert {"h100-ondemand", "h100-spot", "l4-dev*"} <= set(partitions)
        marker = tmp_path / "pwned"
        hostile = f"$(touch {marker}); touch {marker} 'q\" `touch {marker}`"
        echoed = runner.run(["printf", "%s", hostile])
        assert echoed.returncode == 0 and echoed.stdout == hostile and not marker.exists()
        failed = runner.run(["sh", "-c", "echo oops >&2; exit 3"])
        assert (failed.returncode, failed.stderr.strip()) == (3, "oops")
        assert runner.connections == 1
    finally:
        runner.close()


def test_sftp_upload_copies_a_tree_with_modes(login_node, tmp_path):
    src = tmp_path / "src"
    (src / "logs").mkdir(parents=True)
    (src / "job.sbatch").write_text("#!/bin/bash\necho hi\n")
    (src / "job.sbatch").chmod(0o755)
    (src / "logs" / "a.out").write_text("x")
    runner = _runner(login_node)
    try:
        copied = runner.upload_tree(src, str(tmp_path / "remote" / "run-1"))
    finally:
        runner.close()
    dst = tmp_path / "remote" / "run-1"
    assert copied == 2 and (dst / "job.sbatch").read_text() == "#!/bin/bash\necho hi\n"
    assert (dst / "job.sbatch").stat().st_mode & 0o777 == 0o755 and (dst / "logs" / "a.out").read_text() == "x"
    assert f'open "{dst}/job.sbatch" flags WRITE,CREATE,TRUNCATE' in login_node.sftp_log.read_text()



def test_mirroring_stands_down_when_the_login_node_shares_the_runs_root(login_node, tmp_path):
    """Here sshd sees this very runs root: nothing is copied (a file copied onto itself could be
    truncated under a running job), and the probe file that told us so is gone again."""
    run_dir = tmp_path / "runs" / "shared-run"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text("{}")
    (run_dir / "heartbeat.json").write_text('{"step": 3}')
    runner = _runner(login_node)
    try:
        run = RemoteSlurmClient(runner).mirrored_registry(tmp_path / "runs").get("shared-run")
    finally:
        runner.close()
    assert run.heartbeat() == {"step": 3} and run.refresh(run_dir / "heartbeat.json").exists()
    assert str(run_dir) not in login_node.sftp_log.read_text()
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["shared-run"]

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
    runner = SSHRunner(SSHTarget("127.0.0.1", "root", silent.getsockname()[1]), known_hosts=login_node.known_hosts,
                       allow_agent=False, key_filename=str(login_node.client_key), connect_timeout=1.5)
    started = time.monotonic()
    with pytest.raises(SSHError) as timed_out:
        runner.run(["true"])
    waited = time.monotonic() - started
    silent.close()
    assert "did not answer within 2 s" in timed_out.value.message, timed_out.value.message
    assert 1.4 < waited < 5


def fake_laptop(tmp_path, cluster, login_node, spec: dict, files: dict[str, str]):
    """Folders and a shell preamble for a "laptop": the CLI in a private mount namespace whose runs
    root and code dir are tmpfs that sshd and Slurm (the "cluster") cannot see, with no Slurm tools
    on PATH. Returns (runs, code, out, cli, preamble); run the script with `unshare -m bash -c`."""
    runs, code, out = tmp_path / "runs", tmp_path / "code", tmp_path / "out"
    for d in (runs, code, out):
        d.mkdir()
    src = write_run(tmp_path / "src", spec, files).parent
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({**cluster.model_dump(mode="json"), "runs_root": str(runs)}))
    config = login_node.user_config(tmp_path / "config.yaml", login_host=login_node.host)
    cli = shlex.join([sys.executable, "-m", "slurmctl.cli"])
    preamble = f"""set -e
mount -t tmpfs laptop-runs {runs}; mount -t tmpfs laptop-code {code}; cp -r {src}/. {code}/
export PATH=/nonexistent SLURMCTL_SITE_CONFIG={site} SLURMCTL_USER_CONFIG={config}
"""
    return runs, code, out, cli, preamble


def test_cli_submits_reads_status_and_cancels_through_the_login_node(login_node, tmp_path, cluster):
    """The "laptop" is the CLI in a private mount namespace: its runs root and code dir are tmpfs
    that sshd and Slurm (the "cluster") cannot see, and it has no Slurm tools on PATH. So the
    job script and the code reach the cluster only if SFTP copies them, and every Slurm command
    only works over SSH."""
    runs, code, out, cli, preamble = fake_laptop(
        tmp_path, cluster, login_node, {"name": "ssh-test", "entrypoint": "train.py", "partition": "l4-dev",
                                        "gpus_per_node": 1, "time_limit": "5m"}, {"train.py": "print('hi')\n"})
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
            subprocess.run(["scancel", str(submitted["job_id"])], capture_output=True)
    # what reached the cluster's filesystem came over SFTP
    run_dir = runs / submitted["run_id"]
    assert (run_dir / "job.sbatch").read_text().startswith("#!") and (code / "train.py").read_text() == "print('hi')\n"
    sftp_log = login_node.sftp_log.read_text()
    assert f'open "{run_dir}/job.sbatch" flags WRITE' in sftp_log and f'open "{code}/train.py" flags WRITE' in sftp_log
    # the `submitted` record written after sbatch was pushed too, so the cluster side knows the job
    events = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    assert {"event": "submitted", "job_id": submitted["job_id"]}.items() <= events[0].items()


def test_cli_refuses_an_unknown_login_node_cleanly(login_node, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = login_node.user_config(tmp_path / "config.yaml", known_hosts=str(empty))
    result = slurmctl("--host", login_node.host, "ls", "--json", check=False,
                      env={"SLURMCTL_USER_CONFIG": str(config)})
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert json.loads(result.stdout)["error"] == "ssh-host-key-refused"


def test_cli_reads_progress_checkpoints_and_logs_from_the_login_node(login_node, tmp_path, cluster):
    """Same fake laptop as above, but the job runs to the end: its heartbeat, checkpoints and log
    exist only on the cluster's filesystem, so `logs -f`, `status` and `logs` see them only if they
    are mirrored over SFTP (and the checkpoint payload must not be)."""
    steps_py = (Path(__file__).parent / "reliability" / "steps.py").read_text()
    runs, code, out, cli, preamble = fake_laptop(
        tmp_path, cluster, login_node,
        {"name": "ssh-read", "entrypoint": "steps.py", "args": ["--steps", "7", "--sleep", "0.3"],
         "partition": "h100-ondemand", "gpus_per_node": 1, "time_limit": "5m", "checkpoint": {"interval_steps": 3}},
        {"steps.py": steps_py})
    laptop = preamble + f"""{cli} submit {code}/run.yaml --json > {out}/submit.json
run_id=$({sys.executable} -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' {out}/submit.json)
{shutil.which("timeout")} 100 {cli} logs "$run_id" -f > {out}/follow.txt   # from before the job starts writing to its end
{cli} status "$run_id" --json > {out}/status.json
{cli} logs "$run_id" -n 0 > {out}/logs.txt
{cli} ls --json > {out}/ls.json
{sys.executable} -c 'import os,sys; print(*os.listdir(sys.argv[1]))' {runs}/$run_id/checkpoints/checkpoint-6 \
    > {out}/mirrored-checkpoint.txt
"""
    result = subprocess.run(["unshare", "-m", "bash", "-c", laptop], capture_output=True, text=True, timeout=150)
    submitted = json.loads((out / "submit.json").read_text()) if (out / "submit.json").stat().st_size else {}
    try:
        assert result.returncode == 0, result.stderr
    finally:
        if submitted.get("job_id"):
            subprocess.run(["scancel", str(submitted["job_id"])], capture_output=True)
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "COMPLETED", status
    assert (status["last_step"], status["latest_checkpoint_step"]) == (6, 6)
    assert status["checkpoint_age_seconds"] is not None and status["checkpoint_age_seconds"] < 120
    followed, logged = (out / "follow.txt").read_text(), (out / "logs.txt").read_text()
    for text in (followed, logged):
        assert "attempt 0 starts at step 0" in text and "finished" in text, text
    assert [r["last_step"] for r in json.loads((out / "ls.json").read_text())] == [6]
    # only the marker of the checkpoint came over, never its payload
    assert (out / "mirrored-checkpoint.txt").read_text().split() == [".complete"]
    assert "checkpoint-6/state.json" not in login_node.sftp_log.read_text()
