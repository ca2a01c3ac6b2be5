"""kill -9 a checkpoint writer at random moments and check `latest()` never returns a partial checkpoint.

Each trial starts a fresh writer process that saves checkpoints in a loop (several files, each with
its sha256 in a manifest written LAST by the write_fn, so a partial write is detectable), kills it
with SIGKILL after a random delay, then opens the directory like a restarting job would:
`latest()` must be a checkpoint whose every file matches the manifest, and must not be older
than the last save the writer reported finished.

    .venv/bin/python benchmarks/checkpoint_fault_injection.py [--trials 200]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # runs with any python3 (the checkpoint library is standard library only)

from slurmctl.runtime.checkpoint import CheckpointManager  # noqa: E402 - after the sys.path line above

WRITER = r"""
import hashlib, json, os, sys
from pathlib import Path
from slurmctl.runtime.checkpoint import CheckpointManager

root, start = Path(sys.argv[1]), int(sys.argv[2])
mgr = CheckpointManager(root, keep_last=2)

def write(step):
    def fn(d):
        manifest = {}
        for i in range(4):
            data = os.urandom(64 * 1024 * (i + 1))
            with open(d / f"part-{i}.bin", "wb") as fh:
                for off in range(0, len(data), 16 * 1024):  # many small writes widen the window
                    fh.write(data[off:off + 16 * 1024])
            manifest[f"part-{i}.bin"] = hashlib.sha256(data).hexdigest()
        (d / "manifest.json").write_text(json.dumps({"step": step, "files": manifest}))
    return fn

print("ready", flush=True)
step = start
while True:
    print(f"begin {step}", flush=True)
    mgr.save(step, write(step))
    print(f"end {step}", flush=True)
    step += 1
"""


def checkpoint_is_whole(path: Path) -> bool:
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    for name, digest in manifest["files"].items():
        try:
            if hashlib.sha256((path / name).read_bytes()).hexdigest() != digest:
                return False
        except OSError:
            return False
    return manifest["step"] == int(path.name.rsplit("-", 1)[1])


def run_trials(root: Path, trials: int, seed: int = 0, max_delay: float = 0.25) -> dict:
    rng = random.Random(seed)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    partial = killed_mid_save = lost_finished = 0
    next_step = 0
    for _ in range(trials):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(next_step)],
                                stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0, max_delay))
        proc.send_signal(signal.SIGKILL)
        lines = proc.stdout.read().split()
        proc.wait()
        proc.stdout.close()
        events = list(zip(lines[0::2], map(int, lines[1::2])))
        finished = [s for e, s in events if e == "end"]
        if events and events[-1][0] == "begin":
            killed_mid_save += 1
        # What a restarted job sees:
        ck = CheckpointManager(root, keep_last=2).latest()
        if ck is not None and not checkpoint_is_whole(ck.path):
            partial += 1
        if finished and (ck is None or ck.step < finished[-1]):
            lost_finished += 1
        next_step = max([next_step, *(s + 1 for _, s in events)])
    return {"trials": trials, "killed_mid_save": killed_mid_save, "partial_resumes": partial,
            "finished_saves_lost": lost_finished}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ckpt-fault-") as tmp:
        started = time.monotonic()
        result = run_trials(Path(tmp), args.trials, args.seed)
    result["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(result))
    return 0 if result["partial_resumes"] == 0 and result["finished_saves_lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
