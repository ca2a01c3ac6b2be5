"""Production's preemption tiers on real daemons: deploy/slurm/{scheduling,partitions}.conf and
accounting.sh's QOS, run by a throwaway slurmctld + slurmdbd + two slurmds (tests/integration/
throwaway_slurm.py; the shared cluster is not touched), with real jobs submitted by alice.

- h100-spot: an `experiments` job is preempted by a `production` job: its batch shell gets its own
  --signal (B:USR1) at once, then GraceTime later the requeue's SIGTERM, and it goes back to PENDING.
- h100-ondemand: no tier preempts a job there. preempt/qos ignores the partition's PreemptMode=OFF
  (preempt_qos.c takes the QOS's mode or the cluster's), so the partition admits only QOS that do
  not preempt each other; every tier is tried, and the accepted jobs are never signalled.
- h100-ondemand admits only production (AllowQos): a job under another tier is accepted and pends
  for good (QOSNotAllowed); alice has ONE association (accounting.sh), no partition-bound one.
- Jobs sent to a partition with no node, or bigger than the nodes present, are accepted and pend
  (EnforcePartLimits=NO): KEDA scales partitions up from zero on them. So do jobs that name several
  partitions (`-p h100-ondemand,h100-spot`), which a partition-bound association made Slurm refuse.
- `slurmctl submit` as alice to h100-flex, a pool with no node (the production site.yaml's
  partitions, `max_nodes`): preflight passes, placement says it pends until the pool scales up, the
  job is submitted and pends.
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


def ours_on_22_05(nodes: dict[str, str] | None = None) -> str:
    """scheduling.conf + partitions.conf (with this cluster's nodes: NODES unless given), in 22.05's spelling."""
    nodes = NODES if nodes is None else nodes
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
            members = ",".join(n for n, part in nodes.items() if f"PartitionName={part}" == name)
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
        # what an earlier accounting.sh made: an association bound to a partition, which splits the
        # user's fair share and makes Slurm refuse multi-partition jobs; the re-run removes it
        bound = c.run(["sacctmgr", "-i", "add", "user", USER, "account=ml-research", "partition=h100-ondemand"])
        assert bound.returncode == 0, bound.stdout + bound.stderr
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
    # every tier on h100-ondemand, the lower ones first: none of them may ever start there (AllowQos),
    # so no lower-tier job holds the node when a production job comes, the one tier that could
    # preempt. None: no --qos, alice's default QOS (experiments, accounting.sh)
    for qos in ("burst", "experiments", "dev", None, "production"):
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
    assert observed["refused"] == {}, observed["refused"]  # one association: every tier is accepted ...
    assert set(observed["od_running"]) == {"od-production"}, observed["squeue"]  # ... only production runs
    for name, job_id in observed["od_running"].items():
        assert [e for e, _ in events(c, name)] == ["start"], (name, events(c, name))  # no signal, no requeue
        assert job(c, job_id)["JobState"] == "RUNNING" and job(c, job_id)["Restarts"] == "0"
    assert job(c, observed["od_high"])["JobState"] == "PENDING"  # waits for the node instead of taking it
    # the other tiers pend for good: preempt/qos ignores PreemptMode=OFF, AllowQos keeps them off
    for name in ("od-burst", "od-experiments", "od-dev", "od-default"):
        job_id = observed["accepted"][name]
        assert job(c, job_id)["JobState"] == "PENDING", name
        reason = c.run(["squeue", "-h", "-j", job_id, "-o", "%r"]).stdout
        assert "not permitted to use this partition" in reason, (name, reason)
    assert job(c, observed["accepted"]["od-default"])["QOS"] == "experiments"


def test_alice_has_one_association_and_no_partition_bound_one(cluster):
    """accounting.sh gives a user one association (one fair-share standing), none per partition, and
    removes the partition-bound one an earlier version made (the fixture adds it before the re-run)."""
    rows = cluster.run(["sacctmgr", "-n", "-P", "show", "assoc", f"user={USER}",
                        "format=account,partition,qos,defaultqos"]).stdout.split()
    assert rows == ["ml-research||burst,dev,experiments,production|experiments"], rows


def test_the_first_start_creates_the_tres_and_stops_until_the_qos_exist(cluster):
    assert "creating" in cluster.first_start_log and "gres/gpu" in cluster.first_start_log
    assert "fatal: Partition l4-dev has an invalid qos (dev)" in cluster.first_start_log


def test_slurmctld_logs_no_error_on_the_operators_lines_plus_ours(observed):
    log = observed["c"].log("slurmctld.out") + observed["c"].log("slurmctld.log")
    assert error_lines(log) == []


def test_jobs_pend_on_a_partition_scaled_to_zero_and_for_nodes_not_there_yet(observed):
    """KEDA adds nodes for pending jobs: a job sent to a partition with no node, or bigger than the
    nodes present, must be accepted and pend (EnforcePartLimits=ALL refused them all at submit)."""
    c = observed["c"]
    wanted = {"flex-production": ("h100-flex", "production", []),   # no node in h100-flex
              "flex-default": ("h100-flex", None, []),
              "dev-default": ("l4-dev", None, []),                   # no node in l4-dev
              "spot-2-nodes": ("h100-spot", "burst", ["-N", "2"]),   # one node present
              "spot-or-flex": ("h100-spot,h100-flex", "burst", []),
              # several partitions, one of them h100-ondemand: refused while users had an association
              # bound to it ("Multiple partition job request not supported ...")
              "ondemand-or-flex": ("h100-ondemand,h100-flex", "production", [])}
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


def test_slurmctl_submit_to_a_pool_scaled_to_zero_is_accepted_and_pends(observed):
    """A researcher's `slurmctl submit` (as alice, the CLI as installed) to h100-flex, which has no
    node here as a pool scaled to zero has none: with production's site.yaml partitions (max_nodes),
    preflight finds the partition (from the partitions, not the nodes), placement says the job pends
    until the pool scales up (sbatch --test-only: "Requested node configuration is not available"),
    and the job is submitted and pends. 2 nodes x 8 GPUs: more than any node present."""
    import pwd
    import sys

    import yaml

    from tests.integration.conftest import User

    c = observed["c"]
    production = yaml.safe_load((REPO / "deploy" / "slinky" / "site.yaml").read_text())
    runs, work = c.dir / "runs", c.dir / "alice-work"
    for folder in (runs, c.dir / "cost-records"):
        folder.mkdir(exist_ok=True)
        folder.chmod(0o1777)
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text("print('hello')\n")
    (work / "run.yaml").write_text(yaml.safe_dump({"name": "flex-empty", "entrypoint": "train.py",
                                                   "partition": "h100-flex", "nodes": 2, "gpus_per_node": 8,
                                                   "time_limit": "10m"}))
    site = c.dir / "site.yaml"
    site.write_text(yaml.safe_dump({"cluster": c.name, "runs_root": str(runs), "python": sys.executable,
                                    "cost_records_dir": str(c.dir / "cost-records"), "cpus_per_gpu": 1,
                                    "partitions": production["partitions"]}))
    alice = pwd.getpwnam(USER)
    for path in (work, work / "train.py", work / "run.yaml"):
        os.chown(path, alice.pw_uid, alice.pw_gid)
    site.chmod(0o644)
    env = {"SLURM_CONF": str(c.conf), "SLURMCTL_SITE_CONFIG": str(site), "PYTHONPATH": str(REPO)}
    dry = User(USER).slurmctl("submit", str(work / "run.yaml"), "--dry-run", env=env, cwd=work, timeout=120)
    print(f"\nslurmctl submit --dry-run to h100-flex (no node), exit {dry.returncode}:\n{dry.stdout}{dry.stderr}")
    text = " ".join((dry.stdout + dry.stderr).split())
    assert dry.returncode == 0 and "unknown-partition" not in text, text
    assert "pends until the pool scales up" in text, text
    started = time.monotonic()
    result = User(USER).slurmctl_json("submit", str(work / "run.yaml"), "--yes", env=env, cwd=work, timeout=120)
    print(f"slurmctl submit in {time.monotonic() - started:.1f} s: job {result['job_id']}, "
          f"placement {result['placement']}")
    [option] = result["placement"]["options"]
    assert option["waits_for_scale_up"] and option["start_time"] is None, option
    job_id = str(result["job_id"])
    time.sleep(6)  # scheduler passes
    state = job(c, job_id)
    print(f"its job {job_id}: {state['JobState']} {state['Reason']} partition {state['Partition']} "
          f"nodes {state['NumNodes']}")
    assert state["JobState"] == "PENDING" and state["Partition"] == "h100-flex", state
    assert state["NumNodes"].startswith("2"), state


def test_the_exporter_counts_only_jobs_more_nodes_would_start(observed, monkeypatch):
    """KEDA's demand on real daemons: the exporter (production site.yaml partitions) asked by this
    cluster's squeue/sinfo. Jobs under a QOS the partition does not take, over its MaxTime, or
    bigger than the pool can grow are not counted; jobs waiting on a pool with no node are."""
    import sys

    import yaml
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from slurmctl.config.models import SiteConfig
    from slurmctl.ops.exporter import build

    c = observed["c"]
    never = {"flex-too-long": ["-t", "8-00:00:00"],   # over h100-flex's MaxTime (7 days)
             "flex-7-nodes": ["-N", "7"]}             # the pool has at most 6 nodes (site.yaml max_nodes)
    for name, extra in never.items():
        job_id, msg = submit(c, name, "h100-flex", "production", extra)
        assert job_id, msg
    time.sleep(6)  # scheduler passes: the reasons are set
    production = yaml.safe_load((REPO / "deploy" / "slinky" / "site.yaml").read_text())
    site = SiteConfig.model_validate({"cluster": c.name, "runs_root": str(c.dir / "runs"), "python": sys.executable,
                                      "partitions": production["partitions"]})
    monkeypatch.setenv("SLURM_CONF", str(c.conf))
    registry, _ = build(site, 15.0)
    samples = {(s.name, s.labels.get("partition")): s.value
               for family in text_string_to_metric_families(generate_latest(registry).decode())
               for s in family.samples if s.name.startswith("slurmctl_job")}
    queue = c.run(["squeue", "-h", "-t", "PD", "-o", "%j|%P|%D|%r"]).stdout
    print(f"\npending:\n{queue}exporter: { {k: v for k, v in samples.items() if 'waiting' in k[0]} }")
    # h100-ondemand: od-production-2; not the four whose QOS it refuses, nor ondemand-or-flex, which
    # counts for the cheaper of its two partitions (h100-flex, site.yaml prices)
    assert samples[("slurmctl_jobs_waiting_for_nodes", "h100-ondemand")] == 1, queue
    # h100-flex (no node): flex-production, flex-default, ondemand-or-flex; not flex-too-long (over
    # MaxTime: Slurm says PartitionConfig there, as for every job, so the exporter compares the time
    # limits itself) or flex-7-nodes; + slurmctl's 2-node flex-empty run when that test ran before
    flex = [line for line in queue.splitlines() if line.split("|")[1].startswith("h100-flex")]
    assert "flex-too-long|h100-flex|1|PartitionConfig" in flex, flex
    submitted = any(line.startswith("flex-empty-") for line in flex)
    assert samples[("slurmctl_jobs_waiting_for_nodes", "h100-flex")] == 3 + submitted, flex
    assert samples[("slurmctl_job_waiting_for_nodes_max_nodes", "h100-flex")] == (2 if submitted else 1), flex
