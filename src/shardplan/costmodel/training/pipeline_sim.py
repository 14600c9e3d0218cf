"""Megatron-Core's 1F1B pipeline schedules, simulated: what model chunks of unequal size cost.

The step's pipeline term ``(m + (p−1)/v)·T`` (Narayanan et al. 2021 §2.2) holds when every model chunk of every
rank takes ``T/v``. When a rank's ``n`` layers do not divide into its ``v`` chunks (the first chunks take the
remainder: ``chunk_layers``, as ``--pipeline-model-parallel-layout`` is written by the Megatron export), the
interleaved schedule's fixed order makes ranks wait on each other in the steady state too, not only in fill and
drain: with 8 ranks of 12 layers in 8 chunks (2,2,2,2,1,1,1,1) the schedule takes 4.9% longer than the closed form
at 128 microbatches.

``simulate`` runs each rank's operations in Megatron-Core's order (megatron/core/pipeline_parallel/schedules.py at
d98e8a6: ``forward_backward_pipelining_without_interleaving`` warms up with ``p − r − 1`` forwards; the interleaved
schedule with ``2(p − r − 1) + (v − 1)·p``, model chunk ``(k mod p·v) // p`` of microbatch group ``k // (p·v)``,
backward chunks in reverse), each as soon as its rank is free and its inputs exist: the forward of virtual stage
``s = c·p + r`` after the forward of ``s − 1``, its backward after its forward and the backward of ``s + 1``.
Sends take no time unless ``hop`` is given: then every input from another rank arrives ``hop`` after it is
produced (with ``p > 1`` every virtual stage's neighbours live on other ranks). Interleaved, the simulated step then
grows by exactly ``2·(p·v − 1)·hop`` at any ``m`` when the ranks' chunks are equal (checked for sends up to a
chunk's forward; an LM head on the last chunk or a light first chunk keeps it): the first microbatch's forward
passes every virtual stage and the last one's backward passes them all back, and Megatron's fixed order leaves no
slack on that chain (the wrap from the last rank to rank 0 is tight: rank 0 finishes its group of ``p`` forwards of
chunk ``c`` just as the group's first microbatch could come back for chunk ``c + 1``). A rank slower than the rest
gives the others spare time that absorbs sends. ``schedule_overlap.pipeline_send_s`` prices the chain.

``chunk_factor`` is the simulated schedule over the closed form for a split's chunks, a layer's forward taking 1
and its backward 2 (the backward's two GEMMs per forward GEMM), never below 1: the closed form charges the heaviest
rank to every slot, which the simulation of ranks with spare time undercuts by up to ~3%; that over-charge is the
closed form's for every split and is left to it, so only the schedule's loss to unequal chunks is added.
For ``m`` a multiple of ``p`` from ``2p`` on, the simulated makespan is exactly linear in ``m`` (one microbatch
group repeats the same pattern), so two short simulations price any ``m``.
"""

from __future__ import annotations

from functools import cache

import numpy as np

FWD_UNITS = 1.0  # a layer's forward, in the simulation's time unit
BWD_UNITS = 2.0  # its backward: input and weight gradients, two GEMMs per forward GEMM


def uniform_split(num_layers: int, pp: int) -> list[int]:
    """``stages.stage_shapes``'s rule made explicit: even, remainder on middle ranks first, then first, last."""
    base, extra = divmod(num_layers, pp)
    counts = [base] * pp
    middles = list(range(1, pp - 1))
    for i in range(extra):
        counts[middles[i] if i < len(middles) else (0 if i == len(middles) else pp - 1)] += 1
    return counts


def chunk_layers(n: int, v: int) -> list[int]:
    """``n`` layers in ``v`` model chunks, the first chunks taking the remainder."""
    return [n // v + (1 if c < n % v else 0) for c in range(v)]


def schedule_order(p: int, v: int, m: int, r: int) -> list[tuple[str, int, int]]:
    """Rank ``r``'s (phase "F"/"B", microbatch, model chunk) in Megatron-Core's order: warm-up forwards, alternating
    forward/backward, cool-down backwards. Interleaved (v > 1): microbatches run in groups per model chunk, of ``p``
    microbatches, or of all ``m`` when ``p`` does not divide ``m`` (schedules.py ``get_schedule_table`` and its
    group-size check); backward chunks in reverse."""
    size = p if m % p == 0 else m
    groups = [range(g, min(g + size, m)) for g in range(0, m, size)]
    fwd = [(mb, c) for grp in groups for c in range(v) for mb in grp]
    bwd = [(mb, c) for grp in groups for c in reversed(range(v)) for mb in grp]
    total = m * v
    warm = min(total, p - r - 1 if v == 1 else 2 * (p - r - 1) + (v - 1) * size)  # get_pp_rank_microbatches
    ops = [("F", *fwd[k]) for k in range(warm)]
    for k in range(total - warm):
        ops += [("F", *fwd[warm + k]), ("B", *bwd[k])]
    return ops + [("B", *bwd[k]) for k in range(total - warm, total)]


def simulate(p: int, v: int, m: int, fwd: list[list[float]], bwd: list[list[float]], hop: float = 0.0) -> float:
    """Makespan of one schedule; ``fwd[r][c]``, ``bwd[r][c]``: chunk ``c``'s times on rank ``r`` per microbatch;
    ``hop``: a send's time from one rank to the next (the output waits for it, the sender does not)."""
    stages = p * v
    # Operation (phase, microbatch, virtual stage) as one index into ``done``; -1: not run yet.
    def index(phase: str, mb: int, s: int) -> int:
        return ((phase == "B") * m + mb) * stages + s

    # per rank, parallel lists: the operation's index, its two inputs' (``zero``: none, always done at 0), the
    # first input's arrival delay (a neighbour's output: ``hop``; its own forward: none) and time
    zero = 2 * m * stages
    ops: list[tuple[list[int], list[int], list[int], list[float], list[float]]] = []
    for r in range(p):
        me, d1, d2, ts, late = [], [], [], [], []
        for phase, mb, c in schedule_order(p, v, m, r):
            s = c * p + r
            me.append(index(phase, mb, s))
            if phase == "F":
                d1.append(index("F", mb, s - 1) if s > 0 else zero)
                late.append(hop if s > 0 else 0.0)
                d2.append(zero)
                ts.append(fwd[r][c])
            else:  # the neighbour's gradient first: the delay applies to it
                d1.append(index("B", mb, s + 1) if s < stages - 1 else zero)
                late.append(hop if s < stages - 1 else 0.0)
                d2.append(index("F", mb, s))
                ts.append(bwd[r][c])
        ops.append((me, d1, d2, ts, late))
    done = [-1.0] * zero + [0.0]
    pos, free = [0] * p, [0.0] * p
    moved = True
    while moved:
        moved = False
        for r in range(p):
            me, d1, d2, ts, late = ops[r]
            i, t_free, n = pos[r], free[r], len(me)
            while i < n:
                a, b = done[d1[i]], done[d2[i]]
                if a < 0.0 or b < 0.0:
                    break
                a += late[i]
                t_free = done[me[i]] = (t_free if t_free > a and t_free > b else a if a > b else b) + ts[i]
                i += 1
            if i != pos[r]:
                pos[r], free[r], moved = i, t_free, True
    if any(pos[r] != len(ops[r][0]) for r in range(p)):
        raise RuntimeError("the pipeline schedule deadlocked")  # cannot happen for Megatron's orders
    return max(free)


def uneven_chunks(split: tuple[int, ...], v: int) -> bool:
    """Some rank's layers do not divide into its ``v`` chunks."""
    return v > 1 and any(n % v for n in split)


def _split_makespan(split: tuple[int, ...], v: int, m: int) -> float:
    per_rank = [chunk_layers(n, v) for n in split]
    return simulate(len(split), v, m, [[FWD_UNITS * c for c in cs] for cs in per_rank],
                    [[BWD_UNITS * c for c in cs] for cs in per_rank])


@cache
def _line(split: tuple[int, ...], v: int) -> tuple[float, float]:
    """Intercept and slope of the makespan in ``m`` (``m`` a multiple of ``p``, ``m ≥ 2p``)."""
    p = len(split)
    two, three = _split_makespan(split, v, 2 * p), _split_makespan(split, v, 3 * p)
    slope = (three - two) / p
    return two - slope * 2 * p, slope


@cache
def chunk_factor(split: tuple[int, ...], v: int, m: int) -> float:
    """Simulated schedule over ``(m + (p−1)/v)·max(n)`` for ``m`` microbatches per schedule, at least 1; exactly 1
    when every rank's chunks are equal."""
    if not uneven_chunks(split, v) or max(split) % v == 0:
        # The heaviest ranks' chunks are equal, so no chunk anywhere is longer than theirs; the schedule's end times
        # are maxima and sums of operation times, never shorter when one grows, so growing every chunk to theirs
        # (the closed form's equal-chunk schedule) bounds it: the factor is 1 without simulating.
        return 1.0
    p = len(split)
    if m % p:
        raise ValueError(f"the interleaved schedule needs m ({m}) a multiple of pp ({p})")
    if m < 2 * p:
        sim = _split_makespan(split, v, m)
    else:
        a, b = _line(split, v)
        sim = a + b * m
    closed = (m + (p - 1) / v) * (FWD_UNITS + BWD_UNITS) * max(split)
    return max(1.0, sim / closed)


def chunk_factors(num_layers: int, pp: np.ndarray, v: np.ndarray, m_per_schedule: np.ndarray) -> np.ndarray:
    """``chunk_factor`` of each row's uniform split (``uniform_split``: ranks of ``⌊L/p⌋`` or one more layer),
    computed once per distinct (pp, v, m) among the rows whose heaviest ranks' chunks are unequal (1 for the rest)."""
    pp, v, m = np.broadcast_arrays(np.asarray(pp, dtype=np.int64), np.asarray(v, dtype=np.int64),
                                   np.rint(np.asarray(m_per_schedule, dtype=float)).astype(np.int64))
    out = np.ones(pp.shape)
    p = np.maximum(pp, 1)
    base, extra = num_layers // p, num_layers % p
    uneven = (v > 1) & (pp > 1) & ((base + (extra > 0)) % v != 0)  # the heaviest ranks' chunks unequal (chunk_factor)
    rows = uneven & (m > 0) & (m % p == 0)
    if not rows.any():
        return out
    keys, inverse = np.unique((pp[rows] * 1024 + v[rows]) * 2**32 + m[rows], return_inverse=True)
    vals = np.array([chunk_factor(tuple(uniform_split(num_layers, int(k >> 42))), int((k >> 32) & 1023),
                                  int(k & (2**32 - 1))) for k in keys])
    out[rows] = vals[inverse.ravel()]
    return out
