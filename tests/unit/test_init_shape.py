"""`slurmctl init`: the shape and partition of the run.yaml it writes come from the site config, so
the first `submit --dry-run` passes on the site it was written for. The node list is the real
cluster's `sinfo` (replayed); the end-to-end dry-run of every template is
tests/integration/test_templates_real.py."""

import pytest

from slurmctl.config.models import TEMPLATES, load_run_spec
from slurmctl.slurm.client import SlurmClient
from slurmctl.submit.preflight import ClusterView
from slurmctl.submit.preflight.cluster import check_memory, check_shape, check_time_limit
from slurmctl.submit.scaffold import EXAMPLE_GPUS, FirstRun, first_run_shape, init_run

from .fakes import ReplayRunner
from .test_preflight import VIEW


def _site(local_site, smoke="l4-dev", **partitions):
    """The local site with its partitions replaced (name -> (capacity, gpus per node, price, preemptible))."""
    parts = {name: {"capacity": c, "gpu_type": "g", "gpus_per_node": g, "price_per_gpu_hour": price,
                    "preemptible": pre} for name, (c, g, price, pre) in partitions.items()}
    return local_site.model_validate({**local_site.model_dump(), "partitions": parts, "smoke_partition": smoke})


def test_every_template_has_an_example_size():
    assert set(EXAMPLE_GPUS) == set(TEMPLATES)


def test_local_site_dev_partition_for_one_gpu_and_on_demand_h100_for_two(local_site):
    """l4-dev has 1 GPU per node: the one-GPU starter goes there; the sharded examples need 2 on a
    node, which the h100 partitions have (8): on-demand before spot, so a first run is not preempted."""
    assert first_run_shape("torchrun", local_site) == FirstRun("l4-dev", "l4", 1, 1, ("h100-ondemand", 8))
    for template in ("fsdp", "hf-lora", "deepspeed"):
        assert first_run_shape(template, local_site) == FirstRun("h100-ondemand", "h100", 1, 2, ("h100-ondemand", 8))


def test_a_dev_partition_that_holds_the_example_is_chosen(local_site):
    site = _site(local_site, smoke="dev", big=("ondemand", 8, 4.0, False), dev=("dev", 4, 0.5, False))
    assert all(first_run_shape(t, site).partition == "dev" for t in TEMPLATES)
    assert first_run_shape("fsdp", site).scale_up == ("more GPUs: nodes of big have 8; set partition: big, "
                                                      "gpus_per_node up to 8, then nodes")


def test_cheapest_and_non_preemptible_first_without_a_smoke_partition(local_site):
    site = _site(local_site, smoke=None, spot=("spot", 8, 1.0, True), dear=("ondemand", 8, 5.0, False),
                 cheap=("reserved", 4, 2.0, False))
    assert first_run_shape("fsdp", site).partition == "cheap"


def test_no_partition_holds_the_example_so_it_shrinks_to_the_largest(local_site):
    site = _site(local_site, smoke="dev", dev=("dev", 1, 0.3, False), cpu=("ondemand", 0, 0.1, False),
                 one=("ondemand", 1, 1.0, False))
    shape = first_run_shape("deepspeed", site)
    assert (shape.partition, shape.nodes, shape.gpus_per_node, shape.scale_up) == ("dev", 1, 1, "")


def test_without_a_site_config_a_neutral_default(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMCTL_SITE_CONFIG", str(tmp_path / "absent.yaml"))  # offline, no site.yaml
    assert first_run_shape("hf-lora", None) == FirstRun("gpu", None, 1, 2)
    init_run("x", tmp_path / "x", "hf-lora", site=None)
    spec = load_run_spec(tmp_path / "x" / "run.yaml")
    assert (spec.partition, spec.nodes, spec.gpus_per_node, spec.gpu_type) == ("gpu", 1, 2, None)


@pytest.mark.parametrize("template", TEMPLATES)
def test_what_init_writes_fits_the_local_cluster(tmp_path, local_site, template):
    """Shape, time limit and memory checks of preflight pass on the nodes the real sinfo reported."""
    view = ClusterView(SlurmClient(ReplayRunner()).nodes(), VIEW.partitions, associations=None)
    assert {n.name: n.gpus for n in view.nodes} == {"h100-1": 8, "h100-2": 8, "h100-3": 8, "l4-1": 1}
    init_run("first", tmp_path, template, site=local_site)
    spec = load_run_spec(tmp_path / "run.yaml")
    shape = first_run_shape(template, local_site)
    assert (spec.partition, spec.nodes, spec.gpus_per_node, spec.gpu_type) == (
        shape.partition, shape.nodes, shape.gpus_per_node, shape.gpu_type)
    for result in (check_shape(spec, local_site, view), check_time_limit(spec, view),
                   check_memory(spec, local_site, workdir=tmp_path)):
        assert result.findings == [], result.findings
    text = (tmp_path / "run.yaml").read_text()
    assert ("# more GPUs: nodes of h100-ondemand have 8" in text) == (shape.gpus_per_node < 8)
