"""Diagnosis scored on real failure logs from public issue threads (tests/fixtures/diagnose_corpus/).

Rules are fitted on the `tune` split only; `heldout` (other source repositories) measures whether they
generalise. A wrong specific category is worse than `unknown`, so it has its own, tighter bound.
"""

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from slurmctl.observe.diagnosis_rules import CATEGORIES

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import diagnose_corpus  # noqa: E402

INDEX = json.loads((diagnose_corpus.CORPUS / "index.json").read_text(encoding="utf-8"))["cases"]


def test_corpus_is_real_and_split_by_source():
    assert len(INDEX) >= 120
    for case in INDEX:
        assert case["url"].startswith("https://github.com/") and case["category"] in CATEGORIES, case
        assert (diagnose_corpus.CORPUS / f"{case['id']}.log").read_text(encoding="utf-8").strip(), case
    splits_of_repo: dict[str, set] = {}
    for case in INDEX:
        splits_of_repo.setdefault(case["repository"].lower(), set()).add(case["split"])
    assert all(len(s) == 1 for s in splits_of_repo.values()), "a source repository is on both sides"
    counts = Counter(c["split"] for c in INDEX)
    assert counts["tune"] >= 0.5 * len(INDEX) and counts["heldout"] >= 0.3 * len(INDEX)


@pytest.mark.parametrize("split, floor", [("tune", 0.95), ("heldout", 0.90)])
def test_accuracy_floor_and_few_confident_mistakes(split, floor):
    result = diagnose_corpus.score(diagnose_corpus.load(split))
    print(f"{split}: {result['correct']}/{result['n']} correct, {result['confident_wrong']} confidently wrong")
    assert result["correct"] >= floor * result["n"], [(c["id"], c["category"], got)
                                                      for c, got in result["rows"] if got != c["category"]]
    assert result["confident_wrong"] <= 0.03 * result["n"]


def test_first_sight_records_match_the_corpus_labels():
    """A blind batch, once studied and added to the corpus, keeps the collector's own label for every case
    (a batch just scored at first sight is not in it yet), and the headline is computed from the frozen
    first-sight verdicts, not from today's rules."""
    records = diagnose_corpus.first_sight_records()
    by_id = {c["id"]: c for c in INDEX}
    for record in records:
        added = [case for case in record["cases"] if case["id"] in by_id]
        assert not added or len(added) == len(record["cases"]), (record["batch"], "added in part")
        for case in added:
            assert by_id[case["id"]]["category"] == case["category"], case
            assert by_id[case["id"]]["batch"] == record["batch"], case
            assert case["first_sight"] in CATEGORIES, case
    headline = diagnose_corpus.cumulative_lines()[0]
    if records:
        n = sum(len(r["cases"]) for r in records)
        right = sum(diagnose_corpus.is_correct(c["category"], c["first_sight"]) for r in records for c in r["cases"])
        assert headline.startswith("FIRST SIGHT") and f"{n} cases: correct {right} " in headline


def test_success_is_right_only_when_no_failure_is_named():
    assert diagnose_corpus.is_correct("success", "unknown") and diagnose_corpus.is_correct("success", "success")
    assert diagnose_corpus.is_confidently_wrong("success", "host_oom")
    assert diagnose_corpus.is_confidently_wrong("host_oom", "success")
    assert not diagnose_corpus.is_confidently_wrong("host_oom", "unknown")



def test_leave_one_batch_out_splits_patterns_at_their_top_level_alternatives():
    from slurmctl.observe.diagnosis_rules import SIGNATURES
    assert diagnose_corpus.alternatives(r"a(b|c)|[|x]y|d\|e|f") == ["a(b|c)", "[|x]y", r"d\|e", "f"]
    for sig in SIGNATURES:  # every alternative is a pattern of its own, and together they are the signature
        parts = diagnose_corpus.alternatives(sig.regex)
        assert "|".join(parts) == sig.regex
        for part in parts:
            re.compile(part)


def test_the_log_only_experts_answer_every_case_of_their_batches_in_the_vocabulary():
    """Each expert file answers one scored batch whole, with the batch's case ids, in the labels the rules use."""
    expert = diagnose_corpus.EXPERT
    for path in sorted([*expert.glob("batch-*.json"), *expert.glob("repeat/batch-*.json")]):
        answers = json.loads(path.read_text(encoding="utf-8"))
        assert answers["batch"] == path.stem
        scored = json.loads((diagnose_corpus.RESULTS / f"diagnose_firstsight_{path.stem}.json").read_text())
        assert [c["id"] for c in answers["cases"]] == [c["id"] for c in scored["cases"]], path
        assert all(c["label"] in CATEGORIES for c in answers["cases"]), path
    headline = diagnose_corpus.log_only_expert_lines()[0]
    assert headline.startswith("AN EXPERT WHO READS ONLY THE LOG") or headline.startswith("log-only expert: no batch")
