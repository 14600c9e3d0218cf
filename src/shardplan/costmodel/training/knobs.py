"""Enumerated knobs of a layout (a light module: the CLI imports it at start-up)."""

from __future__ import annotations

from enum import StrEnum


class Recompute(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022, arXiv 2205.05198)."""

    NONE = "none"
    """Store every activation: most memory, no extra FLOPs."""
    SELECTIVE = "selective"
    """Recompute core attention (QKᵀ, softmax, dropout, ·V): drops the 5·a·s/h term for ~2–7% more time."""
    FULL = "full"
    """Store only each layer's input (2·s·b·h bytes) and rerun the layer's forward pass in backward."""


RECOMPUTE_CODE = {Recompute.NONE: 0, Recompute.SELECTIVE: 1, Recompute.FULL: 2}
RECOMPUTE_OF_CODE = {v: k for k, v in RECOMPUTE_CODE.items()}
