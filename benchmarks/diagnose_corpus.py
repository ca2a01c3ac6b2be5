"""Score `slurmctl diagnose` on real failure logs from public issue threads.

The headline is FIRST SIGHT: each blind batch of new cases (collected by someone who has not read the
rules, labelled by what the thread concluded) is scored by the rules of that moment, before anyone reads
its logs or changes a rule. Those verdicts are frozen in benchmarks/results/diagnose_firstsight_<batch>.json
(written by `--batch DIR`) and summed here over all batches; they are the honest estimate of how the rules
do on logs nobody tuned them on.

The corpus (tests/fixtures/diagnose_corpus/) is a regression guard only: split once by source repository
into `tune` (rules may be fitted to it) and `heldout`. A wrong specific category is counted apart from
`unknown`: naming the wrong cause is worse than saying "don't know" and showing the root error.
A case labelled `success` (the job did not fail of its training) is right when no failure is named.

    .venv/bin/python benchmarks/diagnose_corpus.py                   first-sight cumulative + corpus splits
    .venv/bin/python benchmarks/diagnose_corpus.py --batch DIR       score a new batch at first sight
    .venv/bin/python benchmarks/diagnose_corpus.py --batch DIR --after   rescore it after rule changes
    .venv/bin/python benchmarks/diagnose_corpus.py --split tune --cases
    .venv/bin/python benchmarks/diagnose_corpus.py --leave-one-batch-out DIR DIR ...
    .venv/bin/python benchmarks/diagnose_corpus.py --log-only-expert   the rules beside an expert reading the log

Old batches are studied once scored, so their rescores say little about the next batch. The leave-one-batch-out
estimate takes each batch out in turn: every alternative of a signature's pattern, or of a family's words
(diagnosis_families.EXCEPTION_FAMILIES, SCHEDULER_FAMILIES), that matches a line of that batch's cases and of no
other batch's (nor of a corpus case from no batch) was written for it, and is dropped while that batch is scored.
What the rest of the rules (the structural reading, the families' words and the wordings met in other batches)
get right is an estimate of first sight; a change that generalises raises it. A change to the structural reading
(where an error was raised, what the log did after it) is not dropped: say so when it was written for a batch.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from slurmctl.observe import diagnose
from slurmctl.observe.diagnose import diagnose_text
from slurmctl.observe.diagnosis_rules import Signature
from slurmctl.observe.log_reading import clean_line

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "diagnose_corpus"
RESULTS = ROOT / "benchmarks" / "results"
NOT_A_FAILURE = {"unknown", "success"}  # verdicts that name no failure category


def load(split: str = "all") -> list[dict]:
    cases = json.loads((CORPUS / "index.json").read_text(encoding="utf-8"))["cases"]
    return [c for c in cases if split == "all" or c["split"] == split]


def is_correct(label: str, said: str) -> bool:
    return said == label or (label == "success" and said in NOT_A_FAILURE)


def is_confidently_wrong(label: str, said: str) -> bool:
    """A named cause that is not the label: a failure category, or `success` for a real failure."""
    return not is_correct(label, said) and said != "unknown"


def tally(rows: list[tuple[str, str]]) -> dict:
    """rows: (label, said). correct, confidently wrong, unknown although a cause is known."""
    return {"n": len(rows), "correct": sum(is_correct(a, b) for a, b in rows),
            "confident_wrong": sum(is_confidently_wrong(a, b) for a, b in rows),
            "unknown_missed": sum(b == "unknown" and a not in NOT_A_FAILURE for a, b in rows)}


def score(cases: list[dict], folder: Path = CORPUS) -> dict:
    rows = []
    for case in cases:
        text = (folder / f"{case['id']}.log").read_text(encoding="utf-8", errors="replace")
        rows.append((case, diagnose_text(text).category))
    return {**tally([(c["category"], got) for c, got in rows]), "rows": rows}


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.1f}%" if n else "-"


def table(rows: list[tuple[str, str]], indent: str = "  ") -> list[str]:
    """Per-category n, recall, precision and the confusions (label -> said)."""
    t = tally(rows)
    out = [f"{t['n']} cases: correct {t['correct']} ({_pct(t['correct'], t['n'])}), confidently wrong "
           f"{t['confident_wrong']} ({_pct(t['confident_wrong'], t['n'])}), unknown although a cause is known "
           f"{t['unknown_missed']}"]
    truth = Counter(a for a, _ in rows)
    said = Counter(b for _, b in rows)
    hits = Counter(a for a, b in rows if is_correct(a, b))
    wrong = Counter(a for a, b in rows if is_confidently_wrong(a, b))
    out.append(f"{indent}{'category':20} {'n':>3} {'right':>5} {'recall':>6} {'said':>4} {'precision':>9} "
               f"{'conf.wrong':>10}")
    for cat in sorted(set(truth) | set(said)):
        right_said = sum(1 for a, b in rows if b == cat and is_correct(a, b))
        precision = f"{right_said / said[cat]:.2f}" if said[cat] else "-"
        recall = f"{hits[cat] / truth[cat]:.2f}" if truth[cat] else "-"
        out.append(f"{indent}{cat:20} {truth[cat]:>3} {hits[cat]:>5} {recall:>6} {said[cat]:>4} {precision:>9} "
                   f"{wrong[cat]:>10}")
    confusion = Counter((a, b) for a, b in rows if not is_correct(a, b))
    if confusion:
        out.append(f"{indent}confusions (label -> said): "
                   + ", ".join(f"{a}->{b} x{k}" for (a, b), k in sorted(confusion.items())))
    return out


def report(split: str, result: dict, *, per_case: bool) -> None:
    rows = [(c["category"], got) for c, got in result["rows"]]
    lines = table(rows)
    print(f"[{split}] {lines[0]}")
    print("\n".join(lines[1:]))
    if per_case:
        for case, got in result["rows"]:
            mark = "ok " if is_correct(case["category"], got) else "BAD"
            print(f"  {mark} {case['id']:60} {case['category']:20} {got}")


# --- first sight -----------------------------------------------------------------------------------
def first_sight_records() -> list[dict]:
    """Every batch's frozen first-sight verdicts, oldest batch first."""
    records = []
    for path in sorted(RESULTS.glob("diagnose_firstsight_batch-*.json"),
                       key=lambda p: int(p.stem.rsplit("-", 1)[1])):
        records.append(json.loads(path.read_text(encoding="utf-8")))
    return records


def cumulative_lines() -> list[str]:
    records = first_sight_records()
    if not records:
        return ["first sight: no batch scored yet"]
    rows = [(c["category"], c["first_sight"]) for r in records for c in r["cases"]]
    out = [f"FIRST SIGHT, cumulative over {len(records)} blind batches "
           f"({', '.join(r['batch'] for r in records)}): " + table(rows)[0]]
    out.append(f"  {'batch':10} {'n':>3} {'right':>5} {'first sight':>11} {'conf.wrong':>10}   after rule changes")
    for r in records:
        t = tally([(c["category"], c["first_sight"]) for c in r["cases"]])
        after = r.get("after")
        after_text = (f"{after['correct']}/{after['n']} ({_pct(after['correct'], after['n'])}), confidently "
                      f"wrong {after['confident_wrong']}" if after else "-")
        out.append(f"  {r['batch']:10} {t['n']:>3} {t['correct']:>5} {_pct(t['correct'], t['n']):>11} "
                   f"{t['confident_wrong']:>10}   {after_text}")
    out.append("  per category (first sight):")
    out.extend(table(rows, indent="    ")[1:])
    small = [(cat, n) for cat, n in Counter(a for a, _ in rows).items() if n >= 5]
    weak = [f"{cat} {sum(is_correct(a, b) for a, b in rows if a == cat)}/{n}" for cat, n in sorted(small)
            if sum(is_correct(a, b) for a, b in rows if a == cat) < 0.7 * n]
    out.append("  categories with >= 5 cases below 70% recall: " + (", ".join(weak) if weak else "none"))
    out.extend(log_shows_lines([(c, c["first_sight"]) for r in records for c in r["cases"]]))
    return out


def log_shows_lines(rows: list[tuple[dict, str]]) -> list[str]:
    """First sight apart on the cases whose log shows the cause the thread concluded, and those whose cause came
    from outside the log (the collector's judgement, recorded from batch 47 on): what the rules could read."""
    judged = [(c, said) for c, said in rows if "log_shows" in c]
    if not judged:
        return []
    out = []
    for shows, words in ((True, "shows the cause"), (False, "does not show it")):
        part = [(c["category"], said) for c, said in judged if bool(c["log_shows"]) is shows]
        if part:
            out.append(f"  where the log {words} (collector's judgement): " + table(part)[0])
    return out


def score_batch(folder: Path, *, after: bool) -> int:
    """Score a collector's batch directory (index.json + <id>.log) and record it under benchmarks/results/.

    Without --after this is the first-sight score and refuses to overwrite one already recorded."""
    batch = folder.resolve().name
    cases = json.loads((folder / "index.json").read_text(encoding="utf-8"))["cases"]
    result = score(cases, folder)
    json_path, txt_path = RESULTS / f"diagnose_firstsight_{batch}.json", RESULTS / f"diagnose_firstsight_{batch}.txt"
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = [(c["category"], got) for c, got in result["rows"]]
    per_case = [f"  {'ok ' if is_correct(c['category'], got) else 'BAD'} {c['id']:60} {c['category']:20} {got}"
                for c, got in result["rows"]]
    if not after:
        if json_path.exists():
            print(f"{json_path} exists: first sight is scored once; use --after to rescore", file=sys.stderr)
            return 2
        json_path.write_text(json.dumps({"batch": batch, "scored_at": now, "cases": [
            {"id": c["id"], "category": c["category"], "first_sight": got,
             **({"log_shows": c["log_shows"]} if "log_shows" in c else {})} for c, got in result["rows"]]},
            indent=1) + "\n", encoding="utf-8")
        text = [f"# {batch}: FIRST SIGHT, scored {now} by the rules as committed then, before any of the batch's "
                "logs were read", "first sight: " + table(rows)[0], *table(rows)[1:], *log_shows_lines(
                    [(c, got) for c, got in result["rows"]]), "per case (label, said):", *per_case]
        txt_path.write_text("\n".join(text) + "\n", encoding="utf-8")
    else:
        record = json.loads(json_path.read_text(encoding="utf-8"))
        record["after"] = {**tally(rows), "scored_at": now}
        json_path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        old = txt_path.read_text(encoding="utf-8").split("\n# AFTER")[0].rstrip("\n")
        text = [old, "", f"# AFTER rule changes, rescored {now} (the batch's logs read and studied)",
                "after: " + table(rows)[0], *table(rows)[1:], "per case (label, said):", *per_case]
        txt_path.write_text("\n".join(text) + "\n", encoding="utf-8")
    (RESULTS / "diagnose_firstsight.txt").write_text("\n".join(cumulative_lines()) + "\n", encoding="utf-8")
    print(txt_path)
    return 0


# --- an expert who reads only the log ----------------------------------------------------------------------
EXPERT = ROOT / "benchmarks" / "diagnose_batches" / "log_only_expert"


def log_only_expert_lines() -> list[str]:
    """The rules beside an expert who saw only each log (log_only_expert/README.md), on the batches it answered:
    what a reader of the log alone reaches, so what first sight could reach."""
    first = {r["batch"]: {c["id"]: c for c in r["cases"]} for r in first_sight_records()}
    rows, batches = [], []  # rows: (case record, expert's label, first sight, the rules now)
    for path in sorted(EXPERT.glob("batch-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1])):
        answers = json.loads(path.read_text(encoding="utf-8"))
        batches.append(answers["batch"])
        folder = ROOT / "benchmarks" / "diagnose_batches" / answers["batch"]
        for answer in answers["cases"]:
            case = first[answers["batch"]][answer["id"]]
            now = diagnose_text((folder / f"{answer['id']}.log").read_text(encoding="utf-8", errors="replace"))
            rows.append((case, answer["label"], case["first_sight"], now.category))
    if not rows:
        return ["log-only expert: no batch answered yet"]
    out = [f"AN EXPERT WHO READS ONLY THE LOG, beside the rules, on {len(rows)} cases ({', '.join(batches)})"]
    parts = [("all cases", rows), *((f"the log {words}", [r for r in rows if r[0].get("log_shows") is shows])
                                    for shows, words in ((True, "shows the cause"), (False, "does not show it")))]
    for name, part in parts:
        if not part:
            continue
        out.append(f"  {name} ({len(part)}):")
        for who, k in (("expert, log only", 1), ("rules at first sight", 2), ("rules now (studied)", 3)):
            t = tally([(r[0]["category"], r[k]) for r in part])
            out.append(f"    {who:22} {t['correct']:>4} right ({_pct(t['correct'], t['n'])}), "
                       f"confidently wrong {t['confident_wrong']} ({_pct(t['confident_wrong'], t['n'])})")
    out.append("  per batch: expert right / conf.wrong, rules at first sight right / conf.wrong")
    for batch in batches:
        records = {id(case) for case in first[batch].values()}  # this batch's records, not a same-named case's
        part = [r for r in rows if id(r[0]) in records]
        e, f = (tally([(r[0]["category"], r[k]) for r in part]) for k in (1, 2))
        out.append(f"    {batch:10} {len(part):>3}   expert {e['correct']:>3} / {e['confident_wrong']:<3}  "
                   f"first sight {f['correct']:>3} / {f['confident_wrong']}")
    out.extend(repeat_lines({r[0]["id"]: r for r in rows}))
    both = Counter((is_correct(r[0]["category"], r[1]), is_correct(r[0]["category"], r[2])) for r in rows)
    out.append(f"  expert right where first sight was not: {both[(True, False)]}; first sight right where the "
               f"expert was not: {both[(False, True)]}; both wrong: {both[(False, False)]}")
    return out


def repeat_lines(rows: dict[str, tuple]) -> list[str]:
    """A second expert, fresh, with the same instructions, on some batches (log_only_expert/repeat/): how much the
    ceiling moves from one reader to the next."""
    answers = [(rows[a["id"]], a["label"]) for path in sorted((EXPERT / "repeat").glob("batch-*.json"))
               for a in json.loads(path.read_text(encoding="utf-8"))["cases"]]
    if not answers:
        return []
    first = tally([(row[0]["category"], row[1]) for row, _ in answers])
    second = tally([(row[0]["category"], label) for row, label in answers])
    return [f"  a second expert on {len(answers)} of these logs: {second['correct']} right, "
            f"{second['confident_wrong']} confidently wrong (the first: {first['correct']}, "
            f"{first['confident_wrong']}); the same label on "
            f"{sum(row[1] == label for row, label in answers)}"]


# --- leave one batch out ---------------------------------------------------------------------------------
def alternatives(regex: str) -> list[str]:
    """The top-level alternatives of a pattern (`|` outside groups and character classes)."""
    out, depth, in_class, current, i = [], 0, False, "", 0
    while i < len(regex):
        ch = regex[i]
        if ch == "\\":
            current, i = current + regex[i:i + 2], i + 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch in "()":
            depth += 1 if ch == "(" else -1
        elif ch == "|" and depth == 0:
            out.append(current)
            current, i = "", i + 1
            continue
        current, i = current + ch, i + 1
    return [*out, current]


def leave_one_batch_out(folders: list[Path]) -> list[str]:
    batches = {f.resolve().name: (f, json.loads((f / "index.json").read_text(encoding="utf-8"))["cases"])
               for f in folders}
    texts, batches_of = {}, {}
    for name, (folder, cases) in batches.items():
        for case in cases:
            texts[case["id"]] = (folder / f"{case['id']}.log").read_text(encoding="utf-8", errors="replace")
            batches_of.setdefault(case["id"], set()).add(name)
    for case in load():
        texts.setdefault(case["id"], (CORPUS / f"{case['id']}.log").read_text(encoding="utf-8", errors="replace"))
    lines = {cid: [clean_line(line)[0] for line in text.splitlines()] for cid, text in texts.items()}

    def owned(regexes: list[str]) -> list[tuple[int, str, str | None]]:
        """(pattern number, alternative, the one batch it was written for or None)"""
        found = []
        for n, regex in enumerate(regexes):
            for alt in alternatives(regex):
                pattern = re.compile(alt, re.IGNORECASE)
                seen = {b for cid, ls in lines.items() if any(pattern.search(line) for line in ls)
                        for b in batches_of.get(cid, {None})}
                found.append((n, alt, next(iter(seen)) if len(seen) == 1 else None))
        return found

    def without(owners: list[tuple[int, str, str | None]], n: int, name: str) -> str:
        return "|".join(a for m, a, owner in owners if m == n and owner != name) or r"(?!x)x"

    # the signatures' wordings, and the families' words (read from the root error and the error lines)
    original = diagnose.SIGNATURES
    families = {"EXCEPTION_FAMILIES": diagnose.EXCEPTION_FAMILIES, "SCHEDULER_FAMILIES": diagnose.SCHEDULER_FAMILIES}
    owners = owned([sig.regex for sig in original])
    family_owners = {key: owned([rx.pattern for _, rx in fam]) for key, fam in families.items()}
    out, total = [], []
    try:
        for name, (_, cases) in batches.items():
            diagnose.SIGNATURES = tuple(
                Signature(sig.category, without(owners, n, name), sig.summary, sig.hint, sig.unless)
                for n, sig in enumerate(original))
            for key, fam in families.items():
                setattr(diagnose, key, tuple((category, re.compile(without(family_owners[key], n, name), re.IGNORECASE))
                                             for n, (category, _) in enumerate(fam)))
            rows = [(c["category"], diagnose_text(texts[c["id"]]).category) for c in cases]
            dropped = sum(owner == name for _, _, owner in
                          [*owners, *(o for fam in family_owners.values() for o in fam)])
            diagnose.SIGNATURES = original
            for key, fam in families.items():
                setattr(diagnose, key, fam)
            full = [(c["category"], diagnose_text(texts[c["id"]]).category) for c in cases]
            t, f = tally(rows), tally(full)
            total += rows
            out.append(f"  {name:10} {t['n']:>3}   all rules {f['correct']:>3} ({_pct(f['correct'], f['n'])}), "
                       f"conf.wrong {f['confident_wrong']}   without its {dropped:>2} own alternatives "
                       f"{t['correct']:>3} ({_pct(t['correct'], t['n'])}), conf.wrong {t['confident_wrong']}")
    finally:
        diagnose.SIGNATURES = original
        for key, fam in families.items():
            setattr(diagnose, key, fam)
    return ["LEAVE ONE BATCH OUT (an estimate of first sight): " + table(total)[0], *out]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["tune", "heldout", "all"], default="all")
    parser.add_argument("--cases", action="store_true", help="one line per case (use on tune only while tuning)")
    parser.add_argument("--batch", type=Path, help="a collector's batch directory (index.json + <id>.log)")
    parser.add_argument("--after", action="store_true", help="with --batch: rescore after rule changes")
    parser.add_argument("--log-only-expert", action="store_true",
                        help="the rules beside an expert who saw only the logs (diagnose_batches/log_only_expert)")
    parser.add_argument("--leave-one-batch-out", type=Path, nargs="+", metavar="DIR",
                        help="scored batch directories: estimate first sight with each batch's own rules left out")
    args = parser.parse_args(argv)
    if args.log_only_expert:
        print("\n".join(log_only_expert_lines()))
        return 0
    if args.leave_one_batch_out:
        print("\n".join(leave_one_batch_out(args.leave_one_batch_out)))
        return 0
    if args.batch:
        return score_batch(args.batch, after=args.after)
    print("\n".join(cumulative_lines()))
    print()
    print("Regression guard (the corpus; rules were written by people who had read it):")
    splits = ["tune", "heldout"] if args.split == "all" else [args.split]
    for split in splits:
        report(split, score(load(split)), per_case=args.cases)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `| head`: a closed pipe is a normal end
        sys.stderr.close()
        sys.exit(0)
