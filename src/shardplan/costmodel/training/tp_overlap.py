"""How much of each sequence-parallel TP collective shows, given the GEMMs beside it.

``Ctx.collective`` prices a TP all-gather or reduce-scatter whole; this pass, run on a layer's forward and backward
operators, keeps what the overlap cannot hide plus the compute the hidden rest slows (``comm.with_overlap_cost``).

- ``userbuffers`` (Transformer Engine comm+GEMM overlap as NeMo configures it on H100:
  nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py at 26005325d0cf): in the forward pass the
  all-gather before QKV/FC1 is a ring exchange (the GEMM runs in tp chunks; each peer's shard arrives while the
  previous chunk computes: exposed ``max(t − g·(tp−1)/tp, 0)``) and the reduce-scatter after proj/FC2 is pipelined in
  ``num_splits = 4`` chunks behind the GEMM that produces it (the last chunk shows: ``max(t − g·3/4, t/4)``; by ring
  exchange, ``SoftwareSpec.tp_overlap_rs``, tp chunks: ``max(t − g·(tp−1)/tp, 0)`` plus the kernel that reduces the
  received chunks); in the
  backward pass both run as bulk overlap behind the layer's other gradient GEMM (``max(t − g, 0)``). Applies to the
  dense layers TE builds (attention and MLP); other layers keep the share rule. The GEMMs ``g`` are the chunked
  ones ``userbuffers.ub_chunks`` prices in ``Ctx.gemm``; where userbuffers cannot run (MLA, NVFP4:
  ``userbuffers.ub_blocked``) the collectives block.
- ``share``: a fixed share ``tp_comm_overlap`` hides (torchtitan async TP, Megatron without userbuffers).
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.ops import COMM, GEMM, Op
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.userbuffers import UB_KINDS, UB_PIPELINE_SPLITS, ub_blocked


def _sp_collective(op: Op) -> str | None:
    if op.kind != COMM or op.dim != "tp":
        return None
    return "ag" if ".tp_allgather" in op.name else "rs" if ".tp_reducescatter" in op.name else None


def _neighbour_gemm(ops: list[Op], i: int, after: bool, suffix: str = "") -> np.ndarray | float:
    seq = ops[i + 1:] if after else reversed(ops[:i])
    return next((op.time for op in seq if op.kind == GEMM and op.name.endswith(suffix)), 0.0)


def overlap_regather(ctx: Ctx, ops: list[Op]) -> list[Op]:
    """A layer's backward operators with the input re-gathered for a weight gradient (``sp_comm.tp_entry``) cut to
    what shows beside the data-gradient GEMM that follows it: Transformer Engine issues the gather asynchronously
    (``gather_along_first_dim(async_op=True)``) or as userbuffers' bulk all-gather beside ``qkv_dgrad``/``fc1_dgrad``
    (v2.7 layernorm_linear.py l.640-665), and waits for it only before the weight gradient; whatever the overlap
    settings, the part longer than that GEMM shows, plus the compute the hidden rest slows."""
    out: list[Op] = []
    for i, op in enumerate(ops):
        if op.kind == COMM and ".tp_regather" in op.name:
            g = _neighbour_gemm(ops, i, after=True, suffix=".dgrad")
            shown = comm.with_overlap_cost(ctx.system, op.time, np.maximum(op.time - g, 0.0))
            op = Op(op.name, op.kind, op.flops, op.nbytes, shown, dim=op.dim)
        out.append(op)
    return out


def overlap_tp(ctx: Ctx, kind: str, ops: list[Op], *, backward: bool) -> list[Op]:
    """The layer's operators with each SP collective's time cut to what shows (plus the compute it slows)."""
    r, s = ctx.rows, ctx.system
    sw = s.software
    if backward:
        ops = overlap_regather(ctx, ops)
    if not sw.tp_comm_overlap or ub_blocked(ctx.model, ctx.mm_dtype, sw):  # blocking (``userbuffers.ub_blocked``)
        return ops
    on = (r.sp == 1) & (r.tp > 1)
    tp = r.tp.astype(float)
    ub = sw.tp_overlap_method == "userbuffers" and kind in UB_KINDS
    out: list[Op] = []
    for i, op in enumerate(ops):
        which = _sp_collective(op)
        if which is None:
            out.append(op)
            continue
        t, after = op.time, 0.0  # after: a kernel that must follow the hidden collective
        if not ub:
            exposed = t * (1 - sw.tp_comm_overlap)
        elif backward:
            # Transformer Engine's userbuffers in the backward: the input gradient's reduce-scatter (the forward
            # all-gather's backward) runs beside the column-parallel layer's wgrad (``qkv_wgrad``/``fc1_wgrad``
            # bulk), the output gradient's all-gather (the forward reduce-scatter's) beside the row-parallel
            # layer's dgrad (``proj_dgrad``/``fc2_dgrad``); the backward ops keep the forward's order.
            g = _neighbour_gemm(ops, i, after=which == "ag", suffix=".wgrad" if which == "ag" else ".dgrad")
            exposed = np.maximum(t - g, 0.0)
        elif which == "ag":
            exposed = np.maximum(t - _neighbour_gemm(ops, i, after=True) * (tp - 1) / tp, 0.0)
        elif sw.tp_overlap_rs == "ring_exchange":
            # tp row chunks, the rank's own last and never sent: the other tp − 1 partial sums travel while the next
            # chunks compute, then one kernel reduces the tp chunks (reads the whole activation, writes its 1/tp:
            # TE CommOverlapP2PBase::split_overlap_rs, reduce_bf16 / reduce_fp8_in_bf16_out)
            exposed = np.maximum(t - _neighbour_gemm(ops, i, after=False) * (tp - 1) / tp, 0.0)
            after = ctx.mem_time(op.nbytes * (1.0 + 1.0 / tp))
        else:  # pipelined in 4 column chunks: the last chunk's reduce-scatter shows
            k = UB_PIPELINE_SPLITS
            exposed = np.maximum(t - _neighbour_gemm(ops, i, after=False) * (k - 1) / k, t / k)
        shown = np.where(on, comm.with_overlap_cost(s, t, exposed) + after, t)
        out.append(Op(op.name, op.kind, op.flops, op.nbytes, shown, dim=op.dim, selective=op.selective))
    return out
