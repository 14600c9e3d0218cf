"""The tensor-parallel collectives around a TP region, as Megatron-Core with Transformer Engine runs them.

Entering a column-parallel region (QKV, FC1, the Mamba and Gated DeltaNet input projections, the shared experts'
FC1, the LM head) under sequence parallelism, the forward all-gathers the sharded input. Under an fp8 recipe TE
quantizes it first and gathers the fp8 copy (``quantization.gathered_bytes``), under current scaling after an
all-reduce of its amax over the TP group (``quantization.amax_reduced``). The backward reduce-scatters the input
gradient (16 bit) and all-gathers the input again for the weight gradient: only the local shard is saved
(TransformerEngine v2.7 ``layernorm_linear.py`` l.390-392 ``ln_out_needs_gather``, l.640-665; Megatron-LM's own
linear layers likewise, Korthikanti et al. 2022 §4.2.2, whose activation memory ``memory.py`` counts sharded),
asynchronously beside the data-gradient GEMM (``tp_overlap.overlap_regather``); PyTorch's DTensor sequence parallelism
saves the gathered input instead (``SoftwareSpec.sp_input_regather``).

Leaving a row-parallel region (attention output, FC2, the mixers' output projections) the forward reduce-scatters
(16 bit; without SP it all-reduces); the backward all-gathers the output gradient, quantized first under fp8
(``GRAD_OUTPUT1``, LayerNormMLP's ``GRAD_OUTPUT2``, with the amax all-reduce under current scaling; MXFP8 sends both
its row- and column-wise copies).

torchao's float8 tensor parallelism (torchtitan) casts before its DTensor all-gathers too, with a dynamic scale over
the whole tensor (torchtitan ``docs/float8.md``: "float8 all-gather ... for TP (by default for Float8Linear)"), and
its DTensor colwise linear keeps the gathered input (``SoftwareSpec.sp_input_regather`` off; ``memory.py`` then
counts that input whole).

The embedding, the LM head and MTP's ``eh_proj`` run outside the recipe: 16 bit throughout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.ops import COMM, Op
from shardplan.costmodel.training.quantization import amax_reduced, gathered_bytes

if TYPE_CHECKING:
    from shardplan.costmodel.training.ctx import Ctx

# TP regions entered by TE linear layers inside the fp8 autocast (MLA: its column-parallel up projections and query)
IN_RECIPE = ("attn", "mlp", "moe.shared", "lin", "ssm", "attn.q_up", "attn.kv_up", "attn.q")
# Gathers that feed no linear layer (MLA's rotary key: Megatron's ``gather_from_sequence_parallel_region``, whose
# backward reduce-scatters and which saves nothing): no re-gather in backward
NOT_SAVED = ("attn.k_pe",)
AMAX_BYTES = 4.0  # one fp32 amax per quantized tensor


def masked(op: Op, when: np.ndarray) -> Op:
    """The op where ``when`` holds, zero elsewhere (collectives that exist only with SP, or only without)."""
    z = np.zeros_like(op.time)
    bwd = None if op.bwd_nbytes is None else np.where(when, op.bwd_nbytes, z)
    bwd_t = None if op.bwd_time is None else np.where(when, op.bwd_time, z)
    return Op(op.name, op.kind, np.where(when, op.flops, z), np.where(when, op.nbytes, z),
              np.where(when, op.time, z), dim=op.dim, selective=op.selective, bwd_nbytes=bwd,
              bwd_kernels=op.bwd_kernels, bwd_time=bwd_t, grads=None if op.grads is None else op.grads.where(when))


def _quantized(ctx: Ctx, prefix: str, *, both_usages: bool = False) -> tuple[float, bool]:
    """Bytes per element a gather of this region's GEMM input (or output gradient: ``both_usages``) moves, and
    whether its cast waits for an amax all-reduce."""
    if prefix not in IN_RECIPE:
        return ctx.act_bytes, False
    scaling = ctx.system.software.fp8_scaling
    return (gathered_bytes(ctx.mm_dtype, scaling, ctx.act_bytes, both_usages=both_usages),
            amax_reduced(ctx.mm_dtype, scaling))


def _amax(ctx: Ctx, prefix: str, *, backward: bool) -> Op:
    """The amax all-reduce before a gathered cast, in the forward (input) or the backward (output gradient)."""
    r = ctx.rows
    t = comm.all_reduce_time(ctx.system, np.full(np.shape(r.tp), AMAX_BYTES), r.tp, np.ones_like(r.tp))
    t = t + np.zeros_like(ctx.tokens)
    z = np.zeros_like(t)
    nbytes = np.full_like(t, AMAX_BYTES)
    return Op(f"{prefix}.tp_amax_allreduce", COMM, z, z if backward else nbytes, z if backward else t, dim="tp",
              bwd_nbytes=nbytes if backward else z, bwd_time=t if backward else z)


def tp_entry(ctx: Ctx, prefix: str, elements: np.ndarray | float) -> list[Op]:
    """Sequence parallelism all-gathers the sharded input before a TP region (identity without SP): the input
    gathered (fp8 under the recipe, its amax all-reduced first under current scaling), in backward the input
    gradient reduce-scattered and the input gathered again for the weight gradient."""
    r = ctx.rows
    sp = (r.sp == 1) & (r.tp > 1)
    q, amax = _quantized(ctx, prefix)
    ag = ctx.collective(f"{prefix}.tp_allgather", "all_gather", elements * q, "tp")
    rs = ctx.collective(f"{prefix}.tp_allgather", "reduce_scatter", elements * ctx.act_bytes, "tp")
    gather = Op(ag.name, COMM, ag.flops, ag.nbytes, ag.time, dim="tp", bwd_nbytes=rs.nbytes, bwd_time=rs.time)
    z = np.zeros_like(ag.time)
    regather = Op(f"{prefix}.tp_regather", COMM, z, z, z, dim="tp", bwd_nbytes=ag.nbytes, bwd_time=ag.time)
    ops = [_amax(ctx, prefix, backward=False)] if amax else []
    ops += [gather] + ([regather] if ctx.system.software.sp_input_regather and prefix not in NOT_SAVED else [])
    return [masked(op, sp) for op in ops]


def tp_exit(ctx: Ctx, prefix: str, elements: np.ndarray | float) -> list[Op]:
    """Leaving a TP region: all-reduce the partial sums, or reduce-scatter them under SP (in backward the output
    gradient all-gathered, fp8 under the recipe after its amax all-reduce under current scaling)."""
    r = ctx.rows
    nbytes = elements * ctx.act_bytes
    q, amax = _quantized(ctx, prefix, both_usages=True)
    ar = ctx.collective(f"{prefix}.tp_allreduce", "all_reduce", nbytes, "tp")
    rs = ctx.collective(f"{prefix}.tp_reducescatter", "reduce_scatter", nbytes, "tp")
    ag = ctx.collective(f"{prefix}.tp_reducescatter", "all_gather", elements * q, "tp")
    scatter = Op(rs.name, COMM, rs.flops, rs.nbytes, rs.time, dim="tp", bwd_nbytes=ag.nbytes, bwd_time=ag.time)
    sp = (r.sp == 1) & (r.tp > 1)
    out = [masked(ar, (r.sp == 0) & (r.tp > 1)), masked(scatter, sp)]
    return out + ([masked(_amax(ctx, prefix, backward=True), sp)] if amax else [])


def expert_tp_entry(ctx: Ctx, prefix: str, elements: np.ndarray | float) -> list[Op]:
    """Experts split over expert TP need every ETP rank's dispatched tokens: all-gather them (SP)."""
    r = ctx.rows
    op = ctx.collective(f"{prefix}.tp_allgather", "all_gather", elements * r.etp * ctx.act_bytes, "etp")
    return [masked(op, (r.etp > 1) & (r.sp == 1))]


def expert_tp_exit(ctx: Ctx, prefix: str, elements: np.ndarray | float) -> list[Op]:
    r = ctx.rows
    op = ctx.collective(f"{prefix}.tp_reducescatter", "reduce_scatter", elements * r.etp * ctx.act_bytes, "etp")
    return [masked(op, (r.etp > 1) & (r.sp == 1))]
