"""What the interleaved (virtual) pipeline schedule hides: per-chunk gradient reduction, per-chunk parameter gathers
and asynchronous sends.

Megatron-Core's interleaved 1F1B (``forward_backward_pipelining_with_interleaving``, megatron/core/
pipeline_parallel/schedules.py at d98e8a6) runs microbatches in groups of ``microbatch_group_size_per_vp_stage``
(default: the pipeline size ``p``), each group through chunk 0, 1, …, v−1 forward and v−1, …, 0 backward
(``get_schedule_table``, ``get_model_chunk_id(forward=False) = v − 1 − chunk``). So in the last group, after
chunk ``j``'s last backward this rank still runs ``j·g`` backward chunk-microbatches (``g`` the last group's size).
Every model chunk is its own DDP module (the first with buckets, the others one bucket each: ``ddp_buckets``), and
with ``--overlap-grad-reduce`` the schedule
launches a chunk's gradient reduction (``grad_sync_func[chunk]``) when its last backward ends
(``is_last_microbatch_for_model_chunk``; with ``align_grad_reduce`` rank ``r`` waits ``r`` more chunk-microbatches,
which lines the launches up in time across the pipeline, rank 0 finishing last).
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.training.ctx import Ctx


def backwards_after_chunk(p: np.ndarray, v: np.ndarray, m: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Backward chunk-microbatches a rank runs after chunk ``j``'s last one: ``j·g``, ``g`` the last microbatch
    group's size (Megatron: ``m mod p`` when nonzero, it must then be ≥ p, else ``p``; ``m`` when under ``p``)."""
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    rem = np.mod(m, p)
    g = np.where(m < p, m, np.where(rem > 0, rem, p))
    return np.asarray(j, dtype=float) * g


def chunked_reduce_exposed(t: np.ndarray, edge: np.ndarray, bwd_s: np.ndarray, bucket: np.ndarray,
                           params: np.ndarray, p: np.ndarray, v: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Exposed time of a gradient reduction taking ``t`` for the whole stage when each of its ``v`` chunks
    (``t/v`` each, ``params/v`` parameters, ``bwd_s/v`` backward per microbatch) starts with its chunk's last
    backward, and the network serves the chunks one after another.

    Time 0 is the rank's last backward's end; chunk ``j``'s last backward ends at ``−j·g·b`` (``b = bwd_s/v``,
    ``backwards_after_chunk``), and its first bucket fills after ``bucket/(params/v)`` of that backward. Chunk
    ``v−1`` goes first, so the queue ends at ``max_k (k+1)·t/v − k·g·b − fill_k``. Megatron buckets chunk 0
    only (the chunks after it are one bucket each: megatron/training/models/dist_utils.py@d98e8a6 l.357-372), so
    ``fill_0 = b·(1 − share)`` and ``fill_k = 0`` above it, where the maximum, linear in ``k``, is at ``k = 1`` or
    ``k = v−1``; the edge bucket (the last one of chunk 0) waits for time 0. With ``v = 1`` this is
    ``max(t − bwd_s·(1 − bucket/params), edge)``, the single-chunk rule."""
    v = np.asarray(v, dtype=float)
    b = bwd_s / v
    share = np.minimum(bucket / np.maximum(params / v, 1.0), 1.0)
    first = t / v - b * (1 - share)
    later = np.maximum(2 * t / v - backwards_after_chunk(p, v, m, 1) * b,
                       t - backwards_after_chunk(p, v, m, v - 1) * b)
    return np.maximum(np.where(v > 1, np.maximum(first, later), first), edge)


def chunked_gather_exposed(t: np.ndarray, edge: np.ndarray, fwd_s: np.ndarray, bucket: np.ndarray,
                           params: np.ndarray, p: np.ndarray, v: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Exposed time of the distributed optimizer's parameter all-gather (``t`` for the whole stage) under the
    next step's forward when each of the ``v`` chunks gathers its own ``t/v``: chunks 0 and 1 are launched at the
    step's start, chunk ``k+1`` when chunk ``k``'s first forward starts (``param_sync_func`` with
    ``align_param_gather``, the default; schedules.py@d98e8a6 ``forward_step_helper_preprocess``), and a chunk's
    first forward comes after the first microbatch group, ``g0 = min(p, m)`` forwards, of the chunk before it.

    ``start_param_sync`` dispatches a chunk's bucket groups in bucket order, and the buckets hold the parameters
    in reverse (backward) order (megatron/core/distributed/distributed_data_parallel.py@d98e8a6), so chunk 0's first
    forward waits for all of its ``t/v`` (``f = fwd_s/v``); chunk 1 queues behind it on the network and is needed
    ``g0·f`` later; each later chunk has ``g0·f`` from its launch. Without interleaving Megatron-LM turns
    ``align_param_gather`` off and the forward pre-hooks start each next bucket as the forward reaches it, so one
    chunk streams under its forward: ``max(t − fwd_s·(1 − bucket/params), edge)``, the single-chunk rule."""
    v = np.asarray(v, dtype=float)
    f, c = fwd_s / v, t / v
    g0 = np.minimum(np.asarray(p, dtype=float), np.asarray(m, dtype=float))
    share = np.minimum(bucket / np.maximum(params / v, 1.0), 1.0)
    first = np.where(v >= 2, np.maximum(c, edge), np.maximum(c - f * (1 - share), edge))
    second = np.where(v >= 2, np.maximum(2 * c - g0 * f - first, 0.0), 0.0)
    later = np.maximum(v - 2, 0.0) * np.maximum(c - g0 * f, 0.0)
    return first + second + later


def overlapped_send_s(send_s: np.ndarray, chain: np.ndarray, slots: np.ndarray, m: np.ndarray,
                      slowdown: float) -> np.ndarray:
    """Cost per microbatch slot of one direction's pipeline sends (``send_s`` per microbatch: ``v`` chunk sends)
    when they run asynchronously beside compute (Megatron ``overlap_p2p_comm``): in the steady state each send
    hides behind the other direction's chunk compute (costing ``slowdown`` of it), while the fill and drain chain
    waits for every send on it: ``chain`` microbatch slots' worth, ``(p·v − 1)/v`` per schedule (``send_chain``).
    Spread over the step's ``slots`` (``m`` plus the bubble's fill and drain), so that the step carries
    ``chain·send_s + m·slowdown·send_s``, never more than the blocking schedule's ``slots·send_s`` (a rank can
    always wait for its send instead: with ``m = p`` and ``v ≥ 6`` the chain alone is nearly every send)."""
    return send_s * np.minimum(chain + m * slowdown, slots) / slots


def send_chain(pp: np.ndarray, v: np.ndarray, schedules: np.ndarray) -> np.ndarray:
    """Microbatch slots of sends (``v`` hops each) on the interleaved schedule's critical path: the first
    microbatch's forward hops through all ``p·v`` virtual stages and the last one's backward back, ``p·v − 1``
    hops each way per schedule. Megatron's order leaves no slack there (``pipeline_sim.simulate`` with a send
    time: with equal ranks the makespan grows by exactly ``2·(p·v − 1)`` sends at any ``m``, a multiple of ``p``;
    an LM head on the last chunk or a light embedding chunk keeps it exact), where the bubble's ``(p − 1)/v`` slots
    would count only the physical stages' ``p − 1``. When whole ranks differ, the lighter ranks' spare time absorbs
    sends (one rank 2% heavier, sends of 3% of a chunk's forward, p = v = 4: 12 of the 30), so there the chain is an
    upper bound, as the closed form's slowest-stage slots are."""
    p, v = np.asarray(pp, dtype=float), np.asarray(v, dtype=float)
    return schedules * (p * v - 1) / v


def pipeline_send_s(ctx: Ctx, m: np.ndarray) -> np.ndarray:
    """Pipeline sends of one direction per microbatch slot: one activation per chunk (scatter/gather over TP,
    Narayanan et al. 2021 §4.1), blocking, or ``overlapped_send_s`` when interleaved with
    ``SoftwareSpec.overlap_p2p_comm`` (Megatron-LM turns it off without interleaving: arguments.py@d98e8a6)."""
    r, sysm = ctx.rows, ctx.system
    stride = r.tp * r.cp * r.dp
    crosses = (stride >= sysm.gpus_per_node) | (stride * r.pp > sysm.gpus_per_node)
    p2p_bytes = ctx.tokens * ctx.model.hidden_size * ctx.act_bytes / r.tp
    p2p = np.where(r.pp > 1, r.v * comm.p2p_time(sysm, p2p_bytes, crosses), 0.0)
    if not sysm.software.overlap_p2p_comm:
        return p2p
    chain = send_chain(r.pp, r.v, ctx.schedules)
    return np.where(r.v > 1, overlapped_send_s(p2p, chain, m + ctx.fill_slots, m, sysm.software.overlap_slowdown),
                    p2p)
