"""Checking a user's pinned layout values (shared by the training and serving planners)."""

from __future__ import annotations

from shardplan.errors import ShardplanError


def require_allowed(name: str, value: int | None, allowed: list[int]) -> None:
    """A pinned ``value`` must be one of ``allowed``; the error lists them (at most 16)."""
    if value is not None and value not in allowed:
        shown = ", ".join(str(a) for a in allowed[:16]) + (", …" if len(allowed) > 16 else "")
        raise ShardplanError(f"{value} is not possible here; allowed: {shown}", field=name)
