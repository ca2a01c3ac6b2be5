"""Production's preemption tiers on real daemons: deploy/slurm/{scheduling,partitions}.conf and
accounting.sh's QOS, run by a throwaway slurmctld + slurmdbd + two slurmds (tests/integration/
throwaway_slurm.py; the shared cluster is not touched), with real jobs submitted by alice.

- h100-spot: an `experiments` job is preempted by a `production` job: its batch shell gets its own
  --signal (B:USR1) at once, then GraceTime later the requeue's SIGTERM, and it goes back to PENDING.
- h100-ondemand: no tier preempts a job there. preempt/qos ignores the partition's PreemptMode=OFF
  (preempt_qos.c takes the QOS's mode or the cluster's), so the partition admits only QOS that do
  not preempt each other; every tier is tried, and the accepted jobs are never signalled.
- h100-ondemand admits only production: the other tiers are refused at submit by alice's
  association for the partition (accounting.sh); an operator's burst job pends for good (AllowQos).
- Jobs sent to a partition with no node, or bigger than the nodes present, are accepted and pend
  (EnforcePartLimits=NO): KEDA scales partitions up from zero on them.
- RUNBOOK order on a fresh database: slurmctld's first start exits (no QOS yet); step 9's block, run
  exactly as written, creates the QOS while slurmctld is down; then slurmctld starts.
- slurmctld logs no error line on the operator's lines + ours (no key declared twice).

What differs on this machine's Slurm 22.05 from production's 25.11 (each substitution below says
so): 22.05 has no PreemptParameters, its `send_user_signal` is SlurmctldParameters'
`preempt_send_user_signal`; the operator's auth/slurm, cgroup plugins and metrics/openmetrics are
25.11/cgroup-host features, replaced by munge and linuxproc in the throwaway cluster's base lines.
The preemption code paths used here (QOS Preempt lists, QOS GraceTime, requeue) are the same in
both (preempt_qos.c of 22.05.8 and 25.11.6). For speed only: PreemptExemptTime=0 and GraceTime
GRACE seconds instead of 10 min and 120 s (accounting.sh's GRACE_TIME; the code path is the same).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.unit.test_deploy_runbook import runbook_blocks
from tests.unit.test_deploy_slurmctld import error_lines

from .throwaway_slurm import ThrowawayCluster

REPO = Path(__file__).resolve().parents[2]
SLURM_PARTS = REPO / "deploy" / "slurm"
GRACE = 12
USER = "alice"
NODES = {"od-0": "h100-ondemand", "spot-0": "h100-spot"}
JOB = """#!/bin/bash
log=$1
echo "start $(date +%s.%N) restarts=${SLURM_RESTART_COUNT:-0}" >> "$log"
trap 'echo "USR1 $(date +%s.%N)" >> "$log"' USR1
trap 'echo "TERM $(date +%s.%N)" >> "$log"; exit 143' TERM
while :; do sleep 0.2; done
"""


def ours_on_22_05() -> str:
    """scheduling.conf + partitions.conf (with this cluster's nodes), in 22.05's spelling."""
    lines = []
    for line in (SLURM_PARTS / "scheduling.conf").read_text().splitlines():
        if line.startswith("PreemptParameters="):
            continue  # 25.11 only; 22.05: SlurmctldParameters=preempt_send_user_signal (see below)
        if line.startswith("PreemptExemptTime="):
            line = "PreemptExemptTime=00:00:00"  # test speed
        lines.append(line)
    for line in (SLURM_PARTS / "partitions.conf").read_text().splitlines():
        if line.startswith("PartitionName="):
            name, rest = line.split(" ", 1)
            members = ",".join(n for n, part in NODES.items() if f"PartitionName={part}" == name)
            lines.append(f"{name} Nodes={members} {rest}" if members else line)
    return "\n".join(lines) + "\n"


def runbook_step_9(c: ThrowawayCluster) -> subprocess.CompletedProcess:
    """RUNBOOK step 9's block exactly as written, from a folder with users.txt and the repository's
    deploy/; its `kubectl exec ... -c reconfigure -- CMD` runs CMD here, where slurmctld is down as
    in the controller pod's crash loop and only slurmdbd answers, as to the reconfigure container."""
    [block] = [b for b in runbook_blocks() if "deploy/slurm/accounting.sh" in b and "kubectl" in b]
    work = c.dir / "step9"
    (work / "bin").mkdir(parents=True, exist_ok=True)
    (work / "users.txt").write_text(f"{USER} ml-research\n")
    if not (work / "deploy").exists():
        (work / "deploy").symlink_to(REPO / "deploy")
    (work / "bin" / "kubectl").write_text(
        '#!/bin/bash\n'
        'want="-n slurm exec -i statefulset/slurm-controller -c reconfigure --"\n'
        '[[ "$*" == "$want "* ]] || { echo "kubectl: not the reconfigure container: $*" >&2; exit 2; }\n'
        'shift 8\n'
        'exec "$@"\n')
    (work / "bin" / "kubectl").chmod(0o755)
    return c.run(["bash", "-c", "set -euo pipefail\n" + block], cwd=work, timeout=90,
                 env={"PATH": f"{work}/bin:{os.environ['PATH']}", "GRACE_TIME": str(GRACE)})


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0 or not shutil.which("slurmctld") or not shutil.which("mariadbd"):
        pytest.fail("needs root, Slurm and MariaDB (scripts/setup installs them)")
    started = time.monotonic()
    c = ThrowawayCluster("preempt")
    try:
        c.write(ours_on_22_05(), NODES)
        text = c.conf.read_text().replace("SlurmctldParameters=enable_configless,enable_stepmgr",
                                          "SlurmctldParameters=enable_configless,enable_stepmgr,"
                                          "preempt_send_user_signal")  # 22.05's PreemptParameters=send_user_signal
        c.conf.write_text(text)
        c.start()
        # RUNBOOK order: Slurm (step 8), then the QOS (step 9). The first start creates the gres/gpu
        # TRES in the database (accounting.sh's caps need it), then exits: l4-dev's partition QOS
        # does not exist yet (a fatal in 25.11's read_config.c too).
        code, first = c.first_start()
        assert code not in (None, 0), first  # it stopped: accounting.sh below runs with no slurmctld
        c.first_start_log = first
        assert "is DOWN" in c.run(["scontrol", "ping"]).stdout
        acct = runbook_step_9(c)
        assert acct.returncode == 0, acct.stdout + acct.stderr
        again = runbook_step_9(c)
        assert again.returncode == 0, again.stdout + again.stderr  # idempotent: people change, it re-runs
        # root (an operator) may use burst: its jobs get past the association check, AllowQos stays
        assert c.run(["sacctmgr", "-i", "modify", "user", "root", "set", "QOS+=burst"]).returncode == 0
        c.start_slurm()
        c.restart_slurmctld()  # what every later start runs on: QOS and saved state exist
        c.started_in = time.monotonic() - started
        (c.dir / "job.sh").write_text(JOB)
        (c.dir / "job.sh").chmod(0o755)
        yield c
    finally:
        c.close()


def submit(c: ThrowawayCluster, name: str, partition: str, qos: str | None,
           extra: list[str] | None = None) -> tuple[str | None, str]:
    """(job id or None, sbatch's message) of a job submitted by alice."""
    argv = ["sbatch", "--parsable", "-J", name, "-p", partition, "-t", "10", "--signal=B:USR1@60", "--requeue",
            "-o", f"{c.dir}/jobs/{name}.out", *([f"--qos={qos}"] if qos else []), *(extra or []),
            str(c.dir / "job.sh"), f"{c.dir}/jobs/{name}.log"]
    out = subprocess.run(["runuser", "-u", USER, "--", "env", "-i", "PATH=/usr/bin:/bin", f"SLURM_CONF={c.conf}",
                          *argv], capture_output=True, text=True, timeout=30)
    return (out.stdout.strip().split(";")[0] if out.returncode == 0 else None), (out.stdout + out.stderr).strip()


def job(c: ThrowawayCluster, job_id: str) -> dict[str, str]:
    text = c.run(["scontrol", "show", "job", "-o", job_id]).stdout
    return dict(f.split("=", 1) for f in text.split() if "=" in f)


def wait_for(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False


def events(c: ThrowawayCluster, name: str) -> list[tuple[str, float]]:
    path = c.dir / "jobs" / f"{name}.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(line.split()[0], float(line.split()[1])) for line in lines]


@pytest.fixture(scope="module")
def observed(cluster):
    """Both scenarios at once (one per node), so the grace periods overlap: the states seen."""
    c, t0 = cluster, time.monotonic()
    spot_low, msg = submit(c, "spot-experiments", "h100-spot", "experiments")
    assert spot_low, msg
    accepted, refused = {}, {}
    # every tier on h100-ondemand, the lower ones first so that one of them would hold the node when a
    # production job comes (the one tier that could preempt there); None: no --qos, the default QOS
    # of alice's association for h100-ondemand (accounting.sh PARTITION_QOS)
    for qos in ("burst", "experiments", "dev", None):
        name = f"od-{qos or 'default'}"
        job_id, msg = submit(c, name, "h100-ondemand", qos)
        (accepted if job_id else refused)[name] = job_id or msg
    assert wait_for(lambda: job(c, spot_low)["JobState"] == "RUNNING" and
                    any(job(c, j)["JobState"] == "RUNNING" for j in accepted.values()), 60)
    od_running = {n: j for n, j in accepted.items() if job(c, j)["JobState"] == "RUNNING"}
    assert wait_for(lambda: all(events(c, n) for n in ["spot-experiments", *od_running]), 10)
    spot_high, msg = submit(c, "spot-production", "h100-spot", "production")
    od_high, od_msg = submit(c, "od-production-2", "h100-ondemand", "production")
    assert spot_high and od_high, msg + od_msg
    preempted = wait_for(lambda: job(c, spot_high)["JobState"] == "RUNNING", GRACE + 60)
    time.sleep(3)  # the on-demand side has had GraceTime + the scheduler's passes to act too
    states = c.run(["squeue", "-h", "-o", "%i %j %P %q %T %r"]).stdout
    sacct = c.run(["sacct", "-n", "-P", "--duplicates", "-X", "-o", "JobID,JobName,Partition,QOS,State",
                   "-S", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 3600))]).stdout
    print(f"\ncluster up in {c.started_in:.1f} s; scenario {time.monotonic() - t0:.1f} s\n"
          f"squeue:\n{states}sacct --duplicates:\n{sacct}refused on h100-ondemand: {refused}\n"
          f"signals seen by the batch shells: { {n: events(c, n) for n in ['spot-experiments', *od_running]} }")
    return {"c": c, "spot_low": spot_low, "spot_high": spot_high, "preempted": preempted,
            "accepted": accepted, "od_running": od_running, "od_high": od_high, "refused": refused,
            "squeue": states, "sacct": sacct}


def test_a_spot_experiments_job_gets_its_signal_then_grace_time_then_requeue(observed):
    c = observed["c"]
    assert observed["preempted"], "production did not preempt experiments on h100-spot:\n" + observed["squeue"]
    seen = dict(events(c, "spot-experiments")[1:3])
    assert list(seen) == ["USR1", "TERM"], events(c, "spot-experiments")  # the drain signal, then the requeue
    # the QOS's GraceTime (not the partition's 120 s): slurmctld ends the grace in its periodic
    # time-limit pass (every 30 s, PERIODIC_TIMEOUT in controller.c), so up to 30 s later
    assert GRACE - 1 <= seen["TERM"] - seen["USR1"] <= GRACE + 32, seen
    low = job(c, observed["spot_low"])
    assert low["JobState"] == "PENDING" and low["Restarts"] == "1", low   # requeued, will restart
    assert re.search(rf"^{observed['spot_low']}\|spot-experiments\|h100-spot\|experiments\|(PREEMPTED|REQUEUED)",
                     observed["sacct"], re.M), observed["sacct"]


def test_no_tier_preempts_an_on_demand_job(observed):
    c = observed["c"]
    for name, job_id in observed["od_running"].items():
        assert [e for e, _ in events(c, name)] == ["start"], (name, events(c, name))  # no signal, no requeue
        assert job(c, job_id)["JobState"] == "RUNNING" and job(c, job_id)["Restarts"] == "0"
    assert job(c, observed["od_high"])["JobState"] == "PENDING"  # waits for the node instead of taking it
    # only production is admitted, at submit, by alice's association for the partition (preempt/qos
    # ignores PreemptMode=OFF, and EnforcePartLimits=NO leaves AllowQos to the scheduler)
    assert set(observed["accepted"]) == {"od-default"}, observed["accepted"]
    assert job(c, observed["accepted"]["od-default"])["QOS"] == "production"  # no --qos: production
    assert set(observed["refused"]) == {"od-burst", "od-experiments", "od-dev"}, observed["refused"]
    assert all("Invalid qos specification" in msg for msg in observed["refused"].values()), observed["refused"]


def test_the_first_start_creates_the_tres_and_stops_until_the_qos_exist(cluster):
    assert "creating" in cluster.first_start_log and "gres/gpu" in cluster.first_start_log
    assert "fatal: Partition l4-dev has an invalid qos (dev)" in cluster.first_start_log


def test_slurmctld_logs_no_error_on_the_operators_lines_plus_ours(observed):
    # the refused submits log their reason as an error ("This association ... does not have access to qos")
    refusals = re.compile(r"error: This association .* does not have access to qos")
    log = observed["c"].log("slurmctld.out") + observed["c"].log("slurmctld.log")
    assert [line for line in error_lines(log) if not refusals.search(line)] == []


def test_jobs_pend_on_a_partition_scaled_to_zero_and_for_nodes_not_there_yet(observed):
    """KEDA adds nodes for pending jobs: a job sent to a partition with no node, or bigger than the
    nodes present, must be accepted and pend (EnforcePartLimits=ALL refused them all at submit)."""
    c = observed["c"]
    wanted = {"flex-production": ("h100-flex", "production", []),   # no node in h100-flex
              "flex-default": ("h100-flex", None, []),
              "dev-default": ("l4-dev", None, []),                   # no node in l4-dev
              "spot-2-nodes": ("h100-spot", "burst", ["-N", "2"]),   # one node present
              "spot-or-flex": ("h100-spot,h100-flex", "burst", [])}
    ids, refused = {}, {}
    for name, (partition, qos, extra) in wanted.items():
        job_id, msg = submit(c, name, partition, qos, extra)
        (ids if job_id else refused)[name] = job_id or msg
    assert refused == {}, refused
    time.sleep(6)  # two scheduler passes (sched_min_interval 2 s, PriorityCalcPeriod 5 s)
    states = {name: (job(c, j)["JobState"], job(c, j)["Reason"]) for name, j in ids.items()}
    print(f"\njobs sent where no node (or not enough) is: {states}")
    assert all(state == "PENDING" for state, _ in states.values()), states
    assert states["spot-2-nodes"][1] in ("PartitionConfig", "PartitionNodeLimit", "Resources", "Priority"), states
    assert job(c, ids["dev-default"])["QOS"] == "experiments"  # l4-dev's default (accounting.sh)


def test_a_qos_on_demand_does_not_admit_never_starts_there_even_past_the_association(observed):
    """The second line: with EnforcePartLimits=NO, AllowQos is the scheduler's check. A burst job that
    an operator (whose association has burst) sends to h100-ondemand pends for good, with its reason."""
    c = observed["c"]
    out = c.run(["sbatch", "--parsable", "-J", "od-root-burst", "-p", "h100-ondemand", "-t", "10", "--qos=burst",
                 "-o", "/dev/null", "--wrap", "sleep 300"])
    assert out.returncode == 0, out.stdout + out.stderr
    job_id = out.stdout.strip().split(";")[0]
    time.sleep(6)  # scheduler passes
    state = job(c, job_id)
    print(f"\nroot's burst job on h100-ondemand: {state['JobState']} {state['Reason']}")
    assert state["JobState"] == "PENDING", state
    assert "not permitted to use this partition" in c.run(["squeue", "-h", "-j", job_id, "-o", "%r"]).stdout
