"""Score `slurmctl diagnose` on the corpus of real failure logs (tests/fixtures/diagnose_corpus/).

Each case is a log tail copied from a public issue thread (index.json names the URL and the category a
human gives it). The corpus is split once, by source repository, into `tune` (rules may be fitted to
it) and `heldout` (never used to write rules). A wrong specific category is counted separately from
`unknown`: naming the wrong cause is worse than saying "don't know" and showing the traceback.

    .venv/bin/python benchmarks/diagnose_corpus.py [--split tune|heldout|all] [--cases]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from slurmctl.observe.diagnose import diagnose_text

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "diagnose_corpus"


def load(split: str = "all") -> list[dict]:
    cases = json.loads((CORPUS / "index.json").read_text(encoding="utf-8"))["cases"]
    return [c for c in cases if split == "all" or c["split"] == split]


def score(cases: list[dict]) -> dict:
    """correct, confidently wrong (a specific category that is not the label), unknown where a cause exists."""
    rows = []
    for case in cases:
        text = (CORPUS / f"{case['id']}.log").read_text(encoding="utf-8")
        got = diagnose_text(text).category
        rows.append((case, got))
    correct = sum(got == c["category"] for c, got in rows)
    wrong = sum(got != c["category"] and got != "unknown" for c, got in rows)
    missed = sum(got == "unknown" and c["category"] != "unknown" for c, got in rows)
    return {"n": len(rows), "correct": correct, "confident_wrong": wrong, "unknown_missed": missed, "rows": rows}


def report(split: str, result: dict, *, per_case: bool) -> None:
    n = result["n"] or 1
    print(f"[{split}] {result['n']} cases: correct {result['correct']} ({100 * result['correct'] / n:.1f}%), "
          f"confidently wrong {result['confident_wrong']} ({100 * result['confident_wrong'] / n:.1f}%), "
          f"unknown although a cause is known {result['unknown_missed']}")
    truth = Counter(c["category"] for c, _ in result["rows"])
    said = Counter(got for _, got in result["rows"])
    hits = Counter(c["category"] for c, got in result["rows"] if got == c["category"])
    print(f"  {'category':20} {'n':>3} {'precision':>9} {'recall':>6}")
    for cat in sorted(set(truth) | set(said)):
        precision = f"{hits[cat] / said[cat]:.2f}" if said[cat] else "-"
        recall = f"{hits[cat] / truth[cat]:.2f}" if truth[cat] else "-"
        print(f"  {cat:20} {truth[cat]:>3} {precision:>9} {recall:>6}")
    confusion = Counter((c["category"], got) for c, got in result["rows"] if got != c["category"])
    if confusion:
        print("  confusions (label -> said):", ", ".join(f"{a}->{b} x{k}" for (a, b), k in sorted(confusion.items())))
    if per_case:
        for case, got in result["rows"]:
            mark = "ok " if got == case["category"] else "BAD"
            print(f"  {mark} {case['id']:60} {case['category']:20} {got}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["tune", "heldout", "all"], default="all")
    parser.add_argument("--cases", action="store_true", help="one line per case (use on tune only while tuning)")
    args = parser.parse_args(argv)
    splits = ["tune", "heldout"] if args.split == "all" else [args.split]
    for split in splits:
        report(split, score(load(split)), per_case=args.cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
