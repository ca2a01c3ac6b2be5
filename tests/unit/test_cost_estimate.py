"""The submit-time cost estimate: $/hour, worst case, and the confirmation threshold."""

import pytest

from slurmctl.config.models import RunSpec
from slurmctl.submit.cost import estimate


def test_cost_per_hour_and_worst_case(local_site):
    spec = RunSpec(name="c", entrypoint="t.py", partition=["h100-spot", "h100-ondemand"], nodes=2, gpus_per_node=8,
                   time_limit="10h")
    upper = estimate(spec, local_site)  # before placement: the dearest acceptable partition
    assert (upper.partition, upper.usd_per_hour, upper.max_usd) == ("h100-ondemand", pytest.approx(62.4), 624.0)
    spot = estimate(spec, local_site, "h100-spot")
    assert (spot.usd_per_hour, spot.max_usd, spot.preemptible, spot.capacity) == \
        (pytest.approx(22.4), 224.0, True, "spot")
    assert "$22.40/hour" in spot.sentence() and "worst case $224.00" in spot.sentence()


def test_threshold(local_site):
    spec = RunSpec(name="c", entrypoint="t.py", partition="l4-dev", time_limit="2h")
    cost = estimate(spec, local_site)
    assert not cost.needs_confirmation(local_site)  # no threshold set
    assert cost.needs_confirmation(local_site.model_copy(update={"cost_confirm_threshold": 0.5}))
    assert not cost.needs_confirmation(local_site.model_copy(update={"cost_confirm_threshold": 0.7}))
