"""What status, logs, diagnose, explain, cost and cancel print for a plain sbatch job (a Slurm job id of
the caller's that is no run). Thin: the core is slurmctl.observe.plain_job."""

from __future__ import annotations

import time

import click

from slurmctl.cli.context import Context, out, print_json, print_line, usd
from slurmctl.durations import human_duration
from slurmctl.observe.plain_job import PlainJob, plain_job_diagnosis, plain_job_status, resolve
from slurmctl.slurm.owned import owned_job

__all__ = ["PlainJob", "cancel_plain", "cost_plain", "plain_job_diagnosis", "print_plain_logs", "print_plain_status",
           "resolve_ref"]


def resolve_ref(ctx: Context, ref: str):
    """A run, or a PlainJob when REF is one of the caller's Slurm job ids that is no run."""
    return resolve(ref, ctx.registry, ctx.client)


def print_plain_status(plain: PlainJob, as_json: bool, site=None, ctx: Context | None = None) -> None:
    s = plain_job_status(plain, site)
    job = plain.job
    # also while a requeued job waits to start again (its own cost is None then): its attempts were paid for
    if ctx is not None and job is not None and (job.restarts or job.source == "sacct"):
        from slurmctl.ops.cost_so_far import cost_so_far  # why: only a job that may have several attempts

        # every attempt of a requeued job, as `slurmctl cost JOBID` counts them, not only the newest
        s.cost_usd = cost_so_far(ctx.site_view, ctx.client, [plain.job_id], plain.job_id, job.start_time, s.cost_usd)
    if as_json:
        print_json(s.to_dict())
        return
    print_line(("Job:", "bold"), f" {s.job_id} {s.name}   ", ("Phase:", "bold"), f" {s.phase}   "
               f"(Slurm: {s.state.lower()}; plain sbatch job, not a slurmctl run)")
    print_line(("Why:", "bold"), f" {s.headline}")
    if s.num_nodes:
        held = f", {s.gpus} GPU(s)" if s.gpus else (f", {s.cpus} CPU(s), no GPU" if s.cpus else "")
        cost = f" · cost so far {usd(s.cost_usd)}" if s.cost_usd is not None else ""
        print_line(("Shape:", "bold"), f" {s.num_nodes} node(s){held}{f' on {s.nodes}' if s.nodes else ''} · "
                   f"{s.partition}{cost}")
    elif s.cost_usd is not None:  # nothing allocated now (waiting to start again, cancelled while waiting)
        print_line(("Cost so far:", "bold"), f" {usd(s.cost_usd)} (every attempt before this one)")
    for line in s.details:
        print_line(f"  {line}")
    if s.log_path:
        print_line(("Output:", "bold"), f" {s.log_path}")
    if s.error_path:
        print_line(("Errors:", "bold"), f" {s.error_path}")
    if s.diagnosis:
        d = s.diagnosis
        print_line(("Diagnosis:", "bold"), " ", (d["category"], "red"), f" — {d['summary']}")
        from slurmctl.observe.diagnose import excerpt  # loaded already: the status read diagnosed it

        for line in [e for e in excerpt(d) if e.strip()]:  # ends with the exception line itself, as for runs
            print_line(f"    {line}")
        print_line("  ", ("Fix:", "bold"), f" {d['hint']}")
    print_line(("What to do:", "bold"), f" {s.action}")


def print_plain_logs(plain: PlainJob, lines: int, as_json: bool) -> int | None:
    """The end of the job's output file and, when it names one apart, of its --error file (as `tail`
    prints two files: each under its name)."""
    from slurmctl.observe.logs import tail_lines

    path, err = plain.log_path, plain.err_path
    if path is None:
        print_line(plain.missing or f"Slurm no longer says where job {plain.job_id} wrote its output.",
                   to_stderr=True)
        return 1
    if plain.missing:  # a path in doubt is said, not shown as if Slurm had said it
        print_line(plain.missing, to_stderr=True)
    # the caller's own files, named in their own job: read as they would with tail
    text = tail_lines(path, lines, nofollow=False) if path.exists() else []
    err_text = tail_lines(err, lines, nofollow=False) if err is not None and err.exists() else []
    if as_json:
        print_json({"job_id": plain.job_id, "path": str(path), "lines": text,
                    "error_path": str(err) if err else None, "error_lines": err_text})
        return None
    if err is None:
        if not text and not path.exists():
            print_line(f"no output yet at {path}", to_stderr=True)
            return None
        click.echo("\n".join(text))
        return None
    for name, shown, exists in ((path, text, path.exists()), (err, err_text, err.exists())):
        click.echo(f"==> {name} <==")
        if shown:
            click.echo("\n".join(shown))
        elif not exists:
            click.echo("(no such file yet)")
    return None


def cost_plain(ctx: Context, plain: PlainJob, as_json: bool) -> None:
    from slurmctl.ops.accounting import run_cost
    from slurmctl.slurm.owned import array_task_ids

    # `cost ARRAYID` prices every task of the array, each a job of its own, as `sacct -j ARRAYID` lists them
    ids = array_task_ids(ctx.client, plain.job_id) if plain.whole_array else [plain.job_id]
    result = run_cost([f"job {plain.job_id}"], ids, ctx.site, ctx.client)
    if as_json:
        print_json({**result.to_dict(), "kind": "sbatch"})
        return
    for a in result.attempts:
        out.print(f"job {a.job_id}  {a.state.lower()}  {a.partition}  {a.shape}  {a.start}  "
                  f"{a.elapsed_s / 3600:.2f} h  ${a.cost_usd:,.2f}", markup=False)
    jobs = len({a.job_id for a in result.attempts})
    what = f"array {plain.job_id}" if plain.whole_array else f"job {plain.job_id}"
    tasks = f"{jobs} tasks, " if plain.whole_array else ""
    out.print(f"{what} (plain sbatch): {tasks}{len(result.attempts)} attempt(s), "
              f"{result.held}, ${result.cost_usd:,.2f}", markup=False)


def cancel_plain(ctx: Context, plain: PlainJob, as_json: bool, wait_seconds: float = 60.0) -> int | None:
    """scancel at once: a plain job has no drain to wait for (said, not hidden)."""
    job = plain.job
    began = time.monotonic()
    if job is not None and job.active:
        ctx.client.cancel(plain.job_id)
    state = job.state if job else "UNKNOWN"
    while time.monotonic() - began < wait_seconds:
        now = owned_job(ctx.client, plain.job_id, ctx.registry.uid)
        state = now.state if now else "CANCELLED"
        if now is None or not now.active:
            break
        time.sleep(0.5)
    seconds = time.monotonic() - began
    verified = state not in {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING"}
    if as_json:
        print_json({"job_id": plain.job_id, "kind": "sbatch", "final_state": state, "verified": verified,
                    "seconds": round(seconds, 2), "drain": "none (plain sbatch job)"})
    else:
        out.print(f"job {plain.job_id} (plain sbatch, no drain: it cannot checkpoint on request) is "
                  f"{state.lower()} (verified after {human_duration(seconds) if seconds >= 1 else f'{seconds:.1f} s'})",
                  markup=False)
    return None if verified else 1


def explain_job(ctx: Context, job_id: int, as_json: bool) -> int | None:
    """`explain JOBID`: the state (and, while it waits, the reason) of one of the caller's jobs."""
    from slurmctl.observe.explain import explain_job_reason, explain_state, reason_now

    job = owned_job(ctx.client, job_id, ctx.registry.uid)
    if job is None:
        print_line(f"job {job_id}: Slurm no longer knows it.")
        return 1
    state = explain_state(job.state)
    why = reason_now(job)  # an ended job's pending reason no longer holds
    reason = explain_job_reason(job) if why and job.state != "RUNNING" else None
    if as_json:
        print_json({"job_id": job_id, "state": job.state, "reason": why, "state_explained": state.to_dict(),
                    "reason_explained": reason.to_dict() if reason else None})
        return None
    print_line((f"job {job_id}", "bold"), f" ({job.state.lower()}): {state.headline}")
    if reason:
        print_line("  ", ("Why:", "bold"), f" {why}: {reason.headline}")
    action = (reason or state).action.replace("JOBID", str(job_id)).replace("RUN", str(job_id))
    print_line("  ", ("What to do:", "bold"), f" {action}")
    return None
