"""`slurmctl merge`: merged weights of a LoRA run (slurmctl/control/merge.py)."""

from __future__ import annotations

from pathlib import Path

import click

from slurmctl.cli.context import Context, json_option, out, pass_ctx, print_json


@click.command()
@click.argument("run")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path),
              help="Where the merged model goes (default: <run dir>/artifacts/merged).")
@click.option("--base-model", type=click.Path(file_okay=False, path_type=Path),
              help="The base model folder (default: the one recorded in the adapter's config).")
@click.option("--force", is_flag=True, help="Replace an existing merged model.")
@json_option
@pass_ctx
def merge(ctx: Context, run: str, output: Path | None, base_model: Path | None, force: bool, as_json: bool) -> None:
    """Fold RUN's LoRA adapter (template hf-lora) into its base model and save the merged weights."""
    from slurmctl.control.merge import merge_adapter

    result = merge_adapter(ctx.registry.get(run), output, base_model, force)
    if as_json:
        print_json(result.to_dict())
        return
    out.print(f"merged the adapter of {result.run_id} into {result.base_model}", markup=False)
    out.print(f"  merged model: {result.merged} (max logit difference {result.max_abs_diff:.2g}, "
              f"{result.seconds:.1f} s)", markup=False)
