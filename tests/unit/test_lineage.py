"""Run lineage: a run and every run resumed or forked from it; a planted cycle cannot loop."""

from dataclasses import dataclass, field

from slurmctl.lineage import family, parent_of


@dataclass
class R:
    run_id: str
    meta: dict = field(default_factory=dict)


def test_family_is_the_run_then_descendants_breadth_first():
    runs = [R("a"), R("b", {"parent_run": "a"}), R("c", {"resumed_from": "b"}), R("d", {"parent_run": "a"}),
            R("x"), R("y", {"parent_run": "x"})]
    assert [r.run_id for r in family(runs, "a")] == ["a", "b", "d", "c"]
    assert [r.run_id for r in family(runs, "b")] == ["b", "c"]
    assert family(runs, "nope") == [] and parent_of(runs[2]) == "b"


def test_a_cycle_written_into_run_json_ends():
    runs = [R("a", {"parent_run": "b"}), R("b", {"parent_run": "a"}), R("c", {"parent_run": "c"})]
    assert [r.run_id for r in family(runs, "a")] == ["a", "b"]
    assert [r.run_id for r in family(runs, "c")] == ["c"]
