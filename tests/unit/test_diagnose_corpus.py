"""Diagnosis scored on real failure logs from public issue threads (tests/fixtures/diagnose_corpus/).

Rules are fitted on the `tune` split only; `heldout` (other source repositories) measures whether they
generalise. A wrong specific category is worse than `unknown`, so it has its own, tighter bound.
"""

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from slurmctl.observe.diagnose import CATEGORIES

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
