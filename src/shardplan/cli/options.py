"""Option types shared by commands (the names are the public CLI contract of DESIGN.md)."""

from __future__ import annotations

from typing import Annotated

import typer

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name, or a HF config.json (or its folder).")]
HardwareOpt = Annotated[
    str, typer.Option("--hardware", "-H", help="System preset (e.g. dgx-h100), GPU name, or YAML/JSON file.")
]
GpusOpt = Annotated[
    int | None, typer.Option("--gpus", "-g", help="Total GPUs (default: one node).", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout, nothing else.")]
TimeLimitOpt = Annotated[float, typer.Option("--time-limit", help="CP-SAT time limit in seconds.", min=0.01)]
