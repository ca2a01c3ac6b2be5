"""The diagnosis corpus (tests/fixtures/logs/, real-world logs from public issue trackers) and edge cases."""

from pathlib import Path

import pytest

from slurmctl.observe.diagnose import CATEGORIES, clean_line, diagnose_file, diagnose_text

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
CASES = sorted(LOGS.glob("*.log"))


def _header(path: Path) -> dict:
    return {k.strip(): v.strip() for k, v in (line[3:].split(":", 1) for line in path.read_text().splitlines()
                                             if line.startswith("#> "))}


def test_corpus_is_big_enough_and_covers_every_category():
    expected = {_header(p)["expect"] for p in CASES}
    assert len(CASES) >= 35
    assert expected == set(CATEGORIES)
    assert all(_header(p)["source"] for p in CASES)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_corpus_log_is_classified(path):
    result = diagnose_file(path)
    assert result.category == _header(path)["expect"], result
    assert result.evidence and result.summary and result.hint


def test_corpus_accuracy_is_reported():
    right = sum(diagnose_file(p).category == _header(p)["expect"] for p in CASES)
    print(f"diagnosis corpus: {right}/{len(CASES)} correct")
    assert right == len(CASES)


def test_prefixes_and_ansi_are_stripped():
    assert clean_line("\x1b[31m[rank3]:boom\x1b[0m") == ("boom", 3)
    assert clean_line("12: hello") == ("hello", 12)
    assert clean_line("[default0]:x") == ("x", 0)


def test_root_cause_rank_is_named():
    log = "[rank0]: waiting\n[rank5]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
    result = diagnose_text(log)
    assert result.category == "cuda_oom" and result.rank == 5 and "rank 5" in result.summary


def test_slurm_state_outranks_the_log():
    assert diagnose_text("step 5 loss 1.0\n", slurm_state="TIMEOUT").category == "time_limit"
    assert diagnose_text("", slurm_state="PREEMPTED").source == "slurm"
    assert diagnose_text("NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.",
                         slurm_state="NODE_FAIL").category == "gpu_hardware"


def test_unknown_shows_the_last_traceback_not_a_guess():
    log = ("Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'\nnoise\n"
           "Traceback (most recent call last):\n  File \"b.py\", line 2, in f\n    g()\n"
           "ZeroDivisionError: division by zero\n"
           "more noise after\n")
    result = diagnose_text(log, exit_code="1:0")
    assert result.category == "unknown" and "exit code 1:0" in result.summary
    assert result.evidence[0].startswith("Traceback") and result.evidence[-1].startswith("ZeroDivisionError")


def test_words_that_only_look_like_failures_stay_unknown():
    # "nan" in a file name and "memory" in a normal log line are not failures
    assert diagnose_text("loading nanogpt weights\nmemory usage 3.2 GB\nstep 4 loss 2.1\n").category == "unknown"
