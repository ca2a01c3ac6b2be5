"""A runner that records argv and replays output captured from the real local cluster, by FULL argv.

tests/fixtures/slurm_22.05_outputs.json holds each call's exact argv and output, recorded by
tests/fixtures/capture_slurm_outputs.py (re-run it when a client argv changes). A call whose argv
was never captured fails the test: a client that asks Slurm something new cannot pass on output
recorded for another question.
"""

import json
from pathlib import Path

from slurmctl.slurm.runner import CommandResult

CAPTURED = json.loads((Path(__file__).parent.parent / "fixtures" / "slurm_22.05_outputs.json").read_text())
JOBS = CAPTURED["jobs"]  # {"failed": id, "completed": id, "held": id} of the captured jobs


class ReplayRunner:
    """Replays CAPTURED by full argv, or `outputs` written by the test.

    `outputs` keys are a full argv (tuple) or, for output a test writes itself, a command name (str)
    that answers every call of that command; other calls get empty output (control commands such as
    scancel print nothing; such tests assert the argv). Replaying CAPTURED, a call whose argv was not
    captured is an AssertionError (or, when the test simulates a failure, that failure).
    """

    def __init__(self, outputs: dict | None = None, returncode: int = 0, stderr: str = ""):
        self.calls: list[list[str]] = []
        self.strict = outputs is None
        if outputs is None:
            outputs = {tuple(c["argv"]): c["stdout"] for c in CAPTURED["calls"]}
        self.outputs = outputs
        self.returncode, self.stderr = returncode, stderr

    def run(self, argv, timeout=60.0):
        self.calls.append(list(argv))
        for key in (tuple(argv), argv[0]):
            if key in self.outputs:
                return CommandResult(tuple(argv), self.returncode, self.outputs[key], self.stderr)
        if self.returncode != 0 or not self.strict:
            return CommandResult(tuple(argv), self.returncode, "", self.stderr)
        raise AssertionError(f"no captured output for argv {argv!r}; re-run tests/fixtures/capture_slurm_outputs.py")

    def attach(self, argv):
        self.calls.append(list(argv))
        return self.returncode


# Every Slurm listing is sealed per call (slurmctl.slurm.parsing.new_seal); unit tests pin the seal
# so argv and replayed output match, and write output in Slurm's sealed shape with these helpers.
TEST_SEAL = CAPTURED.get("seal", "5eal5eal5eal5eal")


def pin_seal(monkeypatch, seal: str = TEST_SEAL) -> str:
    import slurmctl.slurm.client as client_module

    monkeypatch.setattr(client_module, "new_seal", lambda: seal)
    return seal


def squeue_output(*records, seal: str = TEST_SEAL) -> str:
    """What `squeue -o/-O <sealed format>` prints for records given as field lists."""
    from slurmctl.slurm.parsing import field_separator, record_end

    return "".join(field_separator(seal).join(map(str, r)) + record_end(seal) + "\n" for r in records)


def sacct_output(*records, seal: str = TEST_SEAL) -> str:
    """What `sacct -P --delimiter=<sealed separator>` prints for records given as field lists (each
    closed by its own id, as the client asks)."""
    from slurmctl.slurm.parsing import field_separator

    return "".join(field_separator(seal).join(map(str, [*r, r[0]])) + "\n" for r in records)


def silent_slurm_env(tmp: Path, runs_root: Path) -> dict:
    """The environment of a slurmctl process whose Slurm commands answer with nothing (an empty queue, no
    accounting record) and whose site config keeps runs under `runs_root`: for tests of a whole process that
    pin what it reads or imports, not what Slurm says."""
    import os

    import yaml

    site = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy/local/site.yaml").read_text())
    (tmp / "site.yaml").write_text(yaml.safe_dump({**site, "runs_root": str(runs_root)}))
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in ("squeue", "sacct", "sinfo", "scontrol", "sacctmgr"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("SLURMCTL_", "FORCE_COLOR", "TTY_"))},
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "SLURMCTL_SITE_CONFIG": str(tmp / "site.yaml"), "SLURMCTL_USER_CONFIG": str(tmp / "no-config.yaml"),
            "XDG_CACHE_HOME": str(tmp / "cache"), "XDG_STATE_HOME": str(tmp / "state")}
