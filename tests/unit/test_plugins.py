"""slurmctl.ops.hooks without Slurm: job facts, cost records, prolog checks, epilog cleanup.

JOB_20 is job 20's record as the hooks read it (the values of the local cluster's failed job 20)."""

import json
import os
import subprocess
import sys

from slurmctl.ops.health import checks
from slurmctl.ops.hooks import epilog, prolog
from slurmctl.ops.hooks.config import HookConfig
from slurmctl.ops.hooks.records import SCHEMA_VERSION, read_records
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.records import JobInfo

from .fakes import ReplayRunner, squeue_output

# Job 20 as the hooks' sealed `squeue -t all -j 20` (SlurmClient.job_info) reads it: it failed with exit 3
JOB_20 = ["20", "FAILED", "768", "0", "2026-11-29T13:26:49", "2026-11-29T13:26:51", "l4-1", "l4-1",
          "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=1,gres/gpu:l4=1", "/tmp/slurm-20.out", "/tmp", "wrap"]
JOB_20_OUTPUT = squeue_output(JOB_20)


def cfg_for(tmp_path, **over):
    env = {"SLURMD_NODENAME": "n1", "SLURMCTL_LOCAL_DIR": str(tmp_path), "SLURMCTL_SLURM_BIN_DIR": "/nonexistent",
           "SLURMCTL_MIN_FREE_SCRATCH_MB": "1", "SLURMCTL_MIN_FREE_SHM_MB": "1",
           "SLURMCTL_RUNS_ROOT": str(tmp_path / "runs"), "SLURMCTL_DATA_CACHE_DIRS": "", **over}
    cfg = HookConfig.from_env(env)
    cfg.slurm, cfg.nvidia_smi = None, None
    return cfg


def test_job_info_from_a_sealed_record():
    info = SlurmClient(ReplayRunner({"squeue": JOB_20_OUTPUT})).job_info(20)
    assert (info.state, info.exit_code, info.gpu_model, info.gpu_count) == ("FAILED", "3:0", "l4", 1)
    assert info.start_time and info.end_time - info.start_time == 2
    assert info.std_out == "/tmp/slurm-20.out" and info.work_dir == "/tmp"


def test_final_state_while_the_controller_still_says_completing():
    completing = JobInfo(1, state="COMPLETING", exit_code="0:0")
    assert epilog.final_state(completing, {"SLURM_JOB_EXIT_CODE2": "3:0"}) == ("FAILED", True, "3:0")
    assert epilog.final_state(completing, {"SLURM_JOB_EXIT_CODE2": "0:0"}) == ("COMPLETING", False, "0:0")
    done = JobInfo(1, state="CANCELLED", exit_code="0:15")
    assert epilog.final_state(done, {"SLURM_JOB_EXIT_CODE2": "0:0"}) == ("CANCELLED", True, "0:15")


def test_prolog_test_trigger_fails_with_one_line_and_only_on_the_local_cluster(tmp_path):
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_COMMENT": "slurmctl:r1", "SLURM_JOB_GPUS": "2,3", "SLURM_JOB_UID": "0"}
    (tmp_path / "test-triggers" / "prolog-fail").mkdir(parents=True)
    (tmp_path / "test-triggers" / "prolog-fail" / "slurmctl:r1").touch()
    result = prolog.run_prolog(env, cfg_for(tmp_path))
    assert not result.ok and result.reason == ("slurmctl:[node_problem] trigger: "
                                             "test trigger prolog-fail/slurmctl:r1 (local dev cluster)")
    production = cfg_for(tmp_path)
    production.test_trigger_dir = None
    production.scratch_root, production.gpu_map_dir = tmp_path / "scratch", tmp_path / "map"
    assert prolog.run_prolog(env, production).ok
    assert (tmp_path / "map" / "2").read_text() == "5\n" and (tmp_path / "scratch" / "5").is_dir()


def test_prolog_fails_when_shm_is_too_full(tmp_path):
    cfg = cfg_for(tmp_path, SLURMCTL_MIN_FREE_SHM_MB=str(10**9))
    result = prolog.run_prolog({"SLURM_JOB_ID": "5"}, cfg)
    assert not result.ok and result.reason.startswith("slurmctl:[") and "] shm: /dev/shm has" in result.reason
    assert "needs 1000000000 MB" in result.reason


def test_epilog_cleans_up_and_writes_one_record_per_attempt(tmp_path):
    cfg = cfg_for(tmp_path)
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_GPUS": "0", "SLURM_JOB_RESTART_COUNT": "2", "SLURM_JOB_UID": "0",
           "SLURM_JOB_COMMENT": "slurmctl:run-a-20261130-0abc", "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_USER": "u"}
    assert prolog.run_prolog(env, cfg).ok
    (cfg.gpu_map_dir / "1").write_text("78\n")  # another job's GPU
    epilog.run_epilog(env, cfg)
    assert not (cfg.gpu_map_dir / "0").exists() and (cfg.gpu_map_dir / "1").exists()
    assert not (cfg.scratch_root / "77").exists()
    [record] = read_records(cfg.cost_spool)
    assert (record.job_id, record.restart_count, record.run_id, record.state) == \
        (77, 2, "run-a-20261130-0abc", "FAILED")
    # the prolog's record of the attempt (records.attempt_start) sits beside it under a dot name
    assert record.schema_version == SCHEMA_VERSION
    assert sorted(os.listdir(cfg.cost_spool)) == [".attempt-77", "77.2.0.json"]


def test_epilog_kills_a_process_of_the_ended_job_and_spares_others(tmp_path):
    cfg = cfg_for(tmp_path)
    env_base = {**os.environ, "SLURMD_NODENAME": "n1"}
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**env_base, "SLURM_JOB_ID": "4242"})
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**env_base, "SLURMD_NODENAME": "n2", "SLURM_JOB_ID": "4242"})
    try:
        result = epilog.run_epilog({"SLURM_JOB_ID": "4242", "SLURM_JOB_UID": str(os.getuid())}, cfg)
        assert mine.wait(timeout=5) is not None
        assert other.poll() is None  # same job id, but on another node of the job
        assert any(n.startswith("killed 1 orphan") for n in result.notes), result.notes
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()


def test_prolog_kills_only_leftovers_slurmd_started_on_its_own_node(tmp_path):
    """An interactive `salloc ... sleep` carries SLURM_JOB_ID and no SLURMD_NODENAME: it is nobody's
    leftover, whichever job's prolog runs on whichever node; a process of an ended job on this node is."""
    cfg = cfg_for(tmp_path)
    cfg.slurm = SlurmClient(ReplayRunner({"squeue": ""}))  # no job runs on n1 any more
    env_base = {k: v for k, v in os.environ.items() if k != "SLURMD_NODENAME"}
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    salloc_command = subprocess.Popen(sleep, env={**env_base, "SLURM_JOB_ID": "4300"})
    elsewhere = subprocess.Popen(sleep, env={**env_base, "SLURM_JOB_ID": "4301", "SLURMD_NODENAME": "n2"})
    leftover = subprocess.Popen(sleep, env={**env_base, "SLURM_JOB_ID": "4302", "SLURMD_NODENAME": "n1"})
    try:
        finding = checks.check_leftovers(checks.Subject(cfg, 4399, moment="prolog"))
        assert leftover.wait(timeout=5) is not None
        assert salloc_command.poll() is None and elsewhere.poll() is None
        assert finding.ok and finding.detail.startswith("killed 1 leftover"), finding
    finally:
        for p in (salloc_command, elsewhere, leftover):
            p.kill()
            p.wait()


def test_record_file_is_json_with_every_documented_field(tmp_path):
    cfg = cfg_for(tmp_path)
    epilog.run_epilog({"SLURM_JOB_ID": "9", "SLURM_JOB_UID": "0"}, cfg)
    data = json.loads((cfg.cost_spool / "9.0.0.json").read_text())
    for key in ("job_id", "restart_count", "run_id", "user", "account", "partition", "gpu_model", "gpu_count",
                "start_time", "end_time", "state", "exit_code", "drain_requested", "drain_acknowledged",
                "last_checkpoint_step", "last_checkpoint_time", "schema_version"):
        assert key in data


def test_hooks_reach_slurm_only_through_the_client_and_degrade_when_it_is_down(tmp_path):
    cfg = cfg_for(tmp_path)
    down = ReplayRunner({}, returncode=1, stderr="slurm_load_jobs error: Unable to contact slurm controller")
    cfg.slurm = SlurmClient(down)
    result = epilog.run_epilog({"SLURM_JOB_ID": "31", "SLURM_JOB_UID": "0", "SLURM_JOB_EXIT_CODE2": "0:0"}, cfg)
    assert "Slurm did not describe the job; record has no state/times" in result.notes
    assert (cfg.cost_spool / "31.0.0.json").is_file()
    assert down.calls[0][:6] == ["squeue", "-h", "-t", "all", "-j", "31"]
    # a drain needs the node's current reason first (never over someone else's): unknown -> not drained
    assert prolog.drain_node(cfg, "slurmctl:[node_problem] gpu: GPU 3 lost") is False
    assert down.calls[-1][:4] == ["sinfo", "-h", "-N", "-O"] and down.calls[-1][-2:] == ["-n", "n1"]


def test_epilog_record_uses_the_job_info_from_the_client(tmp_path):
    cfg = cfg_for(tmp_path)
    cfg.slurm = SlurmClient(ReplayRunner({"squeue": JOB_20_OUTPUT}))
    epilog.run_epilog({"SLURM_JOB_ID": "20", "SLURM_JOB_UID": "0"}, cfg)
    [record] = read_records(cfg.cost_spool)
    assert (record.state, record.state_final, record.exit_code, record.gpu_model) == ("FAILED", True, "3:0", "l4")
    assert record.elapsed_seconds == 2


def test_hooks_and_the_slurm_client_import_only_the_standard_library():
    """slurmd runs the hooks under the system python3, without the venv."""
    probe = ("import sys; sys.path.insert(0, '.'); before = set(sys.modules)\n"
             "import slurmctl.ops.hooks.prolog, slurmctl.ops.hooks.epilog, slurmctl.slurm\n"
             "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] not in sys.stdlib_module_names"
             " and m.split('.')[0] != 'slurmctl'))")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(["/usr/bin/python3", "-c", probe], cwd=repo, env={}, capture_output=True, text=True,
                         check=False)
    assert (out.returncode, out.stdout.strip()) == (0, "[]"), out.stderr
