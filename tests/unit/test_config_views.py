"""config.views: what the read path sees of site.yaml and run.yaml is what config.models made of them,
read back from the user's private cache without pydantic."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from slurmctl import usercache
from slurmctl.config import views
from slurmctl.config.models import RunSpec, SiteConfig, load_site_config
from slurmctl.config.pricing import Discounts
from slurmctl.config.views import View, run_spec_view, site_view
from slurmctl.errors import ConfigError
from slurmctl.rundir import Run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _same(view, model) -> None:
    """Every field and property of the model, through the view, equal to the model's."""
    for name in type(model).model_fields:
        _same_value(getattr(view, name), getattr(model, name))
    for name in ("runs_root_path", "partitions", "time_limit_seconds", "nprocs_per_node"):
        if hasattr(type(model), name):
            assert getattr(view, name) == getattr(model, name), name


def _same_value(seen, want) -> None:
    if hasattr(type(want), "model_fields"):
        assert isinstance(seen, View)
        _same(seen, want)
    elif isinstance(want, dict):
        assert isinstance(seen, dict) and seen.keys() == want.keys()
        for key in want:
            _same_value(seen[key], want[key])
    else:
        assert seen == want and type(seen) is type(want), (seen, want)


def test_site_view_is_the_validated_model_then_read_without_it(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text((REPO / "deploy/local/site.yaml").read_text())
    model = site_view(site)
    assert isinstance(model, SiteConfig)  # first read: validated by the model
    view = site_view(site)
    assert isinstance(view, View)  # then from the cache
    _same(view, model)
    assert isinstance(view.accounting.discounts, Discounts) and view.accounting.discounts.offpeak == 0.3
    assert view.partitions["l4-dev"].price_per_gpu_hour == 0.35
    with pytest.raises(AttributeError):
        view.cluster = "other"


@pytest.mark.parametrize("text", [
    "name: a\nentrypoint: train.py\npartition: l4-dev\n",
    "name: b\nentrypoint: t.py\npartition: [h100-spot, h100-ondemand]\nnodes: 2\ngpus_per_node: 8\n"
    "time_limit: 2h\nenv: {A: 1, B: true}\nmax_restarts: 0\ncheckpoint: {interval_steps: 5}\n"
    "model: {params: 7b, micro_batch: 2}\n",
])
def test_run_spec_view_is_the_validated_model(tmp_path, text):
    run = Run("r-20260101-0001", tmp_path / "r")
    run.path.mkdir()
    run.spec_path.write_text(text)
    model = run_spec_view(run)
    assert isinstance(model, RunSpec)
    view = run_spec_view(run)
    assert isinstance(view, View)
    _same(view, model)


def test_changed_bytes_or_model_code_are_validated_again(tmp_path, monkeypatch):
    site = tmp_path / "site.yaml"
    text = (REPO / "deploy/local/site.yaml").read_text()
    site.write_text(text)
    site_view(site)
    assert isinstance(site_view(site), View)
    site.write_text(text.replace("price_per_gpu_hour: 0.35", "price_per_gpu_hour: -1"))
    with pytest.raises(ConfigError, match="price_per_gpu_hour"):  # the model's own error, every time
        site_view(site)
    site.write_text(text)
    assert isinstance(site_view(site), View)
    monkeypatch.setattr(views, "_model_fingerprint", lambda: "other model code")
    assert isinstance(site_view(site), SiteConfig)


def test_a_damaged_or_foreign_entry_is_not_used(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text((REPO / "deploy/local/site.yaml").read_text())
    site_view(site)
    entry = next(usercache.cache_dir().glob("site-*.json"))
    entry.write_text(entry.read_text().replace('"~model"', '"~other"'))
    assert isinstance(site_view(site), SiteConfig)
    assert isinstance(site_view(site), View)
    os.chmod(entry, 0o644)  # readable by others: not the user's private entry any more
    assert isinstance(site_view(site), SiteConfig)


def test_cache_refuses_a_directory_open_to_others(tmp_path):
    assert usercache.write_entry("x.json", {"a": 1}) and usercache.read_entry("x.json") == {"a": 1}
    os.chmod(usercache.cache_dir(), 0o777)
    assert usercache.read_entry("x.json") is None and not usercache.write_entry("y.json", {"a": 1})
    with pytest.raises(ValueError):
        usercache.read_entry("../x.json")


def test_the_model_still_validates_discounts():
    data = yaml.safe_load((REPO / "deploy/local/site.yaml").read_text())
    data["accounting"]["discounts"]["weekend"] = 1.5
    with pytest.raises(Exception, match="weekend"):
        SiteConfig.model_validate(data)
    assert load_site_config(REPO / "deploy/local/site.yaml").accounting.discounts == Discounts(
        offpeak=0.3, weekend=0.2)
