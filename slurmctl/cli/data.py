"""`slurmctl data`: what the node caches hold (`ls`), and staging a dataset ahead of a big run (`warm`)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import click

from slurmctl.cli.context import Context, escape, json_option, out, pass_ctx, print_json, print_table


@click.group()
def data() -> None:
    """Object-store datasets in the node caches: list them, or stage one ahead of a run."""


RECENT_RUNS = 200  # the runs whose staging records `data ls` reads for the other nodes


@data.command("ls")
@click.option("--all-users", is_flag=True, help="Every user's entries (operators, as root).")
@json_option
@pass_ctx
def ls(ctx: Context, all_users: bool, as_json: bool) -> None:
    """List what the caches hold: per user and dataset, objects, bytes and last use.

    A node cache is node-local: this lists the one of the machine it runs on (and the shared tier), then
    what your recent runs staged on each node, from their staging records."""
    from slurmctl.fsutil import human_bytes
    from slurmctl.observe.data import cache_listing, staged_by_runs

    if all_users and os.geteuid() != 0:
        out.print("--all-users lists other users' cache entries: operators only (run it as root).", markup=False)
        return 2
    site_data = ctx.site.data
    host = socket.gethostname()
    tiers = [("node", site_data.node_cache_dir, site_data.node_cache_bytes, "data.node_cache_budget",
              f"node-local: the cache of {host}, the machine this runs on")]
    if site_data.shared_cache_dir:
        setting = "data.shared_cache_budget" if site_data.shared_cache_budget else (
            "data.node_cache_budget: data.shared_cache_budget is unset")
        tiers.append(("shared", site_data.shared_cache_dir, site_data.shared_cache_bytes, setting,
                      "shared: the same directory on every node"))
    listings = [{"tier": tier, "host": host, "scope": scope, "budget_setting": setting,
                 **cache_listing(root, budget, all_users=all_users)} for tier, root, budget, setting, scope in tiers]
    staged = [] if all_users else staged_by_runs(ctx.registry.recent(RECENT_RUNS))
    if as_json:
        print_json({"host": host, "caches": listings, "staged_by_your_runs": staged})
        return None
    rows = []
    for listing in listings:
        for user in listing["users"]:
            for ds in user["datasets"]:
                rows.append((listing["tier"], user["user"], str(ds["objects"]), human_bytes(ds["bytes"]),
                             _when(ds["last_used"]), ds["src"]))
    for listing in listings:
        per = " per node" if listing["tier"] == "node" else " for the whole tier"
        out.print(f"{listing['tier']} cache {listing['root']} ({listing['scope']}): {human_bytes(listing['bytes'])} "
                  f"listed of a {human_bytes(listing['budget_bytes'])} budget{per} ({listing['budget_setting']})",
                  markup=False)
    if rows:
        print_table(("TIER", "USER", "OBJECTS", "SIZE", "LAST USED", "DATASET"), rows)
    else:
        out.print("nothing cached" + ("" if all_users else " for you") + " here.", markup=False)
    if all_users:
        out.print("Other nodes' caches are their own: run this there (e.g. `srun -w NODE slurmctl data ls "
                  "--all-users` as root), or see the exporter's slurmctl_data_* series per node.", markup=False)
        return None
    others = [e for e in staged if e["tier"] != "node" or e["node"] != host]
    if others:
        out.print(f"Staged by your last {RECENT_RUNS} runs, per node (their staging records; eviction may have "
                  "removed some since):", markup=False)
        print_table(("NODE", "TIER", "OBJECTS", "SIZE", "STAGED", "RUN", "DATASET"),
                    [(e["node"], e["tier"], str(e["objects"]), human_bytes(e["bytes"]), _when(e["time"]), e["run"],
                      e["src"]) for e in others])
    out.print("Each node's cache is its own: `slurmctl status RUN` says where a run staged its data; to list a "
              "node's cache now, run `slurmctl data ls` there (e.g. `srun -w NODE -p PARTITION slurmctl data ls`).",
              markup=False)
    return None


def _when(epoch: float) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(epoch)) if epoch else "-"


@data.command("warm")
@click.argument("src")
@click.option("--partition", "-p", required=True, help="Stage on the nodes of this partition.")
@click.option("--nodes", "-N", type=click.IntRange(min=1), help="How many of its nodes (default: all).")
@click.option("--cache", type=click.Choice(["node", "shared"]), default="node", show_default=True)
@json_option
@pass_ctx
def warm(ctx: Context, src: str, partition: str, nodes: int | None, cache: str, as_json: bool) -> None:
    """Stage SRC (s3://bucket/prefix) into the caches of a partition's nodes before a big run."""
    from slurmctl.submit.warm import warm as warm_dataset

    if nodes is None:
        nodes = max(1, sum(1 for node in ctx.client.nodes() if partition in node.partitions))
    workdir = Path.home() / ".cache" / "slurmctl" / "warm"
    result = warm_dataset(src, partition, nodes, ctx.site, ctx.client, workdir, cache)
    if as_json:
        print_json(result.to_dict())
        return None
    out.print(f"staging {escape(src)} on {nodes} node(s) of {escape(partition)}: run {escape(result.run_id)}, "
              f"Slurm job {result.job_id}. `slurmctl status {escape(result.run_id)}` shows the hit rate and bytes "
              "staged when it ends.")
    return None
