"""Printing: one JSON object on stdout under --json, rich tables otherwise."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

from rich.console import Console


def console() -> Console:
    """A console on stdout; width from $COLUMNS when set (tests pin it), else the terminal's."""
    if os.environ.get("COLUMNS", "").isdigit():
        width: int | None = int(os.environ["COLUMNS"])
    else:
        probe = Console()
        width = None if probe.is_terminal else 160  # pipes and files: wide enough for the tables
    return Console(width=width, highlight=False, soft_wrap=False)


def _clean(obj: Any) -> Any:
    """JSON-safe: numpy scalars to Python, non-finite floats to None."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def emit(payload: dict[str, Any], render: Callable[[Console], None], *, as_json: bool) -> None:
    """Print ``payload`` as one JSON object, or call ``render`` on a rich console."""
    if as_json:
        print(json.dumps(_clean(payload), separators=(",", ":"), sort_keys=False))
    else:
        render(console())


def render_infeasible(con: Console, result: Any) -> bool:
    """Print the infeasible head (binding resource, then one fix per line); False when the result fits."""
    if result.status != "infeasible":
        return False
    con.print(f"[bold red]INFEASIBLE[/]: {result.reason}")
    for line in result.suggestions:
        con.print(f"  To fix: {line}")
    return True
