"""How much a layout costs: pure functions over numpy, per-layer tables. Never imports ortools/typer/rich."""
