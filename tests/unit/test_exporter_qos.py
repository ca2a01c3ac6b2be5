"""The autoscaler's demand checks what Slurm does not say on a pool scaled to zero: there every
pending job pends with PartitionConfig, before Slurm looks at AllowQos, the QOS limits or MaxNodes.

tests/fixtures/zero_pools_*.txt are `scontrol show partition -o` and `sacctmgr -n -P show qos
format=...` as printed by a throwaway Slurm 22.05 cluster running production's partitions.conf and
accounting.sh with no node in h100-ondemand, h100-flex and l4-dev
(tests/integration/test_exporter_zero_pools.py, which runs the same scenario on the daemons)."""

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurmctl.config.models import load_site_config
from slurmctl.errors import SlurmCommandError
from slurmctl.ops.exporter import build
from slurmctl.slurm.client import SEP, SlurmClient

from .fakes import ReplayRunner, squeue_output

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
SCONTROL = (FIXTURES / "zero_pools_scontrol_partitions.txt").read_text()
SACCTMGR = (FIXTURES / "zero_pools_sacctmgr_qos.txt").read_text()
SCONTROL_ARGV = ("scontrol", "show", "partition", "-o")
SACCTMGR_ARGV = ("sacctmgr", "-n", "-P", "show", "qos", "format=Name,MaxTRES,MaxTRESPU,GrpTRES,MaxJobsPU,MaxWall")
MAXTIME = "".join(f"{name}{SEP}{'04:00:00' if name == 'l4-dev' else '7-00:00:00'}{SEP}up\n"
                  for name in ("h100-ondemand", "h100-spot", "h100-flex", "l4-dev"))


def job(job_id, partition, qos, nodes=1, gpus=0, state="PENDING", reason="PartitionConfig", user="alice",
        dependency="(null)", tres=None, array="N/A", per_node="N/A"):
    tres = tres or f"cpu={nodes},node={nodes},gres/gpu={gpus}"
    return [str(job_id), state, reason, partition, str(nodes), tres,
            "2026-12-01T10:00:00", "N/A", "10:00", user, qos, dependency, per_node, array, "(null)"]


# the integration test's queue, as squeue -O prints it (flex-after-production waits on job 9)
QUEUE = [
    job(1, "h100-ondemand", "experiments", gpus=8), job(2, "h100-ondemand", "burst", gpus=8),
    job(3, "h100-ondemand", "production", gpus=8),
    job(4, "h100-flex", "burst", 3, 24), job(5, "h100-flex", "burst", 2, 16), job(6, "h100-flex", "burst", 1, 8),
    job(7, "h100-flex", "experiments", 5, 40), job(8, "h100-flex", "dev"), job(9, "h100-flex", "production"),
    job(10, "h100-flex", "production", reason="JobHeldUser"), job(11, "h100-flex", "production"),
    job(12, "h100-spot", "production", state="RUNNING", reason="None"),
    job(13, "l4-dev", "production"), job(14, "l4-dev", "experiments", gpus=1), job(15, "l4-dev", "experiments", gpus=1),
    job(16, "h100-flex", "production", reason="Dependency", dependency="afterok:9(unfulfilled)"),
]


class Runner(ReplayRunner):
    """ReplayRunner whose sacctmgr fails (slurmdbd down) when asked to."""

    def __init__(self, outputs, sacctmgr_down=False):
        super().__init__(outputs)
        self.sacctmgr_down = sacctmgr_down

    def run(self, argv, timeout=60.0):
        if self.sacctmgr_down and argv[0] == "sacctmgr":
            self.calls.append(list(argv))
            raise SlurmCommandError("`sacctmgr` failed: Problem talking to the database")
        return super().run(argv, timeout)


def waiting(records, sacctmgr=SACCTMGR, sacctmgr_down=False, sinfo_nodes="") -> dict[str, float]:
    site = load_site_config(REPO / "deploy" / "slinky" / "site.yaml")
    runner = Runner({"squeue": squeue_output(*records), "sinfo": sinfo_nodes,
                     ("sinfo", "-h", "-o", SEP.join(["%R", "%l", "%a"])): MAXTIME,
                     SCONTROL_ARGV: SCONTROL, SACCTMGR_ARGV: sacctmgr}, sacctmgr_down)
    registry, _ = build(site, 15.0, runner)
    text = generate_latest(registry).decode()
    assert list(SCONTROL_ARGV) in runner.calls and list(SACCTMGR_ARGV) in runner.calls
    return {s.labels["partition"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "slurmctl_jobs_waiting_for_nodes"}


def test_partition_policies_from_real_scontrol_output():
    policies = SlurmClient(ReplayRunner({SCONTROL_ARGV: SCONTROL})).partition_policies()
    assert policies["h100-ondemand"].allow_qos == {"production"}
    assert not policies["h100-ondemand"].admits("experiments") and policies["h100-ondemand"].admits("production")
    assert policies["l4-dev"].qos == "dev" and policies["l4-dev"].allow_qos == {"dev", "experiments"}
    assert policies["h100-flex"].max_nodes is None and policies["h100-ondemand"].qos == ""


def test_qos_table_from_real_sacctmgr_output():
    table = SlurmClient(ReplayRunner({SACCTMGR_ARGV: SACCTMGR})).qos_table()
    assert table["burst"].per_user == {"gres/gpu": 16} and table["burst"].group == {"gres/gpu": 16}
    assert table["experiments"].jobs_per_user == 8 and table["production"].per_user == {"gres/gpu": 64}
    assert table["dev"].max_wall_seconds == 4 * 3600 and table["dev"].jobs_per_user == 1
    assert table["normal"].per_user == {} and table["normal"].max_wall_seconds is None


def test_a_malformed_qos_line_is_counted_not_fatal():
    client = SlurmClient(ReplayRunner({SACCTMGR_ARGV: SACCTMGR + "half|a|line\n"}))
    assert set(client.qos_table()) == {"normal", "production", "experiments", "burst", "dev"}
    assert client.rejects.counts == {"qos_table": 1}


def test_only_jobs_their_partition_admits_and_their_qos_limits_allow_are_demand():
    # h100-ondemand: production only (AllowQos); h100-flex: job 9, job 11 (no dependency left) and
    # one burst job (5 or 6: 16 + 8 > alice's 16); not 4 (24 > 16), 7 (40 > experiments' 32), 8
    # (dev is not allowed there), 10 (held) or 16 (dependency); l4-dev: one of 14 and 15 (the
    # partition QOS dev: one job per user), not 13 (production is not allowed there)
    assert waiting(QUEUE) == {"h100-ondemand": 1, "h100-spot": 0, "h100-flex": 3, "l4-dev": 1}


def test_running_jobs_count_against_the_users_cap():
    # alice's 32 experiments GPUs (MaxTRESPerUser), running on spot: her next one cannot start anywhere
    running = [job(20, "h100-spot", "experiments", 4, 32, state="RUNNING", reason="None")]
    assert waiting(running + [job(21, "h100-flex", "experiments", 1, 8)])["h100-flex"] == 0
    # bob's own cap is untouched by alice's jobs (and the QOS's 48 leave room for his 8)
    assert waiting(running + [job(22, "h100-flex", "experiments", 1, 8, user="bob")])["h100-flex"] == 1


def test_group_cap_counts_every_users_jobs():
    # burst GrpTRES gres/gpu=16 for the whole QOS: bob's 8 + carol's 8 fill it, alice's 8 waits
    queue = [job(30, "h100-flex", "burst", 1, 8, user="bob"), job(31, "h100-flex", "burst", 1, 8, user="carol"),
             job(32, "h100-flex", "burst", 1, 8)]
    assert waiting(queue)["h100-flex"] == 2


def test_without_the_qos_table_only_the_partition_rules_apply():
    """slurmdbd down: no QOS limit is known, so none is applied (a node too many for a while is better
    than a job left waiting for good); AllowQos still is (it comes from slurmctld)."""
    assert waiting(QUEUE, sacctmgr_down=True) == {"h100-ondemand": 1, "h100-spot": 0, "h100-flex": 6, "l4-dev": 2}


def test_jobs_no_node_of_the_pool_can_hold_ask_for_no_node():
    """site.yaml's node shape (a3-highgpu-8g: 208 vCPUs, 1872 GiB, H100): on a pool at zero Slurm says
    PartitionConfig for all of these, and would keep saying it once the pool had scaled up."""
    fits = [(2, "cpu=416,mem=3833856M,node=2,billing=416,gres/gpu=16,gres/gpu:h100=16"),  # a whole node each
            (2, "cpu=8,mem=3T,node=2,billing=8,gres/gpu=2")]  # 1.5 TiB per node
    never = [(1, "cpu=256,mem=1000M,node=1,billing=256,gres/gpu=8"),             # -c 256 > 208 vCPUs
             (1, "cpu=8,mem=4000000M,node=1,billing=8,gres/gpu=8"),              # --mem above the node's
             (2, "cpu=420,mem=1000M,node=2,billing=420,gres/gpu=16"),            # 210 CPUs per node
             (1, "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=1,gres/gpu:l4=1")]  # an L4 on an H100 pool
    assert waiting([job(40 + i, "h100-flex", "production", n, tres=t) for i, (n, t) in enumerate(fits)]) == \
        {"h100-ondemand": 0, "h100-spot": 0, "h100-flex": 2, "l4-dev": 0}
    assert waiting([job(45 + i, "h100-flex", "production", n, tres=t) for i, (n, t) in enumerate(never)]) == \
        {"h100-ondemand": 0, "h100-spot": 0, "h100-flex": 0, "l4-dev": 0}
    # production tracks gres/gpu only (AccountingStorageTRES): tres-alloc has no model, tres-per-node does
    untyped = "cpu=1,mem=100M,node=1,billing=1,gres/gpu=1"
    assert waiting([job(49, "h100-flex", "production", tres=untyped, per_node="gres:gpu:l4:1"),
                    job(50, "h100-flex", "production", tres=untyped, per_node="gres/gpu:h100:1"),
                    job(51, "h100-flex", "production", tres=untyped, per_node="gres:gpu:1")])["h100-flex"] == 2
    assert waiting([job(50, "l4-dev", "experiments", tres="cpu=2,node=1,gres/gpu=1,gres/gpu:l4=1")])["l4-dev"] == 1


def test_a_job_sent_to_several_partitions_counts_for_the_cheapest_that_can_hold_it():
    # both at zero: spot is cheaper than on-demand and takes production
    assert waiting([job(60, "h100-ondemand,h100-spot", "production", gpus=8)]) == \
        {"h100-ondemand": 0, "h100-spot": 1, "h100-flex": 0, "l4-dev": 0}
    # on-demand refuses experiments: Slurm's reason names it, but flex takes the job once it has a node
    refused = "Job's QOS not permitted to use this partition (h100-ondemand allows production not experiments)"
    assert waiting([job(61, "h100-flex,h100-ondemand", "experiments", gpus=8, reason=refused)]) == \
        {"h100-ondemand": 0, "h100-spot": 0, "h100-flex": 1, "l4-dev": 0}
    # the same reason on a job sent to one partition: it never runs there
    assert waiting([job(62, "h100-ondemand", "experiments", gpus=8, reason=refused)])["h100-ondemand"] == 0


def test_a_pending_array_counts_each_task_up_to_its_throttle_and_the_pool():
    assert waiting([job(70, "h100-flex", "production", gpus=8, array="0-9%4")])["h100-flex"] == 4
    assert waiting([job(71, "h100-flex", "production", gpus=8, array="0-99")])["h100-flex"] == 6  # max_nodes
    # the QOS caps the tasks like separate jobs: experiments allows alice 32 GPUs
    assert waiting([job(72, "h100-flex", "experiments", gpus=8, array="0-9")])["h100-flex"] == 4
    assert waiting([job(73, "h100-flex", "production", gpus=8, array="3")])["h100-flex"] == 1
