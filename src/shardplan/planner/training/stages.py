"""Per-stage decisions of one global training layout, chosen by a factored CP-SAT model.

Decisions per pipeline rank ``i`` (``costmodel.training.stage_split``): layers ``n_i`` (``≥ v``, one per model
chunk; rank 0 holds the embedding and any dense-first layers, rank ``p−1`` the LM head), fully recomputed
layers ``k_i ∈ [0, n_i]`` under ``--recompute full``, and activation offload ``f_i`` in integer percent when
offload is allowed. Each rank's options are costed in numpy; the rank's HBM and host-memory limits are
exact float filters on its own options (a rank's memory depends on its own choice and on its in-flight
microbatches only). Per ``(rank, n, k)`` the smallest offload percent that fits is kept (time is
non-decreasing and memory decreasing in ``f``); per ``(rank, n)`` only options that are not dominated in
(time per microbatch, rank-0 tail) survive — unless one recompute count must hold on every rank
(``single_recompute``: Megatron's ``--recompute-num-layers`` and torchtitan take one), which the model
enforces as Megatron applies it — the first ``K`` layers of every model chunk — for one integer ``K``.

CP-SAT: one boolean per surviving option, ``exactly_one`` per rank, ``Σ n_i = L``, ``Z ≥ t_i`` per rank,
objective ``(m·v + p − 1)·Z + v·tail_0`` (``v`` times ``train_cost``'s step composition in closed form, without the
interleaved schedule's loss to unequal chunks, ``pipeline_sim``; times scaled to integers by ``planner.core.scaling``,
needs rounded up), then fewer recomputed layers and less offload.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from shardplan.costmodel.training.evaluate import gpu_capacity, host_capacity
from shardplan.costmodel.training.knobs import RECOMPUTE_CODE, Recompute
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload, pipeline_schedules
from shardplan.costmodel.training.pipeline_sim import chunk_layers, uniform_split
from shardplan.costmodel.training.row_trees import map_rows
from shardplan.costmodel.training.stage_split import (
    RankCosts,
    layout_kinds,
    min_first_layers,
    rank_costs,
)
from shardplan.costmodel.training.stages import KindCost
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.planner.core.scaling import fine_time_unit, to_int_time


@dataclass(frozen=True, slots=True)
class StageSpace:
    """What one global layout's per-stage model may choose."""

    model: ModelSpec
    system: SystemSpec
    work: TrainWorkload
    layout: TrainLayout
    allow_offload: bool = False
    single_recompute: bool = False
    free_recompute: bool = True  # False: the layout's recompute count holds on every rank (a user's pin)
    equal_chunks: bool = False  # True: only layer counts that divide into the layout's v model chunks
    kinds: dict[str, KindCost] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.kinds:
            self.kinds.update(layout_kinds(self.model, self.system, self.work, self.layout))

    @property
    def full(self) -> bool:
        """Per-rank recompute counts are decisions (``--recompute full``, count not pinned)."""
        return RECOMPUTE_CODE[Recompute(self.layout.recompute)] == 2 and self.free_recompute

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Fewest and most layers each rank may hold."""
        p, v, L = self.layout.pp, self.layout.interleave, self.model.num_layers
        lo = np.full(p, v, dtype=np.int64)
        if p > 1:
            lo[0] = max(v, min_first_layers(self.model))
        hi = L - (lo.sum() - lo)
        return lo, hi

    def even_chunks(self, layers: np.ndarray) -> np.ndarray:
        """Layer counts this space allows: all, or with ``equal_chunks`` those that divide into the layout's ``v``
        model chunks. The per-stage model prices the pipeline in closed form, ``(m + (p−1)/v)·max t``; the
        interleaved schedule's loss to unequal chunks (``pipeline_sim.chunk_factor``) is not linear in the ranks'
        times, so it is exact on equal-chunk splits only (``stage_search.solve_row`` solves both ways and keeps the
        better of the two plans as the cost model prices them)."""
        v = self.layout.interleave
        if not self.equal_chunks or v == 1:
            return np.ones(np.shape(layers), dtype=bool)
        return np.asarray(layers) % v == 0

    def cost(self, rank: np.ndarray, layers: np.ndarray, k: np.ndarray, pct: np.ndarray) -> RankCosts:
        return rank_costs(self.model, self.system, self.work, self.layout, rank, layers, k, pct, self.kinds)

    def costs(self, *sets: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> list[RankCosts]:
        """``cost`` of several option sets in one call (``rank_costs`` is option by option), split back."""
        cols = [np.concatenate([np.asarray(x[j]) for x in sets]) for j in range(4)]
        every, n = self.cost(*cols), len(cols[0])
        ends = np.cumsum([0] + [len(x[0]) for x in sets])
        return [map_rows(every, lambda x, a=a, b=b: x[a:b], n) for a, b in itertools.pairwise(ends)]

    def fits(self, c: RankCosts) -> np.ndarray:
        host = c.host_bytes * self.system.gpus_per_node
        cap = gpu_capacity(self.system, self.work)
        return (c.memory_bytes <= cap) & (host <= host_capacity(self.system, self.work))

    def layout_k(self, layers: np.ndarray) -> np.ndarray:
        every = self.layout.recompute_layers if self.layout.recompute_layers is not None else 10**9
        return np.minimum(every, layers)


@dataclass(frozen=True, slots=True)
class Options:
    """Surviving options, flat: rank, layers, k, pct, float time/tail, and their integer forms."""

    rank: np.ndarray
    layers: np.ndarray
    k: np.ndarray
    pct: np.ndarray
    per_mb_s: np.ndarray
    tail_s: np.ndarray

    def where(self, keep: np.ndarray) -> Options:
        return Options(*(getattr(self, f)[keep] for f in Options.__slots__))

    def equal_chunks(self, space: StageSpace) -> Options:
        """The options of ``space`` with ``equal_chunks``: the same per-(rank, layers) survivors, since every
        filter of ``rank_options`` works within one (rank, layers) (``_grid``'s memory and time caps, the offload
        bisection, the Pareto front), less the layer counts that do not divide into the layout's chunks."""
        return self.where(self.layers % space.layout.interleave == 0)


def _grid(space: StageSpace, t_cap_s: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (rank, layers, k), without the (rank, layers) whose fastest option is slower than ``t_cap_s`` or
    whose least memory (none or all recomputed, all offloadable activations on the CPU) does not fit."""
    lo, hi = space.bounds()
    rk = np.concatenate([np.full(int(hi[i] - lo[i] + 1), i) for i in range(space.layout.pp)])
    ln = np.concatenate([np.arange(int(lo[i]), int(hi[i]) + 1) for i in range(space.layout.pp)])
    even = space.even_chunks(ln)
    rk, ln = rk[even], ln[even]
    none = np.zeros_like(ln)
    fast_set = (rk, ln, none if space.full else space.layout_k(ln), none)
    # The least memory of a (rank, layers): stored activations fall linearly with the recomputed layers, but a
    # recomputed layer's activations are live on the GPU during its backward (not offloadable): so the least is
    # at one of the ends, none or all recomputed (with every offloadable activation on the CPU). All in one call.
    f_all = np.full_like(ln, 100 if space.allow_offload else 0)
    if not space.allow_offload:  # nothing on the CPU: the end with nothing recomputed is ``fast`` itself
        fast, *rest = space.costs(fast_set, *([(rk, ln, ln, f_all)] if space.full else []))
        ok = space.fits(fast)
        for c in rest:
            ok |= space.fits(c)
    else:
        fast, least, *rest = space.costs(fast_set, (rk, ln, ln if space.full else space.layout_k(ln), f_all),
                                         *([(rk, ln, none, f_all)] if space.full else []))
        ok = space.fits(least)
        for c in rest:
            ok |= space.fits(c)
    if t_cap_s is not None:
        ok &= fast.per_mb_s <= t_cap_s
    ranks, layers, ks = [], [], []
    v = space.layout.interleave
    for i, n in zip(rk[ok], ln[ok], strict=True):
        kk = np.arange(n + 1) if space.full else space.layout_k(np.array([n]))
        if space.full and space.single_recompute:  # one count K per chunk: v·K layers, or all of them
            kk = kk[(kk % v == 0) | (kk == n)]
        ranks.append(np.full(len(kk), i))
        layers.append(np.full(len(kk), n))
        ks.append(kk)
    if not ranks:
        return (np.zeros(0, dtype=np.int64),) * 3
    return np.concatenate(ranks), np.concatenate(layers), np.concatenate(ks)


def _pareto(t: np.ndarray, tail: np.ndarray, secondary: np.ndarray) -> np.ndarray:
    """Indices not dominated in (t, tail), smallest ``secondary`` among equals."""
    order = np.lexsort((secondary, tail, t))
    keep, best = [], np.inf
    for j in order:
        if tail[j] < best:
            keep.append(j)
            best = tail[j]
    return np.array(keep, dtype=np.int64)


def rank_options(space: StageSpace, t_cap_s: float | None = None) -> Options:
    """Every feasible option worth choosing, with the smallest offload percent that fits (options slower
    than ``t_cap_s`` per microbatch dropped)."""
    rank, layers, k = _grid(space, t_cap_s)
    c0 = space.cost(rank, layers, k, np.zeros_like(rank))
    pct = np.zeros_like(rank)
    if space.allow_offload:
        # The smallest offload percent that fits, by bisection (memory falls monotonically with the offloaded
        # share, but not linearly: the peak may be a transient that offload does not shrink); 101: none fits.
        fits_at = space.fits(c0)
        lo = np.where(fits_at, -1, 0)  # the largest percent known not to fit (-1: none)
        hi = np.where(fits_at, 0, np.where(space.fits(space.cost(rank, layers, k, np.full_like(rank, 100))), 100, 101))
        for _ in range(7):  # ⌈log2 101⌉ halvings
            open_ = (hi <= 100) & (hi - lo > 1)
            if not open_.any():
                break
            mid = (lo + hi) // 2
            ok_mid = space.fits(space.cost(rank, layers, k, np.clip(mid, 0, 100)))
            hi = np.where(open_ & ok_mid, mid, hi)
            lo = np.where(open_ & ~ok_mid, mid, lo)
        pct = hi.astype(np.int64)
    ok = pct <= 100
    c = space.cost(rank, layers, k, np.minimum(pct, 100)) if space.allow_offload else c0  # no offload: pct 0
    ok &= space.fits(c)
    idx = np.flatnonzero(ok)
    keep: list[np.ndarray] = []
    secondary = k + pct
    if space.single_recompute or not space.full:
        keep.append(idx)
    else:
        groups = rank[idx] * (space.model.num_layers + 1) + layers[idx]
        for g in np.unique(groups):
            sel = idx[groups == g]
            tail = c.tail_s[sel] if rank[sel[0]] == 0 else np.zeros(len(sel))
            keep.append(sel[_pareto(c.per_mb_s[sel], tail, secondary[sel])])
    sel = np.sort(np.concatenate(keep)) if keep else np.zeros(0, dtype=np.int64)
    return Options(rank[sel], layers[sel], k[sel], pct[sel], c.per_mb_s[sel], c.tail_s[sel])


@dataclass(frozen=True, slots=True)
class StageChoice:
    """The chosen per-stage plan of one global layout (floats are the cost model's, per rank)."""

    layers: list[int]
    recompute_layers: list[int]
    offload_pct: list[int]
    objective: int  # integer primary objective (units of ``unit`` seconds, times v)
    unit: float
    status: str
    solve_s: float
    options: int


def _schedules(space: StageSpace) -> int:
    """Pipeline schedules per step (``layout.pipeline_schedules``: a whole number on a valid layout)."""
    lay, w = space.layout, space.work
    return round(float(pipeline_schedules(w.global_batch, lay.dp, lay.pp, w.local_batch)))


def scale(space: StageSpace, per_mb_s: np.ndarray, tail_s: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The time unit and integer times (rounded up) of a per-stage model."""
    lay = space.layout
    m = space.work.global_batch // (lay.dp * lay.microbatch)
    upper = (m * lay.interleave + _schedules(space) * lay.pp) * float(per_mb_s.max(initial=0)) \
        + lay.interleave * float(tail_s.max(initial=0))
    tie = space.model.num_layers + 100 * lay.pp + 1
    unit = fine_time_unit(upper * tie * 2)
    return unit, to_int_time(per_mb_s, unit), to_int_time(tail_s, unit)


def coefficients(space: StageSpace) -> tuple[int, int]:
    """Integer weights of the slowest rank's time and rank 0's tail: ``m·v + n·(p − 1)`` (n schedules per step)
    and ``v``."""
    lay = space.layout
    m = space.work.global_batch // (lay.dp * lay.microbatch)
    return m * lay.interleave + _schedules(space) * (lay.pp - 1), lay.interleave


def bounded_options(space: StageSpace, upper_bound_s: float | None = None) -> Options:
    """``rank_options`` less the options whose pipeline term alone exceeds ``upper_bound_s`` (margin 1e-6)."""
    a, _ = coefficients(space)
    t_cap = None if upper_bound_s is None else upper_bound_s * space.layout.interleave / a * (1 + 1e-6)
    return rank_options(space, t_cap)


def solve_stages(space: StageSpace, *, time_limit_s: float = 10.0, seed: int = 0,
                 upper_bound_s: float | None = None, options: Options | None = None) -> StageChoice | None:
    """The per-stage optimum of ``space`` (None when no per-stage plan fits).

    ``upper_bound_s`` (a step time without the overhead factor) drops options that cannot beat it; ``options``, when
    given, are ``bounded_options(space, upper_bound_s)`` built already.
    """
    t0 = time.perf_counter()
    lay, L = space.layout, space.model.num_layers
    a, b = coefficients(space)
    opts = bounded_options(space, upper_bound_s) if options is None else options
    if len(opts.rank) == 0:
        return None
    unit, t_int, tail_int = scale(space, opts.per_mb_s, opts.tail_s)
    if upper_bound_s is not None and len(opts.rank):
        # integer times are rounded up: a plan's a·⌈t⌉ + b·⌈tail⌉ exceeds its float value by less than a + b units
        ub = to_int_time(upper_bound_s * lay.interleave * (1 + 1e-6), unit) + a + b
        tail_min = int(tail_int[opts.rank == 0].min(initial=0))
        own_tail = np.where(opts.rank == 0, tail_int, tail_min)
        keep = a * t_int + b * own_tail <= ub
        opts = opts.where(keep)
        t_int, tail_int = t_int[keep], tail_int[keep]
    p = lay.pp
    if any(not (opts.rank == i).any() for i in range(p)):
        return None
    model = cp_model.CpModel()
    x = [model.NewBoolVar(f"x{j}") for j in range(len(opts.rank))]
    for i in range(p):
        model.AddExactlyOne([x[j] for j in np.flatnonzero(opts.rank == i)])
    model.Add(sum(int(n) * xj for n, xj in zip(opts.layers, x, strict=True)) == L)
    z = model.NewIntVar(0, int(t_int.max()), "z")
    for i in range(p):
        js = np.flatnonzero(opts.rank == i)
        model.Add(z >= sum(int(t_int[j]) * x[j] for j in js))
    tail = sum(int(tail_int[j]) * x[j] for j in np.flatnonzero(opts.rank == 0))
    if space.single_recompute and space.full:
        # One count K per model chunk (Megatron's --recompute-method block): a rank of n layers in v chunks
        # recomputes v·K of them, or all n once K reaches its largest chunk (see ``chunk_recompute``).
        v = lay.interleave
        kvar = model.NewIntVar(0, L, "k")
        for j, xj in enumerate(x):
            n, k = int(opts.layers[j]), int(opts.k[j])
            if k == n:
                model.Add(kvar >= -(-n // v)).OnlyEnforceIf(xj)
            elif k % v == 0:
                model.Add(kvar == k // v).OnlyEnforceIf(xj)
            else:
                model.Add(xj == 0)  # no single per-chunk count recomputes exactly k of this rank's layers
    tie = L + 100 * p + 1
    secondary = sum(int(opts.k[j] + opts.pct[j]) * xj for j, xj in enumerate(x) if opts.k[j] + opts.pct[j])
    model.Minimize((a * z + b * tail) * tie + secondary)
    _hint(model, x, opts, uniform_split(L, p))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    # One exactly-one per rank, one sum and the max: presolve finds nothing to remove and costs most of the solve
    # (Qwen3-235B on 256 H100: 14 solves 0.125 → 0.035 s, same optima; benchmarks/RESULTS.md wave 18)
    solver.parameters.cp_model_presolve = False
    status = solver.Solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    chosen = [j for j, xj in enumerate(x) if solver.Value(xj)]
    chosen.sort(key=lambda j: opts.rank[j])
    # The objective from the solution's integers (CP-SAT reports it as a double, off by rounding when large).
    objective = a * max(int(t_int[j]) for j in chosen) + b * int(tail_int[chosen[0]])
    return StageChoice(
        layers=[int(opts.layers[j]) for j in chosen], recompute_layers=[int(opts.k[j]) for j in chosen],
        offload_pct=[int(opts.pct[j]) for j in chosen], objective=objective, unit=unit,
        status="optimal" if status == cp_model.OPTIMAL else "feasible", solve_s=time.perf_counter() - t0,
        options=len(x))


def chunk_recompute(count: int, layers: int, v: int) -> int:
    """Layers a rank of ``layers`` layers in ``v`` chunks (the first chunks taking the remainder) recomputes
    when the first ``count`` layers of every chunk are recomputed (Megatron's block method, transformer_block.py)."""
    return sum(min(count, c) for c in chunk_layers(layers, v))


def _hint(model: cp_model.CpModel, x: list, opts: Options, split: list[int]) -> None:
    """Hint the uniform split's fastest options (when they survived)."""
    for i, n in enumerate(split):
        js = np.flatnonzero((opts.rank == i) & (opts.layers == n))
        if len(js) == 0:
            return
    for i, n in enumerate(split):
        js = np.flatnonzero((opts.rank == i) & (opts.layers == n))
        best = js[np.argmin(opts.per_mb_s[js])]
        for j in np.flatnonzero(opts.rank == i):
            model.AddHint(x[j], int(j == best))
