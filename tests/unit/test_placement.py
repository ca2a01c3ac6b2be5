"""Earliest-start placement: the choice rule, and the exact `sbatch --test-only` argv.

The test-only answers are in the form sbatch 22.05.8 printed on the local cluster (on stderr):
"sbatch: Job 13 to start at 2026-11-29T13:25:37 using 1 processors on nodes h100-1 in partition h100-spot".
"""

from datetime import datetime, timedelta

import pytest

from slurmctl.config.models import RunSpec
from slurmctl.slurm.client import SlurmClient
from slurmctl.slurm.runner import CommandResult
from slurmctl.submit.placement import NoPlacement, PlacementOption, choose, place, sbatch_directives

NOW = datetime(2026, 11, 29, 13, 0, 0)


def option(partition, minutes, price, ok=True):
    return PlacementOption(partition, ok, NOW + timedelta(minutes=minutes) if ok else None, price, False)


def test_earliest_start_wins_even_if_dearer():
    assert choose([option("spot", 90, 1.4), option("ondemand", 0, 3.9)]) == ("ondemand", "earliest start")


def test_tie_goes_to_the_cheaper():
    assert choose([option("ondemand", 0, 3.9), option("spot", 0.5, 1.4)]) == ("spot", "earliest start (tie), cheaper")


def test_partitions_slurm_cannot_run_are_skipped_and_none_is_an_error():
    assert choose([option("l4", 0, 0.35, ok=False), option("spot", 30, 1.4)])[0] == "spot"
    with pytest.raises(NoPlacement, match="l4: nope"):
        choose([PlacementOption("l4", False, None, 0.35, False, message="nope")])


def test_sbatch_directives_stop_at_the_first_command():
    script = "#!/bin/bash\n# comment\n#SBATCH --partition=l4-dev\n#SBATCH --time=00:05:00\nset -u\n#SBATCH --late\n"
    assert sbatch_directives(script) == ["--partition=l4-dev", "--time=00:05:00"]


class SbatchTestOnlyFake:
    """Answers `sbatch --test-only` like the real one: later for busy partitions, refusal for unknown."""

    def __init__(self, starts):
        self.starts, self.calls = starts, []

    def run(self, argv, timeout=60.0):
        self.calls.append(list(argv))
        partition = next(a.split("=", 1)[1] for a in argv if a.startswith("--partition="))
        if partition not in self.starts:
            return CommandResult(tuple(argv), 1, "",
                                 "allocation failure: Requested node configuration is not available")
        when = (NOW + timedelta(minutes=self.starts[partition])).isoformat()
        return CommandResult(tuple(argv), 0, "",
                             f"sbatch: Job 9 to start at {when} using 1 processors on nodes x-1 "
                             f"in partition {partition}")


def test_place_asks_slurm_for_each_partition(local_site):
    runner = SbatchTestOnlyFake({"l4-dev": 120, "h100-spot": 0})
    spec = RunSpec(name="p", entrypoint="train.py", partition=["l4-dev", "h100-spot", "h100-ondemand"])
    placement = place(spec, local_site, SlurmClient(runner),
                      lambda p: f"#!/bin/bash\n#SBATCH --partition={p}\n#SBATCH --gres=gpu:1\nsrun x\n")
    assert runner.calls[0] == ["sbatch", "--test-only", "--partition=l4-dev", "--gres=gpu:1", "--wrap=true"]
    assert placement.chosen == "h100-spot"
    assert [(o.partition, o.ok, o.usd_per_hour, o.preemptible) for o in placement.options] == [
        ("l4-dev", True, 0.35, False), ("h100-spot", True, 1.4, True), ("h100-ondemand", False, 3.9, False)]
    assert "Requested node configuration" in placement.options[2].message


def test_test_only_retries_a_busy_controller():
    class Busy:
        calls = 0

        def run(self, argv, timeout=60.0):
            Busy.calls += 1
            if Busy.calls == 1:
                return CommandResult(tuple(argv), 1, "", "allocation failure: Resource temporarily unavailable")
            return CommandResult(tuple(argv), 0, "", "sbatch: Job 9 to start at 2026-11-29T13:00:00 using 1 "
                                 "processors on nodes l4-1 in partition l4-dev")

    answer = SlurmClient(Busy()).test_only(None, ["--partition=l4-dev"])
    assert answer.ok and answer.partition == "l4-dev" and Busy.calls == 2


def test_a_busy_controller_is_not_reported_as_an_impossible_job():
    busy = [PlacementOption("l4", False, None, 0.35, False,
                            message="allocation failure: Resource temporarily unavailable")]
    with pytest.raises(NoPlacement) as caught:
        choose(busy)
    assert caught.value.code == "slurm-busy"


def autoscaled(site, partition, max_nodes):
    parts = dict(site.partitions)
    parts[partition] = parts[partition].model_copy(update={"max_nodes": max_nodes})
    return site.model_copy(update={"partitions": parts})


def test_an_autoscaled_pool_without_nodes_yet_is_a_pending_placement_not_a_refusal(local_site):
    """sbatch --test-only on a pool scaled to zero says "Requested node configuration is not
    available" (tests/integration/test_deploy_preemption.py sees it on real daemons): the job pends
    there until the pool scales up, with no start estimate; a fixed partition with that answer is
    still refused."""
    spec = RunSpec(name="p", entrypoint="train.py", partition=["h100-ondemand"])
    script = lambda p: f"#!/bin/bash\n#SBATCH --partition={p}\nsrun x\n"  # noqa: E731
    placement = place(spec, autoscaled(local_site, "h100-ondemand", 6), SlurmClient(SbatchTestOnlyFake({})), script)
    [option] = placement.options
    assert placement.chosen == "h100-ondemand" and option.ok and option.waits_for_scale_up
    assert option.start_time is None and "pends until the pool scales up" in option.message
    assert "start unknown" in placement.reason
    with pytest.raises(NoPlacement, match="Requested node configuration is not available"):
        place(spec, local_site, SlurmClient(SbatchTestOnlyFake({})), script)


def test_a_known_start_beats_waiting_for_a_pool_to_scale_up(local_site):
    spec = RunSpec(name="p", entrypoint="train.py", partition=["h100-spot", "h100-ondemand"])
    script = lambda p: f"#!/bin/bash\n#SBATCH --partition={p}\nsrun x\n"  # noqa: E731
    site = autoscaled(autoscaled(local_site, "h100-spot", 8), "h100-ondemand", 6)
    assert place(spec, site, SlurmClient(SbatchTestOnlyFake({"h100-ondemand": 600})), script).chosen == "h100-ondemand"
    # neither can give a start: the cheaper pool scales up
    both = place(spec, site, SlurmClient(SbatchTestOnlyFake({})), script)
    assert both.chosen == "h100-spot" and all(o.waits_for_scale_up for o in both.options)


def test_a_cpu_only_run_is_priced_by_its_cpus_in_the_placement_table(local_site):
    """The placement table's $/HOUR is the cost estimate's: CPUs x price_per_cpu_hour for a run
    without GPUs (not 0.00 beside the dry run's '$0.03/hour')."""
    from slurmctl.submit.cost import estimate

    runner = SbatchTestOnlyFake({"l4-dev": 0})
    spec = RunSpec(name="p", entrypoint="train.py", partition=["l4-dev"], gpus_per_node=0, procs_per_node=2)
    placement = place(spec, local_site, SlurmClient(runner), lambda p: f"#!/bin/bash\n#SBATCH --partition={p}\nx\n")
    price = local_site.partitions["l4-dev"].price_per_cpu_hour
    assert price > 0 and placement.options[0].usd_per_hour == estimate(spec, local_site, "l4-dev").usd_per_hour
    assert placement.options[0].usd_per_hour == round(2 * price, 2)
