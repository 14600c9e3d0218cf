"""Forward kernels of each layer kind (attention, MLP, MoE, embedding, LM head) on one GPU.

Shapes per GPU and microbatch: T = b·s/cp tokens, heads a/t, MLP width f/t (Megatron tensor
parallelism, Shoeybi et al. 2019); elementwise kernels see T/t tokens under sequence parallelism
(Korthikanti et al. 2022 §4.2.2). Byte counts are HBM traffic in the activation datatype.
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core.kernels import kernel_time
from shardplan.costmodel.core.ops import GEMM, Op
from shardplan.costmodel.training.ctx import Ctx


def _kv_per_rank(ctx: Ctx) -> np.ndarray:
    """KV heads per TP rank (replicated when TP exceeds the KV heads, as for MQA)."""
    return np.maximum(ctx.model.kv_heads / ctx.rows.tp, 1.0)


def _masked(op: Op, when: np.ndarray) -> Op:
    """The op where ``when`` holds, zero elsewhere (collectives that exist only with SP, or only without)."""
    z = np.zeros_like(op.time)
    return Op(op.name, op.kind, np.where(when, op.flops, z), np.where(when, op.nbytes, z),
              np.where(when, op.time, z), dim=op.dim, selective=op.selective)


def tp_entry(ctx: Ctx, prefix: str) -> list[Op]:
    """Sequence parallel all-gathers the sharded input before a TP region (identity without SP)."""
    r = ctx.rows
    op = ctx.collective(f"{prefix}.tp_allgather", "all_gather", ctx.tokens * ctx.model.hidden_size * ctx.act_bytes,
                        "tp")
    return [_masked(op, (r.sp == 1) & (r.tp > 1))]


def tp_exit(ctx: Ctx, prefix: str) -> list[Op]:
    """Leaving a TP region: all-reduce the partial sums, or reduce-scatter them under SP."""
    r = ctx.rows
    nbytes = ctx.tokens * ctx.model.hidden_size * ctx.act_bytes
    ar = ctx.collective(f"{prefix}.tp_allreduce", "all_reduce", nbytes, "tp")
    rs = ctx.collective(f"{prefix}.tp_reducescatter", "reduce_scatter", nbytes, "tp")
    return [_masked(ar, (r.sp == 0) & (r.tp > 1)), _masked(rs, (r.sp == 1) & (r.tp > 1))]


def norm(ctx: Ctx, name: str) -> Op:
    """LayerNorm/RMSNorm: read and write T·h activations (fp32 statistics are negligible)."""
    return ctx.mem(name, ctx.norm_tokens * ctx.model.hidden_size * 2 * ctx.act_bytes)


def dropout_residual(ctx: Ctx, name: str) -> Op:
    """Bias-dropout-add: read x and the residual, write the sum (and a 1-byte mask with dropout)."""
    per = 3 * ctx.act_bytes + (1 if ctx.dropout else 0)
    return ctx.mem(name, ctx.norm_tokens * ctx.model.hidden_size * per)


def core_attention(ctx: Ctx, d_qk: int, d_v: int) -> list[Op]:
    """Softmax(QKᵀ)V for the rows' attention kernel: unfused (Megatron 2021–22) or flash."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    s = ctx.work.seq_len
    heads = m.num_heads / r.tp
    sq = s / r.cp
    qkv_bytes = e * r.mb * heads * sq * (2 * d_qk + 2 * d_v)
    # Unfused: the full s×s score matrix is computed, masked and stored (no causal skipping).
    scores = r.mb * heads * sq * s
    unfused = [
        ctx.bmm("attn.scores", 2.0 * scores * d_qk, e * scores + e * r.mb * heads * sq * 2 * d_qk),
        ctx.mem("attn.softmax", 2 * e * scores, selective=True),
    ]
    if ctx.dropout:
        unfused.append(ctx.mem("attn.dropout", (2 * e + 1) * scores, selective=True))
    unfused.append(ctx.bmm("attn.context", 2.0 * scores * d_v, e * scores + e * r.mb * heads * sq * 2 * d_v))
    # Flash: causal blocks above the diagonal are skipped: ≈ half the matrix, plus the diagonal blocks (128).
    causal = 0.5 + 64.0 / s
    flash = ctx.flash_attn("attn.flash", 2.0 * r.mb * heads * sq * s * (d_qk + d_v) * causal, qkv_bytes)
    ops = [_masked(op, ~ctx.flash) for op in unfused] + [_masked(flash, ctx.flash)]
    # Context parallel: K/V chunks travel around the CP ring, overlapped with the attention kernels.
    kv_bytes = 2.0 * r.mb * s * _kv_per_rank(ctx) * (d_qk + d_v) / 2 * e
    ring = ctx.collective("attn.cp_ring", "all_gather", kv_bytes, "cp")
    hidden = flash.time * (r.cp - 1) / r.cp
    exposed = np.maximum(ring.time - hidden, 0.0)
    ops.append(Op("attn.cp_ring", ring.kind, ring.flops, ring.nbytes, np.where(r.cp > 1, exposed, 0.0), dim="cp"))
    return ops


def attention_ops(ctx: Ctx) -> list[Op]:
    """Attention block forward: norm, QKV (or MLA projections), core attention, output, TP collectives."""
    m, r, T = ctx.model, ctx.rows, ctx.tokens
    h, t = m.hidden_size, r.tp
    ops: list[Op] = [norm(ctx, "attn.norm"), *tp_entry(ctx, "attn")]
    if m.mla is not None:
        mla = m.mla
        if mla.q_lora_rank:
            # Down-projections are replicated across TP ranks; up-projections are split by heads.
            ops += ctx.gemm("attn.q_down", T, h, mla.q_lora_rank)
            ops.append(ctx.mem("attn.q_norm", T * mla.q_lora_rank * 2 * ctx.act_bytes))
            ops += ctx.gemm("attn.q_up", T, mla.q_lora_rank, m.num_heads * mla.qk_head_dim / t)
        else:
            ops += ctx.gemm("attn.q", T, h, m.num_heads * mla.qk_head_dim / t)
        ops += ctx.gemm("attn.kv_down", T, h, mla.kv_lora_rank + mla.qk_rope_head_dim)
        ops.append(ctx.mem("attn.kv_norm", T * mla.kv_lora_rank * 2 * ctx.act_bytes))
        ops += ctx.gemm("attn.kv_up", T, mla.kv_lora_rank, m.num_heads * (mla.qk_nope_head_dim + mla.v_head_dim) / t)
        ops += core_attention(ctx, mla.qk_head_dim, mla.v_head_dim)
        ops += ctx.gemm("attn.out", T, m.num_heads * mla.v_head_dim / t, h)
    else:
        d = m.head_size
        ops += ctx.gemm("attn.qkv", T, h, (m.num_heads / t + 2 * _kv_per_rank(ctx)) * d)
        ops += core_attention(ctx, d, d)
        ops += ctx.gemm("attn.out", T, m.num_heads * d / t, h)
    ops += tp_exit(ctx, "attn")
    ops.append(dropout_residual(ctx, "attn.residual"))
    return ops


def _mlp_core(ctx: Ctx, prefix: str, tokens: np.ndarray, ffn: float, *, groups: np.ndarray | float = 1.0
              ) -> list[Op]:
    """FC1 → activation (gated: act(gate)·up) → FC2, split over TP; ``groups`` experts share the tokens."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    h, g = m.hidden_size, 2 if m.mlp.gated else 1
    width = ffn / r.tp
    ops = _grouped_gemm(ctx, f"{prefix}.fc1", tokens, h, g * width, groups)
    ops.append(ctx.mem(f"{prefix}.act", tokens * width * (g + 1) * e))
    ops += _grouped_gemm(ctx, f"{prefix}.fc2", tokens, width, h, groups)
    return ops


def _grouped_gemm(ctx: Ctx, name: str, m: np.ndarray, k: float | np.ndarray, n: float | np.ndarray,
                  groups: np.ndarray | float) -> list[Op]:
    """GEMM(s) over ``groups`` equal shares of the rows: efficiency is that of one group's GEMM."""
    ops = ctx.gemm(name, m, k, n)
    if np.all(np.asarray(groups) == 1):
        return ops
    op = ops[0]
    per = np.maximum(op.flops / groups, 1.0)
    eff_t = kernel_time(ctx.gpu, per, op.nbytes / groups, ctx.mm_dtype) * groups
    return [Op(op.name, GEMM, op.flops, op.nbytes, np.maximum(op.time, eff_t)), *ops[1:]]


def mlp_ops(ctx: Ctx) -> list[Op]:
    """Dense MLP block forward."""
    ops: list[Op] = [norm(ctx, "mlp.norm"), *tp_entry(ctx, "mlp")]
    ops += _mlp_core(ctx, "mlp", ctx.tokens, ctx.model.ffn_hidden_size)
    ops += tp_exit(ctx, "mlp")
    ops.append(dropout_residual(ctx, "mlp.residual"))
    return ops


def moe_ops(ctx: Ctx) -> list[Op]:
    """MoE block forward: router, all-to-all dispatch over EP, expert MLPs (TP-split), combine, shared experts."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    assert m.moe is not None
    moe, h = m.moe, m.hidden_size
    routed = ctx.norm_tokens * moe.experts_per_token * moe.capacity_factor  # token copies leaving this GPU
    ops: list[Op] = [norm(ctx, "moe.norm")]
    ops += ctx.gemm("moe.router", ctx.norm_tokens, h, moe.num_experts)
    ops.append(ctx.mem("moe.topk", ctx.norm_tokens * moe.num_experts * 8.0))
    ops.append(ctx.mem("moe.permute", routed * h * 2 * e))
    ops.append(ctx.collective("moe.ep_dispatch", "all_to_all", routed * h * e, "ep"))
    ops += tp_entry_tokens(ctx, "moe.experts", routed)
    local_experts = moe.num_experts / r.ep
    ops += _mlp_core(ctx, "moe.experts", ctx.tokens * moe.experts_per_token * moe.capacity_factor,
                     moe.expert_ffn_hidden_size, groups=local_experts)
    ops += tp_exit_tokens(ctx, "moe.experts", routed)
    ops.append(ctx.collective("moe.ep_combine", "all_to_all", routed * h * e, "ep"))
    ops.append(ctx.mem("moe.unpermute", routed * h * 2 * e))
    if moe.num_shared_experts:
        ops += tp_entry(ctx, "moe.shared")
        ops += _mlp_core(ctx, "moe.shared", ctx.tokens, moe.num_shared_experts * moe.shared_ffn)
        ops += tp_exit(ctx, "moe.shared")
    ops.append(dropout_residual(ctx, "moe.residual"))
    return ops


def tp_entry_tokens(ctx: Ctx, prefix: str, routed: np.ndarray) -> list[Op]:
    """Experts split over TP need every TP rank's dispatched tokens: all-gather them."""
    op = ctx.collective(f"{prefix}.tp_allgather", "all_gather", routed * ctx.rows.tp * ctx.model.hidden_size
                        * ctx.act_bytes, "tp")
    return [_masked(op, (ctx.rows.tp > 1) & (ctx.rows.sp == 1))]


def tp_exit_tokens(ctx: Ctx, prefix: str, routed: np.ndarray) -> list[Op]:
    op = ctx.collective(f"{prefix}.tp_reducescatter", "reduce_scatter", routed * ctx.rows.tp
                        * ctx.model.hidden_size * ctx.act_bytes, "tp")
    return [_masked(op, (ctx.rows.tp > 1) & (ctx.rows.sp == 1))]


def embedding_ops(ctx: Ctx) -> list[Op]:
    """Vocab-parallel embedding lookup (+ learned positions, embedding norm, dropout) on the first stage."""
    m, e = ctx.model, ctx.act_bytes
    h = m.hidden_size
    ops = [ctx.mem("embed.lookup", ctx.tokens * h * 2 * e), *tp_exit(ctx, "embed")]
    if m.position == "learned":
        ops.append(ctx.mem("embed.positions", ctx.norm_tokens * h * 3 * e))
    if m.embedding_norm:
        ops.append(norm(ctx, "embed.norm"))
    if ctx.dropout:
        ops.append(ctx.mem("embed.dropout", ctx.norm_tokens * h * (2 * e + 1)))
    return ops


def head_ops(ctx: Ctx) -> list[Op]:
    """Final norm, vocab-parallel LM head and cross-entropy loss on the last stage."""
    m, r = ctx.model, ctx.rows
    vocab = m.vocab_size / r.tp
    ops = [norm(ctx, "head.norm"), *tp_entry(ctx, "head")]
    ops += ctx.gemm("head.logits", ctx.tokens, m.hidden_size, vocab)
    # Vocab-parallel cross entropy in fp32: read logits, write fp32 softmax, read it back (Megatron).
    ops.append(ctx.mem("head.cross_entropy", ctx.tokens * vocab * (ctx.act_bytes + 8.0)))
    loss = ctx.collective("head.tp_loss_allreduce", "all_reduce", ctx.tokens * 12.0, "tp")
    ops.append(_masked(loss, r.tp > 1))
    return ops
