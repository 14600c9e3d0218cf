"""The training cost table: every candidate layout with the memory fixes it needs, costed in one pass.

Two memory-saving knobs are continuous-ish and monotone, so they are set in closed form per layout
instead of enumerated (the prototype behind DESIGN.md measured this exact against enumeration):

- full recompute of only ``k`` layers per stage: the smallest ``k`` that fits (stored bytes fall
  linearly in ``k``, time rises linearly), at least one layer;
- CPU offload, in integer percent, for layouts that still do not fit: for each order of the three
  classes (optimizer state, weights, activations) the cheapest fill that fits — each class in turn
  takes the smallest share that closes the gap, or all of it before the next. Six fills per layout;
  the solver chooses among them like any other row.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.training.evaluate import fits, gpu_capacity, host_capacity
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload
from shardplan.costmodel.training.space import row_keys
from shardplan.costmodel.training.step import TrainCost, train_cost
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec

ALL_LAYERS = 10**9
OFFLOAD_CLASSES = ("f_opt", "f_w", "f_act")


@dataclass(frozen=True, slots=True)
class TrainTable:
    """Costed candidate rows (``cost.ctx.rows``) and whether each fits GPU and host memory."""

    cost: TrainCost
    fits: np.ndarray
    gpu_over: np.ndarray  # bytes over GPU capacity on the binding stage (≤ 0 when it fits)
    host_over: np.ndarray  # bytes over usable host memory per node
    capacity: float  # GPU memory a row may fill (the GPU's memory less the headroom)

    @property
    def rows(self) -> LayoutArrays:
        return self.cost.ctx.rows

    @property
    def step_time_s(self) -> np.ndarray:
        return self.cost.step_time_s

    def __len__(self) -> int:
        return len(self.rows)


def _concat(parts: list[LayoutArrays]) -> LayoutArrays:
    first = parts[0]
    return LayoutArrays(*(np.concatenate([getattr(p, f) for p in parts]) for f in first.__slots__))


def _recompute_layers(cost: TrainCost, cap: float) -> np.ndarray:
    """Smallest number of fully recomputed layers per stage that fits every stage (≥ 1).

    Recompute covers a stage's first k layers (dense before MoE), so the last n − k store everything: j = n − k
    spare layers cost ``min(j, moe)·s_moe + max(j − moe, 0)·s_dense`` bytes over the all-recomputed total.
    That total holds the largest recomputed-layer transient, so the k found always fits (``fits`` rechecks).
    """
    r = cost.ctx.rows
    need = np.ones(len(r))
    for st in cost.stages:
        n, nmoe = st.shape.layers, st.shape.moe_layers
        scale = st.inflight * (1 - r.f_act)
        s_moe, s_dense = st.save_moe * scale, st.save_dense * scale
        spare_bytes = cap - st.total  # st.total assumes every layer is recomputed

        def layers_within(budget: np.ndarray, per: np.ndarray) -> np.ndarray:
            return np.floor(np.divide(budget, per, out=np.full_like(budget, np.inf), where=per > 0))

        j = np.minimum(layers_within(spare_bytes, s_moe), nmoe)  # MoE layers at the stage's end first
        dense_spare = np.clip(layers_within(spare_bytes - j * s_moe, s_dense), 0, n - nmoe)
        j = j + np.where(j >= nmoe, dense_spare, 0.0)  # dense layers precede MoE: spared only after all MoE
        k = np.where(spare_bytes < 0, n, n - np.clip(j, 0, n))
        need = np.maximum(need, np.where(st.shape.exists, k, 1))
    return np.where(r.rc == 2, need, ALL_LAYERS).astype(np.int64)


def _offload_fills(cost: TrainCost, cap: float, order: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Integer-percent offload shares that close each row's gap, filling classes in ``order``."""
    r = cost.ctx.rows
    frac = {c: getattr(r, c).astype(float).copy() for c in OFFLOAD_CLASSES}
    for cls in order:
        need = np.zeros(len(r))
        for st in cost.stages:
            saving = {"f_opt": st.optimizer_if_kept, "f_w": st.weights_on_gpu_if_kept,
                      "f_act": st.stored_mb * st.inflight}[cls]
            gap = st.total - cap
            for other in OFFLOAD_CLASSES:  # gap left after the shares already chosen
                if other == cls:
                    continue
                extra = frac[other] - getattr(r, other)
                gap = gap - extra * {"f_opt": st.optimizer_if_kept, "f_w": st.weights_on_gpu_if_kept,
                                     "f_act": st.stored_mb * st.inflight}[other]
            share = np.divide(gap, saving, out=np.full_like(gap, np.inf), where=saving > 0)
            need = np.maximum(need, np.where(st.shape.exists & (gap > 0), share, 0.0))
        # ceil to whole percent, guarding float noise (ceil(42.0000001) must stay 42)
        pct = np.ceil(np.round(np.clip(frac[cls] + need, 0, 1) * 100, 6)) / 100
        frac[cls] = np.minimum(np.maximum(frac[cls], pct), 1.0)
    return frac


def build_train_table(model: ModelSpec, system: SystemSpec, work: TrainWorkload, rows: LayoutArrays, *,
                      allow_offload: bool = True, partial_recompute: bool = True) -> TrainTable:
    """Cost every candidate row; add recompute-layer and offload fixes; mark which rows fit.

    ``partial_recompute=False`` keeps full recompute on every layer (the user pinned ``--recompute full``).
    """
    cap = gpu_capacity(system, work)
    # Each pass's arrays are dropped before the next pass is costed: peak memory is one pass, not two.
    if partial_recompute:
        rows = rows.replace(rk=_recompute_layers(train_cost(model, system, work, rows, ops=False), cap))
    cost = train_cost(model, system, work, rows, ops=False)
    ok = fits(cost, system, work)
    if allow_offload and (~ok).any():
        del cost  # costed again below, with the offload variants
        bad = np.flatnonzero(~ok)
        sub = train_cost(model, system, work, rows.take(bad), ops=False)
        variants = []
        for order in itertools.permutations(OFFLOAD_CLASSES):
            f = _offload_fills(sub, cap, order)
            variants.append(sub.ctx.rows.replace(**f))
        del sub
        extra = _concat(variants)
        # distinct variants only
        key = row_keys([extra.f_opt, extra.f_w, extra.f_act, np.tile(bad, len(variants))])
        _, uniq = np.unique(key, return_index=True)
        extra = extra.take(np.sort(uniq))
        changed = (extra.f_opt + extra.f_w + extra.f_act) > 0
        rows = _concat([rows, extra.take(np.flatnonzero(changed))])
        cost = train_cost(model, system, work, rows, ops=False)
        ok = fits(cost, system, work)
    return TrainTable(cost=cost, fits=ok, gpu_over=cost.peak_memory - cap, capacity=cap,
                      host_over=cost.host_bytes_per_node - host_capacity(system, work))
