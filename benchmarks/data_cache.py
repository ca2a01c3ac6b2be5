"""The node data cache against reading the object store every epoch, measured side by side in one sitting.

On the local cluster, as the benchmark user (alice), three runs of examples/data-cache/train.py read the
same synthetic shards from the local S3 store (deploy/local/s3-up's moto server), one after another on
one node:
  none        `cache: none`: every epoch reads every shard from the store
  node-cold   `cache: node` on an empty cache: a staging step downloads the shards, the epochs read the
              node's copies
  node-warm   `cache: node` again (a later run): the staging step finds and verifies the cached shards
              (re-hashes every byte: site.yaml data.verify_on_reuse, the default)
  node-quick  the same with verify_on_reuse: false (size, owner and mode checked, no re-hash)
  node-prefetch  as node-quick, the training reading 4 shards ahead (rt.data(loader, prefetch=4))
Each epoch "computes" --compute-ms-per-mb per MiB it read (the stand-in for a GPU step). Printed: per run
the data-wait share of epoch 1 and of epochs 2+ (rt.data's meter), the staging time, bytes staged and the
cache hit rate, the job's wall time; and the ratios. The cache directory is the benchmark's own (a fresh
site.yaml copy naming a temporary node_cache_dir), so the cold run is cold and no other cache is touched.

    .venv/bin/python benchmarks/data_cache.py              # 32 x 64 MiB = 2 GiB (the benchmark)
    .venv/bin/python benchmarks/data_cache.py --small      # 8 x 4 MiB, a quick check

Writes benchmarks/results/data_cache.txt (and .json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
from _as_user import bench_user, run  # noqa: E402 - after the sys.path lines above

from slurmctl.rundir import Run  # noqa: E402

PY = sys.executable
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
BUCKET = "slurmctl-datasets"


def site_config() -> tuple[Path, dict]:
    path = Path(os.environ.get("SLURMCTL_SITE_CONFIG", "/etc/slurmctl/site.yaml"))
    return path, yaml.safe_load(path.read_text())


def slurmctl(*args: str, env: dict) -> dict:
    out = run([PY, "-m", "slurmctl.cli", *args, "--json"], timeout=300, env=env)
    if out.returncode not in (0, 1):
        raise SystemExit(f"slurmctl {' '.join(args)} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def job_state(job_id: int) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State"], capture_output=True,
                         text=True, timeout=30).stdout.split()
    return out[0] if out else "PENDING"


def one_run(base: Path, label: str, cache: str, src: str, args, env: dict, prefetch: int = 0) -> dict:
    user = bench_user()
    d = base / label
    d.mkdir()
    shutil.copy(REPO / "examples" / "data-cache" / "train.py", d / "train.py")
    (d / "run.yaml").write_text(yaml.safe_dump({
        "name": f"bench-data-{label}", "entrypoint": "train.py", "partition": args.partition, "gpus_per_node": 0,
        "time_limit": "60m", "args": ["--epochs", str(args.epochs), "--compute-ms-per-mb", str(args.compute_ms_per_mb),
                                         "--prefetch", str(prefetch)],
        "data": [{"src": src, "cache": cache, "name": "shards"}]}))
    for p in (d, d / "train.py", d / "run.yaml"):
        os.chown(p, user.pw_uid, user.pw_gid)
    t0 = time.monotonic()
    submitted = slurmctl("submit", str(d / "run.yaml"), env=env)
    job_id, run_dir = int(submitted["job_id"]), Path(submitted["run_dir"])
    while (state := job_state(job_id)) not in ENDED:
        time.sleep(2)
    wall = time.monotonic() - t0
    if state != "COMPLETED":
        log = "".join(p.read_text()[-3000:] for p in (run_dir / "logs").glob("*.out"))
        raise SystemExit(f"{label}: job {job_id} ended {state}:\n{log}")
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    stages = Run(run_dir.name, run_dir).stage_records()
    ds = stages[-1]["datasets"][0] if stages else {}
    later = [e["data_wait_share"] for e in epochs[1:]]
    return {"label": label, "cache": cache, "job_id": job_id, "run_dir": str(run_dir), "wall_seconds": round(wall, 1),
            "epoch1_wait_share": round(epochs[0]["data_wait_share"], 4),
            "epoch2plus_wait_share": round(sum(later) / len(later), 4) if later else None,
            "epoch_seconds": [round(e["epoch_seconds"], 2) for e in epochs],
            "staging_seconds": ds.get("seconds"), "verify_seconds": ds.get("verify_seconds"),
            "bytes_staged": ds.get("bytes_staged"), "hit_rate": ds.get("hit_rate")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--shard-mb", type=float, default=64)
    parser.add_argument("--small", action="store_true", help="8 shards of 4 MiB: a quick check, not the benchmark")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--compute-ms-per-mb", type=float, default=10.0)
    parser.add_argument("--partition", default="l4-dev")
    parser.add_argument("--prefix", help="the shards' prefix in the bucket (default bench-<shards>x<MiB>m)")
    args = parser.parse_args()
    if args.small:
        args.shards, args.shard_mb = 8, 4
    site_path, site = site_config()
    endpoint = (site.get("data") or {}).get("endpoint_url")
    if not endpoint:
        raise SystemExit(f"{site_path} names no object store (data.endpoint_url); run deploy/local/up (it starts "
                         "deploy/local/s3-up and writes it)")
    prefix = args.prefix or f"bench-{args.shards}x{args.shard_mb:g}m"
    subprocess.run([PY, str(REPO / "deploy" / "local" / "s3_shards.py"), "--endpoint", endpoint, "--bucket", BUCKET,
                    "--prefix", prefix, "--shards", str(args.shards), "--shard-mb", str(args.shard_mb)], check=True)
    user = bench_user()
    base = Path(tempfile.mkdtemp(prefix="slurmctl-bench-data-", dir="/tmp"))
    os.chmod(base, 0o755)
    cache_dir = base / "cache"
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o1777)
    site["data"] = {**site["data"], "node_cache_dir": str(cache_dir),
                    "node_cache_budget": str(int(args.shards * args.shard_mb * 2**20 * 2))}
    own_site, quick_site = base / "site.yaml", base / "site-quick.yaml"
    own_site.write_text(yaml.safe_dump(site))
    quick_site.write_text(yaml.safe_dump({**site, "data": {**site["data"], "verify_on_reuse": False}}))
    os.chmod(own_site, 0o644)
    os.chmod(quick_site, 0o644)
    env = {**os.environ, "SLURMCTL_SITE_CONFIG": str(own_site)}
    os.chown(base, user.pw_uid, user.pw_gid)
    src = f"s3://{BUCKET}/{prefix}"
    total = args.shards * args.shard_mb
    try:
        results = [one_run(base, "none", "none", src, args, env), one_run(base, "node-cold", "node", src, args, env),
                   one_run(base, "node-warm", "node", src, args, env),
                   one_run(base, "node-quick", "node", src, args, {**env, "SLURMCTL_SITE_CONFIG": str(quick_site)}),
                   one_run(base, "node-prefetch", "node", src, args, {**env, "SLURMCTL_SITE_CONFIG": str(quick_site)},
                           prefetch=4)]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    none, cold, warm, quick, ahead = results
    lines = [f"data_cache: {args.shards} shards x {args.shard_mb:g} MiB = {total / 1024:.2f} GiB from {src} "
             f"({endpoint}), {args.epochs} epochs, {args.compute_ms_per_mb:g} ms compute per MiB, as "
             f"{user.pw_name} on {args.partition}; runs one after another in this sitting",
             f"{'run':<13} {'epoch1 wait':>11} {'epoch2+ wait':>12} {'staging s':>9} {'staged MiB':>10} "
             f"{'hit rate':>8} {'job wall s':>10}  epoch seconds"]
    for r in results:
        staged = "-" if r["bytes_staged"] is None else f"{r['bytes_staged'] / 2**20:.0f}"
        first, later = 100 * r["epoch1_wait_share"], 100 * r["epoch2plus_wait_share"]
        lines.append(f"{r['label']:<13} {first:>10.1f}% {later:>11.1f}% "
                     f"{'-' if r['staging_seconds'] is None else r['staging_seconds']:>9} {staged:>10} "
                     f"{'-' if r['hit_rate'] is None else r['hit_rate']:>8} {r['wall_seconds']:>10}  "
                     f"{r['epoch_seconds']}")
    ratios = {
        "epoch2plus_wait_share_none_over_node": round(none["epoch2plus_wait_share"]
                                                      / max(cold["epoch2plus_wait_share"], 1e-4), 1),
        "epoch2plus_seconds_none_over_node": round(sum(none["epoch_seconds"][1:])
                                                   / max(sum(cold["epoch_seconds"][1:]), 1e-3), 2),
        "warm_over_cold_staging_seconds": round(warm["staging_seconds"] / max(cold["staging_seconds"], 1e-3), 3),
        "quick_over_cold_staging_seconds": round(quick["staging_seconds"] / max(cold["staging_seconds"], 1e-3), 3),
        "job_wall_none_over_warm": round(none["wall_seconds"] / warm["wall_seconds"], 2),
        "epoch2plus_wait_share_none_over_prefetch": round(none["epoch2plus_wait_share"]
                                                          / max(ahead["epoch2plus_wait_share"], 1e-4), 1),
    }
    lines += [f"ratio: epoch 2+ data-wait share, cache none / cache node = "
              f"{ratios['epoch2plus_wait_share_none_over_node']}x",
              f"ratio: epochs 2+ time, cache none / cache node = {ratios['epoch2plus_seconds_none_over_node']}x",
              f"ratio: second run's staging / first run's = {ratios['warm_over_cold_staging_seconds']} "
              f"({warm['staging_seconds']} s vs {cold['staging_seconds']} s; the second verifies, downloads nothing)",
              f"ratio: second run's staging without the re-hash / first run's = "
              f"{ratios['quick_over_cold_staging_seconds']} ({quick['staging_seconds']} s)",
              f"ratio: whole job, cache none / cache node (warm) = {ratios['job_wall_none_over_warm']}x",
              f"ratio: epoch 2+ data-wait share, cache none / cache node with prefetch = "
              f"{ratios['epoch2plus_wait_share_none_over_prefetch']}x"]
    text = "\n".join(lines)
    print(text)
    out = REPO / "benchmarks" / "results" / ("data_cache_small" if args.small else "data_cache")
    out.with_suffix(".txt").write_text(text + "\n")
    out.with_suffix(".json").write_text(json.dumps({"results": results, "ratios": ratios}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
