"""Brute force over one global layout's per-stage space (small instances): the reference for the CP-SAT model.

It costs every (rank, layers, recomputed layers, offload percent) with the cost model — no closed-form
offload, no dominance, no bounds — and enumerates every split of the layers over the ranks and every
tuple of recompute counts (or one count ``K`` for all ranks), in the same integer units as the solver; with
``StageSpace.equal_chunks``, like the solver, only splits whose ranks divide into the layout's model chunks.
"""

from __future__ import annotations

import itertools

import numpy as np

from shardplan.planner.core.scaling import to_int_time
from shardplan.planner.training.stages import StageSpace, chunk_recompute, coefficients


def _compositions(lo: np.ndarray, hi: np.ndarray, total: int) -> list[tuple[int, ...]]:
    ranges = [range(int(a), int(b) + 1) for a, b in zip(lo, hi, strict=True)]
    return [c for c in itertools.product(*ranges) if sum(c) == total]


def brute_force_stages(space: StageSpace, unit: float) -> tuple[int, tuple[int, ...]] | None:
    """The optimal integer objective and its split (None when nothing fits)."""
    lay, L = space.layout, space.model.num_layers
    p = lay.pp
    lo, hi = space.bounds()
    pcts = np.arange(101) if space.allow_offload else np.zeros(1, dtype=np.int64)
    rows = [(i, n, k, f) for i in range(p) for n in range(int(lo[i]), int(hi[i]) + 1)
            for k in (range(n + 1) if space.full else [int(space.layout_k(np.array([n]))[0])]) for f in pcts]
    arr = np.array(rows, dtype=np.int64)
    c = space.cost(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3])
    ok = space.fits(c)
    t_int, tail_int = to_int_time(c.per_mb_s, unit), to_int_time(c.tail_s, unit)
    big = np.iinfo(np.int64).max // 4
    # best (time, percent) over offload percents for each (rank, layers, k): exhaustive over f
    best_t: dict[tuple[int, int, int], tuple[int, int]] = {}
    for (i, n, k, _f), tt, tl, good in zip(rows, t_int, tail_int, ok, strict=True):
        if not good:
            continue
        key = (i, n, k)
        if key not in best_t or tt < best_t[key][0]:
            best_t[key] = (int(tt), int(tl))
    a, b = coefficients(space)
    best: tuple[int, tuple[int, ...]] | None = None
    for comp in _compositions(lo, hi, L):
        if not space.even_chunks(np.array(comp)).all():
            continue
        ks = [np.arange(n + 1) if space.full else space.layout_k(np.array([n])) for n in comp]
        t = [np.array([best_t.get((i, n, int(k)), (big, big))[0] for k in ks[i]]) for i, n in enumerate(comp)]
        tail0 = np.array([best_t.get((0, comp[0], int(k)), (big, big))[1] for k in ks[0]])
        if space.single_recompute and space.full:
            v = lay.interleave
            kk = range(max(comp) + 1)  # one per-chunk count K for every rank
            ks_of = [np.array([chunk_recompute(K, n, v) for K in kk]) for n in comp]
            tm = np.max(np.stack([t[i][ks_of[i]] for i in range(p)]), axis=0)
            obj = a * tm + b * tail0[ks_of[0]]
            feas = tm < big
        else:
            grid = np.ix_(*t)
            tm = grid[0]
            for g in grid[1:]:
                tm = np.maximum(tm, g)
            obj = a * tm + b * tail0.reshape((-1,) + (1,) * (p - 1))
            feas = tm < big
        if not feas.any():
            continue
        val = int(obj[feas].min())
        if best is None or val < best[0]:
            best = (val, comp)
    return best
