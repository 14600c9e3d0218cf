"""Enumerated serving-planner options (a light module: the CLI imports it at start-up)."""

from __future__ import annotations

from enum import StrEnum


class InferObjective(StrEnum):
    """What the serving planner optimises."""

    THROUGHPUT = "throughput"
    """Maximise output tokens per second over all GPUs, under the optional TTFT/TPOT limits."""
    LATENCY = "latency"
    """Minimise one request's end-to-end latency (TTFT + (gen − 1)·TPOT)."""
