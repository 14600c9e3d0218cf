"""Memory per GPU: parameters held per layer kind, and activations stored per layer and microbatch.

Activations follow Korthikanti et al. 2022 (arXiv 2205.05198) §4, generalised to GQA, gated and
MoE MLPs and optional dropout. For a GPT layer (MHA, 4h GeLU MLP, dropout, 16-bit) they reduce to the
paper's per-layer bytes: ``s·b·h·(34 + 5·a·s/h)`` without parallelism; ``s·b·h·(10 + 24/t + 5·a·s/(h·t))``
with tensor parallelism; ``s·b·h·(34 + 5·a·s/h)/t`` with sequence parallelism too; selective recompute
drops the ``5·a·s/h`` term; full recompute keeps ``2·s·b·h`` (the layer input).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.training.ctx import Ctx
from shardplan.models import params as P


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one layer held by one GPU: replicated over data parallelism (dense) or over the
    expert-data-parallel group (experts)."""

    dense: np.ndarray
    expert: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.dense + self.expert


def layer_params(ctx: Ctx, kind: str) -> LayerParams:
    """Parameters per GPU of one layer of ``kind``: attention, mlp, moe, embedding or head."""
    m, r = ctx.model, ctx.rows
    t = r.tp.astype(float)
    zero = np.zeros_like(t)
    if kind == "attention":
        replicated = P.layer_norms_params(m)
        split = P.attention_qkv_params(m) + P.attention_out_params(m)
        if m.mla is not None:  # MLA down-projections are replicated across TP ranks
            down = m.hidden_size * (m.mla.q_lora_rank + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
            split, replicated = split - down, replicated + down
        return LayerParams(replicated + split / t, zero)
    if kind == "mlp":
        return LayerParams(P.mlp_params(m, m.ffn_hidden_size) / t, zero)
    if kind == "moe":
        assert m.moe is not None
        shared = m.moe.num_shared_experts * P.mlp_params(m, m.moe.shared_ffn) / t
        experts = m.moe.num_experts / r.ep * P.mlp_params(m, m.moe.expert_ffn_hidden_size) / t
        return LayerParams(P.router_params(m) + shared, experts)
    if kind == "embedding":
        extra = P.position_params(m) + (P.norm_params(m, m.hidden_size) if m.embedding_norm else 0)
        return LayerParams(P.embedding_params(m) / t + extra, zero)
    if kind == "head":
        # Tied embeddings: the last stage keeps its own copy of the word embedding when pp > 1 (Megatron).
        lm = m.vocab_size * m.hidden_size / t
        head = lm if not m.tied_embeddings else np.where(r.pp > 1, lm, 0.0)
        return LayerParams(P.norm_params(m, m.hidden_size) + head, zero)
    raise ValueError(f"unknown layer kind {kind}")


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes one layer stores for backward, per microbatch, under each recompute mode."""

    none: np.ndarray
    selective: np.ndarray
    full: np.ndarray


def layer_activations(ctx: Ctx, kind: str) -> LayerActivations:
    """Stored activation bytes of one layer of ``kind`` for one microbatch on one GPU."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    T, t = ctx.tokens, r.tp.astype(float)
    sp = r.sp == 1
    h = m.hidden_size
    drop = 1.0 if ctx.dropout else 0.0

    def shard(unsplit: np.ndarray | float) -> np.ndarray:
        """Per-token bytes outside TP regions: sharded only under sequence parallelism."""
        return np.where(sp, unsplit / t, unsplit)

    layer_input = T * shard(e * h)
    if kind == "attention":
        if m.mla is not None:
            d_qk, d_v = m.mla.qk_head_dim, m.mla.v_head_dim
            kv_heads = float(m.num_heads)
        else:
            d_qk = d_v = m.head_size
            kv_heads = m.kv_heads
        kv = np.maximum(kv_heads / t, 1.0)
        # norm input, QKV input, dropout mask | Q, K (for QKᵀ), V, output-projection input (÷t)
        unsplit = (2 * e + drop) * h
        split = e * (m.num_heads / t * d_qk + kv * d_qk + kv * d_v + m.num_heads / t * d_v)
        # softmax output (e), dropout mask (1) and dropout output (e) per score, unfused only
        scores = np.where(ctx.flash, 0.0, (m.num_heads / t) * ctx.work.seq_len * (e + drop * (1 + e)))
        lse = np.where(ctx.flash, (m.num_heads / t) * 4.0, 0.0)  # flash keeps fp32 log-sum-exp per head
        base = T * (shard(unsplit) + split + lse)
        return LayerActivations(none=base + T * scores, selective=base, full=layer_input)
    if kind == "mlp":
        g = 2 if m.mlp.gated else 1
        f = m.ffn_hidden_size / t
        base = T * (shard((2 * e + drop) * h) + e * f * (g + 1))
        return LayerActivations(none=base, selective=base, full=np.zeros_like(base))  # input kept by attention
    if kind == "moe":
        assert m.moe is not None
        moe = m.moe
        g = 2 if m.mlp.gated else 1
        copies = moe.experts_per_token * moe.capacity_factor
        experts = copies * (e * h / t + e * moe.expert_ffn_hidden_size / t * (g + 1))
        shared = moe.num_shared_experts * e * moe.shared_ffn / t * (g + 1)
        router = shard(moe.num_experts * 4.0 + copies * 8.0)
        base = T * (shard((2 * e + drop) * h) + experts + shared + router)
        return LayerActivations(none=base, selective=base, full=np.zeros_like(base))
    raise ValueError(f"unknown layer kind {kind}")


def embedding_activations(ctx: Ctx) -> np.ndarray:
    """First stage, per microbatch: the embedding dropout mask (Korthikanti et al. §4.3)."""
    drop = 1.0 if ctx.dropout else 0.0
    return ctx.tokens * np.where(ctx.rows.sp == 1, drop * ctx.model.hidden_size / ctx.rows.tp,
                                 drop * ctx.model.hidden_size)


def head_activations(ctx: Ctx) -> np.ndarray:
    """Last stage, per microbatch: final-norm and LM-head inputs, and fp32 logits for the loss."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    norm_in = np.where(r.sp == 1, e * m.hidden_size / r.tp, e * m.hidden_size)
    return ctx.tokens * (norm_in + e * m.hidden_size + 4.0 * m.vocab_size / r.tp)
