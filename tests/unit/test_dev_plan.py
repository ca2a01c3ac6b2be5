"""`slurmctl dev` plans and the SSH target/command building, without Slurm or sshd."""

from pathlib import Path

import pytest

from slurmctl.config.models import SiteConfig
from slurmctl.control.dev import DevRequest, jupyter_plan, shell_plan, tunnel_command
from slurmctl.errors import SlurmctlError, SpecError
from slurmctl.slurm.ssh import SSHRunner, SSHTarget

SITE = SiteConfig.model_validate({
    "cluster": "t", "account": "ml", "cpus_per_gpu": 4,
    "partitions": {"l4-dev": {"capacity": "dev", "gpu_type": "l4", "gpus_per_node": 1, "price_per_gpu_hour": 0.35},
                   "h100-spot": {"capacity": "spot", "gpu_type": "h100", "gpus_per_node": 8,
                                 "price_per_gpu_hour": 1.4, "preemptible": True}}})


def test_shell_plan_is_srun_pty_with_ttl_and_idle_logout():
    plan = shell_plan(SITE, DevRequest(time="1m", idle="15s"))
    assert plan.command == ["env", "TMOUT=15", "srun", "--partition=l4-dev", "--time=00:01:00",
                            "--job-name=slurmctl-dev", plan.command[6], "--nodes=1", "--ntasks=1",
                            "--cpus-per-task=4", "--gres=gpu:l4:1", "--account=ml", "--pty", "bash", "-i"]
    assert plan.command[6].startswith("--comment=slurmctl-dev:")


def test_jupyter_plan_keeps_the_token_out_of_the_script_and_leaves_the_port_to_the_node():
    plan = jupyter_plan(SITE, DevRequest(time="2h", idle="30m", jupyter=True), "s3cret")
    assert plan.command[:2] == ["sbatch", "--parsable"] and "--export=ALL,JUPYTER_TOKEN" in plan.command
    wrap = next(a for a in plan.command if a.startswith("--wrap="))
    assert wrap == f"--wrap={SITE.python} -m slurmctl.runtime.jupyter --idle 1800" and "s3cret" not in wrap
    assert plan.environment == {"JUPYTER_TOKEN": "s3cret"}
    assert tunnel_command("alice@login", "l4-1", 41234) == "ssh -N -L 41234:127.0.0.1:41234 -J alice@login -- l4-1"
    assert tunnel_command("alice@login", "l4-1", 41234, 8899) == \
        "ssh -N -L 8899:127.0.0.1:41234 -J alice@login -- l4-1"


def test_the_job_starts_jupyter_on_loopback_with_no_port_retries():
    from slurmctl.runtime.jupyter import free_loopback_port, jupyter_argv

    argv = jupyter_argv("/py", 41234, 60)
    assert argv[:3] == ["/py", "-m", "jupyterlab"] and "--ip=127.0.0.1" in argv
    assert "--port=41234" in argv and "--port-retries=0" in argv
    assert not any("0.0.0.0" in a for a in argv)
    assert 1024 <= free_loopback_port() < 65536


def test_the_url_comes_only_from_a_server_file_of_the_users_own(tmp_path):
    import json
    import os

    from slurmctl.runtime.jupyter import private_dir, read_server_file, runtime_dir

    directory = private_dir(runtime_dir(tmp_path, 77))
    assert directory == tmp_path / ".local/state/slurmctl/jupyter/77" and directory.stat().st_mode & 0o777 == 0o700
    uid = os.getuid()
    assert read_server_file(directory, uid) is None
    server = {"port": 41234, "url": "http://127.0.0.1:41234/", "token": "t", "pid": 1}
    (directory / "jpserver-1.json").write_text(json.dumps({**server, "url": "http://0.0.0.0:8888/"}))
    assert read_server_file(directory, uid) is None  # not a loopback URL on the port it names
    (directory / "jpserver-1.json").write_text(json.dumps(server))
    os.chmod(directory / "jpserver-1.json", 0o600)
    assert read_server_file(directory, uid) == server
    assert read_server_file(directory, uid + 1) is None  # someone else's directory
    os.chmod(directory / "jpserver-1.json", 0o666)
    assert read_server_file(directory, uid) is None  # writable by others
    os.unlink(directory / "jpserver-1.json")
    os.symlink(tmp_path / "elsewhere.json", directory / "jpserver-2.json")
    (tmp_path / "elsewhere.json").write_text(json.dumps(server))
    assert read_server_file(directory, uid) is None  # never followed


@pytest.mark.parametrize("request_, message", [
    (DevRequest(time="soon"), "--time"), (DevRequest(idle="0s"), "--idle"),
    (DevRequest(partition="nope"), "nope"), (DevRequest(gpus=2), "--gpus 2"),
])
def test_bad_dev_requests_name_the_option(request_, message):
    with pytest.raises(SpecError) as err:
        shell_plan(SITE, request_)
    assert message in err.value.message


def test_ssh_targets_parse_and_bad_ones_are_refused():
    assert SSHTarget.parse("alice@login.example.org:2222") == SSHTarget("login.example.org", "alice", 2222)
    assert SSHTarget.parse("login") == SSHTarget("login", None, 22)
    with pytest.raises(SlurmctlError):
        SSHTarget.parse("alice@host:ssh")


def test_interactive_ssh_uses_strict_host_keys_and_quotes_the_remote_command():
    runner = SSHRunner(SSHTarget("login", "alice", 2222), key_filename="/k", known_hosts=Path("/kh"))
    argv = runner.openssh_argv(["srun", "--pty", "bash", "-i"], {"A": "x y"})
    assert argv[:2] == ["ssh", "-t"] and "StrictHostKeyChecking=yes" in argv and "UserKnownHostsFile=/kh" in argv
    assert argv[-2:] == ["alice@login", "env 'A=x y' srun --pty bash -i"]


def test_dev_shell_goes_through_the_client_seam():
    class RecordingRunner:
        def __init__(self):
            self.attached = []

        def attach(self, argv):
            self.attached.append(argv)
            return 0

    from slurmctl.control.dev import run_shell
    from slurmctl.slurm.client import SlurmClient

    runner = RecordingRunner()
    plan = shell_plan(SITE, DevRequest())
    code, _ = run_shell(plan, SlurmClient(runner))
    assert code == 0 and runner.attached == [plan.command] and "srun" in plan.command and "--pty" in plan.command
