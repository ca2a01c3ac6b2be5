"""`slurmctl exporter`: serve Prometheus metrics (core in slurmctl.ops.exporter)."""

from __future__ import annotations

import click

from slurmctl.cli.context import Context, json_option, out, pass_ctx, print_json


@click.command()
@click.option("--port", default=9877, show_default=True, help="HTTP port for /metrics.")
@click.option("--listen", "--address", "address", default="127.0.0.1", show_default=True, metavar="ADDR",
              help="Address to listen on. The metrics have no authentication: loopback by default; give "
                   "the scrape network's address (or 0.0.0.0 behind a firewall) to expose them.")
@click.option("--interval", default=15.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between Slurm snapshots (at most one squeue + one sinfo per interval).")
@click.option("--once", is_flag=True, help="Print the metrics once and exit (no server).")
@json_option
@pass_ctx
def exporter(ctx: Context, port: int, address: str, interval: float, once: bool, as_json: bool) -> None:
    """Serve Prometheus metrics: queue, GPUs, nodes, active runs' progress and cost."""
    from prometheus_client import generate_latest

    from slurmctl.ops.exporter import build, serve

    if once or as_json:
        registry, collector = build(ctx.site, interval)
        if as_json:
            print_json({m.name: [{"labels": s.labels, "value": s.value} for s in m.samples]
                        for m in registry.collect()})
        else:
            click.echo(generate_latest(registry).decode(), nl=False)
        return
    out.print(f"slurmctl exporter on http://{address}:{port}/metrics (Slurm snapshot every {interval:g} s)")
    serve(ctx.site, port, interval, address)
