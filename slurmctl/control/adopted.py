"""cancel and resume for adopted programs (`slurmctl adopt`): they have no heartbeat and no drain
acknowledgement of ours, so the program's own signal and its own checkpoints stand in for them
(slurmctl.runtime.adapters): cancel sends the signal the program saves on and waits for a new
complete checkpoint of its own; resume submits the same job again, under the same run id, and the
program resumes itself from its newest checkpoint.
"""

from __future__ import annotations

import time

from slurmctl.control.cancel import CancelResult, ProgressFn
from slurmctl.control.resume import ConfirmFn, ResumeResult, confirm_cost
from slurmctl.errors import ResumeError, RunNotFound, SlurmCommandError, SlurmctlError
from slurmctl.fsutil import tail_text_lines
from slurmctl.rundir import ADOPTED_SCRIPT, JOB_SCRIPT, Run
from slurmctl.runtime import write_drain_request
from slurmctl.runtime.adapters import ProgramCheckpoint, Resilience
from slurmctl.slurm.client import ACTIVE_STATES, SlurmClient

LOG_TAIL_BYTES = 256 * 1024  # the program's last logged step is near the end of its log


def is_adopted(run: Run) -> bool:
    return isinstance(run.meta.get("adopted"), dict)


def resilience_of(run: Run) -> Resilience | None:
    return Resilience.from_dict((run.meta.get("adopted") or {}).get("resilience"))


def _live_state(client: SlurmClient, job_id: int) -> str | None:
    """The job's state while the controller has it (`scontrol show job`); None once it is gone, which
    an active job never is. Accounting is not asked: its newest row of a job cancelled while it
    waited after a requeue still says REQUEUED."""
    info = client.job_info(job_id)
    return info.state if info is not None else None


def _active(state: str | None) -> bool:
    return state is not None and state in ACTIVE_STATES


def _newer(ck: ProgramCheckpoint | None, than: ProgramCheckpoint | None) -> bool:
    return ck is not None and (than is None or ck.mtime > than.mtime or ck.path != than.path)


def cancel_adopted(run: Run, client: SlurmClient, *, now: bool = False, drain_timeout: float = 300.0,
                   wait_seconds: float = 60.0, poll: float = 0.5, progress: ProgressFn | None = None,
                   at_next_checkpoint: bool = False) -> CancelResult:
    """`at_next_checkpoint`: send no signal; the program's next checkpoint on its own schedule (litgpt's
    `save_interval`) is the drain's acknowledgement, and the job is stopped right after it."""
    job_id = run.latest_job_id()
    if job_id is None:
        raise RunNotFound(f"run {run.run_id} was never submitted; nothing to cancel.", "`slurmctl ls` lists your runs.")
    started = time.monotonic()
    state = _live_state(client, job_id)
    if not _active(state):
        return CancelResult(run.run_id, job_id, state or "ENDED", True, 0.0)
    result = CancelResult(run.run_id, job_id, "", False, 0.0)
    block = resilience_of(run)
    if state == "RUNNING" and not now:
        if block is None or not (block.signal or at_next_checkpoint):
            latest = block.restored() if block else None
            kept = f"its next start restores {latest.path} (step {latest.step})" if latest else \
                "it has no checkpoint slurmctl can see that its next start would restore"
            raise SlurmctlError(
                f"run {run.run_id} runs an adopted program that cannot be asked to save: it sends no heartbeat and "
                f"slurmctl knows no signal it saves on; {kept}. Nothing was cancelled.",
                f"Stop it right after its next checkpoint of its own with `slurmctl cancel {run.run_id} "
                f"--at-next-checkpoint`, or now with `slurmctl cancel {run.run_id} --now` (work since that "
                "checkpoint is lost), or adopt it again with --framework/--signal if the program saves on a signal."
                if block else
                f"Stop it now with `slurmctl cancel {run.run_id} --now` (work since that checkpoint is lost), "
                "or adopt it again with --framework/--signal if the program saves on a signal.")
        _drain(run, client, job_id, block, result, drain_timeout, poll, progress,
               signal=None if at_next_checkpoint else block.signal)
    elif now:
        result.drain = "skipped"
    if _active(_live_state(client, job_id)):
        client.cancel(job_id)
    run.record("cancel-requested", job_id=job_id, drain=result.drain, ack_step=result.ack_step)
    requeued_cancelled = False
    while time.monotonic() - started < drain_timeout + wait_seconds:
        state = _live_state(client, job_id)
        if not _active(state):
            # the user asked for this end: a program killed by the signal it was sent (FAILED) or one
            # that saved and exited (COMPLETED) was cancelled all the same; Slurm's word is kept beside it
            result.final_state = "CANCELLED"
            if state not in {None, "CANCELLED"}:
                result.slurm_state = state
            result.verified, result.seconds = True, time.monotonic() - started
            _steps_lost(run, job_id, block, result)
            if result.drain == "unacknowledged":
                latest = block.restored() if block else None  # what the next start restores, as status says
                sent = block.signal if block and not at_next_checkpoint else None
                result.note = ((f"the program wrote no new checkpoint after {sent}" if sent else
                                f"the program wrote no new checkpoint of its own within {drain_timeout:.0f} s")
                               + (f" ({_why_no_save(block, state, result.last_step)})" if sent and state
                                  not in {None, "CANCELLED"} else "")
                               + (f"; its next start restores {latest.path} (step {latest.step})" if latest else
                                  "; its next start restores no checkpoint of its own"))
            return result
        if state in {"PENDING", "REQUEUED", "REQUEUE_HOLD"} and not requeued_cancelled:
            # the program requeued itself after its save (Lightning does) while the first scancel
            # met the ending attempt: the requeued job is cancelled as soon as it waits
            client.cancel(job_id)
            requeued_cancelled = True
        time.sleep(poll)
    raise SlurmctlError(f"job {job_id} is still {state} {wait_seconds:.0f} s after scancel.",
                        "Check again with `slurmctl status`, then tell the platform team.")


def _why_no_save(block: Resilience | None, state: str, last_step: int | None) -> str:
    """Why a program sent its save signal ended without a new checkpoint: a framework that saves on
    that signal (Lightning) does so only once its training runs, so it died of it while starting."""
    if block is not None and block.signal and block.signal == block.adapter.SIGNAL:
        when = "while it was still starting (no step logged yet)" if last_step is None else "before it saved"
        return (f"it ended {state.lower()}: {block.framework} saves on {block.signal} only once its training loop "
                f"has installed its handler, and it died of the signal {when}")
    return f"it ended {state.lower()}: it does not save on that signal"


def _steps_lost(run: Run, job_id: int, block: Resilience | None, result: CancelResult) -> None:
    """The steps the cancel cost: the last step the program logged in this attempt (its adapter's step
    pattern) past the step of the checkpoint its next start restores (all of them without one)."""
    if block is None:
        return
    try:
        lines = tail_text_lines(run.log_path(job_id), 0, LOG_TAIL_BYTES, nofollow=True)
    except OSError:
        return
    heads = [i for i, line in enumerate(lines) if line.startswith("slurmctl: attempt ")]
    result.last_step = block.last_step(lines[heads[-1]:] if heads else lines)
    kept = block.restored()
    result.kept_step = kept.step if kept is not None else None
    if result.last_step is not None and (kept is None or kept.step is not None):
        result.steps_lost = max(0, result.last_step - kept.step) if kept is not None else result.last_step + 1
    run.record("cancel-result", job_id=job_id, last_step=result.last_step, checkpoint_step=result.kept_step,
               steps_lost=result.steps_lost)


def _drain(run: Run, client: SlurmClient, job_id: int, block: Resilience, result: CancelResult, timeout: float,
           poll: float, progress: ProgressFn | None, signal: str | None) -> None:
    """The program's own `signal` (none: it saves on its own schedule), then its own new complete
    checkpoint as the acknowledgement."""
    before = block.latest()
    info = client.job_info(job_id)
    restarts = info.restarts if info is not None else 0
    # A user's cancel never restarts the job: the script's own USR1 trap (`scontrol requeue`) or the
    # framework's (Lightning's) would requeue it on this signal; with Requeue=0 Slurm refuses that.
    try:
        client.update_job(job_id, Requeue=0)
    except SlurmCommandError as exc:
        run.record("requeue-not-disabled", job_id=job_id, error=str(exc)[:200])
    # the batch shell's `attempt end` reads it: the attempt ends `cancelled`, however the program ends
    write_drain_request(run.path, "cancel", job_id=str(job_id))
    run.record("drain-requested", job_id=job_id, reason="cancel", program_signal=signal,
               signal_to=block.signal_to if signal else None)
    if signal:
        # read again: a checkpoint the program wrote on its own schedule while the commands above ran (seconds on
        # a loaded controller) is no answer to the signal; without one, any save after the request is the answer
        before = block.latest()
        client.cancel(job_id, signal=signal, batch_only=block.signal_to == "batch")
    began = time.monotonic()
    while (waited := time.monotonic() - began) < timeout:
        latest = block.latest()
        if _newer(latest, before):
            result.drain, result.drain_seconds = "acknowledged", waited
            # named: what the program's next start restores (Lightning's ckpt_path="last" skips the
            # hpc_ckpt it just saved), as status and resume name it
            restored = block.restored()
            named = restored or latest
            result.ack_step, result.ack_checkpoint = named.step, str(named.path)
            if restored is None or restored.path != latest.path:
                result.note = (f"it saved {latest.path} (step {latest.step}), but its next start restores "
                               f"{f'{restored.path} (step {restored.step})' if restored else 'no checkpoint'} "
                               f"({block.framework}'s rule for this program: {block.restore})")
            run.record("drain-acknowledged", job_id=job_id, step=latest.step, checkpoint=str(latest.path),
                       by="the program's own checkpoint", restores=str(named.path) if restored else None)
            return
        info = client.job_info(job_id)
        if info is None or info.state != "RUNNING" or info.restarts != restarts:
            break  # ended, or requeued all the same: a checkpoint of a later attempt is no acknowledgement
        if progress:
            progress(waited, None)
        time.sleep(poll)
    result.drain, result.drain_seconds = "unacknowledged", time.monotonic() - began
    run.record("drain-unacknowledged", job_id=job_id, waited_seconds=round(result.drain_seconds, 1))


def resume_adopted(run: Run, client: SlurmClient, site=None, *, yes: bool = False,
                   confirm: ConfirmFn | None = None) -> ResumeResult:
    """The same job again under the same run id; the program restores its newest checkpoint itself.
    `site`: its worst case is confirmed as adopt confirmed it (none: not asked)."""
    from slurmctl.submit.adopt.script import parse_script  # why: only a resume of an adopted run reads its script

    job_id = run.latest_job_id()
    state = _live_state(client, job_id) if job_id is not None else None
    if _active(state):
        raise ResumeError(f"run {run.run_id} is still {state.lower()} (job {job_id}); it cannot be resumed now.",
                          f"Wait for it to end, or stop it with `slurmctl cancel {run.run_id}` first.")
    block = resilience_of(run)
    latest = block.restored() if block else None  # what the program's next start restores by itself
    if latest is None:
        newest = block.latest() if block else None
        if newest is not None:  # e.g. Lightning's fit(ckpt_path=None) restores hpc_ckpt_* only
            raise ResumeError(f"run {run.run_id}: {block.framework} would restore none of its checkpoints "
                              f"(restore rule: {block.restore}); its newest, {newest.path}, would be ignored and "
                              "training would start from the beginning. Nothing was submitted.",
                              "Pass that checkpoint to the program (e.g. fit(ckpt_path=...)) and adopt it again.")
        where = f" in {block.checkpoint_dir}" if block else " (no --framework was given when it was adopted)"
        raise ResumeError(f"run {run.run_id} has no complete checkpoint of the program's own{where}.",
                          "Adopt the script again to start from the beginning.")
    adopted = run.meta["adopted"]
    if site is not None:
        confirm_cost(_worst_case(adopted, site, run.meta.get("partition")), site, yes, confirm)
    sbatch_args = [str(a) for a in adopted.get("sbatch_args") or []]
    script = parse_script(run.path / ADOPTED_SCRIPT, sbatch_args)
    chdir = [] if script.has("chdir") else [f"--chdir={adopted.get('cwd')}"]
    run.use_umask()
    new_job = client.submit(run.path / JOB_SCRIPT, [*chdir, *sbatch_args, *adopted.get("platform_args", [])])
    run.record("submitted", job_id=new_job, resumed_from_step=latest.step, resumed_from=str(latest.path),
               sbatch_args=sbatch_args, adopted=True)
    return ResumeResult(run.run_id, str(run.path), new_job, latest.step if latest.step is not None else -1,
                        run.run_id)


def _worst_case(adopted: dict, site, partition: str | None) -> float:
    """The worst case adopt showed (run.json keeps it), or, for a run adopted before it kept one, the
    same estimate from its shape (a job without GPUs is then priced at $0: its CPUs were Slurm's answer)."""
    from slurmctl.submit.adopt.plan import Shape, estimate_cost  # why: only a resume asks for it

    if isinstance((adopted.get("cost") or {}).get("max_usd"), int | float):
        return float(adopted["cost"]["max_usd"])
    return estimate_cost(Shape(**adopted.get("shape") or {}), site, partition)["max_usd"]
