"""How much of an MoE layer's expert-parallel all-to-all shows, given the compute of the microbatch beside it.

Megatron-Core's ``overlap_moe_expert_parallel_comm`` (``SoftwareSpec.ep_comm_overlap``) runs the combined 1F1B
schedule: in the steady state each transformer layer's forward for one microbatch (A) is paired with the same
layer's backward for another (B), on a compute and a communication stream (megatron/core/models/common/
model_chunk_schedule_plan.py at d98e8a6, ``TransformerLayerSchedulePlan.run``)::

    comm stream:  combine_bwd(B)     | dispatch_fwd(A) -> dispatch_bwd(B)        | combine_fwd(A)
    comp stream:  pre_dispatch_fwd(A) | mlp_bwd(B) -> mlp_bwd_dw(B) -> mlp_fwd(A) | pre_dispatch_bwd(B)

with the data dependencies of the layer (``pair_time``): an all-to-all hides only behind the compute chunk beside
it, so a transfer longer than its partner shows the difference even when the pair's total compute is longer.
``pre_dispatch`` is the token mixer with the MoE's norm, router, permutation and shared experts; ``mlp`` the experts
(with DeepEP/HybridEP the permutation and unpermutation too: token_dispatcher.py ``_DeepepManager``); the combine
node's unpermutation and residual add (gpt/fine_grained_callables.py ``submodule_combine_forward``) take SMs, so they
are charged on the compute chain, not beside it. With ``--delay-wgrad-compute`` (``SoftwareSpec.ep_delay_wgrad``, which
Megatron-Bridge's performance scripts set with the overlap) the experts' weight gradients run after the backward
dispatch leaves; without it the dispatch waits for them. The hidden part slows the kernels beside it
(``comm.with_overlap_cost``; DeepEP/HybridEP at their own measured rate, ``SoftwareSpec.ep_overlap_slowdown``). The
schedule's warm-up forwards and cool-down backwards have no partner (``get_pp_rank_microbatches``: ``2(pp−1) + (v−1)·pp
+ 1`` of the ``m·v`` virtual microbatches on the first rank with interleaving; one of ``m`` without pipelining): their
all-to-alls stay exposed. Megatron allows the overlap only with PP 1 or interleaving, and without full recompute
(transformer_config.py ``__post_init__`` asserts); elsewhere nothing hides. The dropless host synchronisation of a
paired layer (``layers.MOE_SYNC_IDLE_S``) waits while the partner's backward runs: only unpaired ones idle the GPU.
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.ops import COMM, GEMM, HOST, Op
from shardplan.costmodel.training.ctx import Ctx


def unpaired_share(ctx: Ctx) -> np.ndarray:
    """Share of a rank's (virtual) microbatches that the combined 1F1B schedule runs without a partner."""
    r = ctx.rows
    p, v = r.pp.astype(float), r.v.astype(float)
    m = ctx.microbatches * v
    warmup = np.where(p > 1, 2 * (p - 1) + (v - 1) * p + 1, 1.0) * ctx.schedules  # each schedule warms up
    return np.minimum(warmup / m, 1.0)


def pair_time(*, p_f: np.ndarray, p_b: np.ndarray, m_f: np.ndarray, m_b: np.ndarray, m_w: np.ndarray,
              d_f: np.ndarray, c_f: np.ndarray, d_b: np.ndarray, c_b: np.ndarray, post_f: np.ndarray | float = 0.0,
              post_b: np.ndarray | float = 0.0, delay_wgrad: bool) -> np.ndarray:
    """One layer pair of the combined 1F1B schedule, forward of A beside backward of B: pre-dispatch ``p``, experts
    ``m`` (backward ``m_b`` then weight gradients ``m_w``), dispatch ``d`` and combine ``c`` (forward ``_f``, backward
    ``_b``), each stream in its order, each step after what it needs (``TransformerLayerSchedulePlan.run``); the
    combine node's compute (``post``: B's before its combine gradient, A's after its combine) on the compute chain."""
    pb0 = np.asarray(post_b) + np.zeros_like(p_f)  # comp: B's unpermute/residual gradients, then A's pre-dispatch
    cb_end = pb0 + c_b  # comm: combine_bwd(B) needs them
    pf_end = pb0 + p_f
    df_end = np.maximum(pf_end, cb_end) + d_f  # dispatch_fwd(A) needs A's pre-dispatch
    mb_end = np.maximum(pf_end, cb_end) + m_b  # mlp_bwd(B) needs B's combine gradient
    mw_end = mb_end + m_w
    # dispatch_bwd(B) needs B's expert input gradient: with delayed weight gradients it leaves after mlp_bwd, else
    # after the whole expert backward (Transformer Engine's GroupedLinear backward returns both gradients together)
    db_end = np.maximum(df_end, mb_end if delay_wgrad else mw_end) + d_b
    mf_end = np.maximum(mw_end, df_end) + m_f  # mlp_fwd(A) needs A's dispatched tokens
    cf_end = np.maximum(db_end, mf_end) + c_f  # combine_fwd(A) needs A's expert output
    pb_end = np.maximum(mf_end, db_end) + p_b  # pre_dispatch_bwd(B) needs B's dispatch gradient
    return np.maximum(cf_end, pb_end) + post_f  # A's unpermute/residual once its combine and the SMs are free


def chunk_times(ops: list[Op], *, deepep: bool, zero: np.ndarray) -> tuple[np.ndarray, ...]:
    """An MoE layer's forward or backward operators as the combined 1F1B schedule's chunks: (pre-dispatch,
    experts, experts' weight gradients, the combine node's compute, dispatch, combine) times. Shared experts run in
    pre-dispatch (fine_grained_callables.py ``submodule_pre_dispatch_forward``); DeepEP's permutations in the
    experts' node."""
    names = [op.name.removesuffix(".bwd") for op in ops]
    d, c = names.index("moe.ep_dispatch"), names.index("moe.ep_combine")
    assert d < c, "the MoE inventory dispatches before it combines"
    pre, exp, dw, post = zero, zero, zero, zero
    for i, (op, name) in enumerate(zip(ops, names, strict=True)):
        if op.kind in (COMM, HOST):
            continue
        if name.startswith("moe.shared.") or (i < d and not (deepep and name == "moe.permute")):
            pre = pre + op.time
        elif d < i < c or (deepep and name in ("moe.permute", "moe.unpermute")):
            if op.kind == GEMM and op.name.endswith(".wgrad"):
                dw = dw + op.time
            else:
                exp = exp + op.time
        else:
            post = post + op.time
    return pre, exp, dw, post, ops[d].time, ops[c].time


def overlap_ep(ctx: Ctx, fwd: list[Op], bwd: list[Op], mixer_f: np.ndarray | float, mixer_b: np.ndarray | float
               ) -> tuple[list[Op], list[Op]]:
    """The MoE layer's forward and backward operators with each EP all-to-all cut to what shows; ``mixer_f`` and
    ``mixer_b`` are the forward and backward compute of the token mixer that shares the transformer layer."""
    sw, r = ctx.system.software, ctx.rows
    if not sw.ep_comm_overlap:
        return fwd, bwd
    zero = np.zeros_like(ctx.tokens)

    def is_ep(op: Op) -> bool:
        return op.kind == COMM and op.dim == "ep"

    deepep = sw.ep_dispatcher == "deepep"
    pre_f, m_f, _, post_f, d_f, c_f = chunk_times(fwd, deepep=deepep, zero=zero)
    pre_b, m_b, m_w, post_b, d_b, c_b = chunk_times(bwd, deepep=deepep, zero=zero)
    a2a = d_f + c_f + d_b + c_b
    work = mixer_f + pre_f + m_f + post_f + mixer_b + pre_b + m_b + m_w + post_b
    end = pair_time(p_f=mixer_f + pre_f, p_b=mixer_b + pre_b, m_f=m_f, m_b=m_b, m_w=m_w, d_f=d_f, c_f=c_f, d_b=d_b,
                    c_b=c_b, post_f=post_f, post_b=post_b, delay_wgrad=sw.ep_delay_wgrad)
    paired = comm.with_overlap_cost(ctx.system, a2a, np.clip(end - work, 0.0, a2a),
                                    slowdown=sw.ep_overlap_slowdown if deepep else None)
    u = unpaired_share(ctx)
    shown = u * a2a + (1 - u) * paired
    on = (r.ep > 1) & ((r.pp == 1) | (r.v > 1)) & (r.rc != 2)
    scale = np.where(on & (a2a > 0), shown / np.where(a2a > 0, a2a, 1.0), 1.0)

    # A paired layer's host synchronisation waits while the partner's backward, queued before it, keeps the GPU busy
    # (the same nsys comparison: with the overlap on, the GPU-active time is the whole step): only the unpaired
    # microbatches' waits idle the GPU.
    host = np.where(on, u, 1.0)

    def cut(phase: list[Op]) -> list[Op]:
        return [Op(op.name, op.kind, op.flops, op.nbytes, op.time * scale, dim=op.dim, selective=op.selective)
                if is_ep(op) else Op(op.name, op.kind, op.flops, op.nbytes, op.time * host) if op.kind == HOST
                else op for op in phase]

    return cut(fwd), cut(bwd)
