"""Parameters of one layer held by one GPU: how each layer kind's weights split over tensor and expert
parallelism, written once for every job (counts from ``models.params``).

Megatron's sharding (Shoeybi et al. 2019): column-parallel QKV and FC1 split their outputs (and biases) over
TP; row-parallel output projections and FC2 split their inputs, with the bias whole on every rank (added after
the reduction: ``RowParallelLinear``); norms, the router and MLA's down-projections are replicated; experts are
spread over EP, then split over TP; the vocabulary splits over TP. KV heads are held ``max(kv/t, 1)`` per rank
(vLLM replicates them when t exceeds their number). Quantised serving keeps ``other`` in 16 bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core.operators import kv_heads_per_rank
from shardplan.models import params as P
from shardplan.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class ShardParams:
    """Parameters per GPU of one layer: linear weights (quantisable), routed experts held, and the rest (norms,
    router, biases, embeddings: never quantised)."""

    linear: np.ndarray
    experts: np.ndarray
    other: np.ndarray

    @property
    def dense(self) -> np.ndarray:
        """Replicated over data parallelism (everything but the routed experts)."""
        return self.linear + self.other


def layer_shard(model: ModelSpec, kind: str, tp: np.ndarray, ep: np.ndarray, pp: np.ndarray,
                etp: np.ndarray | None = None) -> ShardParams:
    """Parameters one GPU holds for one layer of ``kind``: a mixer, mlp, moe, embedding or head. Routed experts
    split over ``etp`` (expert TP; default tp), shared experts over tp."""
    m, t, h = model, np.asarray(tp, dtype=float), model.hidden_size
    zero = np.zeros_like(t)
    if kind in ("linear", "mamba"):  # Gated DeltaNet / Mamba-2 mixers: heads (and B/C groups) split over TP
        mixer = P.linear_attention_params(m) if kind == "linear" else P.mamba_params(m)
        return ShardParams(mixer / t, zero, P.layer_norms_params(m) - P.qk_norm_params(m) + zero)  # no qk-norm
    if kind in ("attention", "sliding", "chunked"):
        norms = P.layer_norms_params(m) + zero
        if m.mla is not None:  # MLA down-projections are replicated across TP ranks
            mla = m.mla
            down = h * (mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim)
            split = P.attention_qkv_params(m) + P.attention_out_params(m) - down
            return ShardParams(down + split / t, zero, norms)
        gate = 2 if m.attn_output_gate else 1  # Qwen3-Next: q_proj carries the output gate
        d, cols = m.head_size, gate * m.num_heads / t + 2 * kv_heads_per_rank(m, t)
        qkv_bias = cols * d if m.qkv_bias else zero
        out_bias = h if m.out_bias else 0.0
        sinks = m.num_heads / t if m.attention_sinks else 0.0  # one learned logit per head (gpt-oss), split by heads
        return ShardParams(h * cols * d + m.num_heads * d * h / t, zero, norms + qkv_bias + out_bias + sinks)
    if kind == "mlp":
        return ShardParams(P.mlp_params(m, m.ffn_hidden_size) / t, zero, zero)
    if kind == "moe":
        assert m.moe is not None
        shared = m.moe.num_shared_experts * P.mlp_params(m, m.moe.shared_ffn) / t
        et = t if etp is None else np.asarray(etp, dtype=float)
        experts = m.moe.num_experts / np.asarray(ep, dtype=float) * P.mlp_params(m, m.moe.expert_ffn_hidden_size) / et
        return ShardParams(shared + zero, experts, P.router_params(m) + zero)
    if kind == "embedding":
        extra = P.position_params(m) + (P.norm_params(m, h) if m.embedding_norm else 0)
        return ShardParams(zero, zero, P.embedding_params(m) / t + extra)
    if kind == "head":
        # Tied embeddings: the last stage keeps its own copy of the word embedding when pp > 1 (Megatron, vLLM).
        lm = m.vocab_size * h / t
        head = lm if not m.tied_embeddings else np.where(np.asarray(pp) > 1, lm, 0.0)
        return ShardParams(zero, zero, P.norm_params(m, h) + head)
    raise ValueError(f"unknown layer kind {kind}")
