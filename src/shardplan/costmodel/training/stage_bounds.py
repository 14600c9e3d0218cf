"""Lower bounds on a global layout's best per-stage step time, for many layouts at once (numpy).

Per rank ``i`` the work per microbatch is, for ``n ≥ lo_i`` layers, ``g_i(n) = t_i + a_i·(n − lo_i) + r_i·k_i(n)``
where ``k_i(n) = max(0, (M_i + B_i·(n − lo_i) − C)/s_i)`` is the fewest fully recomputed layers that fit
memory ``C`` (stored bytes fall by ``s_i`` per recomputed layer, each costs ``r_i`` more time). Sends are
included, exposed offload traffic is not (it is never negative). Time and memory are affine in a rank's layers
and recomputed layers (``stage_split``'s per-rank costs), so ``g_i`` is convex piecewise linear and the best
split's slowest rank is at least the smallest ``T`` with ``Σ_i max{n integer : g_i(n) ≤ T} ≥ L`` (``k``
continuous: a relaxation), found by bisection. Where the recompute term is not exact it is left out (a weaker bound):
activation offload can replace recompute, ZeRO-3's gathered unit (without PP) is not affine in layers, and rank 0's
dense-first layers make its per-layer averages vary.

A rank already over memory ``C`` at its fewest layers pays the recompute its excess needs from there on (``g``
jumps at ``lo_i``). Each rank also holds at most the layers that fit its memory with the fewest-memory choices.
``pipeline ≥ (m + (p−1)/v)·T`` and rank 0's tail ≥ ``dp_sync.tail_floor`` of its fewest layers (the balance bound).

Rank 0's tail (gradient sync, ZeRO-3 gathers, optimizer step) grows with its layers while the others' time falls,
so rows the balance bound leaves below the incumbent also get the joint bound ``min over n₀ of
(m + (p−1)/v)·max(g₀(n₀), R(L − n₀)) + tail₀(n₀)``: ``R(K)`` the smallest time at which ranks 1… hold ``K``
layers, ``tail₀(n₀)`` rank 0's tail with ``n₀`` layers and the longest backward its recompute allows (the
exposed gradient reduction never grows with the backward it hides behind).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.dp_sync import data_parallel, fsdp_under_pp, optimizer_time, tail_floor
from shardplan.costmodel.training.evaluate import gpu_capacity
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload, fill_drain_slots
from shardplan.costmodel.training.stage_memory import stage_memory
from shardplan.costmodel.training.stage_split import min_first_layers, rank_shape
from shardplan.costmodel.training.stage_sums import SharedSums
from shardplan.costmodel.training.stages import KindTable, kind_table
from shardplan.costmodel.training.step import StageCost, _stage, stage_times
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec

ALL = 10**9


def stage_lower_bounds(model: ModelSpec, system: SystemSpec, work: TrainWorkload, rows: LayoutArrays, *,
                       free_recompute: bool, allow_offload: bool, cutoff: np.ndarray | None = None,
                       kinds: KindTable | None = None, known_fit: bool = False) -> np.ndarray:
    """Per row: a lower bound on the step time (without the overhead factor) over every per-rank split,
    recompute count and activation offload; ``inf`` where no split can fit GPU memory. Rows whose balance bound
    stays below ``cutoff`` (all rows without one) also get the joint bound on rank 0's layers and tail.
    ``kinds``: the rows' per-kind costs when the caller has them (they do not depend on recompute or offload).
    ``known_fit``: every row is known to pass the fit test (the call on the rows that do), so the stages it reads
    are costed whole at once; otherwise the test reads their memory alone (``stage_memory``): most rows fail it, and
    the others are bounded in a call on them."""
    n_rows = len(rows)
    if n_rows == 0:
        return np.zeros(0)
    L = model.num_layers
    p_row = rows.pp.astype(np.int64)
    row = np.repeat(np.arange(n_rows), p_row)
    rank = np.arange(len(row)) - np.repeat(np.cumsum(p_row) - p_row, p_row)  # 0 … pp−1 within each row
    sub = rows.take(row)
    recompute = (sub.rc == 2) & free_recompute
    ctx_all = Ctx(model, system, work, sub.replace(rk=np.where(recompute, ALL, sub.rk),
                                                  f_act=np.ones(len(row)) if allow_offload else sub.f_act))
    m = (sub.gb / (sub.dp * sub.mb)).astype(float)
    p = sub.pp.astype(float)
    lo = np.where(rank == 0, np.maximum(sub.v, min_first_layers(model)), sub.v).astype(float)
    hi = L - (np.bincount(row, weights=lo, minlength=n_rows)[row] - lo)

    # nothing recomputed where recompute is free; the row's own count where it is pinned
    ctx_fix = Ctx(model, system, work, sub.replace(rk=np.where(recompute, 0, sub.rk),
                                                  f_act=np.ones(len(row)) if allow_offload else sub.f_act))
    entries = kind_table(ctx_fix) if kinds is None else kinds.take(row)
    # a rank's stage follows from its row's pp, its rank and its layers (from v): sums shared by those
    shared = SharedSums.of(entries, sub.sel, [rank, sub.v])

    def stage(ctx: Ctx, layers: np.ndarray) -> StageCost:
        shape = rank_shape("bound", model, rank, layers, p)
        return _stage(ctx, None, shape, m, shared.sums(shape))

    def memory(ctx: Ctx, layers: np.ndarray) -> np.ndarray:  # ``stage(ctx, layers).total``, without the times
        shape = rank_shape("bound", model, rank, layers, p)
        return stage_memory(ctx, None, shape, m, shared.sums(shape)).total

    r1 = stage(ctx_all, lo + 1) if known_fit else None  # every layer recomputed (where free)
    a0 = a1 = None  # nothing recomputed
    if known_fit and allow_offload:
        a0, a1 = stage(ctx_fix, lo), stage(ctx_fix, lo + 1)
    cap = gpu_capacity(system, work)
    # ZeRO-3 without PP gathers one unit at a time (a buffer not affine in layers); under PP it keeps the stage
    gathers = (sub.zero >= 3) & ~fsdp_under_pp(sub)
    # Memory with the fewest-memory choices, for the fit test: everything or nothing recomputed (where free) with
    # every offloadable activation on the CPU. A recomputed layer's activations are live during its backward and
    # cannot be offloaded, so with offload nothing recomputed can take less memory than everything.
    def most_layers(m_lo: np.ndarray, m_lo1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        grow = m_lo1 - m_lo
        spare = np.divide(cap - m_lo, grow, out=np.full(len(row), np.inf), where=grow > 0)
        most = np.where(gathers, hi, np.minimum(hi, lo + np.floor(spare * (1 + 1e-9) + 1e-9)))
        return most, m_lo <= cap * (1 + 1e-12)

    most, rank_ok = most_layers(memory(ctx_all, lo), memory(ctx_all, lo + 1) if r1 is None else r1.total)
    if allow_offload:
        most_f, ok_f = most_layers(memory(ctx_fix, lo) if a0 is None else a0.total,
                                   memory(ctx_fix, lo + 1) if a1 is None else a1.total)
        most, rank_ok = np.where(ok_f & (~rank_ok | (most_f > most)), most_f, most), rank_ok | ok_f
    fit = np.bincount(row, weights=~rank_ok, minlength=n_rows) == 0
    fit &= np.bincount(row, weights=np.where(rank_ok, most, 0), minlength=n_rows) >= L
    if not fit.all():  # rows that cannot fit are bounded out: the rest (independent per row) on the fitting rows only
        out, keep = np.full(n_rows, np.inf), np.flatnonzero(fit)
        if len(keep):
            out[keep] = stage_lower_bounds(model, system, work, rows.take(keep), free_recompute=free_recompute,
                                           allow_offload=allow_offload, cutoff=None if cutoff is None else cutoff[keep],
                                           kinds=None if kinds is None else kinds.take(keep),
                                           known_fit=True)
        return out
    if r1 is None:
        r1 = stage(ctx_all, lo + 1)
    if a0 is None or a1 is None:
        a0, a1 = stage(ctx_fix, lo), stage(ctx_fix, lo + 1)
    t0 = a0.fwd_s + a0.bwd_s
    slope = (a1.fwd_s + a1.bwd_s) - t0
    # Recompute term: exact only without offload, without ZeRO-3's gathered unit, off rank 0 of dense-first.
    exact = recompute & (not allow_offload) & ~gathers & ~((rank == 0) & (min_first_layers(model) > 0))
    r = np.where(exact, ((r1.fwd_s + r1.bwd_s) - (a1.fwd_s + a1.bwd_s)) / (lo + 1), 0.0)
    # Memory one more recomputed layer frees (the marginal saving: recomputing all lo + 1 layers vs lo of them).
    # The first recomputed layer also costs a transient (its activations during its backward), so the average
    # saving is smaller; a lower bound takes the larger, marginal one and ignores the transient.
    ctx_most = Ctx(model, system, work, sub.replace(rk=np.where(recompute, lo.astype(np.int64), sub.rk),
                                                   f_act=ctx_fix.rows.f_act))
    s = np.where(exact, memory(ctx_most, lo + 1) - r1.total, 0.0)
    mem0, b = a0.total, a1.total - a0.total
    use = exact & (r > 0) & (s > 0)
    steep = slope + np.divide(r * b, s, out=np.zeros(len(row)), where=use)
    knee = np.where(use & (b > 0), lo + np.divide(cap - mem0, b, out=np.zeros(len(row)), where=b > 0),
                    np.where(use & (mem0 > cap), lo, np.inf))
    knee = np.maximum(knee, lo)
    # Over memory already at its fewest layers: every layer count pays the recompute its excess needs (a jump at lo).
    over = use & (knee == lo) & (mem0 > cap)
    g_knee = t0 + slope * (knee - lo) + np.divide(r * np.maximum(mem0 - cap, 0), s, out=np.zeros(len(row)),
                                                  where=over)
    lines = _RankLines(lo, np.minimum(most, hi), t0, slope, knee, g_knee, steep, over)

    # what every step of the bisection reads, once: the divisions write only where the slope is positive, so the
    # rest of their buffers stays inf
    rising, steeper = slope > 0, steep > 0
    lin_buf, bent_buf = np.full(len(row), np.inf), np.full(len(row), np.inf)
    with np.errstate(invalid="ignore"):  # inf − inf where a rank never recomputes: the branch is not taken
        g_lo = lines.g(lo)

    def layers_within(T: np.ndarray) -> np.ndarray:
        Tr = T[row]
        lin = lo + np.divide(Tr - t0, slope, out=lin_buf, where=rising)
        bent = knee + np.divide(Tr - g_knee, steep, out=bent_buf, where=steeper)
        x = np.where(over, bent, np.where(lin <= knee, lin, np.maximum(bent, np.minimum(lin, knee))))
        # whole layers, at most what fits the rank's memory
        x = np.where(g_lo > Tr * (1 + 1e-12), -np.inf, np.minimum(np.floor(x + 1e-9), most))
        return np.bincount(row, weights=np.where(np.isfinite(x) | (x > 0), x, -1e18), minlength=n_rows)

    low = np.zeros(n_rows)
    high = np.zeros(n_rows)
    with np.errstate(invalid="ignore"):  # inf − inf where a rank never recomputes: the branch is not taken
        np.maximum.at(high, row, lines.g(hi))
        for _ in range(60):
            mid = (low + high) / 2
            ok = layers_within(mid) >= L * (1 - 1e-12)
            high = np.where(ok, mid, high)
            low = np.where(ok, low, mid)
    factor = (rows.gb / (rows.dp * rows.mb)) + fill_drain_slots(rows.gb, rows.dp, rows.pp, rows.v, work.local_batch)
    first = rank == 0
    tail = np.zeros(n_rows)
    tail[row[first]] = tail_floor(ctx_fix, a0)[first]
    bound = np.where(fit, factor * low + tail, np.inf)
    todo = fit & (bound < (np.inf if cutoff is None else cutoff))
    if todo.any():
        with np.errstate(invalid="ignore"):
            tails = _Rank0Tails(model, system, work, sub, entries, recompute, m)
            bound[todo] = np.maximum(bound[todo], _joint_bounds(lines, tails, row, rank, todo, factor, L))
    return bound


@dataclass(frozen=True, slots=True)
class _RankLines:
    """Per (row, rank) entry: ``g(n)``, a lower bound on the rank's time per microbatch with ``n`` layers
    (piecewise linear, convex: affine up to ``knee``, steeper beyond where recompute must free memory), and
    ``top``, the most layers the rank may hold."""

    lo: np.ndarray
    top: np.ndarray
    t0: np.ndarray
    slope: np.ndarray
    knee: np.ndarray
    g_knee: np.ndarray
    steep: np.ndarray
    over: np.ndarray  # over memory at ``lo`` layers: the steep part from ``lo`` on

    def g(self, x: np.ndarray, idx: np.ndarray | slice = slice(None)) -> np.ndarray:
        """``g`` of entries ``idx`` at ``x`` (shape ``(len(idx),)`` or ``(len(idx), J)``)."""
        def col(a: np.ndarray) -> np.ndarray:
            return a[idx].reshape(a[idx].shape + (1,) * (np.ndim(x) - 1))

        lin = col(self.t0) + col(self.slope) * (x - col(self.lo))
        bent = col(self.g_knee) + col(self.steep) * (x - col(self.knee))
        return np.where(~col(self.over) & (x <= col(self.knee)), lin, bent)


@dataclass(frozen=True, slots=True)
class _Rank0Tails:
    """What rank 0's tail (gradient sync, ZeRO-3 gathers, optimizer step) needs, per (row, rank) entry."""

    model: ModelSpec
    system: SystemSpec
    work: TrainWorkload
    sub: LayoutArrays
    kinds: KindTable  # the entries'
    recompute: np.ndarray  # recompute count free (full): every layer recomputed gives the smallest tail
    m: np.ndarray

    def at(self, ent: np.ndarray, layers: np.ndarray) -> np.ndarray:
        """A lower bound on rank 0's tail with ``layers`` layers, for entries ``ent``: the tail with every layer
        recomputed where the count is free (the longest last backward hides the most of the gradient
        reduction: ``dp_sync.data_parallel``'s exposure never grows with the window), else the row's count."""
        sub = self.sub.take(ent)
        fl = layers.astype(float)
        ctx = Ctx(self.model, self.system, self.work,
                  sub.replace(rk=np.where(self.recompute[ent], layers.astype(np.int64), sub.rk)))
        kinds = self.kinds.take(ent).expand()
        p = sub.pp
        st = _stage(ctx, kinds, rank_shape("bound", self.model, np.zeros(len(ent), dtype=np.int64), fl, p),
                    self.m[ent])
        dp_exposed, z3 = data_parallel(ctx, st, self.m[ent])
        return dp_exposed + z3 + optimizer_time(ctx, st)


def _joint_bounds(lines: _RankLines, tails: _Rank0Tails, row: np.ndarray, rank: np.ndarray, todo: np.ndarray,
                  factor: np.ndarray, L: int) -> np.ndarray:
    """Rows ``todo``: ``min over n₀ of factor·max(g₀(n₀), R(L − n₀)) + tail₀(n₀)``, where ``R(K)`` is the
    smallest time at which ranks 1… can hold ``K`` layers (each rank ``i`` at most ``max{n : ĝᵢ(n) ≤ T}``, ``ĝ``
    the suffix minimum of ``g``, so it is exact for any ``g``). Any plan with ``n₀`` layers on rank 0 has its
    slowest rank ≥ both terms and rank 0's tail ≥ ``tail₀(n₀)``: rank 0's layers trade its tail (a smaller
    stage reduces fewer gradients) against the others' time."""
    sel = np.flatnonzero(todo)
    where = np.full(len(todo), -1)
    where[sel] = np.arange(len(sel))
    e_sel = todo[row]
    # Ranks ≥ 1: ĝ at every layer count, as sorted increments per row.
    ei = np.flatnonzero(e_sel & (rank > 0))
    span = (lines.top[ei] - lines.lo[ei]).astype(np.int64)
    n = lines.lo[ei][:, None] + np.arange(max(int(span.max(initial=0)), 0) + 1)
    valid = n <= lines.top[ei][:, None]
    env = np.minimum.accumulate(np.where(valid, lines.g(n, ei), np.inf)[:, ::-1], axis=1)[:, ::-1]
    r_of = where[row[ei]]
    base = np.full(len(sel), -np.inf)
    np.maximum.at(base, r_of, np.where(valid[:, 0], env[:, 0], np.inf))
    lo_rest = np.bincount(r_of, weights=lines.lo[ei], minlength=len(sel))
    inc_ok = valid[:, 1:]
    inc_row = np.broadcast_to(r_of[:, None], inc_ok.shape)[inc_ok]
    inc = env[:, 1:][inc_ok]
    order = np.lexsort((inc, inc_row))
    inc = inc[order]
    count = np.bincount(inc_row, minlength=len(sel))
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    # Rank 0: each layer count it may hold.
    fi = np.flatnonzero(e_sel & (rank == 0))
    r0 = where[row[fi]]
    n0 = lines.lo[fi][:, None] + np.arange(max(int((lines.top[fi] - lines.lo[fi]).max(initial=0)), 0) + 1)
    ok0 = n0 <= lines.top[fi][:, None]
    need = (L - n0 - lo_rest[r0][:, None]).astype(np.int64)  # increments the other ranks must take
    ok0 &= (need >= 0) & (need <= count[r0][:, None])
    pick = np.clip(start[r0][:, None] + need - 1, 0, max(len(inc) - 1, 0))
    rest = np.where(need > 0, inc[pick] if len(inc) else np.inf, -np.inf)
    worst = np.maximum(np.maximum(lines.g(n0, fi), rest), base[r0][:, None])
    tail = np.full(n0.shape, np.inf)
    ent = np.broadcast_to(fi[:, None], n0.shape)[ok0]
    tail[ok0] = tails.at(ent, n0[ok0])
    total = np.where(ok0, factor[sel][r0][:, None] * worst + tail, np.inf)
    out = np.full(len(sel), np.inf)
    np.minimum.at(out, r0, total.min(axis=1, initial=np.inf))
    return out


def average_lower_bounds(model: ModelSpec, system: SystemSpec, work: TrainWorkload, rows: LayoutArrays, *,
                         free_recompute: bool, kinds: KindTable | None = None) -> np.ndarray:
    """A cheaper, weaker bound (no memory): the slowest rank is at least the average of the ranks' fastest
    work (layer work adds up over ranks), plus rank 0's smallest tail (``dp_sync.tail_floor``). ``kinds``: the
    rows' per-kind costs when the caller has them."""
    n = len(rows)
    recompute = (rows.rc == 2) & free_recompute
    fast = rows.replace(rk=np.where(recompute, 0, rows.rk), f_act=np.zeros(n))
    ctx = Ctx(model, system, work, fast)
    # the stages below follow from a row's pp and v: sums shared by the rows with the same per-kind costs and v
    shared = SharedSums.of(kind_table(ctx) if kinds is None else kinds, rows.sel, [rows.v])
    p, v = rows.pp.astype(float), rows.v.astype(float)
    m = (rows.gb / (rows.dp * rows.mb)).astype(float)

    def shape_of(rank: np.ndarray, layers: np.ndarray):
        return rank_shape("bound", model, rank, np.asarray(layers, dtype=float), p)

    def work_of(rank: np.ndarray, layers: np.ndarray) -> np.ndarray:  # time alone: no memory is read
        shape = shape_of(rank, layers)
        return stage_times(ctx, None, shape, m, shared.sums(shape)).work_s

    zero = np.zeros(n)
    c_first = work_of(zero, zero)
    c_mid = work_of(np.ones(n), zero)
    c_last = work_of(p - 1, zero)
    everything = work_of(zero, np.full(n, float(model.num_layers)))
    total = c_first + c_last + np.maximum(p - 2, 0) * c_mid + (everything - c_first)
    shape0 = shape_of(zero, np.maximum(v, min_first_layers(model)))
    st0 = _stage(ctx, None, shape0, m, shared.sums(shape0))
    return (m + ctx.fill_slots) * total / p + tail_floor(ctx, st0)
