"""A rank's real exception is the root cause, not a peer's collective failing after it: with gloo, rank 1's
AttributeError makes rank 0's all_reduce fail with "Connection closed by peer"; torchrun's --tee output
(one line prefix per rank) can print rank 0's traceback first and name rank 0 as the first failure."""

from slurmctl.observe.diagnose import diagnose_text

TWO_RANKS = """\
[rank0]:step 10 loss 2.3011
[rank1]:step 10 loss 2.3011
[rank0]:Traceback (most recent call last):
[rank0]:  File "/home/alice/proj/train.py", line 41, in <module>
[rank0]:    dist.all_reduce(loss)
[rank0]:  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper
[rank0]:    return func(*args, **kwargs)
[rank0]:  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2806, in all_reduce
[rank0]:    work.wait()
[rank0]:RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.12]:47125
[rank1]:Traceback (most recent call last):
[rank1]:  File "/home/alice/proj/train.py", line 37, in <module>
[rank1]:    loss = model.compute_loss(batch)
[rank1]:  File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1940, in __getattr__
[rank1]:    raise AttributeError(
[rank1]:AttributeError: 'DistributedDataParallel' object has no attribute 'compute_loss'
E1201 18:02:11 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) local_rank: 0 (pid: 4250)
Traceback (most recent call last):
  File "/opt/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 892, in run
    elastic_launch(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_18:02:11
  host      : node-1
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 4251)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_18:02:11
  host      : node-1
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 4250)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_the_peers_real_exception_wins_over_a_collective_teardown():
    diagnosis = diagnose_text(TWO_RANKS, "FAILED", "1:0").to_dict()
    assert "AttributeError" in (diagnosis.get("error_line") or ""), diagnosis
    assert "compute_loss" in diagnosis["summary"] + " ".join(diagnosis["evidence"]), diagnosis


def test_a_teardown_alone_is_still_reported():
    rank0_only = "\n".join(line for line in TWO_RANKS.splitlines() if not line.startswith("[rank1]:Trace")
                           and "compute_loss" not in line and "AttributeError(" not in line
                           and "module.py" not in line and "rank1]:  File" not in line)
    diagnosis = diagnose_text(rank0_only, "FAILED", "1:0").to_dict()
    assert "Connection closed by peer" in (diagnosis.get("error_line") or ""), diagnosis


def test_evidence_is_the_failing_ranks_own_traceback_not_the_peer_it_left_hanging():
    """A real torchrun log (tests/fixtures/peer_teardown): rank 1's AttributeError prints first, rank 0's
    gloo teardown after it. The evidence, and status's excerpt of it, are rank 1's traceback alone."""
    from pathlib import Path

    from slurmctl.observe.diagnose import excerpt
    log = Path(__file__).parent.parent / "fixtures" / "peer_teardown" / "rank1_attributeerror_gloo.log"
    diagnosis = diagnose_text(log.read_text(), "FAILED", "1:0").to_dict()
    evidence = "\n".join(diagnosis["evidence"])
    assert diagnosis["rank"] == 1 and "'Cfg' object has no attribute 'learning_rate'" in diagnosis["error_line"]
    assert "train.py\", line 12" in evidence and "gloo" not in evidence and "all_reduce" not in evidence, evidence
    short = excerpt(diagnosis)
    assert short[-1] == diagnosis["error_line"] and not any("line 9" in line for line in short), short
