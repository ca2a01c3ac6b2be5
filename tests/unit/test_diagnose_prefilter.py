"""The literal prefilter of log reading: a pattern runs only on lines that hold what every match of it must
contain. It must never change a verdict, and every signature must have such a requirement (one without
would silently be searched on every line again)."""

import json
import re
import sys
from pathlib import Path

import pytest

from slurmctl.observe import diagnose, diagnosis_rules, log_reading
from slurmctl.observe.log_reading import LineIndex, required_literals

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import diagnose_speed  # noqa: E402


def test_every_signature_and_reading_pattern_has_a_requirement():
    missing = [s.regex[:60] for s in diagnosis_rules.SIGNATURES if required_literals(s.pattern) is None]
    assert not missing
    for name in ("_LAUNCHER_NOISE", "_FRAME", "_EXCEPTION_LINE", "_NCCL_WARN", "_KERNEL", "_SIGKILL_EXIT"):
        assert required_literals(getattr(log_reading, name)) is not None, name


@pytest.mark.parametrize(("regex", "flags", "present", "absent"), [
    (r"CUDA out of memory|OOM when allocating", re.IGNORECASE, ["cuda OUT of memory x"], ["out of mem"]),
    (r"\bloss\b.{0,30}[:=]\s*nan\b", re.IGNORECASE, ["loss = nan"], ["loss = 0.1", "nan only"]),
    (r"(?:Killed|已杀死)$", 0, ["已杀死", "Killed"], ["kill"]),
    (r"x(?:ab)+y", 0, ["xaby"], ["xy"]),
])
def test_requirement_keeps_every_matching_line(regex, flags, present, absent):
    pattern = re.compile(regex, flags)
    lines = present + absent + ["filler"] * 100
    index = LineIndex(lines)
    kept = set(index.candidates(required_literals(pattern)))
    assert set(range(len(present))) <= kept
    assert kept.isdisjoint(range(len(present), len(present) + len(absent)))
    assert index.where(pattern, lines) == [i for i, line in enumerate(lines) if pattern.search(line)]


def test_common_literals_are_listed_line_by_line_only_where_needed():
    lines = [f"step {n} loss 0.{n}" for n in range(500)] + ["step 9 loss nan"]
    index = LineIndex(lines)
    pattern = re.compile(r"\bloss\b\s+nan\b", re.IGNORECASE)
    assert index.where(pattern, lines) == [500]
    assert index.lines_with("loss") is None  # too common to list; "nan" narrowed it instead


def test_verdicts_identical_with_and_without_the_prefilter():
    cases = json.loads((diagnose_speed.CORPUS / "index.json").read_text(encoding="utf-8"))["cases"]
    logs = [(diagnose_speed.CORPUS / f"{c['id']}.log").read_text(encoding="utf-8", errors="replace") for c in cases]
    for text in logs:
        assert diagnose.diagnose_text(text).to_dict() == diagnose_speed.without_prefilter(text).to_dict()
