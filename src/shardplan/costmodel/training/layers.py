"""Forward operators of each layer kind on one GPU for one training microbatch, from the shared inventory.

Shapes per GPU and microbatch: T = b·s/cp tokens through the GEMMs; elementwise kernels see T/t under sequence
parallelism (Korthikanti et al. 2022 §4.2.2). The inventory (``core.operators``) lists the operators; ``Ctx``
prices them. What only training has is here: the causal pair count of a training microbatch, and the loss.
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core import operators as inv
from shardplan.costmodel.core import recurrent as rec
from shardplan.costmodel.core.ops import HOST, MEM, Op
from shardplan.costmodel.core.routing import ep_imbalance
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.quantization import LOW_PRECISION
from shardplan.costmodel.training.sp_comm import masked

# Flash attention skips the causal blocks above the diagonal and computes the diagonal blocks whole: half the
# score matrix plus half a block per query row (FlashAttention-2 block of 128 keys; Dao 2023).
FLASH_BLOCK = 128


def core_attention(ctx: Ctx, mixer: str = "attention") -> inv.Attention:
    """The attention core of one microbatch: causal (query, key) pairs as the kernel executes them, for full
    attention or the window/chunk of a sliding or chunked layer (``core.operators.mixer_pairs``)."""
    m, r = ctx.model, ctx.rows
    s = ctx.work.seq_len
    d_qk, d_v = inv.attention_dims(m)
    q = r.mb * s / r.cp
    if mixer == "attention":
        pairs = q * s * (0.5 + FLASH_BLOCK / 2 / s)
    else:  # the exact windowed pairs plus the same half block of the diagonal per query row
        pairs = r.mb / r.cp * inv.mixer_pairs(m, mixer, s) + q * FLASH_BLOCK / 2
    window = m.sliding_window if mixer == "sliding" else None
    return inv.Attention("attn", pairs=pairs, heads=m.num_heads / ctx.tp, d_qk=d_qk, d_v=d_v, q_tokens=q,
                         span=s, kv_tokens=r.mb * s,
                         kv_token_bytes=inv.kv_token_bytes(m, ctx.tp, ctx.act_bytes, latent=False), window=window)


def attention_ops(ctx: Ctx, mixer: str = "attention") -> list[Op]:
    return inv.attention_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens, core_attention(ctx, mixer))


def sliding_ops(ctx: Ctx) -> list[Op]:
    return attention_ops(ctx, "sliding")


def chunked_ops(ctx: Ctx) -> list[Op]:
    return attention_ops(ctx, "chunked")


def linear_ops(ctx: Ctx) -> list[Op]:
    """Gated DeltaNet in its chunkwise form over the microbatch's sequences (fp32 states). Under CP, Megatron trades
    sequence for heads around the conv and the delta rule: an all-to-all of in_proj's output (q, k, v, z, b, a)
    before them and of the gated norm's output after (Megatron-LM d98e8a6 ssm/gated_delta_net/gdn.py l.175-183,
    ``_gated_norm_and_a2a``), mirrored in backward."""
    seqs = ctx.rows.mb.astype(float)
    ops = rec.linear_attention_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens, seqs=seqs, recurrent=False,
                                     state_bytes=4.0)
    la = ctx.model.linear_attention
    assert la is not None
    t = ctx.rows.tp.astype(float)
    width = (2 * la.key_dim + 2 * la.value_dim + 2 * la.num_value_heads) / t  # in_qkvz and in_ba's outputs
    return _cp_all_to_alls(ctx, ops, "lin", width, la.value_dim / t, "lin.in_ba", "lin.out")


def _cp_all_to_alls(ctx: Ctx, ops: list[Op], prefix: str, into: np.ndarray, out: np.ndarray, after: str,
                    before: str) -> list[Op]:
    """A recurrent layer's two CP all-to-alls (sequence to heads, ``into`` elements per token on one TP rank, after op
    ``after``; heads to sequence, ``out``, before op ``before``); zero time without CP."""
    e = ctx.act_bytes
    a = ctx.collective(f"{prefix}.cp_a2a_in", "all_to_all", ctx.tokens * into * e, "cp")
    b = ctx.collective(f"{prefix}.cp_a2a_out", "all_to_all", ctx.tokens * out * e, "cp")
    i = next(k for k, o in enumerate(ops) if o.name == after) + 1
    j = next(k for k, o in enumerate(ops) if o.name == before)
    return [*ops[:i], a, *ops[i:j], b, *ops[j:]]


def mamba_ops(ctx: Ctx) -> list[Op]:
    """Mamba-2 SSD in its chunked form over the microbatch's sequences (fp32 states). Under CP, Megatron's
    MambaContextParallel trades sequence for heads around the conv and scan: an all-to-all of in_proj's output
    (z, x, B, C, dt) before them and of y after (Megatron-LM d98e8a6 ssm/mamba_mixer.py ``_ssm_training`` l.512, 728;
    mamba_context_parallel.py ``pre_conv_ssm``, ``post_conv_ssm``), mirrored in backward; the scan's work per GPU
    is unchanged (all tokens, 1/cp of the heads)."""
    seqs = ctx.rows.mb.astype(float)
    ops = rec.mamba2_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens, seqs=seqs, recurrent=False, state_bytes=4.0)
    s = ctx.model.mamba
    assert s is not None
    t, cp = ctx.rows.tp.astype(float), ctx.rows.cp.astype(float)
    # B and C go out repeated to cp groups where a TP rank holds fewer (pre_conv_ssm l.171-190)
    bc = 2 * s.d_state * np.maximum(s.n_groups / t, cp)
    return _cp_all_to_alls(ctx, ops, "ssm", (2 * s.inner + s.num_heads) / t + bc, s.inner / t, "ssm.in_proj",
                           "ssm.gated_norm")


def mlp_ops(ctx: Ctx) -> list[Op]:
    return inv.mlp_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens)


def _padding_copies(ctx: Ctx, ops: list[Op]) -> list[Op]:
    """TEGroupedMLP under fp8/fp4 (Megatron-Core d98e8a6 experts.py ``quantization_padding``): each expert's rows
    are padded to the quantization alignment by copying the routed tokens (and their fp32 probabilities) into a
    padded buffer before FC1, and the FC2 output is copied back without the padding rows (Transformer Engine
    Fp8Padding/Fp8Unpadding: a copy unless every expert's count is already aligned, which random routing over many
    experts all but never gives). Each copy reads and writes the routed tokens once."""
    moe = ctx.model.moe
    assert moe is not None
    routed = ctx.tokens * moe.experts_per_token * ctx.capacity_factor * ctx.etp / ctx.tp
    h = ctx.model.hidden_size
    pad = ctx.elementwise(inv.Elementwise("moe.experts.pad", routed * h, 2, fixed=routed * 8.0))
    unpad = ctx.elementwise(inv.Elementwise("moe.experts.unpad", routed * h, 2))
    first = next(i for i, o in enumerate(ops) if o.name == "moe.experts.fc1")
    last = max(i for i, o in enumerate(ops) if o.name.startswith("moe.experts.fc2"))
    return [*ops[:first], pad, *ops[first:last + 1], unpad, *ops[last + 1:]]


# A dropless MoE forward copies its per-expert token counts to the host and waits for them (Megatron-Core d98e8a6
# token_dispatcher.py ``_maybe_dtoh_and_synchronize`` before the all-to-all it sizes, or before the grouped GEMM's
# per-expert splits without EP; DeepEP's and HybridEP's dispatch wait on the received counts). The wait drains the
# GPU's queue: it then idles until the host has issued the kernels after it. Inferred from NVIDIA's measurements of
# Megatron-Bridge Qwen3-30B-A3B on 16 H100 (EP 16, HybridEP, MBS 1, GBS 1024, CUDA graphs on router and preprocess, EP
# overlap off): 24.7138 s per step (timing run), the GPU active 22.821 s of a step (nsys, rank 0), all the idle charged
# to the 48 MoE layers × 64 microbatches of forwards: 616 µs per synchronisation, an upper bound good to about ±60 µs
# (Megatron-Bridge@067f987 skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md, "HybridEP production-shape
# validation"). One x86 DGX H100 host; Grace hosts and other stacks are not measured.
MOE_SYNC_IDLE_S = (24.7138 - 22.821) / (48 * 64)


def moe_ops(ctx: Ctx) -> list[Op]:
    """The MoE block as the busiest EP rank runs it, with the host synchronisation of dropless dispatch.

    Routing is uniform at random per token in the published benchmark runs (Megatron-Bridge performance scripts set
    ``moe_router_force_load_balancing``: random router logits), so the busiest of the ``ep`` ranks receives
    ``routing.ep_imbalance`` times the mean token copies, and every rank waits for it at the combine: its all-to-alls
    and expert-side kernels take that much longer (the same bound serving uses). Under fp8/fp4 the alltoall
    dispatcher's experts pad and unpad their tokens with a copy each (``_padding_copies``). Dropping and padding to
    a capacity (a capacity factor > 1, or ``SoftwareSpec.moe_drop_and_pad``) prices every expert at that fixed
    capacity: no busiest rank, no padding copy, no host synchronisation. Round-robin routing
    (``SoftwareSpec.moe_balanced_routing``, AutoModel's benchmark gate) loads every rank equally."""
    ops = inv.moe_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens)
    moe = ctx.model.moe
    assert moe is not None
    sw = ctx.system.software
    dropless = ctx.capacity_factor == 1.0 and not sw.moe_drop_and_pad
    if dropless and ctx.work.dtype in LOW_PRECISION and sw.ep_dispatcher == "alltoall" and not sw.moe_router_padding:
        ops = _padding_copies(ctx, ops)
    if dropless and not sw.moe_balanced_routing:
        routed = ctx.tokens * moe.experts_per_token * ctx.etp / ctx.tp  # copies one rank's experts see on average
        busiest = ep_imbalance(ctx.rows.ep, routed)
        ops = [Op(o.name, o.kind, o.flops, o.nbytes * busiest if o.kind == MEM else o.nbytes, o.time * busiest,
                  dim=o.dim, selective=o.selective, bwd_kernels=o.bwd_kernels,
                  bwd_nbytes=None if o.bwd_nbytes is None else o.bwd_nbytes * busiest,
                  bwd_time=None if o.bwd_time is None else o.bwd_time * busiest,
                  grads=None if o.grads is None else o.grads.scaled(busiest))
               if o.name.startswith(("moe.experts", "moe.ep_")) else o for o in ops]
    if sw.moe_host_sync and dropless:  # drop-and-pad sizes nothing on the host
        at = next(i for i, o in enumerate(ops) if o.name == "moe.ep_dispatch")
        wait = MOE_SYNC_IDLE_S + np.zeros_like(ctx.tokens)
        ops.insert(at, Op("moe.host_sync", HOST, np.zeros_like(wait), np.zeros_like(wait), wait))
    return ops


def embedding_ops(ctx: Ctx) -> list[Op]:
    """The embedding block; without SP its output all-reduce has an identity backward (Megatron-Core d98e8a6
    tensor_parallel/mappings.py ``_ReduceFromModelParallelRegion.backward`` l.235-237): no collective there."""
    return [_without_backward(op) if op.name == "embed.tp_allreduce" else op
            for op in inv.embedding_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens)]


def _without_backward(op: Op) -> Op:
    none = np.zeros_like(op.time)
    return Op(op.name, op.kind, op.flops, op.nbytes, op.time, dim=op.dim, bwd_nbytes=none, bwd_time=none)


def mtp_entry_ops(ctx: Ctx) -> list[Op]:
    """What one MTP module runs before its transformer layer (Megatron-LM d98e8a6 transformer/
    multi_token_prediction.py ``_concat_embeddings``): the shifted tokens' embedding lookup, enorm and hnorm, the
    column-parallel ``eh_proj`` (2h→h, its input gathered under SP), and the all-gather of its output over TP
    (``gather_from_tensor_model_parallel_region``; SP then keeps its own slice)."""
    h, T, r = ctx.model.hidden_size, ctx.tokens, ctx.rows
    gather = ctx.collective("mtp.proj_gather", "all_gather", T * h * ctx.act_bytes, "tp")
    return [*embedding_ops(ctx), inv.norm(ctx, "mtp.enorm", ctx.norm_tokens, h),
            inv.norm(ctx, "mtp.hnorm", ctx.norm_tokens, h), *ctx.tp_entry("mtp.proj", T * 2 * h),
            *ctx.gemm(inv.Gemm("mtp.proj", T, 2 * h, h / ctx.tp)), masked(gather, r.tp > 1)]


def head_ops(ctx: Ctx) -> list[Op]:
    """LM head over every token, then vocab-parallel cross entropy in fp32 (``core.passes`` row ``cross_entropy``:
    Megatron's fused kernels, or eager PyTorch's cast and log-softmax; ``cross_entropy.te``: Transformer Engine's
    Triton kernels); the TP ranks all-reduce the max, sum and target logit (3 fp32 per token)."""
    m, r = ctx.model, ctx.rows
    vocab = m.vocab_size / ctx.tp
    ops = inv.head_block(m, ctx, ctx.tokens, ctx.norm_tokens)
    kind = "cross_entropy.te" if ctx.system.software.cross_entropy_fusion == "te" else "cross_entropy"
    ops.append(ctx.elementwise(inv.kernel(kind, "head.cross_entropy", ctx.tokens * vocab)))
    loss = ctx.collective("head.tp_loss_allreduce", "all_reduce", ctx.tokens * 12.0, "tp")
    # the backward computes each vocab shard's gradient locally, softmax − one-hot: no collective (Megatron-Core
    # d98e8a6 tensor_parallel/cross_entropy.py: all-reduces in forward l.130-150, none in backward l.186-)
    ops.append(masked(_without_backward(loss), r.tp > 1))
    # Without SP the column-parallel head's input gradient is all-reduced in backward, asynchronously beside its
    # weight-gradient GEMM (layers.py l.694-696 ``allreduce_dgrad``; ``backward.backward``'s async rule); none forward
    dgrad = ctx.collective("head.tp_allreduce", "all_reduce", ctx.tokens * m.hidden_size * ctx.act_bytes, "tp")
    zero = np.zeros_like(dgrad.time)
    ops.append(masked(Op(dgrad.name, dgrad.kind, zero, zero, zero, dim=dgrad.dim, bwd_nbytes=dgrad.nbytes,
                         bwd_time=dgrad.time), (r.sp == 0) & (r.tp > 1)))
    return ops


def full_rerun_ops(ctx: Ctx, kind: str, fwd: list[Op]) -> list[Op]:
    """The forward operators a full recompute of one layer of ``kind`` reruns in backward.

    Megatron-Core's ``CheckpointFunction`` (tensor_parallel/random.py at d98e8a6) reruns the whole forward. PyTorch's
    non-reentrant ``torch.utils.checkpoint`` stops once every tensor the backward needs is back (early stop, on by
    default: ``SoftwareSpec.recompute_early_stop``). An aten op's autograd wrapper saves its inputs before it runs
    the kernel, so the last saved tensor of a dense MLP is FC2's input: FC2, the collectives on its output and the
    residual add are not rerun. Not where the stop comes later: FC2 as a custom autograd function that saves after
    its GEMM (fp8/fp4 linears: torchao's float8, Transformer Engine), a dropout mask after FC2, or an MoE layer
    (its combine keeps FC2's output for the routing weights' gradient). Two places rerun more here than the stop
    does, conservatively: with dropout the residual add is still spared (the mask comes before it), and a block
    ending in a token mixer would stop before its output projection. Measured on an H200 (benchmarks/gpu/
    RESULTS.md §9): a Llama-3.1-8B-shaped layer's rerun took 112.6 against 134.7 ms for 16 layers without early
    stop."""
    early = ctx.system.software.recompute_early_stop and not ctx.dropout and ctx.work.dtype not in LOW_PRECISION
    at = next((i for i, o in enumerate(fwd) if o.name == "mlp.fc2"), None) if early and kind == "mlp" else None
    return fwd if at is None else fwd[:at]
