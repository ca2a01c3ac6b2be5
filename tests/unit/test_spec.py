import pytest

from slurmctl.config.models import load_run_spec
from slurmctl.durations import parse_duration, slurm_time
from slurmctl.errors import SpecError


def write(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


GOOD = "name: a\nentrypoint: train.py\npartition: l4-dev\n"


def test_minimal_spec_has_defaults(tmp_path):
    spec = load_run_spec(write(tmp_path, GOOD))
    assert spec.nodes == 1 and spec.gpus_per_node == 1 and spec.partitions == ["l4-dev"]
    assert spec.time_limit_seconds == 3600 and spec.nprocs_per_node == 1


def test_partition_list(tmp_path):
    spec = load_run_spec(write(tmp_path, "name: a\nentrypoint: t.py\npartition: [h100-spot, h100-ondemand]\n"))
    assert spec.partitions == ["h100-spot", "h100-ondemand"]


@pytest.mark.parametrize("text, must_mention", [
    ("name: a\npartition: x\n", ["`entrypoint` is missing"]),
    ("name: Bad Name\nentrypoint: t.py\npartition: x\n", ["`name`", "'Bad Name'", "lower-case"]),
    ("name: a\nentrypoint: t.py\npartition: x\nnodes: two\n", ["`nodes`", "'two'", "integer"]),
    ("name: a\nentrypoint: t.py\npartition: x\ngpus: 8\n", ["`gpus`", "not a known field"]),
    ("name: a\nentrypoint: t.py\npartition: x\ntime_limit: soon\n", ["`time_limit`", "'soon'", "2h"]),
    ("name: a\nentrypoint: t.py\npartition: x\nenv: {'BAD-NAME': 1}\n", ["`env`", "BAD-NAME"]),
    ("name: a\nentrypoint: t.py\npartition: 'a;rm -rf /'\n", ["`partition`", "not a partition name"]),
    ("name: $(touch /tmp/x)\nentrypoint: t.py\npartition: x\n", ["`name`", "$(touch /tmp/x)"]),
])
def test_validation_errors_name_field_value_and_fix(tmp_path, text, must_mention):
    with pytest.raises(SpecError) as info:
        load_run_spec(write(tmp_path, text))
    for fragment in must_mention:
        assert fragment in info.value.message + info.value.hint
    assert info.value.hint.startswith("Fix")


def test_malformed_yaml_names_line(tmp_path):
    with pytest.raises(SpecError) as info:
        load_run_spec(write(tmp_path, "name: a\nentrypoint: [unclosed\n"))
    assert "not valid YAML" in info.value.message and "line" in info.value.message


def test_not_a_mapping(tmp_path):
    with pytest.raises(SpecError, match="mapping"):
        load_run_spec(write(tmp_path, "- a\n- b\n"))


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        load_run_spec(tmp_path / "nope.yaml")


@pytest.mark.parametrize("value, seconds", [
    ("2h", 7200), ("90m", 5400), ("01:30:00", 5400), ("1-00:00:00", 86400), (30, 1800), ("45s", 45),
])
def test_durations(value, seconds):
    assert parse_duration(value) == seconds


def test_slurm_time_rounds_up_to_minutes():
    assert slurm_time(61) == "00:02:00"
    assert slurm_time(86400 + 3600) == "1-01:00:00"
