"""A runner that records argv and replays stdout captured from the real local cluster."""

import json
from pathlib import Path

from slurmctl.slurm.runner import CommandResult

CAPTURED = json.loads((Path(__file__).parent.parent / "fixtures" / "slurm_22.05_outputs.json").read_text())


class ReplayRunner:
    def __init__(self, outputs: dict[str, str] | None = None, returncode: int = 0, stderr: str = ""):
        self.calls: list[list[str]] = []
        self.outputs = outputs if outputs is not None else {k: v[0]["stdout"] for k, v in CAPTURED.items()
                                                            if isinstance(v, list)}
        self.returncode, self.stderr = returncode, stderr

    def run(self, argv, timeout=60.0):
        self.calls.append(list(argv))
        return CommandResult(tuple(argv), self.returncode, self.outputs.get(argv[0], ""), self.stderr)
