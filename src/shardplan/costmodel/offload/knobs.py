"""Enumerated offload options (a light module: the CLI imports it at start-up)."""

from __future__ import annotations

from enum import StrEnum


class OffloadObjective(StrEnum):
    """What an offload plan is judged by."""

    THROUGHPUT = "throughput"
    """Generated tokens per second over the whole block (FlexGen's generation throughput): large blocks win."""
    LATENCY = "latency"
    """Time from the start of prefill to the last generated token of one request (the block's total time)."""
