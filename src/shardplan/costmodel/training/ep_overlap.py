"""How much of an MoE layer's expert-parallel all-to-all shows, given the compute of the microbatch beside it.

Megatron-Core's ``overlap_moe_expert_parallel_comm`` (``SoftwareSpec.ep_comm_overlap``) runs the combined 1F1B
schedule: in the steady state each transformer layer's forward for one microbatch is paired with the same layer's
backward for another, and every dispatch or combine of one runs on a communication stream beside a compute chunk of
the other (megatron/core/pipeline_parallel/combined_1f1b.py at d98e8a6: attention, experts, attention-backward,
experts-backward). A layer pair's all-to-alls therefore hide as far as the pair's compute lasts: exposed
``max(a2a_fwd + a2a_bwd − (compute_fwd + compute_bwd), 0)``, and the hidden rest slows that compute
(``comm.with_overlap_cost``). The schedule's warm-up forwards and cool-down backwards have no partner
(``get_pp_rank_microbatches``: ``2(pp−1) + (v−1)·pp + 1`` of the ``m·v`` virtual microbatches on the first rank
with interleaving; one of ``m`` without pipelining): their all-to-alls stay exposed. Megatron allows the overlap
only with PP 1 or interleaving, and without full recompute (transformer_config.py ``__post_init__`` asserts);
elsewhere nothing hides.
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.ops import COMM, HOST, Op
from shardplan.costmodel.training.ctx import Ctx


def unpaired_share(ctx: Ctx) -> np.ndarray:
    """Share of a rank's (virtual) microbatches that the combined 1F1B schedule runs without a partner."""
    r = ctx.rows
    p, v = r.pp.astype(float), r.v.astype(float)
    m = np.maximum(r.gb / (r.dp * r.mb), 1.0) * v
    warmup = np.where(p > 1, 2 * (p - 1) + (v - 1) * p + 1, 1.0)
    return np.minimum(warmup / m, 1.0)


def overlap_ep(ctx: Ctx, fwd: list[Op], bwd: list[Op], mixer_s: np.ndarray | float
               ) -> tuple[list[Op], list[Op]]:
    """The MoE layer's forward and backward operators with each EP all-to-all cut to what shows; ``mixer_s`` is the
    forward plus backward compute of the token mixer that shares the transformer layer."""
    sw, r = ctx.system.software, ctx.rows
    if not sw.ep_comm_overlap:
        return fwd, bwd

    def is_ep(op: Op) -> bool:
        return op.kind == COMM and op.dim == "ep"

    ops = fwd + bwd
    a2a = sum((op.time for op in ops if is_ep(op)), start=np.zeros_like(ctx.tokens))
    compute = mixer_s + sum((op.time for op in ops if op.kind not in (COMM, HOST)), start=np.zeros_like(ctx.tokens))
    paired = comm.with_overlap_cost(ctx.system, a2a, np.maximum(a2a - compute, 0.0))
    u = unpaired_share(ctx)
    shown = u * a2a + (1 - u) * paired
    on = (r.ep > 1) & ((r.pp == 1) | (r.v > 1)) & (r.rc != 2)
    scale = np.where(on & (a2a > 0), shown / np.where(a2a > 0, a2a, 1.0), 1.0)

    def cut(phase: list[Op]) -> list[Op]:
        return [Op(op.name, op.kind, op.flops, op.nbytes, op.time * scale, dim=op.dim, selective=op.selective)
                if is_ep(op) else op for op in phase]

    return cut(fwd), cut(bwd)
