"""Context parallelism's communication around the attention core, as Transformer Engine runs each of Megatron-Core's
``--cp-comm-type`` choices (``SoftwareSpec.cp_comm_type``; TE d0067d0 transformer_engine/pytorch/attention/
dot_product_attention/context_parallel.py, ``attn_forward_func_with_cp`` l.5100-5140):

- ``p2p`` (``AttnFuncWithCPAndKVP2P``, Megatron's default): a ring passes K/V chunks between the cp ranks beside
  the attention kernels, one send/recv per step (a node's boundary GPU over its own NIC); only what the kernels
  cannot cover shows. The backward carries K/V with their gradients.
- ``all_gather`` (``AttnFuncWithCPAndKVAllGather``, Llama 3's §3.3.2: "KV all-gather between CP ranks is exposed",
  l.3014-3016): the forward all-gathers K and V (l.3215-3216) and reorders the gathered chunks (``index_select``,
  l.3229-3230) before its two attention steps; the backward gathers and reorders them again (l.3788-3789,
  l.3806-3807), zero-fills bf16 dK and dV of the gathered size (l.3768-3777), adds each step's gradients into them
  (l.4094-4095), reorders them and reduce-scatters them (l.4112-4123); nothing overlaps.
- ``a2a`` (``AttnFuncWithCPAndQKVOA2A``, DeepSpeed-Ulysses style): all-to-alls trade sequence for heads, Q, K, V
  before the kernel and O after it (``flash_attn_a2a_communicate`` l.387-535), each tensor copied twice around its
  all-to-all (a permute before sending and a chunk reorder after receiving, l.473/l.435; O's reorder before sending and
  ``contiguous`` after, l.489/l.529); the backward mirrors them (dO before, dQ, dK, dV after). Priced whole: a copy
  runs beside the next tensor's all-to-all at most, and the kernel waits for all. Each rank then runs one causal
  kernel over the whole sequence with heads/cp heads (``Ctx.flash_time``); the heads of Q and of K/V must divide by cp
  (l.4246-4249: ``cp_rules.a2a_heads_ok``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.operators import Attention
from shardplan.costmodel.core.ops import COMM, MEM, Op

if TYPE_CHECKING:
    from shardplan.costmodel.training.ctx import Ctx


def cp_ops(ctx: Ctx, a: Attention, flash: Op, bwd_flash: np.ndarray) -> list[Op]:
    """The CP communication of one microbatch's attention core (zero where cp = 1), forward times, with each op's
    backward stated (``bwd_time``/``bwd_nbytes``); ``flash`` is the forward kernel and ``bwd_flash`` its backward
    time, which the ring hides behind. Every op is core attention's (selective recompute reruns it)."""
    kind = ctx.system.software.cp_comm_type
    cp = ctx.rows.cp.astype(float)
    on = cp > 1
    kv = a.kv_tokens * a.kv_token_bytes  # the sequence's K and V on this TP rank, gathered size
    if kind == "all_gather":
        # two calls (K, V) each way; the backward's reduce-scatters move what its gathers do (bf16 dK, dV)
        ag = ctx.collective(f"{a.name}.cp_allgather", "all_gather", kv / 2, "cp")
        t = np.where(on, 2.0 * ag.time, 0.0)
        # forward: index_select reads and writes the gathered K and V; backward: that again for the re-gathered K, V
        # and for dK, dV, their zero fill, and each step's add into its key range (read, read, write: the two
        # steps' ranges cover (2cp + 1)/(2cp) of the sequence)
        reorder = 2.0 * kv
        bwd_copies = 2.0 * reorder + kv + 3.0 * kv * (2.0 * cp + 1.0) / (2.0 * cp)
        copy = Op(f"{a.name}.cp_reorder", MEM, np.zeros_like(kv), np.where(on, reorder, 0.0),
                  np.where(on, ctx.mem_time(reorder, 2), 0.0), selective=True,
                  bwd_nbytes=np.where(on, bwd_copies, 0.0), bwd_kernels=10)
        return [Op(ag.name, ag.kind, ag.flops, np.where(on, kv, 0.0), t, dim="cp", selective=True,
                   bwd_nbytes=np.where(on, 2.0 * kv, 0.0), bwd_time=2.0 * t), copy]
    if kind == "a2a":
        local = a.kv_tokens / cp  # this rank's tokens before the trade
        q, o = (local * a.heads * d * ctx.act_bytes for d in (a.d_qk, a.d_v))
        kv_local = kv / cp
        times = [ctx.collective(f"{a.name}.cp_a2a", "all_to_all", x, "cp").time for x in (q, kv_local / 2,
                                                                                        kv_local / 2, o)]
        t = np.where(on, sum(times[1:], start=times[0]), 0.0)
        moved = np.where(on, q + kv_local + o, 0.0)
        copies = 4.0 * moved  # two copies (read and write) of each traded tensor, eight kernels each way
        copy = Op(f"{a.name}.cp_reorder", MEM, np.zeros_like(moved), copies, np.where(on, ctx.mem_time(copies, 8), 0.0),
                  selective=True, bwd_nbytes=copies, bwd_kernels=8)
        return [Op(f"{a.name}.cp_a2a", COMM, np.zeros_like(moved), moved, t, dim="cp", selective=True,
                   bwd_nbytes=moved, bwd_time=t), copy]
    # cp − 1 steps, each rank sending its own K/V chunk to the next cp rank (isend/irecv, not an NCCL collective:
    # ``flash_attn_p2p_communicate``): a step lasts as long as its slowest link, and where the cp group spans nodes a
    # node's boundary GPU sends its chunk over its own NIC (an all-gather would spread it over the node's NICs)
    crosses = comm.members_per_node(ctx.system, ctx.rows.cp, ctx.rows.tp) < ctx.rows.cp
    step = comm.p2p_time(ctx.system, kv / cp, crosses)
    ring = Op(f"{a.name}.cp_ring", COMM, np.zeros_like(kv), kv, np.where(on, (cp - 1.0) * step, 0.0), dim="cp")
    exposed = comm.with_overlap_cost(ctx.system, ring.time, np.maximum(ring.time - flash.time * (cp - 1) / cp, 0.0))
    # The backward ring carries K/V and their accumulated gradients (context_parallel.py
    # AttnFuncWithCPAndKVP2P.backward l.2459-2495: K/V at the first step, K/V with dK/dV between, dK/dV at the last):
    # twice the bytes, each step's send beside that step's backward kernels (all cp of them; the forward sends on
    # cp − 1), whose time is ``backward``'s ATTN rule.
    exposed_b = comm.with_overlap_cost(ctx.system, 2.0 * ring.time, np.maximum(2.0 * ring.time - bwd_flash, 0.0))
    return [Op(ring.name, ring.kind, ring.flops, ring.nbytes, np.where(on, exposed, 0.0), dim="cp", selective=True,
               bwd_nbytes=2.0 * ring.nbytes, bwd_time=np.where(on, exposed_b, 0.0))]


def gather_transient(ctx: Ctx, a: Attention) -> np.ndarray:
    """Bytes the ``all_gather`` exchange holds at its peak in one attention layer's backward beyond what the layer
    stores: the re-gathered K and V, the zero-filled dK and dV of the gathered size, and one reordered copy
    (TE d0067d0 context_parallel.py l.3768-3777, 3788-3789, 3806-3807, 4107-4123): three times the gathered K/V on this
    TP rank. Zero without CP or under the other exchanges (their buffers are a step's chunk)."""
    on = (ctx.rows.cp > 1) & (ctx.system.software.cp_comm_type == "all_gather")
    return np.where(on, 3.0 * a.kv_tokens * a.kv_token_bytes, 0.0)

