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
