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


def test_adopts_estimate_names_the_rate_cost_charges_now(local_site):
    """The adopt dry run quoted h100-spot at its list $1.40/GPU-hour while `cost` charged $0.98 for the
    same job at 02:00 (the local site's 30% off-peak discount): the rate now comes from the ledger's
    own rule beside the list price's worst case."""
    from datetime import datetime, timedelta

    from slurmctl.config.pricing import allocated_cost, price_at
    from slurmctl.submit.adopt.plan import Shape, estimate_cost

    night, noon = datetime(2026, 12, 2, 2, 0), datetime(2026, 12, 2, 12, 0)  # a Wednesday
    shape = Shape(gpus_total=2, time_seconds=2400)
    cost = estimate_cost(shape, local_site, "h100-spot", now=night)
    assert (cost["price_per_gpu_hour"], cost["max_usd"]) == (1.40, 1.87)  # the worst case stays the list price's
    assert cost["price_now"] == pytest.approx(0.98)
    spot = local_site.partitions["h100-spot"]
    ledger = allocated_cost(2, 0, night, night + timedelta(seconds=2400), spot, local_site.accounting.discounts)
    assert cost["if_started_now_usd"] == round(ledger, 2) == 1.31
    assert estimate_cost(shape, local_site, "h100-spot", now=noon)["price_now"] == pytest.approx(1.40)
    # one rule: an hour priced at a moment is what allocation_cost charges for it
    discounts = local_site.accounting.discounts
    for when in (night, noon, datetime(2026, 12, 5, 12, 0), datetime(2026, 12, 2, 21, 59, 59)):
        hour = allocated_cost(1, 0, when, when + timedelta(seconds=1), spot, discounts) * 3600
        assert hour == pytest.approx(price_at(1.40, when, discounts))
