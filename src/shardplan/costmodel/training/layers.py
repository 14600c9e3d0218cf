"""Forward operators of each layer kind on one GPU for one training microbatch, from the shared inventory.

Shapes per GPU and microbatch: T = b·s/cp tokens through the GEMMs; elementwise kernels see T/t under sequence
parallelism (Korthikanti et al. 2022 §4.2.2). The inventory (``core.operators``) lists the operators; ``Ctx``
prices them. What only training has is here: the causal pair count of a training microbatch, and the loss.
"""

from __future__ import annotations

from shardplan.costmodel.core import operators as inv
from shardplan.costmodel.core import recurrent as rec
from shardplan.costmodel.core.ops import Op
from shardplan.costmodel.training.ctx import Ctx, masked

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
    return inv.Attention("attn", pairs=pairs, heads=m.num_heads / ctx.tp, d_qk=d_qk, d_v=d_v, q_tokens=q,
                         span=s, kv_tokens=r.mb * s,
                         kv_token_bytes=inv.kv_token_bytes(m, ctx.tp, ctx.act_bytes, latent=False))


def attention_ops(ctx: Ctx, mixer: str = "attention") -> list[Op]:
    return inv.attention_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens, core_attention(ctx, mixer))


def sliding_ops(ctx: Ctx) -> list[Op]:
    return attention_ops(ctx, "sliding")


def chunked_ops(ctx: Ctx) -> list[Op]:
    return attention_ops(ctx, "chunked")


def linear_ops(ctx: Ctx) -> list[Op]:
    """Gated DeltaNet in its chunkwise form over the microbatch's sequences (fp32 states)."""
    seqs = ctx.rows.mb.astype(float)
    return rec.linear_attention_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens, seqs=seqs, recurrent=False,
                                      state_bytes=4.0)


def mamba_ops(ctx: Ctx) -> list[Op]:
    """Mamba-2 SSD in its chunked form over the microbatch's sequences (fp32 states)."""
    seqs = ctx.rows.mb.astype(float)
    return rec.mamba2_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens, seqs=seqs, recurrent=False, state_bytes=4.0)


def mlp_ops(ctx: Ctx) -> list[Op]:
    return inv.mlp_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens)


def moe_ops(ctx: Ctx) -> list[Op]:
    return inv.moe_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens)


def embedding_ops(ctx: Ctx) -> list[Op]:
    return inv.embedding_block(ctx.model, ctx, ctx.tokens, ctx.norm_tokens)


def head_ops(ctx: Ctx) -> list[Op]:
    """LM head over every token, then vocab-parallel cross entropy in fp32 (``core.passes`` row ``cross_entropy``:
    Megatron's fused kernels, or eager PyTorch's cast and log-softmax); the TP ranks all-reduce the max, sum and
    target logit (3 fp32 per token)."""
    m, r = ctx.model, ctx.rows
    vocab = m.vocab_size / ctx.tp
    ops = inv.head_block(m, ctx, ctx.tokens, ctx.norm_tokens)
    ops.append(ctx.elementwise(inv.kernel("cross_entropy", "head.cross_entropy", ctx.tokens * vocab)))
    loss = ctx.collective("head.tp_loss_allreduce", "all_reduce", ctx.tokens * 12.0, "tp")
    ops.append(masked(loss, r.tp > 1))
    return ops
