"""The solver's deterministic preference among equal step times (shared by the solver and the explanations)."""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.training.layout import LayoutArrays


def tie_rank(rows: LayoutArrays) -> np.ndarray:
    """Deterministic preference among equal step times: less recompute, less offload, lower ZeRO, smaller
    TP, shallower pipeline, less CP/EP, fewer chunks, no SP, larger microbatch, larger batch."""
    offload = rows.f_opt + rows.f_w + rows.f_act
    rk = np.where(rows.rc == 2, rows.rk, 0)
    order = np.lexsort((-rows.gb, -rows.mb, rows.sp, rows.v, rows.ep, rows.cp, rows.pp, rows.tp, rows.zero,
                        offload, rk, rows.rc))
    rank = np.empty(len(rows), dtype=np.int64)
    rank[order] = np.arange(len(rows))
    return rank
