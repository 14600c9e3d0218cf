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

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.evaluate import fits, gpu_capacity, host_capacity
from shardplan.costmodel.training.knobs import RECOMPUTE_MODULES, RECOMPUTE_POLICIES
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload
from shardplan.costmodel.training.memory import head_activations
from shardplan.costmodel.training.recompute_modules import NESTED, ModuleCost
from shardplan.costmodel.training.row_trees import map_rows, splice_rows
from shardplan.costmodel.training.space import row_keys
from shardplan.costmodel.training.stage_memory import StageMemory, stage_memory
from shardplan.costmodel.training.stage_sums import StageSums, take_rows
from shardplan.costmodel.training.stages import KindCost, KindTable, StageShape, kind_table, stage_counts
from shardplan.costmodel.training.step import TrainCost, _stage, spread_sums, train_cost
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec

ALL_LAYERS = 10**9
OFFLOAD_CLASSES = ("f_opt", "f_w", "f_act")


@dataclass(frozen=True, slots=True)
class TrainTable:
    """Costed candidate rows (``cost.ctx.rows``) and whether each fits GPU and host memory.

    ``kinds`` holds the per-kind costs of the distinct ``stages.KIND_COLUMNS`` rows (``stages.kind_table``; they are
    ``cost.kinds``, not one entry per row): rows that differ only in recompute, module set or offload share them, and
    a row added later (another module set, an offload variant) has those of the row it was derived from. Row ``i``'s
    are ``kinds.kinds`` row ``kinds.index[i]`` (``kinds_of``), none copied."""

    cost: TrainCost
    fits: np.ndarray
    gpu_over: np.ndarray  # bytes over GPU capacity on the binding stage (≤ 0 when it fits)
    host_over: np.ndarray  # bytes over usable host memory per node
    capacity: float  # GPU memory a row may fill (the GPU's memory less the headroom)
    kinds: KindTable  # per row, its per-kind costs' row (``index``) of the distinct rows'

    def kinds_of(self, idx: np.ndarray) -> dict[str, KindCost]:
        """The per-kind costs of rows ``idx``."""
        return self.kinds.take(idx).expand()

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


def _recompute_layers(cost: _Memory, cap: float) -> np.ndarray:
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


def _module_sets(cost: _Memory, cap: float) -> np.ndarray:
    """Selective recompute's module set per row (bit masks over ``knobs.RECOMPUTE_MODULES``): rows under selective
    recompute that do not fit with Megatron's default (core_attn) take the set whose slowest stage is fastest among
    the sets that fit every stage (ties: fewer modules); the rest keep theirs.

    A stage's memory and time are affine in the modules' terms (``recompute_modules.selective_terms``): stored
    bytes fall by each module's freed bytes per microbatch in flight, the largest recomputed module is live during
    its backward (beside the LM head's logits, never both), and each module's forward is rerun. The table costs the
    chosen set exactly afterwards (``fits`` rechecks)."""
    r = cost.ctx.rows
    sel = r.sel.copy()
    need = np.flatnonzero((r.rc == 1) & (cost.peak_memory > cap))
    if not len(need):
        return sel
    n = len(r)

    def modules_of(rows: np.ndarray) -> dict[str, dict[str, ModuleCost]]:  # per kind, the rows' recompute modules
        idx, n_kinds = cost.kinds.index[rows], len(cost.kinds.rows)
        return {k: map_rows(kc.modules, lambda x: x[idx], n_kinds) for k, kc in cost.kinds.kinds.items()}

    kinds = modules_of(need)

    def at(x: np.ndarray | float) -> np.ndarray:
        return np.broadcast_to(np.asarray(x, dtype=float), (n,))[need]

    def of(x: np.ndarray | float) -> np.ndarray:  # a per-kind cost of the rows ``need`` (``kinds``)
        return np.broadcast_to(np.asarray(x, dtype=float), (len(need),))

    # the modules the model has, less those that free nothing and rerun nothing here
    # (Megatron asserts 'moe' is not recomputed under --overlap-moe-expert-parallel-comm: transformer_config.py)
    # other frameworks' whole-layer policies are priced when pinned, not chosen (each replaces the whole set)
    banned = (("moe",) if cost.ctx.system.software.ep_comm_overlap else ()) + RECOMPUTE_POLICIES
    mods = [m for m in RECOMPUTE_MODULES if m not in banned and any(m in kc and (of(kc[m].freed).any()
            or of(kc[m].time).any()) for kc in kinds.values())]
    if not mods:
        return sel
    # Rows that no module set can fit are left as they are: a stage's memory is at least its total less every
    # module's freed bytes per microbatch in flight (core_attn's included: it is in the default), transients aside.
    hopeless = np.zeros(len(need), dtype=bool)
    for st in cost.stages:
        counts = stage_counts(st.shape)
        most = sum((at(c) * np.maximum(of(kinds[k][m].freed), 0.0) for m in mods for k, c in counts.items()
                    if k in kinds and m in kinds[k] and m != "core_attn"), start=np.zeros(len(need)))
        hopeless |= (at(st.shape.exists) > 0) & (at(st.total) - most * at(st.inflight * (1 - r.f_act)) > cap)
    need = need[~hopeless]
    if not len(need):
        return sel
    kinds = modules_of(need)
    per_mb = cost.per_microbatch_s(need)
    masks = np.arange(1 << len(mods))
    bits = (masks[:, None] >> np.arange(len(mods))) & 1  # (subsets, modules)
    nested = [(mods.index(a), mods.index(b)) for a, inner in NESTED.items() for b in inner if a in mods and b in mods]
    keep = np.ones(len(masks), dtype=bool)
    for a, b in nested:
        keep &= ~((bits[:, a] == 1) & (bits[:, b] == 1))
    masks, bits = masks[keep], bits[keep]
    core = mods.index("core_attn") if "core_attn" in mods else -1
    sign = np.where(np.arange(len(mods)) == core, -1.0, 1.0)[None, :]
    on = np.where(np.arange(len(mods)) == core, 1 - bits, bits) * sign  # core_attn is in the default
    live = np.where(np.arange(len(mods)) == core, 0, bits)
    head = at(head_activations(cost.ctx))
    stages = []  # per stage, per row: what a module set's memory and time are affine in
    for st, st_per_mb in zip(cost.stages, per_mb, strict=True):
        counts = stage_counts(st.shape)
        terms = []  # per module: bytes freed and seconds rerun per microbatch, one layer's bytes
        for m in mods:
            present = [(at(c), kinds[k][m]) for k, c in counts.items() if k in kinds and m in kinds[k]]
            freed = sum((c * of(mc.freed) for c, mc in present), start=np.zeros(len(need)))
            time = sum((c * of(mc.time) for c, mc in present), start=np.zeros(len(need)))
            one = np.max(np.stack([np.where(c > 0, of(mc.freed), 0.0) for c, mc in present]), axis=0)
            terms.append((freed, time, one))
        stages.append((np.stack([t[0] for t in terms]), np.stack([t[1] for t in terms]), [t[2] for t in terms],
                       at(st.shape.has_head) * head, at(st.total), at(st.inflight * (1 - r.f_act)),
                       at(st.shape.exists) > 0, st_per_mb))
    order = np.lexsort((masks, bits.sum(axis=1)))  # fewer modules, then the lower mask, among equal times
    best, ok = np.empty(len(need), dtype=np.int64), np.empty(len(need), dtype=bool)
    # (sets × rows) per block of rows (each row's column is its own): blocks that stay in cache, and products small
    # enough that OpenBLAS runs them on one thread (under 2**18 multiply-adds; dispatching a product this small to
    # threads costs more than it computes), each element the same GEMM dot product over the modules either way (no
    # block one row wide, which would go to GEMV instead)
    starts = list(range(0, len(need), max(64, 2**15 // len(masks))))
    if len(starts) > 1 and len(need) - starts[-1] == 1:
        starts.pop()
    for a, z in zip(starts, [*starts[1:], len(need)], strict=True):
        b, width = slice(a, z), z - a
        slowest = np.full((len(masks), width), -np.inf)
        fits_all = np.ones((len(masks), width), dtype=bool)
        for freed_by, time_by, ones, h, total, scale, exists, st_per_mb in stages:
            freed = on @ freed_by[:, b]
            time = on @ time_by[:, b]
            transient = np.zeros((len(masks), width))  # the largest recomputed module's bytes, per subset
            for i, one in enumerate(ones):
                transient = np.maximum(transient, live[:, i:i + 1] * one[b][None, :])
            mem = total[b] - freed * scale[b] + np.maximum(transient, h[b]) - h[b]
            fits_all &= ~exists[b] | (mem <= cap)
            slowest = np.maximum(slowest, np.where(exists[b], st_per_mb[b] + time, -np.inf))
        score = np.where(fits_all, slowest, np.inf)
        best[b] = order[np.argmin(score[order], axis=0)]
        ok[b] = np.isfinite(score[best[b], np.arange(width)])
    mask_of = np.array([sum(1 << RECOMPUTE_MODULES.index(m) for i, m in enumerate(mods) if b >> i & 1) for b in masks])
    sel[need] = np.where(ok, mask_of[best], sel[need])
    return sel


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


@dataclass(frozen=True, slots=True)
class _Memory:
    """Rows before their recompute fixes, with what the fixes read: each stage's memory (``step.stage_memory``) and
    its peak; the times of the few rows a module set may fit come from ``per_microbatch_s``."""

    ctx: Ctx
    kinds: KindTable  # the rows' per-kind costs
    m: np.ndarray  # microbatches per step
    shapes: list[StageShape]
    sums: list[StageSums]
    stages: list[StageMemory]
    peak_memory: np.ndarray  # ``TrainCost.peak_memory``

    @classmethod
    def of(cls, model: ModelSpec, system: SystemSpec, work: TrainWorkload, rows: LayoutArrays, kinds: KindTable
           ) -> _Memory:
        ctx = Ctx(model, system, work, rows)
        m = (rows.gb / (rows.dp * rows.mb)).astype(float)
        shapes, sums = spread_sums(ctx, kinds)
        stages = [stage_memory(ctx, None, shape, m, ss) for shape, ss in zip(shapes, sums, strict=True)]
        peak = np.max(np.stack([np.where(st.shape.exists, st.total, 0.0) for st in stages]), axis=0)
        return cls(ctx, kinds, m, shapes, sums, stages, peak)

    def per_microbatch_s(self, idx: np.ndarray) -> list[np.ndarray]:
        """Each stage's ``StageCost.per_microbatch_s`` of rows ``idx`` (``step._stage`` of those rows alone)."""
        n, c = len(self.ctx.rows), self.ctx
        ctx = Ctx(c.model, c.system, c.work, c.rows.take(idx))
        return [_stage(ctx, None, take_rows(shape, idx, n), self.m[idx], take_rows(ss, idx, n)).per_microbatch_s
                for shape, ss in zip(self.shapes, self.sums, strict=True)]


def _appended(model: ModelSpec, system: SystemSpec, work: TrainWorkload, cost: TrainCost, kinds: KindTable,
              kind_rows: np.ndarray, extra: LayoutArrays, source: np.ndarray) -> tuple[TrainCost, np.ndarray]:
    """``cost`` with the rows ``extra`` (each derived from row ``source`` of it: its per-kind costs) costed and
    appended, and the row of ``cost.kinds`` (``kinds``' distinct rows') each row's per-kind costs are."""
    rows, n = cost.ctx.rows, len(cost.ctx.rows)
    if len(extra) == 0:
        return cost, kind_rows
    kind_rows = np.concatenate([kind_rows, kind_rows[source]])
    sub = train_cost(model, system, work, extra, ops=False, kinds=KindTable(kinds.rows, kinds.kinds, kind_rows[n:]))
    spliced = splice_rows(cost, sub, np.zeros(0, dtype=np.int64), n, len(extra),
                          skip=lambda x: isinstance(x, Ctx) or x is cost.kinds)
    return dataclasses.replace(spliced, ctx=Ctx(model, system, work, _concat([rows, extra]))), kind_rows


def build_train_table(model: ModelSpec, system: SystemSpec, work: TrainWorkload, rows: LayoutArrays, *,
                      allow_offload: bool = True, partial_recompute: bool = True, module_sets: bool = True,
                      offload_last_resort: bool = False) -> TrainTable:
    """Cost every candidate row; add recompute-layer, recompute-module and offload fixes; mark which rows fit.

    ``partial_recompute=False`` keeps full recompute on every layer (the user pinned ``--recompute full``);
    ``module_sets=False`` keeps Megatron's default selective module set (an export that cannot name others).
    ``offload_last_resort``: offload is only a fallback (the planner's ``--offload auto``), so offload variants
    are added only for the (TP, PP) pairs where nothing fits without offload (all pairs when nothing fits at
    all): elsewhere the planner never reads them.
    """
    cap = gpu_capacity(system, work)
    # Every row is costed once whole, with its fixes: the rows a fix may change are first costed for their memory
    # alone (``_Memory``), and a later pass costs only the rows it adds and appends them (the cost is row by row).
    # Per-kind costs do not depend on recompute, module set or offload (``stages.KIND_COLUMNS``): computed once per
    # distinct row, every pass takes each row's from those.
    kinds = kind_table(Ctx(model, system, work, rows))
    rk, sel = rows.rk, rows.sel
    fix = np.flatnonzero(((rows.rc == 2) & partial_recompute) | ((rows.rc == 1) & module_sets))
    if len(fix):
        before = _Memory.of(model, system, work, rows.take(fix), kinds.take(fix))
        if partial_recompute:  # full recompute of the fewest layers that fit, the other rows' count ALL_LAYERS
            rk = np.full(len(rows), ALL_LAYERS, dtype=np.int64)
            rk[fix] = _recompute_layers(before, cap)
        if module_sets:
            sel = rows.sel.copy()
            sel[fix] = _module_sets(before, cap)
        del before
    # a module set is another layout: added beside the default one (which a per-stage split may still fit)
    changed = np.flatnonzero(sel != rows.sel)
    kind_rows = np.concatenate([kinds.index, kinds.index[changed]])
    rows = rows.replace(rk=rk)
    rows = _concat([rows, rows.take(changed).replace(sel=sel[changed])]) if len(changed) else rows
    cost = train_cost(model, system, work, rows, ops=False, kinds=KindTable(kinds.rows, kinds.kinds, kind_rows))
    rows = cost.ctx.rows
    ok = fits(cost, system, work)
    bad = ~ok if allow_offload else np.zeros_like(ok)
    if offload_last_resort and ok.any():
        pair = rows.tp.astype(np.int64) * (int(rows.pp.max()) + 1) + rows.pp
        bad &= ~np.isin(pair, pair[ok])
    if bad.any():
        bad = np.flatnonzero(bad)
        sub = dataclasses.replace(map_rows(cost, lambda x: x[bad], len(rows), skip=lambda x: x is cost.kinds or
                                           isinstance(x, Ctx)), ctx=Ctx(model, system, work, rows.take(bad)), kinds={})
        variants = []
        for order in itertools.permutations(OFFLOAD_CLASSES):
            f = _offload_fills(sub, cap, order)
            variants.append(sub.ctx.rows.replace(**f))
        del sub
        extra = _concat(variants)
        # distinct variants only
        source = np.tile(bad, len(variants))  # the row each variant offloads from
        key = row_keys([extra.f_opt, extra.f_w, extra.f_act, source])
        _, uniq = np.unique(key, return_index=True)
        uniq = np.sort(uniq)
        extra, source = extra.take(uniq), source[uniq]
        changed = np.flatnonzero((extra.f_opt + extra.f_w + extra.f_act) > 0)
        cost, kind_rows = _appended(model, system, work, cost, kinds, kind_rows, extra.take(changed), source[changed])
        ok = fits(cost, system, work)
    return TrainTable(cost=cost, fits=ok, gpu_over=cost.peak_memory - cap, capacity=cap,
                      host_over=cost.host_bytes_per_node - host_capacity(system, work),
                      kinds=KindTable(kinds.rows, kinds.kinds, kind_rows))
