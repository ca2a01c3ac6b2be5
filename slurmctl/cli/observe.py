"""Observation commands: status, ls, logs, explain, diagnose, queue, compare. Thin: parse, call, print."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurmctl.cli.context import (
    Context,
    escape,
    json_option,
    out,
    pass_ctx,
    plain_table,
    print_json,
    print_line,
    print_table,
    printable,
    usd,
)
from slurmctl.durations import human_duration, until

if TYPE_CHECKING:  # status pulls in pricing (pydantic): imported by the commands that need it
    from slurmctl.observe.status import RunStatus


def _when(iso: str | None) -> str:
    return until(datetime.fromisoformat(iso) if iso else None)


def _print_status(s: RunStatus) -> None:
    colour = {"finished": "green", "training": "cyan", "queued": "yellow"}.get(s.phase, "red")
    # Values from Slurm or the run directory are plain text parts: '[/]' in them prints as itself.
    print_line(("Run:", "bold"), f" {s.run_id}   ", ("Phase:", "bold"), " ", (s.phase, colour),
               f"   (Slurm: {s.state.lower()}{f', job {s.job_id}' if s.job_id else ''})")
    if (why := (s.why or s.headline or "").strip()):
        print_line(("Why:", "bold"), f" {why}")
    if s.state == "PENDING":
        pos = f" · position {s.queue_position}" if s.queue_position else ""
        print_line(("Queue:", "bold"), f" {s.partition} · waiting {human_duration(s.waiting_seconds)}{pos} · "
                   f"estimated start {_when(s.estimated_start)}")
    if s.gpus or s.cpus:
        on = f" on {s.nodes}" if s.nodes else ""
        held = f"{s.gpus} GPU(s)" if s.gpus else f"{s.cpus} CPU(s), no GPU"
        print_line(("Shape:", "bold"), f" {s.num_nodes} node(s), {held}{on}"
                   f"{f' · cost so far {usd(s.cost_usd)}' if s.cost_usd is not None else ''}")
    elif s.cost_usd is not None:  # nothing allocated now (waiting to start again, cancelled while waiting)
        print_line(("Cost so far:", "bold"), f" {usd(s.cost_usd)} (every attempt before this one)")
    if s.last_step is not None:
        total = f"/{s.total_steps} ({s.progress_percent}%)" if s.total_steps else ""
        loss = s.last_metrics.get("loss")
        rate = f" · {s.steps_per_second:.2f} steps/s" if s.steps_per_second else ""
        print_line(("Progress:", "bold"), f" step {s.last_step}{total}"
                   f"{f' · loss {loss:.4g}' if isinstance(loss, (int, float)) else ''}"
                   f" · {human_duration(s.heartbeat_age_seconds)} ago{rate} · health: {s.health}")
    ck = (f"step {s.latest_checkpoint_step} ({human_duration(s.checkpoint_age_seconds)} old)"
          if s.latest_checkpoint_step is not None else "none")
    left = f" of {s.requeues + s.requeues_left}" if s.requeues_left is not None else ""
    inside = f", {s.restarts_in_allocation} in the allocation" if s.restarts_in_allocation else ""
    print_line(("Last checkpoint:", "bold"), f" {ck} · Slurm requeues {s.requeues}{left}{inside}")
    # Every heading below carries text on its own line: a section with nothing in it is not printed.
    history = [line for line in s.history if line.strip()]  # the attempts' story, newest last
    if history:
        shown = f" (the last {len(history[-8:])})" if len(history) > 8 else ""
        kind = "array task(s)" if history[0].startswith("array task") else "attempt(s)"
        print_line(("History:", "bold"), f" {len(history)} {kind}{shown}")
        for line in history[-8:]:
            print_line(f"  {line}")
    if s.diagnosis:
        from slurmctl.observe.diagnose import excerpt  # why: only a failed run's status prints its evidence

        d = s.diagnosis
        print_line(("Diagnosis:", "bold"), " ", (d["category"], "red"), f" — {d['summary']}")
        for line in [e for e in excerpt(d) if e.strip()]:  # ends with the exception line itself
            print_line(f"    {line}")
        if d.get("failing_exit"):  # the rank that failed, not srun's 143/137 or the shutdown's 15
            rank = f"rank {d['rank']}, " if d.get("rank") is not None else ""
            print_line("  ", ("Failing rank:", "bold"),
                       f" {rank}{d['failing_exit']} (Slurm recorded exit code {s.exit_code or '?'})")
        if (d.get("hint") or "").strip():
            print_line("  ", ("Fix:", "bold"), f" {d['hint']}")
    if s.watchdog and (s.watchdog.get("message") or "").strip():
        print_line(("Watchdog:", "bold"), " ", (s.watchdog["message"], "red"))
    if s.tracked_run:
        t = s.tracked_run
        print_line(("Tracked run:", "bold"), f" {t.get('backend')} {t.get('url') or t.get('run_id')}")
    for n in s.notifications[-6:]:
        went = ", ".join(n["to"]) or "nowhere"
        print_line(("Message:", "bold"), f" {n['event']} -> {went}"
                   + (f" (failed: {'; '.join(n['failed'])})" if n["failed"] else ""))
    for note in s.health_notes:  # network, data wait, idle, efficiency (slurmctl/observe/health.py)
        if note.strip():
            print_line(("Health:", "bold"), f" {note}")
    if (tries := [t for t in s.suggestions if t.strip()]):
        print_line(("Try:", "bold"), f" {' or '.join(tries)}")
    if s.action.strip():
        print_line(("What to do:", "bold"), f" {s.action.replace('RUN', s.run_id)}")


@click.command()
@click.argument("run")
@json_option
@pass_ctx
def status(ctx: Context, run: str, as_json: bool) -> None:
    """Explain in plain words what RUN is doing and what to do next."""
    from slurmctl.observe.status import run_status
    from slurmctl.observe.sweep import sweep_for

    if (swept := sweep_for(ctx.registry, run)) is not None:  # RUN names a sweep: one row per element
        from slurmctl.cli.sweep import print_sweep_status

        return print_sweep_status(ctx, swept, as_json)

    from slurmctl.cli.plain_job import PlainJob, print_plain_status, resolve_ref

    target = resolve_ref(ctx, run)  # a run, or one of the caller's own plain sbatch jobs by id
    if isinstance(target, PlainJob):
        return print_plain_status(target, as_json, ctx.site_view, ctx)
    result = run_status(target, ctx.client, site=ctx.site_view)
    if result.slurm_unreachable_since is None:
        from slurmctl.ops.cost_so_far import price_every_attempt  # why: its sacct only for runs of several attempts

        price_every_attempt(ctx.site_view, ctx.client, [target], [result])
    print_json(result.to_dict()) if as_json else _print_status(result)
    if result.slurm_unreachable_since is not None:  # shown from the run dir alone: not a success
        from slurmctl.errors import CODES

        return CODES["slurm-unreachable"]


@click.command(name="ls")
@click.option("-n", "--limit", type=int, help="Show the newest N runs (default 20; with --since, every run in it).")
@click.option("--since", metavar="DURATION", help="Only runs created in this past duration (e.g. 2h, 3d).")
@click.option("--all", "show_all", is_flag=True, help="Every run, however old (no --limit).")
@click.option("--all-users", is_flag=True,
              help="Operator only (root): every user's runs, read-only, with a USER column.")
@json_option
@pass_ctx
def list_runs(ctx: Context, limit: int | None, since: str | None, show_all: bool, all_users: bool,
              as_json: bool) -> None:
    """List your runs (one Slurm query for all): phase, progress, GPUs, age, cost so far."""
    import time

    from slurmctl.durations import parse_duration
    from slurmctl.observe.listing import my_runs
    from slurmctl.observe.status import runs_statuses
    from slurmctl.ops.cost_so_far import AttemptsAskedEarly, price_every_attempt

    try:
        after = None if since is None else time.time() - parse_duration(since)
    except ValueError as exc:
        from slurmctl.errors import SpecError

        raise SpecError(f"--since {since!r}: {exc}.", "Give a duration such as 90m, 2h or 3d.") from None
    # a window asked for is shown whole unless a count is asked for too
    wanted = None if show_all or (limit is None and since is not None) else (20 if limit is None else limit)
    # the caller's own jobs (squeue --me, a sacct of the last days) are asked for while the runs are read
    mine = None if all_users else _caller_jobs(ctx)
    if all_users:
        owned = ctx.registry.list_all_users(wanted, since=after)
        users, runs = [u for u, _ in owned], [r for _, r in owned]
        statuses = runs_statuses(runs, ctx.client, site=ctx.site_view)
    else:
        # Only the newest runs' files are read: the cost does not grow with old, ended runs.
        runs = ctx.registry.recent(wanted, since=after)
        # the sacct that prices their attempts, asked while their statuses are read
        early = AttemptsAskedEarly(ctx.site_view, ctx.client, runs)
        runs, statuses = my_runs(ctx.registry, ctx.client, runs, site=ctx.site_view, with_queued_runs=not show_all,
                                 known=mine.recent)
        users = []
    # no squeue --me for plain jobs when squeue already did not answer within the read budget
    slurm_down = any(s.slurm_unreachable_since is not None for s in statuses)
    if not all_users and not slurm_down:
        price_every_attempt(ctx.site_view, ctx.client, runs, statuses, early.result())
    plain = [] if mine is None or slurm_down else mine.plain_rows(wanted, ctx.site_view)
    if as_json:
        rows = [s.to_dict() for s in statuses]
        for row, user in zip(rows, users):
            row["user"] = user
        print_json(rows + [p.to_dict() for p in plain])
        return _unreachable_exit(statuses)
    if not statuses and not plain:
        where = ctx.registry.runs_root if all_users else ctx.registry.root
        out.print(f"no runs under {where}; start one with `slurmctl init NAME`", markup=False)
        return
    columns = ("RUN", "JOB", "PHASE", "STEP", "GPUS", "ELAPSED", "COST", "WHAT IS HAPPENING")
    from slurmctl.observe.sweep import ls_entries

    table = []
    for i, s, sweep_header, label in ls_entries(statuses):  # a sweep: a header row, then its elements
        if sweep_header:
            table.append(("", *sweep_header) if all_users else sweep_header)
            continue
        step = "-" if s.last_step is None else (f"{s.last_step}/{s.total_steps}" if s.total_steps else str(s.last_step))
        row = (label, str(s.job_id or "-"), s.phase, step, str(s.gpus or "-"),
               human_duration(s.elapsed_seconds) if s.elapsed_seconds is not None else "-",
               usd(s.cost_usd), s.what_is_happening)
        table.append((users[i], *row) if all_users else row)
    for p in plain:  # the caller's own jobs submitted with plain sbatch, marked as such
        table.append((f"{p.name} (sbatch)", p.job_id, p.state.lower(), "-", str(p.gpus or "-"), p.elapsed,
                      usd(p.cost_usd),
                      f"plain sbatch job, not a run: `slurmctl status {p.job_id}`"))
    print_table(("USER", *columns) if all_users else columns, table)
    return _unreachable_exit(statuses)


def _caller_jobs(ctx: Context):
    """The caller's own jobs, asked for now, in the background (slurmctl.observe.listing.CallerJobs)."""
    from slurmctl.observe.listing import CallerJobs

    return CallerJobs(ctx.client, ctx.registry.uid)


def _unreachable_exit(statuses: list) -> int | None:
    """Statuses shown from the run dirs alone (Slurm did not answer) end the command non-zero."""
    down = [s.slurm_unreachable_since for s in statuses if s.slurm_unreachable_since is not None]
    if not down:
        return None
    from slurmctl.errors import CODES

    print_line(f"Slurm unreachable since {datetime.fromtimestamp(min(down)):%H:%M:%S}: shown from the run "
               "directories alone.", to_stderr=True)
    return CODES["slurm-unreachable"]


@click.command()
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends (across requeues).")
@click.option("-n", "--lines", default=100, show_default=True, help="Lines from the end (0 = all).")
@click.option("--rank", default="0", show_default=True, help="Rank to show, or 'all'.")
@click.option("--attempt", type=int, help="Only this attempt of the run (1 = the first, as `status` numbers them).")
@click.option("--job", "job_id", type=int, help="A specific job id of the run (default: the latest).")
@json_option
@pass_ctx
def logs(ctx: Context, run: str, follow: bool, lines: int, rank: str, attempt: int | None, job_id: int | None,
         as_json: bool) -> None:
    """Print the training output of RUN (rank 0 by default)."""
    from slurmctl.observe.logs import attempt_log, log_file, tail_lines, training_lines
    from slurmctl.observe.logs import follow as follow_log

    if rank != "all" and not rank.isdigit():
        from slurmctl.errors import SpecError

        raise SpecError(f"--rank {rank!r} is not a rank.", "Pass a rank number (0, 1, ...) or --rank all.")
    wanted_rank = None if rank == "all" else int(rank)
    from slurmctl.cli.plain_job import PlainJob, print_plain_logs, resolve_ref

    the_run = resolve_ref(ctx, run)
    if isinstance(the_run, PlainJob):
        ignored = [o for o, given in (("--rank", rank != "0"), ("--attempt", attempt is not None),
                                      ("-f", follow), ("--job", job_id is not None)) if given]
        if ignored:  # said, not silently dropped: a plain job has one output file, no ranks or attempts of ours
            print_line(f"job {the_run.job_id} is a plain sbatch job with one output file: {', '.join(ignored)} "
                       f"does not apply; showing its output" + (f" (follow it with `tail -f {the_run.log_path}`)"
                                                                if follow and the_run.log_path else ""),
                       to_stderr=True)
        return print_plain_logs(the_run, lines, as_json)
    if follow:
        state = follow_log(the_run, ctx.client, lambda text: click.echo(
            "\n".join(training_lines(text.split("\n"), wanted_rank)), nl=False))
        print_line(("slurmctl:", "bold"), f" job ended: {state.lower()} — `slurmctl status {the_run.run_id}` "
                   "explains it", to_stderr=True)
        return
    if attempt is not None:
        path, text = attempt_log(the_run, attempt)
        text = text[-lines:] if lines else text
    else:
        path = log_file(the_run, job_id)
        text = tail_lines(path, lines)
    text = training_lines(text, wanted_rank)
    if as_json:
        print_json({"run_id": the_run.run_id, "path": str(path), "rank": rank, "attempt": attempt, "lines": text})
        return
    if not text and not path.exists():
        print_line(f"no log yet at {path} (the job has not started writing); try `slurmctl status {the_run.run_id}`",
                   to_stderr=True)
        return
    if not text and attempt is not None:
        print_line(f"attempt {attempt} wrote no output to {path} (or none within its last part)", to_stderr=True)
        return
    click.echo("\n".join(text))


@click.command()
@click.argument("word", nargs=-1, required=True)
@json_option
@pass_ctx
def explain(ctx: Context, word: tuple[str, ...], as_json: bool) -> None:
    """Explain any Slurm state or reason (PD, Resources, QOSMaxGRESPerUser, ...) in plain words."""
    from slurmctl.observe.explain import explain_word

    text = " ".join(word)
    if text.isdigit():  # one of the caller's jobs: its state and reason now
        from slurmctl.cli.plain_job import explain_job

        return explain_job(ctx, int(text), as_json)
    kind, expl = explain_word(text)
    if as_json:
        print_json({"word": text, "type": kind, **expl.to_dict()})
        return
    # the word is the user's and the headline may quote it: '[/]' must print, not parse as markup
    print_line((text, "bold"), f" ({kind}): {expl.headline}")
    print_line("  ", ("What to do:", "bold"), f" {expl.action.replace('JOBID', '<job id>').replace('RUN', '<run>')}")
    if not expl.known:
        return 1


@click.command()
@click.argument("run", required=False)
@click.option("--log", "log_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Diagnose a log file instead of a run.")
@json_option
@pass_ctx
def diagnose(ctx: Context, run: str | None, log_path: Path | None, as_json: bool) -> None:
    """Name why RUN (or --log FILE) failed, with the evidence and a fix."""
    from slurmctl.errors import SpecError
    from slurmctl.observe.run_diagnosis import diagnose_file

    if bool(run) == bool(log_path):
        raise SpecError("give either RUN or --log FILE (not both, not neither).",
                        "e.g. `slurmctl diagnose my-run` or `slurmctl diagnose --log slurm-123.out`.")
    if log_path:
        result = diagnose_file(log_path, nofollow=False)  # a FIFO or /dev/zero is refused, not read
    else:
        from slurmctl.cli.plain_job import PlainJob, plain_job_diagnosis, resolve_ref

        the_run = resolve_ref(ctx, run)
    if run and isinstance(the_run, PlainJob):
        result = plain_job_diagnosis(the_run)
    elif run:
        job_id = the_run.latest_job_id()
        job = ctx.client.jobs([job_id]).get(job_id) if job_id else None
        from slurmctl.observe.logs import log_file
        from slurmctl.observe.run_diagnosis import with_failed_steps
        from slurmctl.observe.status import completed_but_failed

        # Slurm's COMPLETED 0:0 hides a failed srun step (`srun ... &`, bare `wait`): the step's job and exit code
        steps = completed_but_failed(the_run, ctx.client, job) if job is not None else []
        read_job = int(steps[0].step.split(".")[0]) if steps else job_id
        state, exit_code = ("FAILED", steps[0].exit_code) if steps else (job.state, job.exit_code) if job else ("", "")
        result = diagnose_file(log_file(the_run, read_job), state, exit_code)
        if steps:
            result = with_failed_steps(result, steps, job.exit_code)
        from slurmctl.observe.run_diagnosis import cancelled_before_start, in_run_words

        result = in_run_words(result, the_run.events(), job_id, cancelled_waiting=cancelled_before_start(job))
    if as_json:
        print_json(result.to_dict())
        return
    out.print(f"[bold]Cause:[/] [red]{escape(result.category)}[/] — {escape(result.summary)}")
    out.print("[bold]Evidence:[/]")
    for line in result.evidence:
        out.print(f"    {line}", markup=False)
    if result.failing_exit:
        rank = f"rank {result.rank}, " if result.rank is not None else ""
        out.print(f"[bold]Failing rank:[/] {escape(rank + result.failing_exit)}")
    out.print(f"[bold]Fix:[/] {escape(result.hint)}")


@click.command()
@click.option("-p", "--partition", "partitions", multiple=True, help="Only these partitions (like squeue -p).")
@click.option("-u", "--user", "users", multiple=True, help="Only these users (like squeue -u).")
@click.option("-t", "--state", "states", multiple=True, help="Only these states (like squeue -t).")
@json_option
@pass_ctx
def queue(ctx: Context, partitions, users, states, as_json: bool) -> None:
    """The whole queue, every user, with the reason in plain words and the estimated start."""
    from slurmctl.observe.explain import explain_job_reason

    jobs = ctx.client.queue_filtered(partitions, users, states)
    whys, starts = [], []
    for j in jobs:
        expl = explain_job_reason(j) if j.state == "PENDING" else None
        whys.append(expl.headline if expl else "")
        starts.append(j.start_time.isoformat() if j.state == "PENDING" and j.start_time else None)
    if as_json:
        print_json([{**j.to_dict(), "why": why, "estimated_start": start} for j, why, start in zip(jobs, whys, starts)])
        return
    # from the Job's fields, not to_dict(): a deep copy of every job costs more than squeue itself
    print_table(("JOB", "USER", "NAME", "PARTITION", "STATE", "NODES", "START", "WHY"), [
        (str(j.job_id), j.user, j.name[:30], j.partition, j.state.lower(), str(j.num_nodes),
         _when(start) if j.state == "PENDING" else "running", why) for j, why, start in zip(jobs, whys, starts)])


@click.command()
@click.argument("run_a")
@click.argument("run_b", required=False)
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), help="Write a loss plot here.")
@click.option("--metric", help="Metric to compare (default: loss; for a sweep, the sweep's metric).")
@click.option("--goal", type=click.Choice(["min", "max"]), help="For a sweep: which end of the metric is best.")
@json_option
@pass_ctx
def compare(ctx: Context, run_a: str, run_b: str | None, png: Path | None, metric: str | None, goal: str | None,
            as_json: bool) -> None:
    """Compare two runs: steps, loss and throughput, a sparkline each, and a PNG plot.

    `compare SWEEP` ranks the elements of a sweep by its metric (or --metric, --goal).
    """
    from slurmctl.observe.sweep import sweep_for

    if run_b is None:
        if (swept := sweep_for(ctx.registry, run_a)) is None:
            raise click.UsageError("give two runs to compare, or one sweep id to rank its elements.")
        from slurmctl.cli.sweep import print_sweep_compare

        return print_sweep_compare(ctx, swept, metric, goal, as_json)
    metric = metric or "loss"
    from slurmctl.observe.compare import compare_runs

    result = compare_runs(ctx.registry.get(run_a), ctx.registry.get(run_b), png, metric)
    if as_json:
        print_json(result)
        return
    name = escape(printable(metric.upper()))  # column headers are parsed as markup
    table = plain_table("RUN", "LAST STEP", f"LAST {name}", f"MIN {name}", "STEPS/S", name)
    for r in result["runs"]:
        fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
        table.add_row(r["run_id"], str(r["last_step"] if r["last_step"] is not None else "-"), fmt(r["last_loss"]),
                      fmt(r["min_loss"]), fmt(r["steps_per_second"]), result["sparklines"][r["run_id"]])
    out.print(table)
    if result["png"]:
        out.print(f"plot: {result['png']}", markup=False)
