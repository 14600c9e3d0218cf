"""Enumerated planner options (a light module: the CLI imports it at start-up)."""

from __future__ import annotations

from enum import StrEnum


class OffloadPolicy(StrEnum):
    """When the planner may move tensors to CPU memory."""

    AUTO = "auto"
    """Only when no layout fits without it (offload traffic shares PCIe with the NICs on most nodes)."""
    ON = "on"
    """Offload competes with every other choice on predicted step time."""
    OFF = "off"
    """Never offload."""


class InferObjective(StrEnum):
    """What the serving planner optimises."""

    THROUGHPUT = "throughput"
    """Maximise output tokens per second over all GPUs, under the optional TTFT/TPOT limits."""
    LATENCY = "latency"
    """Minimise one request's end-to-end latency (TTFT + (gen − 1)·TPOT)."""
