"""Jobs the platform did not submit (plain `sbatch`): status, log and diagnosis by Slurm job id.

A numeric reference is a Slurm job id. It is one of the caller's runs when its comment names a run
the caller owns (then the run's own story is told), else a plain job: what Slurm says of it, its
output file and the diagnosis of that file. Only the caller's own jobs are answered for
(slurmctl.slurm.owned decides on the uid Slurm records).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurmctl.durations import human_duration
from slurmctl.errors import RunNotFound, RunNotOwned, SlurmctlError
from slurmctl.observe.adopted import script_advice
from slurmctl.observe.explain import explain_job_reason, explain_state, reason_now
from slurmctl.observe.status import job_cost
from slurmctl.rundir import Run, RunRegistry, is_run_id, run_id_from_comment
from slurmctl.slurm.client import Job, SlurmClient
from slurmctl.slurm.owned import StepOutcome, failed_steps, failed_steps_words, owned_job

_JOB_REF_RE = re.compile(r"\d{1,12}")
_ARRAY_TASK_RE = re.compile(r"\d{1,12}_\d{1,9}")
FAILED_STATES = {"FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "TIMEOUT", "PREEMPTED", "DEADLINE"}


@dataclass
class PlainJob:
    """One of the caller's Slurm jobs that is no run of the platform."""

    job_id: int
    job: Job | None  # Slurm's view now (squeue, else sacct)
    log_path: Path | None  # its output file, when it is known
    work_dir: str = ""
    err_path: Path | None = None  # its --error file, when apart from the output
    missing: str = ""  # why no output file is given (not started), or why the one given is in doubt
    failed_steps: list[StepOutcome] = field(default_factory=list)  # of a job Slurm recorded COMPLETED
    whole_array: bool = False  # named by its array's id alone: the whole array is meant (`cost`)


@dataclass
class PlainJobStatus:
    job_id: int
    name: str
    state: str
    phase: str
    headline: str
    action: str
    kind: str = "sbatch"
    partition: str = ""
    nodes: str = ""
    num_nodes: int = 0
    gpus: int = 0
    cpus: int = 0
    cost_usd: float | None = None  # what Slurm allocated (TRES) so far, at the site's prices
    elapsed_seconds: int | None = None
    time_limit_seconds: int | None = None
    exit_code: str = ""
    reason: str = ""
    log_path: str | None = None
    error_path: str | None = None  # its --error file, when apart from the output
    diagnosis: dict | None = None
    details: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def resolve(ref: str, registry: RunRegistry, client: SlurmClient) -> Run | PlainJob:
    """RUN as the commands take it: a run (id, name, path) or, for a number, one of the caller's Slurm
    jobs (the run it is an attempt of, when it is one). A number Slurm does not know is looked up as
    a run name last."""
    named_task = bool(_ARRAY_TASK_RE.fullmatch(ref))
    if named_task:
        ref = _array_task_job_id(client, ref) or ref
    if not _JOB_REF_RE.fullmatch(ref):
        return registry.get(ref)
    job_id = int(ref)
    try:
        job = owned_job(client, job_id, registry.uid)
    except RunNotFound:
        return registry.get(ref)  # a run named with digits only
    run_id = run_id_from_comment(job.comment) if job is not None else None
    if run_id and is_run_id(run_id):
        try:
            return registry.get(run_id)
        except (RunNotFound, RunNotOwned):
            pass  # its comment names no run of the caller's: a plain job with a run-like comment
    files = _output_file(client, job_id, job)
    # a COMPLETED job whose srun step failed (the batch script's exit status hid it) did not succeed
    steps = failed_steps(client, job_id) if job is not None and job.state == "COMPLETED" else []
    whole_array = not named_task and job is not None and job.array_ref.startswith(f"{job_id}_")
    return PlainJob(job_id, job, files.out, files.work_dir, files.err, files.missing, steps, whole_array)


def _array_task_job_id(client: SlurmClient, ref: str) -> str | None:
    """The job id of array task `ref` ('4341_2', as squeue and sacct name it): its own id once it
    started, the array's while it waits; None when Slurm knows no such task (whose it is is decided
    later, on that id)."""
    result = client._run(["squeue", "-h", "-t", "all", "-j", ref, "-o", "%A"], check=False)
    found = result.stdout.split() if result.returncode == 0 else []
    if not found:
        result = client._run(["sacct", "-n", "-P", "-X", "-j", ref, "-o", "JobIDRaw"], check=False)
        found = result.stdout.split() if result.returncode == 0 else []
    return found[-1] if found and found[-1].isdigit() else None


@dataclass
class OutputFiles:
    """Where a job writes: its output file, its error file when it names one apart, and why a path is
    not given (the job has not started, or Slurm no longer says and the caller's script cannot tell)."""

    out: Path | None
    err: Path | None = None
    work_dir: str = ""
    missing: str = ""


def _output_file(client: SlurmClient, job_id: int, job: Job | None) -> OutputFiles:
    """Where the job writes: its StdOut/StdErr while the controller knows the job (the record owned_job
    read); once it left (MinJobAge), what the user's sbatch command line recorded in accounting said,
    else the #SBATCH lines of the script it names; a job not started yet has no file."""
    if job is not None and job.state == "PENDING" and not job.restarts and job.source == "squeue":
        return OutputFiles(None, None, job.work_dir, f"job {job_id} has not started yet: it has no output "
                           "file until it runs.")
    if job is not None and job.std_out:
        out = Path(_expand(job.std_out, job_id, job))
        err = Path(_expand(job.std_err, job_id, job)) if job.std_err else None
        return OutputFiles(out, err if err != out else None, job.work_dir)
    if job is not None and job.source == "sacct" and job.work_dir.startswith("/"):
        return _files_from_submit_line(job_id, job)
    # the newest job of that id that is the caller's (ids restart when a cluster is rebuilt)
    result = client._run(["sacct", "-n", "-P", "-X", "--duplicates", "-j", str(job_id), "-o",
                          "JobIDRaw,UID,Submit,WorkDir"], check=False)
    rows = [line.split("|", 3) for line in result.stdout.splitlines()]
    mine = [r for r in rows if len(r) == 4 and r[0] == str(job_id) and r[1] == str(os.geteuid())
            and r[3].startswith("/")]
    if mine:
        work_dir = max(mine, key=lambda r: r[2])[3]
        return OutputFiles(Path(work_dir) / f"slurm-{job_id}.out", None, work_dir)
    return OutputFiles(None, missing=f"Slurm no longer says where job {job_id} wrote its output.")


def _files_from_submit_line(job_id: int, job: Job) -> OutputFiles:
    """The output and error files of an ended job the controller forgot, as sbatch chose them: -o/-e on
    the command line accounting recorded (SubmitLine), else the #SBATCH lines of the script named
    there (relative to the work dir it was submitted from), else Slurm's default. Read as the caller,
    from the caller's own files; the script is read as it is now (sbatch kept no copy)."""
    from slurmctl.submit.adopt.script import FLAGS, SHORT, parse_script  # why: only a job the controller forgot

    work_dir = Path(job.work_dir)
    default = _DEFAULT_ARRAY_OUTPUT if job.array_task else _DEFAULT_OUTPUT
    try:
        words = shlex.split(job.submit_line)
    except ValueError:
        words = []
    if not words or Path(words[0]).name != "sbatch":
        return OutputFiles(None, None, job.work_dir, f"Slurm no longer knows where job {job_id} wrote its output, "
                           "and accounting recorded no sbatch command line for it.")
    given, script_word = _sbatch_options(words[1:], SHORT, FLAGS)
    output, error = given.get("output"), given.get("error")
    if "wrap" not in given and script_word is not None and (output is None or error is None):
        script_path = Path(script_word)
        if not script_path.is_absolute():
            if "chdir" in given:  # the script is relative to where sbatch ran, which accounting did not keep
                return _from_patterns(job_id, job, output or default, error, "" if output else
                                      f"job {job_id}'s script {script_word} was named relative to a directory "
                                      "accounting did not keep (--chdir)")
            script_path = work_dir / script_path
        try:
            if not script_path.is_file():  # gone, or no regular file (a FIFO would block the read)
                raise SlurmctlError(f"{script_path} is no file")
            script = parse_script(script_path)
        except SlurmctlError:
            return _from_patterns(job_id, job, output or default, error,
                                  "" if output else f"its script {script_path} can no longer be read")
        output = output or script.value("output")
        error = error or script.value("error")
    return _from_patterns(job_id, job, output or default, error)


def _sbatch_options(words: list[str], short: dict, flags: set) -> tuple[dict[str, str], str | None]:
    """sbatch's options on its command line (long names, the last one given wins) and the script word
    after them (None with --wrap or none)."""
    given: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word == "-":
            return given, word
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
        else:
            name, eq, value = short.get(word[1:2], word[1:2]), "=" if word[2:] else "", word[2:]
        if not eq and name not in flags and i + 1 < len(words):
            i, value = i + 1, words[i + 1]
        given[{"workdir": "chdir"}.get(name, name)] = value
        i += 1
    return given, None


def _from_patterns(job_id: int, job: Job, output: str, error: str | None, doubt: str = "") -> OutputFiles:
    work_dir = Path(job.work_dir)
    out = work_dir / _expand(output, job_id, job)
    err = work_dir / _expand(error, job_id, job) if error else None
    if doubt:  # said plainly: the default is Slurm's guess, not what the job was told
        missing = (f"Slurm no longer knows where job {job_id} wrote its output and {doubt}: {out} is Slurm's "
                   "default, which the script may have changed.")
        return OutputFiles(out, err if err != out else None, job.work_dir, missing)
    return OutputFiles(out, err if err != out else None, job.work_dir)


# sbatch's output file when the script names none: an array task's carries the array's id and its index
_DEFAULT_OUTPUT = "slurm-%j.out"
_DEFAULT_ARRAY_OUTPUT = "slurm-%A_%a.out"


def _expand(pattern: str, job_id: int, job: Job | None) -> str:
    """sbatch's filename patterns as Slurm fills them for the batch script's output (man sbatch,
    "filename pattern"): %j the job's own id, %A/%a the array's id and the task's index (for a job
    that is no array task: its id and 4294967294), %x name, %u user, %N the batch host, %n/%t 0
    (node and task of the batch step), %s 'batch', %% a percent sign."""
    array = job.array_task if job is not None else None
    if "%" not in pattern:
        return pattern
    first_node = re.match(r"([^\[,]*)(?:\[(\d+))?", job.nodelist) if job is not None else None
    host = (job.batch_host or "".join(g or "" for g in first_node.groups())) if job is not None else ""
    values = {"j": str(job_id), "A": array[0] if array else str(job_id), "a": array[1] if array else "4294967294",
              "x": job.name if job else "", "u": job.user if job else "", "N": host, "n": "0", "t": "0",
              "s": "batch", "%": "%"}
    return re.sub(r"%(\d*)([jAaxuNnts%])", lambda m: values[m.group(2)].zfill(int(m.group(1) or 0)), pattern)


def _phase(job: Job | None) -> str:
    if job is None:
        return "unknown"
    state = job.state
    if state in {"PENDING", "REQUEUED"}:
        return "held" if job.held else ("requeued" if job.restarts else "queued")
    if state in {"REQUEUE_HOLD", "SPECIAL_EXIT"}:
        return "held"
    if state in {"RUNNING", "CONFIGURING", "SIGNALING"}:
        return "running"
    return {"COMPLETING": "finishing", "COMPLETED": "finished", "CANCELLED": "cancelled",
            "TIMEOUT": "stopped", "PREEMPTED": "stopped", "NODE_FAIL": "stopped"}.get(state, "failed")


# Advice written for runs names commands that do not exist for a plain job: it has one output file (no
# per-rank logs: `logs --rank`), and `logs -f` follows a run's log. The words that work for it instead.
_RUN_ONLY_COMMANDS = (
    (re.compile(r"`slurmctl logs RUN --rank (?:N|all)`( shows other ranks)?"), "rank"),
    (re.compile(r"`slurmctl logs RUN -f`"), "follow"),
)


def in_job_words(text: str, job_id: int, log_path: Path | None) -> str:
    """`text` (advice for runs) for plain job `job_id`: commands that take a run reworded to ones that
    work for it (its id for RUN/JOBID; its whole output file where a run would show a rank)."""
    where = f" ({log_path})" if log_path else ""
    for pattern, kind in _RUN_ONLY_COMMANDS:
        if kind == "rank":
            words = f"`slurmctl logs {job_id} -n 0` shows its whole output{where}, every rank's lines in one file"
        else:
            words = f"`tail -f {shlex.quote(str(log_path))}`" if log_path else f"`slurmctl logs {job_id}`"
        text = pattern.sub(words, text)
    return re.sub(r"\b(?:JOBID|RUN)\b", str(job_id), text)


def _job_advice(status: PlainJobStatus, job_id: int, log_path: Path | None) -> None:
    status.headline = in_job_words(status.headline, job_id, log_path)
    status.action = in_job_words(status.action, job_id, log_path)
    status.details = [in_job_words(d, job_id, log_path) for d in status.details]
    if status.diagnosis:
        status.diagnosis = {**status.diagnosis, **{k: in_job_words(status.diagnosis[k], job_id, log_path)
                                                   for k in ("hint", "summary")
                                                   if isinstance(status.diagnosis.get(k), str)}}


# What to do after a plain sbatch job ended, where the state's own advice is a run's (run.yaml, `slurmctl submit`,
# a checkpoint slurmctl keeps): a plain job has none of those.
_PLAIN_ENDED_ACTIONS = {
    "CANCELLED": "Submit it again with `sbatch` (it starts from scratch unless your script resumes itself); "
                 "`slurmctl adopt SCRIPT` gives the same script drain on cancel, resume and cost per run.",
    "TIMEOUT": "Submit it again with a longer `--time`, or let the script resume from its own checkpoint; "
               "`slurmctl adopt SCRIPT` drains it to a checkpoint before the limit.",
    "PREEMPTED": "Submit it again, or make it requeue itself (`--requeue`); `slurmctl adopt SCRIPT` requeues and "
                 "resumes it from its own checkpoint.",
    "NODE_FAIL": "Submit it again (Slurm marks the failed node DOWN); tell the platform team the node if it repeats.",
}


def plain_job_status(plain: PlainJob, site=None) -> PlainJobStatus:
    job = plain.job
    if job is None:
        return PlainJobStatus(plain.job_id, "", "UNKNOWN", "unknown",
                              f"Slurm no longer knows job {plain.job_id}.", "Nothing to do.")
    expl = explain_state(job.state)
    headline, action = expl.headline, _PLAIN_ENDED_ACTIONS.get(job.state, expl.action)
    reason = explain_job_reason(job) if job.state in {"PENDING", "REQUEUE_HOLD", "SPECIAL_EXIT"} else None
    if reason:
        headline, action = f"Waiting: {reason.headline}", reason.action
    # RUN and JOBID in the advice become the job id at the end (_job_advice)
    status = PlainJobStatus(
        plain.job_id, job.name, job.state, _phase(job), headline, action,
        partition=job.partition, nodes=job.nodelist, num_nodes=job.num_nodes, gpus=job.gpus, cpus=job.cpus,
        cost_usd=job_cost(job, site, job.elapsed_seconds),
        elapsed_seconds=job.elapsed_seconds, time_limit_seconds=job.time_limit_seconds, exit_code=job.exit_code,
        reason=reason_now(job), log_path=str(plain.log_path) if plain.log_path else None,
        error_path=str(plain.err_path) if plain.err_path else None)
    if job.state == "RUNNING":
        status.details.append(f"Running on {job.nodelist} ({job.partition}) for "
                              f"{human_duration(job.elapsed_seconds)} of {human_duration(job.time_limit_seconds)}.")
    elif not job.active and job.elapsed_seconds is not None:
        status.details.append(f"Ran for {human_duration(job.elapsed_seconds)} on {job.nodelist or 'no nodes'}.")
    if plain.failed_steps:
        status.phase, status.headline = "failed", step_failure(plain)
        status.action = "Read the diagnosis above and `slurmctl logs JOBID`; fix the step, then submit again."
    if plain.missing:
        status.details.append(plain.missing)
    if (job.state in FAILED_STATES or plain.failed_steps) and _readable_logs(plain):
        status.diagnosis = _diagnose_logs(plain).to_dict()
    status.details.append("Submitted with plain sbatch: no heartbeat, checkpoints or drain. "
                          "`slurmctl adopt SCRIPT` runs the same script with them.")
    script_advice(status, "`sbatch SCRIPT` (or `slurmctl adopt SCRIPT`) again")
    _job_advice(status, plain.job_id, plain.log_path)
    return status


def step_failure(plain: PlainJob) -> str:
    """The headline of a job Slurm recorded COMPLETED whose srun step failed."""
    return failed_steps_words(plain.failed_steps, plain.job.exit_code if plain.job else "")


def plain_job_diagnosis(plain: PlainJob):
    """diagnose's answer for a plain job: its output and error files, with Slurm's state and exit code
    (a failed step's, when Slurm recorded the job COMPLETED)."""
    from slurmctl.observe.diagnose import Diagnosis  # why: as in plain_job_status

    job = plain.job
    if plain.log_path is None and job is not None and job.state == "PENDING" and not job.restarts:
        return Diagnosis("not_started", f"Job {plain.job_id} has not started yet: nothing has failed, and there "
                         "is no output to read.", [f"Slurm state: PENDING ({job.reason or 'waiting'})"],
                         f"`slurmctl status {plain.job_id}` says why it waits.", source="slurm")
    if plain.log_path is None:
        raise RunNotFound(plain.missing or f"Slurm no longer says where job {plain.job_id} wrote its output.",
                          "Give the file: `slurmctl diagnose --log PATH`.")
    found = _diagnose_logs(plain)
    found.hint = in_job_words(found.hint, plain.job_id, plain.log_path)
    found.summary = in_job_words(found.summary, plain.job_id, plain.log_path)
    return found


def _diagnose_logs(plain: PlainJob):
    """The diagnosis of the job's output file and its --error file (read together: a traceback is
    often only in the latter); a failed step stands for the job Slurm recorded COMPLETED."""
    from slurmctl.observe.diagnose import diagnose_text  # why: a failed job's only (the rules cost ~30 ms)
    from slurmctl.observe.log_reading import read_tail  # why: as diagnose_text above
    from slurmctl.observe.run_diagnosis import with_failed_steps  # why: as diagnose_text above

    job = plain.job
    state, exit_code = (job.state, job.exit_code) if job else ("", "")
    if plain.failed_steps:
        state, exit_code = "FAILED", plain.failed_steps[0].exit_code
    # the caller's own files, named in their own job: read as they would with tail (a FIFO is refused)
    text = "\n".join(read_tail(p, nofollow=False) for p in (plain.log_path, plain.err_path)
                     if p is not None and _readable(p))
    found = diagnose_text(text, state, exit_code)
    if plain.failed_steps:
        found = with_failed_steps(found, plain.failed_steps, job.exit_code if job else "")
    if plain.missing and plain.log_path is not None:
        found.summary = f"{found.summary.rstrip()} ({plain.missing})"
    return found


def _readable(path: Path) -> bool:
    return os.path.isfile(path) and os.access(path, os.R_OK)


def _readable_logs(plain: PlainJob) -> bool:
    return any(p is not None and _readable(p) for p in (plain.log_path, plain.err_path))
