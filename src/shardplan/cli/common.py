"""Helpers shared by the job commands: resolving inputs and parsing percentages."""

from __future__ import annotations

from typing import Any

from shardplan.errors import ShardplanError


def resolve_inputs(model: str, hardware: str, gpus: int | None) -> tuple[Any, Any, int]:
    """ModelSpec, SystemSpec and the GPU count (default: one node)."""
    from shardplan.hardware import resolve_system
    from shardplan.models import resolve_model

    spec = resolve_model(model)
    system = resolve_system(hardware)
    n = gpus if gpus is not None else system.gpus_per_node
    if n < 1:
        raise ShardplanError(f"must be ≥ 1 (got {n})", field="gpus")
    return spec, system, n


def parse_fraction(text: str | None, *, field: str) -> float:
    """A fraction from ``20%``, ``20`` (percent) or ``0.2``; must lie in [0, 1]."""
    if text is None:
        return 0.0
    t = text.strip()
    try:
        v = float(t.rstrip("%"))
    except ValueError:
        raise ShardplanError(f"'{text}' is not a percentage (use e.g. 20% or 0.2)", field=field) from None
    if t.endswith("%") or v > 1:
        v /= 100
    if not 0 <= v <= 1:  # also refuses nan and inf
        raise ShardplanError(f"must be between 0% and 100% (got {text})", field=field)
    return v


def parse_triplet(text: str, *, field: str) -> tuple[float, float, float]:
    """``G,C,D`` percentages on GPU, CPU and disk summing to 100, as fractions."""
    parts = [p.strip() for p in text.split(",")]
    try:
        vals = [float(p.rstrip("%")) for p in parts]
    except ValueError:
        vals = []
    if len(vals) != 3 or any(not 0 <= v <= 100 for v in vals):  # `not 0 ≤ v ≤ 100` also refuses nan
        raise ShardplanError(f"'{text}' must be three percentages GPU,CPU,DISK such as 20,80,0", field=field)
    if abs(sum(vals) - 100) > 1e-6:
        raise ShardplanError(f"'{text}' must sum to 100 (got {sum(vals):g})", field=field)
    return vals[0] / 100, vals[1] / 100, vals[2] / 100
