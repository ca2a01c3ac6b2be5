"""`slurmctl data`: what the node caches hold (`ls`), and staging a dataset ahead of a big run (`warm`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click

from slurmctl.cli.context import Context, escape, json_option, out, pass_ctx, print_json, print_table


@click.group()
def data() -> None:
    """Object-store datasets in the node caches: list them, or stage one ahead of a run."""


@data.command("ls")
@click.option("--all-users", is_flag=True, help="Every user's entries (operators, as root).")
@json_option
@pass_ctx
def ls(ctx: Context, all_users: bool, as_json: bool) -> None:
    """List what the caches hold: per user and dataset, objects, bytes and last use."""
    from slurmctl.observe.data import cache_listing, human_bytes

    if all_users and os.geteuid() != 0:
        out.print("--all-users lists other users' cache entries: operators only (run it as root).", markup=False)
        return 2
    site_data = ctx.site.data
    tiers = [("node", site_data.node_cache_dir, site_data.node_cache_bytes)]
    if site_data.shared_cache_dir:
        tiers.append(("shared", site_data.shared_cache_dir, site_data.node_cache_bytes))
    listings = [{"tier": tier, **cache_listing(root, budget, all_users=all_users)} for tier, root, budget in tiers]
    if as_json:
        print_json(listings)
        return None
    rows = []
    for listing in listings:
        for user in listing["users"]:
            for ds in user["datasets"]:
                used = time.strftime("%m-%d %H:%M", time.localtime(ds["last_used"])) if ds["last_used"] else "-"
                rows.append((listing["tier"], user["user"], str(ds["objects"]), human_bytes(ds["bytes"]), used,
                             ds["src"]))
    for listing in listings:
        out.print(f"{listing['tier']} cache {escape(listing['root'])}: {human_bytes(listing['bytes'])} listed of a "
                  f"{human_bytes(listing['budget_bytes'])} budget per node")
    if rows:
        print_table(("TIER", "USER", "OBJECTS", "SIZE", "LAST USED", "DATASET"), rows)
    else:
        out.print("nothing cached" + ("" if all_users else " for you") + " here.", markup=False)
    return None


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
