"""How much of an MoE layer's expert-parallel all-to-all shows, given the compute of the microbatch beside it.

Megatron-Core's ``overlap_moe_expert_parallel_comm`` (``SoftwareSpec.ep_comm_overlap``) runs the combined 1F1B
schedule: in the steady state each transformer layer's forward for one microbatch (A) is paired with the same
layer's backward for another (B), on a compute and a communication stream (megatron/core/models/common/
model_chunk_schedule_plan.py at d98e8a6, ``TransformerLayerSchedulePlan.run``)::

    comm stream:  combine_bwd(B)     | dispatch_fwd(A) -> dispatch_bwd(B)        | combine_fwd(A)
    comp stream:  pre_dispatch_fwd(A) | mlp_bwd(B) -> mlp_bwd_dw(B) -> mlp_fwd(A) | pre_dispatch_bwd(B)

with the data dependencies of the layer (``pair_time``): an all-to-all hides only behind the compute chunk beside
it, so a transfer longer than its partner shows the difference even when the pair's total compute is longer.
``pre_dispatch`` is the token mixer with the MoE's norm, router and permutation (and shared experts); ``mlp`` the
experts; the combine node also runs the unpermutation and the residual add on the communication stream
(gpt/fine_grained_callables.py ``submodule_combine_forward``). The hidden part slows the compute beside it
(``comm.with_overlap_cost``). The schedule's warm-up forwards and cool-down backwards have no partner
(``get_pp_rank_microbatches``: ``2(pp−1) + (v−1)·pp + 1`` of the ``m·v`` virtual microbatches on the first rank
with interleaving; one of ``m`` without pipelining): their all-to-alls stay exposed. Megatron allows the overlap
only with PP 1 or interleaving, and without full recompute (transformer_config.py ``__post_init__`` asserts);
elsewhere nothing hides.
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
    m = np.maximum(r.gb / (r.dp * r.mb), 1.0) * v
    warmup = np.where(p > 1, 2 * (p - 1) + (v - 1) * p + 1, 1.0)
    return np.minimum(warmup / m, 1.0)


def pair_time(p_f: np.ndarray, p_b: np.ndarray, m_f: np.ndarray, m_b: np.ndarray, m_w: np.ndarray,
              d_f: np.ndarray, c_f: np.ndarray, d_b: np.ndarray, c_b: np.ndarray) -> np.ndarray:
    """One layer pair of the combined 1F1B schedule, forward of A beside backward of B: pre-dispatch ``p``, experts
    ``m`` (backward ``m_b`` then weight gradients ``m_w``), dispatch ``d`` and combine ``c`` (forward ``_f``, backward
    ``_b``), each stream in its order, each step after what it needs (``TransformerLayerSchedulePlan.run``)."""
    cb_end = c_b  # comm: combine_bwd(B) || comp: pre_dispatch_fwd(A)
    pf_end = p_f
    df_end = np.maximum(pf_end, cb_end) + d_f  # dispatch_fwd(A) needs A's pre-dispatch
    mb_end = np.maximum(pf_end, cb_end) + m_b  # mlp_bwd(B) needs B's combine gradient
    mw_end = mb_end + m_w
    db_end = np.maximum(df_end, mb_end) + d_b  # dispatch_bwd(B) needs B's expert gradient
    mf_end = np.maximum(mw_end, df_end) + m_f  # mlp_fwd(A) needs A's dispatched tokens
    cf_end = np.maximum(db_end, mf_end) + c_f  # combine_fwd(A) needs A's expert output
    pb_end = np.maximum(mf_end, db_end) + p_b  # pre_dispatch_bwd(B) needs B's dispatch gradient
    return np.maximum(cf_end, pb_end)


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

    def split(ops: list[Op]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(before dispatch, experts, after combine, dispatch, combine) times, compute only, in the op order."""
        names = [op.name.removesuffix(".bwd") for op in ops]
        d, c = names.index("moe.ep_dispatch"), names.index("moe.ep_combine")
        work = [op.time if op.kind not in (COMM, HOST) else zero for op in ops]
        return (sum(work[:d], start=zero), sum(work[d + 1:c], start=zero), sum(work[c + 1:], start=zero),
                ops[d].time, ops[c].time)

    pre_f, exp_f, post_f, d_f, c_f = split(fwd)
    pre_b, _, post_b, d_b, c_b = split(bwd)
    names = [op.name for op in bwd]
    d, c = names.index("moe.ep_dispatch.bwd"), names.index("moe.ep_combine.bwd")
    m_w = sum((op.time for op in bwd[d + 1:c] if op.kind == GEMM and op.name.endswith(".wgrad")), start=zero)
    m_b = sum((op.time for op in bwd[d + 1:c] if op.kind not in (COMM, HOST)), start=zero) - m_w
    a2a = d_f + c_f + d_b + c_b
    work = mixer_f + pre_f + exp_f + post_f + mixer_b + pre_b + m_b + m_w + post_b
    end = pair_time(mixer_f + pre_f, mixer_b + pre_b, exp_f, m_b, m_w, d_f, c_f + post_f, d_b, c_b + post_b)
    paired = comm.with_overlap_cost(ctx.system, a2a, np.clip(end - work, 0.0, a2a))
    u = unpaired_share(ctx)
    shown = u * a2a + (1 - u) * paired
    on = (r.ep > 1) & ((r.pp == 1) | (r.v > 1)) & (r.rc != 2)
    scale = np.where(on & (a2a > 0), shown / np.where(a2a > 0, a2a, 1.0), 1.0)

    def cut(phase: list[Op]) -> list[Op]:
        return [Op(op.name, op.kind, op.flops, op.nbytes, op.time * scale, dim=op.dim, selective=op.selective)
                if is_ep(op) else op for op in phase]

    return cut(fwd), cut(bwd)
