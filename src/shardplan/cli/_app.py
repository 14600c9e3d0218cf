"""The typer application objects; command modules register themselves on these."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="shardplan",
    help="How should this model be laid out on this hardware? Exact LLM parallelism planning "
    "(cost model + CP-SAT) for training, serving and single-GPU offloading.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
estimate_app = typer.Typer(
    help="Cost of a fully pinned layout: per-layer time and memory tables and a summary.",
    no_args_is_help=True,
)
models_app = typer.Typer(help="The model catalog (and any Hugging Face config.json).", no_args_is_help=True)
hardware_app = typer.Typer(help="The GPU and system catalog (and any YAML/JSON system file).",
                           no_args_is_help=True)
app.add_typer(estimate_app, name="estimate")
app.add_typer(models_app, name="models")
app.add_typer(hardware_app, name="hardware")
