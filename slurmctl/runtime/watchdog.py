"""Progress watchdog: the sidecar the batch script starts next to the training.

    python -m slurmctl.runtime.watchdog --run-dir DIR [--step-field step] [--source FILE] [--stall 15m] ...

It reads a step counter each check (``--step-field``: a key or dotted key path such as ``step``,
``global_step``, ``iteration``, ``train.iter`` read from a JSON file or the last line of a JSONL
file; or ``regex:<pattern>`` matched against the tail of a log, group 1 = the step) and:

* the first check without progress logs a warning naming the field;
* after ``--stall`` without progress (``--startup`` before the first progress of this attempt) it
  writes a diagnosis (field, last value and time, log tail) to the job log and to
  ``<run dir>/watchdog/``, and asks the training to drain (``drain.request``);
* if neither an ACK nor progress comes within ``--drain-timeout`` it captures the scene (stack of
  every rank via py-spy, else the faulthandler the process registered on SIGUSR2; log tails;
  nvidia-smi) into ``<run dir>/watchdog/<job>-<time>/`` and ends the training step, so the job
  fails fast (and, with a valid checkpoint, the batch script's requeue logic takes over);
* the peer check: in a job, no rank alive on this node for ``PEER_LOST_SECONDS`` (and a check
  interval) while the srun step still runs -- it waits on another node whose processes are lost or
  hung -- ends the step at once, without waiting for the stall window; after one check interval
  already when srun says a probe step's launch failed on a node of the allocation;
* a field that never appeared is a configuration problem: reported once, never a kill.

Defaults come from SLURMCTL_WATCHDOG_* environment variables (settable in run.yaml ``env:``). The
check interval (45 s) and stall window (15 min) stay apart from NCCL's collective timeouts.
Standard library only; Slurm is reached through ``scancel``/``squeue`` argv lists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurmctl import rundir
from slurmctl.durations import parse_seconds
from slurmctl.errors import SlurmctlError
from slurmctl.fsutil import child_pids, pid_alive, tail_bytes, write_atomic
from slurmctl.runtime.health import IdleMonitor, IdlePolicy

EXIT_OK, EXIT_KILLED = 0, 3
PEER_LOST_SECONDS = 30.0  # ranks gone this long while the step runs: the peer check ends the step
TAIL_BYTES = 64 * 1024
SIGUSR2_BIT = 1 << (signal.SIGUSR2 - 1)


def log(message: str) -> None:
    """The job log: the watchdog's stderr is the batch script's, i.e. logs/<job>.out."""
    print(f"slurmctl watchdog [{time.strftime('%H:%M:%S')}]: {message}", file=sys.stderr, flush=True)


def tail_text(path: Path, max_bytes: int = TAIL_BYTES) -> str:
    """The log's last bytes through fsutil's tail reader (capped; never blocks on a FIFO)."""
    try:
        return tail_bytes(path, max_bytes)[0].decode(errors="replace")
    except OSError:
        return ""


@dataclass
class StepReader:
    """Reads the current step value from one source; None when the field is not (yet) there."""

    field_spec: str
    source: Path
    source_seen: bool = False

    @property
    def is_regex(self) -> bool:
        return self.field_spec.startswith("regex:")

    def describe(self) -> str:
        return f"field '{self.field_spec}' in {self.source}"

    def read(self) -> float | None:
        text = tail_text(self.source)
        if not text:
            return None
        self.source_seen = True
        if self.is_regex:
            matches = re.findall(self.field_spec.removeprefix("regex:"), text, re.MULTILINE)
            if not matches:
                return None
            last = matches[-1]
            return _number(last[0] if isinstance(last, tuple) else last)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        candidates = [text] if self.source.suffix == ".json" else list(reversed(lines[-5:]))
        for candidate in candidates:  # a JSONL writer may have left a torn last line
            try:
                data = json.loads(candidate)
            except ValueError:
                continue
            for key in self.field_spec.split("."):
                data = data.get(key) if isinstance(data, dict) else None
            return _number(data)
        return None


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass
class Settings:
    run_dir: Path
    reader: StepReader
    check_seconds: float = 45.0
    stall_seconds: float = 900.0
    startup_seconds: float = 1800.0
    drain_timeout_seconds: float = 300.0
    job_id: str | None = None
    log_path: Path | None = None
    target_pids: list[int] = field(default_factory=list)  # standalone: end these instead of srun steps
    parent_pid: int | None = None
    kill_grace_seconds: float = 10.0  # the runtime turns SIGTERM into a drain; a hung rank needs SIGKILL


class Watchdog:
    def __init__(self, settings: Settings, clock=time.time, idle: IdleMonitor | None = None):
        self.s = settings
        self.idle = idle  # the site's idle policy (runtime/health.py); its drain takes the path below
        self.clock = clock
        self.started = clock()
        self.baseline = settings.reader.read()  # a value left by a previous attempt is not progress
        self.last_value = self.baseline
        self.last_progress = self.started
        self.progressed = False
        self.warned = False
        self.config_reported = False
        self.drain_since: float | None = None
        self.ranks_gone_since: float | None = None  # the peer check (_peer_lost)
        self.ranks_seen = False  # ranks found in /proc (torchrun's carry RANK): only then is "none left" news
        self.launchers: set[int] = set()  # the batch shell's srun processes while those ranks were alive

    @property
    def window(self) -> float:
        return self.s.stall_seconds if self.progressed else self.s.startup_seconds

    def check(self) -> str | None:
        """One check; returns 'done' (drain acknowledged) or 'killed' when the watchdog is finished."""
        now = self.clock()
        value = self.s.reader.read()
        if value is not None and value != self.last_value:
            if self.warned or self.drain_since:
                log(f"progress resumed: {self.s.reader.field_spec} = {value:g}")
                if self.drain_since is None:
                    self._write_state("watching", now)  # status stops showing the warning
            self.last_value, self.last_progress = value, now
            self.progressed, self.warned = True, False
        if self.drain_since is not None:
            return self._while_draining(now)
        if self.idle is not None and self.idle.check(now, self.last_progress, self.progressed,
                                                     self.s.startup_seconds) == "drain":
            log(f"IDLE: {self.idle.reason} (site idle_action: drain, grace {self.idle.policy.grace_seconds:g} s); "
                "asking the training to checkpoint and stop")
            request = {"reason": "idle", "job_id": self.s.job_id, "time": now, "summary": self.idle.reason}
            write_atomic(self.s.run_dir / rundir.DRAIN_REQUEST, json.dumps(request))
            self.drain_since = now
            return None
        if self.last_value is None:
            if now - self.started >= self.s.startup_seconds and not self.config_reported:
                self.config_reported = True
                where = ("the source exists but has no such field" if self.s.reader.source_seen
                         else "the source never appeared")
                log(f"CONFIGURATION PROBLEM: {self.s.reader.describe()} never appeared in "
                    f"{now - self.started:.0f} s ({where}). Set SLURMCTL_WATCHDOG_STEP_FIELD / "
                    f"SLURMCTL_WATCHDOG_SOURCE to what your training writes. Not killing the job for this.")
                self._write_state("config-problem", now)
            return None
        stalled = now - self.last_progress
        if self._peer_lost(now, stalled):
            return None  # the step is ended; keep watching a training the batch script may launch again
        if stalled >= self.window:
            self._start_drain(now, stalled)
        elif stalled >= self.s.check_seconds and not self.warned:
            self.warned = True
            log(f"WARNING: no progress in {self.s.reader.describe()} for {stalled:.1f} s "
                f"(last value {self.last_value:g}); acting after {self.window:g} s")
            self._write_state("warned", now, {"stalled_seconds": round(stalled, 1), "window_seconds": self.window})
        return None

    def _peer_lost(self, now: float, stalled: float) -> bool:
        """The peer check: no rank of this job is alive on this node, yet its srun step still runs. The
        step then waits on another node, whose processes are lost or hung (a node loss leaves srun waiting
        for the dead node's task until SlurmdTimeout, and ranks that survive a lost peer exit on their
        first failed collective). End the step after PEER_LOST_SECONDS instead of the stall window; the
        batch script's probe then tells a lost node from a healthy allocation. Only the step whose ranks
        it saw counts: a relaunched training (another srun of the batch shell) arms it again with its
        own ranks, and the floor keeps it clear of the seconds before they start. Before the floor,
        from one check interval on, only on a second, independent signal: srun reports a probe step's
        launch failed on a node of the allocation (its slurmd does not take it); then the local srun,
        which would wait KillWait for the dead node's task, is ended too."""
        if self.s.target_pids or not self.s.job_id:
            return False
        if rank_pids(self.s):
            self.ranks_seen, self.ranks_gone_since = True, None
            self.launchers = _launchers(self.s)
            return False
        if self.launchers and _launchers(self.s).isdisjoint(self.launchers):
            # the srun whose ranks it saw is gone: a relaunch whose ranks are not there yet (under load
            # its launcher may take longer than the floor to import torch) -- armed again by its ranks
            self.ranks_seen, self.launchers = False, set()
        if not (self.ranks_seen and self.progressed) or stalled < self.s.check_seconds:
            self.ranks_gone_since = None
            return False
        if self.ranks_gone_since is None:
            self.ranks_gone_since = now
            return False
        gone = now - self.ranks_gone_since
        if gone < self.s.check_seconds or not _steps_running(self.s):
            return False
        unreachable = None
        if gone < max(PEER_LOST_SECONDS, self.s.check_seconds):
            unreachable = _allocation_unreachable()
            if unreachable is None:
                return False
        evidence = [f"no rank of job {self.s.job_id} alive here for {gone:.0f} s while its step still runs",
                    f"no progress for {stalled:.0f} s"] + ([f"a probe step could not run on every node: {unreachable}"]
                                                          if unreachable else [])
        log(f"PEER LOST: no rank of job {self.s.job_id} has been alive here for {gone:.0f} s (no progress for "
            f"{stalled:.0f} s) while its step still runs: it waits for another node's processes, lost or hung"
            + (f"; a probe step could not run on every node ({unreachable})" if unreachable else "")
            + "; ending the step")
        scene = capture_scene(self.s, now)
        self._write_state("killed", now, {"scene": str(scene), "evidence": evidence,
                                          "summary": "the ranks here are gone; the step waited for another node"
                                          + (" that does not answer" if unreachable else "")})
        end_step(self.s)
        if unreachable:
            end_launcher(self.s)
        self.ranks_gone_since, self.last_progress, self.progressed, self.warned = None, now, False, False
        self.ranks_seen, self.launchers = False, set()
        return True

    def _start_drain(self, now: float, stalled: float) -> None:
        diagnosis = self.diagnosis(now, stalled)
        log("HUNG: " + diagnosis["summary"] + "\n--- log tail ---\n" + diagnosis["log_tail"] + "\n---")
        self._write_state("drain-requested", now, diagnosis)
        request = {"reason": "watchdog", "job_id": self.s.job_id, "time": now, "summary": diagnosis["summary"]}
        write_atomic(self.s.run_dir / rundir.DRAIN_REQUEST, json.dumps(request))
        log(f"asked the training to drain; ending the step in {self.s.drain_timeout_seconds:.0f} s "
            "unless it acknowledges or moves")
        self.drain_since = now
        if os.environ.get("SLURMCTL_NOTIFY") == "1":  # the run sends messages: `stalled`, as the user, aside
            subprocess.Popen([sys.executable, "-m", "slurmctl.notify", "stalled", "--run-dir", str(self.s.run_dir),
                              "--detail", diagnosis["summary"]], stdin=subprocess.DEVNULL)

    def _while_draining(self, now: float) -> str | None:
        if (self.s.run_dir / rundir.DRAIN_ACK).exists():
            log("training acknowledged the drain; watchdog done")
            self._write_state("drained", now)
            return "done"
        if self.last_progress > self.drain_since:
            return None  # it moves again: give the training its drain
        if now - self.drain_since < self.s.drain_timeout_seconds:
            return None
        scene = capture_scene(self.s, now)
        log(f"no ACK and no progress {self.s.drain_timeout_seconds:.0f} s after the drain request; "
            f"scene captured in {scene}; ending the training step")
        self._write_state("killed", now, {"scene": str(scene)})
        end_step(self.s)
        log(f"training step ended {self.clock() - now:.1f} s after the drain timeout")
        return "killed"

    def diagnosis(self, now: float, stalled: float) -> dict:
        last = self.last_value
        summary = (f"no progress in {self.s.reader.describe()} for {stalled:.1f} s (window "
                   f"{self.window:g} s); last value {last:g} at "
                   f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.last_progress))}")
        tail = "\n".join(tail_text(self.s.log_path, 8192).splitlines()[-20:]) if self.s.log_path else ""
        return {"summary": summary, "field": self.s.reader.field_spec, "source": str(self.s.reader.source),
                "last_value": last, "last_progress_time": self.last_progress, "stalled_seconds": stalled,
                "log_tail": tail, "job_id": self.s.job_id}

    def _write_state(self, state: str, now: float, extra: dict | None = None) -> None:
        """<run dir>/watchdog/state.json: what `status` / `diagnose` show."""
        data = {"state": state, "time": now, "job_id": self.s.job_id, "field": self.s.reader.field_spec,
                "source": str(self.s.reader.source), "last_value": self.last_value, **(extra or {})}
        try:
            path = rundir.watchdog_state_path(self.s.run_dir)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(data, indent=2))
        except OSError as exc:
            log(f"could not write watchdog state: {exc}")

    def run(self) -> int:
        log(f"watching {self.s.reader.describe()} every {self.s.check_seconds:g} s; stall window "
            f"{self.s.stall_seconds:g} s, start-up {self.s.startup_seconds:g} s, drain timeout "
            f"{self.s.drain_timeout_seconds:g} s")
        while True:
            time.sleep(min(self.s.check_seconds, 5.0) if self.drain_since else self.s.check_seconds)
            if self.s.parent_pid and not pid_alive(self.s.parent_pid):
                return EXIT_OK
            outcome = self.check()
            if outcome == "done":
                return EXIT_OK
            if outcome == "killed":
                return EXIT_KILLED


def rank_pids(settings: Settings) -> list[int]:
    """Standalone: the target pids; in a job: this job's processes that carry a RANK (torchrun workers)."""
    if settings.target_pids:
        return list(settings.target_pids)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={settings.job_id}".encode() in env and any(e.startswith(b"RANK=") for e in env):
            found.append(int(name))
    return found


def _catches_sigusr2(pid: int) -> bool:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & SIGUSR2_BIT)
    except (OSError, ValueError, IndexError):
        pass
    return False


def capture_scene(settings: Settings, now: float) -> Path:
    """Stacks of every rank, log tails, nvidia-smi -> <run dir>/watchdog/<job>-<time>/."""
    scene = rundir.watchdog_scene_dir(settings.run_dir, settings.job_id, now)
    scene.mkdir(parents=True, exist_ok=True)
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    stacks = []
    for pid in rank_pids(settings):
        text = ""
        if py_spy:
            try:
                proc = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
                text = proc.stdout if proc.returncode == 0 else f"(py-spy failed: {proc.stderr.strip()[:300]})\n"
            except subprocess.TimeoutExpired:
                text = "(py-spy timed out)\n"
        if not text or text.startswith("(py-spy"):
            if _catches_sigusr2(pid):
                os.kill(pid, signal.SIGUSR2)  # faulthandler.register(SIGUSR2): stacks go to the job log
                text += "faulthandler dump requested with SIGUSR2: see the job log\n"
            else:
                text += "no stack: py-spy unavailable and the process registered no SIGUSR2 faulthandler\n"
        stacks.append(f"=== pid {pid} ===\n{text}")
    (scene / rundir.SCENE_STACKS).write_text("\n".join(stacks) or "no rank processes found\n")
    if settings.log_path:
        (scene / rundir.SCENE_LOG_TAIL).write_text(tail_text(settings.log_path))
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout
        except subprocess.TimeoutExpired:
            out = "nvidia-smi hung for 30 s\n"
        (scene / rundir.SCENE_GPUS).write_text(out)
    time.sleep(1.0)  # let a faulthandler dump reach the log before the step dies
    return scene


def _steps_running(settings: Settings) -> bool:
    """This job still has an srun step (the training's, or the one relaunched in its place)."""
    from slurmctl.slurm.client import (
        SlurmClient,  # why: only inside a Slurm job; the standalone watchdog never asks Slurm
    )

    try:
        return bool(SlurmClient().job_steps(int(settings.job_id)))
    except (SlurmctlError, ValueError):
        return False


def _allocation_unreachable() -> str | None:
    """srun's words when a probe step's launch failed on a node of this job's allocation (its slurmd
    did not take it); None when it ran everywhere, or failed otherwise (a step Slurm would not create,
    a probe that timed out under load: they say nothing about a node)."""
    from slurmctl.slurm.client import SlurmClient  # why: as in _steps_running

    try:
        nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or 1)
    except ValueError:
        nodes = 1
    client = SlurmClient()
    failure = client.allocation_probe_failure(nodes)
    return failure if failure is not None and client.nodes_not_launched(failure) else None


def _launchers(settings: Settings) -> set[int]:
    """The srun processes the batch shell (--parent-pid) started (the training's step)."""
    if not settings.parent_pid:
        return set()
    found = set()
    for pid in child_pids(settings.parent_pid):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "srun":
                found.add(pid)
        except OSError:
            pass  # it ended meanwhile
    return found


def end_launcher(settings: Settings) -> None:
    """SIGKILL the srun launchers the batch shell (--parent-pid) started: once a node is lost, srun
    waits KillWait (+2 s) for that node's task after the step was cancelled, and the batch script
    with it. Only this job's own srun processes, children of its own batch shell."""
    for pid in _launchers(settings):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass  # it ended meanwhile


def end_step(settings: Settings) -> None:
    """Standalone: SIGTERM then SIGKILL the target pids. In a job: scancel every srun step."""
    if settings.target_pids:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in settings.target_pids:
                try:
                    os.kill(pid, signal.SIGCONT)  # as Slurm: a stopped process (e.g. left by a debugger) gets TERM
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + settings.kill_grace_seconds
            while time.monotonic() < deadline and any(pid_alive(p) for p in settings.target_pids):
                time.sleep(0.1)
        return
    from slurmctl.slurm.client import SlurmClient, job_ref_from_env  # why: as in _steps_running

    client = SlurmClient()
    # this job's own steps: a sweep element's array id may name every task of the array
    own = job_ref_from_env()
    for step in client.job_steps(own if isinstance(own, str) else int(settings.job_id)):
        client.cancel_step(step)


def _env_default(name: str, fallback: str) -> str:
    return os.environ.get(f"SLURMCTL_WATCHDOG_{name}") or fallback


def _seconds(text: str) -> float:
    return parse_seconds(text)  # a bare number is minutes, as everywhere in slurmctl


def parse_args(argv: list[str] | None) -> Settings:
    p = argparse.ArgumentParser(prog="python -m slurmctl.runtime.watchdog", description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", default=os.environ.get("SLURMCTL_RUN_DIR"),
                   required=not os.environ.get("SLURMCTL_RUN_DIR"))
    p.add_argument("--step-field", default=_env_default("STEP_FIELD", "step"),
                   help="key path (step, global_step, iteration, a.b) or regex:<pattern with one group>")
    p.add_argument("--source", default=_env_default("SOURCE", ""),
                   help="file to read; default heartbeat.json (key path) or the job log (regex)")
    p.add_argument("--check", default=_env_default("CHECK", "45s"), help="time between checks (default 45s)")
    p.add_argument("--stall", default=_env_default("STALL", "15m"), help="no-progress window (default 15m)")
    p.add_argument("--startup", default=_env_default("STARTUP", "30m"), help="window before the first progress (30m)")
    p.add_argument("--drain-timeout", default=_env_default("DRAIN_TIMEOUT", "5m"), help="wait for the ACK (5m)")
    p.add_argument("--job-id", default=os.environ.get("SLURM_JOB_ID"))
    p.add_argument("--log", default=None, help="job log to tail; default <run dir>/logs/<job id>.out")
    p.add_argument("--pid", type=int, action="append", default=[],
                   help="standalone: end this pid instead of srun steps")
    p.add_argument("--kill-grace", type=float, default=10.0, help="standalone: SIGTERM -> SIGKILL delay (10 s)")
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process (the batch shell) is gone")
    a = p.parse_args(argv)
    run_dir = Path(a.run_dir)
    log_path = Path(a.log) if a.log else (
        rundir.Run(run_dir.name, run_dir).log_path(a.job_id) if a.job_id else None)
    if a.source:
        source = Path(a.source)
        source = source if source.is_absolute() else run_dir / source
    else:
        source = log_path if a.step_field.startswith("regex:") and log_path else run_dir / rundir.HEARTBEAT
    if a.step_field.startswith("regex:"):
        re.compile(a.step_field.removeprefix("regex:"))  # fail at start, not at the first check
    if not a.pid and not a.job_id:
        p.error("give --job-id (or run inside a Slurm job) or --pid: the watchdog must know what to end")
    return Settings(run_dir=run_dir, reader=StepReader(a.step_field, source), check_seconds=_seconds(a.check),
                    stall_seconds=_seconds(a.stall), startup_seconds=_seconds(a.startup),
                    drain_timeout_seconds=_seconds(a.drain_timeout), job_id=a.job_id, log_path=log_path,
                    target_pids=a.pid, parent_pid=a.parent_pid, kill_grace_seconds=a.kill_grace)


def main(argv: list[str] | None = None) -> int:
    try:
        settings = parse_args(argv)
    except (re.error, ValueError) as exc:
        print(f"slurmctl watchdog: bad setting: {exc}; watchdog not started", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_OK))
    policy, problem = IdlePolicy.from_site()
    log(problem or f"idle policy: {policy.action} after {policy.grace_seconds:g} s without a step or GPU work")
    return Watchdog(settings, idle=IdleMonitor(policy, settings.run_dir, settings.job_id)).run()


if __name__ == "__main__":
    sys.exit(main())
