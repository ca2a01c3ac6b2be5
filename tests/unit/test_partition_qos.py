"""A partition that admits only some QOS (site.yaml `partitions: <name>: qos:`): the job script
carries `#SBATCH --qos=...`, so the submit, placement's `sbatch --test-only` (it sends the script's
#SBATCH lines) and preflight's account check all use it.

Production's h100-ondemand admits only production (deploy/slinky/site.yaml, partitions.conf
AllowQos); a user's account default is experiments. The sbatch and sacctmgr answers below were
printed by Slurm 22.05 for alice on a throwaway cluster running deploy/slurm/*.conf and
accounting.sh (tests/integration/throwaway_slurm.py)."""

from pathlib import Path

import pytest

from slurmctl.config.models import RunSpec, load_site_config
from slurmctl.errors import ConfigError
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.runner import CommandResult
from slurmctl.submit.placement import place
from slurmctl.submit.preflight.cluster import ClusterView, check_account
from slurmctl.submit.render import render
from slurmctl.submit.submission import TEMPLATE, sbatch_context

from .fakes import ReplayRunner

REPO = Path(__file__).resolve().parents[2]
PRODUCTION_SITE = REPO / "deploy" / "slinky" / "site.yaml"
REFUSED = "allocation failure: Invalid qos specification\n"   # --qos=experiments on h100-ondemand
STARTS = ("sbatch: Job 2 to start at 2026-12-01T15:37:16 using 1 processors on nodes od-0 in partition "
          "h100-ondemand\n")
ASSOCIATIONS_ARGV = ("sacctmgr", "-n", "-P", "show", "associations", "user=alice", "format=account,qos")
# alice's associations after accounting.sh: l4-dev's, h100-ondemand's, the account's
ASSOCIATIONS = "ml-research|dev,experiments\nml-research|production\nml-research|burst,dev,experiments,production\n"


class OnDemandSbatch:
    """`sbatch --test-only` as production's slurmctld answers: a job on h100-ondemand without
    --qos=production runs under the account's default, experiments, which the partition refuses."""

    def __init__(self):
        self.calls = []

    def run(self, argv, timeout=60.0):
        self.calls.append(list(argv))
        qos = next((a.split("=", 1)[1] for a in argv if a.startswith("--qos=")), "experiments")
        if qos != "production":
            return CommandResult(tuple(argv), 1, "", REFUSED)
        return CommandResult(tuple(argv), 0, "", STARTS)


def script_for(site, spec):
    def script(partition):
        return render(TEMPLATE, sbatch_context(spec, site, "tiny-20261201-abcd", Path("/runs/tiny-20261201-abcd"),
                                               Path("/home/alice/tiny"), partition))
    return script


def test_a_submit_to_on_demand_sends_the_partitions_qos_and_placement_asks_with_it():
    site = load_site_config(PRODUCTION_SITE)
    spec = RunSpec(name="tiny", entrypoint="train.py", gpus_per_node=8, partition=["h100-ondemand"], time_limit="10m")
    script = script_for(site, spec)("h100-ondemand")
    assert "#SBATCH --qos=production\n" in script
    runner = OnDemandSbatch()
    placement = place(spec, site, SlurmClient(runner), script_for(site, spec))
    assert placement.chosen == "h100-ondemand" and placement.options[0].ok, placement.options[0].message
    [argv] = runner.calls
    assert argv[:2] == ["sbatch", "--test-only"] and "--qos=production" in argv and "--partition=h100-ondemand" in argv


def test_partitions_without_a_qos_and_jobs_over_several_partitions_send_none():
    site = load_site_config(PRODUCTION_SITE)
    spec = RunSpec(name="tiny", entrypoint="train.py", gpus_per_node=8, partition=["h100-spot", "h100-ondemand"],
                   time_limit="10m")
    assert "--qos" not in script_for(site, spec)("h100-spot")
    # Slurm picks among several partitions: one --qos cannot fit both, so none is written
    assert "--qos" not in render(TEMPLATE, sbatch_context(spec, site, "t-1", Path("/r/t-1"), Path("/w")))


def test_preflight_checks_the_partitions_qos_against_the_users_associations():
    site = load_site_config(PRODUCTION_SITE).model_copy(update={"account": "ml-research"})
    client = SlurmClient(ReplayRunner({ASSOCIATIONS_ARGV: ASSOCIATIONS}))
    view = ClusterView([], {}, client.associations("alice"))
    result = check_account(site, view, "alice", ["h100-ondemand"])
    assert result.findings == [] and "production" in result.note
    without = SlurmClient(ReplayRunner({ASSOCIATIONS_ARGV: "ml-research|burst,dev,experiments\n"}))
    result = check_account(site, ClusterView([], {}, without.associations("alice")), "alice", ["h100-ondemand"])
    [finding] = result.findings
    assert finding.code == "qos-not-allowed"
    assert "'production'" in finding.message and "h100-ondemand" in finding.message


def test_a_qos_that_is_not_one_word_is_refused_naming_the_field(tmp_path):
    bad = tmp_path / "site.yaml"
    bad.write_text(PRODUCTION_SITE.read_text().replace("qos: production", "qos: 'production --wrap=x'"))
    with pytest.raises(ConfigError, match="qos"):
        load_site_config(bad)
