"""A training loop over object-store shards (run.yaml data: shards), for the node cache benchmark.

Each epoch reads every shard of $SLURMCTL_DATA_SHARDS (one shard = one batch) and "computes" for
--compute-ms-per-mb per MiB read (a stand-in for the GPU step). Per epoch it logs the share of the
epoch's time spent waiting for data (rt.data's meter), so metrics.jsonl shows epoch 1 against 2+.
--prefetch N reads N shards ahead in the background (rt.data's prefetch)."""

import argparse
import time

from slurmctl.runtime import Runtime
from slurmctl.runtime.datacache import open_dataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--compute-ms-per-mb", type=float, default=5.0)
parser.add_argument("--prefetch", type=int, default=0)
args = parser.parse_args()

rt = Runtime.from_env()
dataset = open_dataset("shards")


def shards():
    for name in dataset.files:
        with dataset.open(name) as fh:
            yield fh.read()


# Both look for torch.distributed on first use (importing torch takes seconds): done here, not in epoch 1.
rt.rank_health().flush()
rt.should_stop()
meter = rt.rank_health().meter
step = 0
for epoch in range(1, args.epochs + 1):
    wait0, busy0, first0 = meter.wait, meter.busy, meter.first_wait
    started = time.perf_counter()
    nbytes = 0
    for batch in rt.data(shards(), prefetch=args.prefetch):
        nbytes += len(batch)
        time.sleep(args.compute_ms_per_mb * len(batch) / 2**20 / 1000)
        step += 1
        if rt.should_stop():
            rt.ack_drain(step)
            raise SystemExit(0)
    wait = meter.wait - wait0 + meter.first_wait - first0
    busy = meter.busy - busy0
    rt.log(step, epoch=epoch, data_wait_share=wait / (wait + busy) if wait + busy else 0.0,
           epoch_seconds=time.perf_counter() - started, bytes=nbytes, cached=float(dataset.cache != "none"))
    print(f"epoch {epoch}: {nbytes} bytes, data wait {wait:.2f} s of {wait + busy:.2f} s", flush=True)
