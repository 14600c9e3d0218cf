"""Parameter counts of a ``ModelSpec``, itemised by component (weights only, no buffers).

Each function counts one component of one layer; ``param_breakdown`` sums them over the model
with path-like keys (``attention/qkv``, ``mlp/experts``), in the spirit of nanoGPT's sizing notebook.
"""

from __future__ import annotations

from shardplan.models.spec import ModelSpec, NormKind


def norm_params(m: ModelSpec, width: int) -> int:
    """One norm layer: weight (RMSNorm) or weight + bias (LayerNorm)."""
    return width * (2 if m.norm == NormKind.LAYERNORM else 1)


def attention_qkv_params(m: ModelSpec) -> int:
    """Query, key and value projections of one layer (MLA: the low-rank path with its norms)."""
    h, a = m.hidden_size, m.num_heads
    if m.mla is not None:
        mla = m.mla
        if mla.q_lora_rank:
            # DeepSeek-V2 §2.1.2: W_DQ (h×r_q), RMSNorm(r_q), W_UQ (r_q × a·d_qk).
            q = h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * a * mla.qk_head_dim
        else:
            q = h * a * mla.qk_head_dim
        # W_DKV with the shared rope key (h × (r_kv + d_rope)), RMSNorm(r_kv), W_UK/W_UV (r_kv × a·(d_nope+d_v)).
        kv = (
            h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
            + mla.kv_lora_rank
            + mla.kv_lora_rank * a * (mla.qk_nope_head_dim + mla.v_head_dim)
        )
        return q + kv
    d, kv_heads = m.head_size, m.kv_heads
    weights = h * (a + 2 * kv_heads) * d
    bias = (a + 2 * kv_heads) * d if m.qkv_bias else 0
    return weights + bias


def attention_out_params(m: ModelSpec) -> int:
    """Attention output projection of one layer."""
    width = m.num_heads * (m.mla.v_head_dim if m.mla else m.head_size)
    return width * m.hidden_size + (m.hidden_size if m.out_bias else 0)


def mlp_params(m: ModelSpec, ffn: int) -> int:
    """One (dense or expert) MLP of intermediate size ``ffn``: 2·h·f plain, 3·h·f gated."""
    h = m.hidden_size
    mats = 3 if m.mlp.gated else 2
    bias = (ffn * (mats - 1) + h) if m.mlp_bias else 0
    return mats * h * ffn + bias


def router_params(m: ModelSpec) -> int:
    """Router (gate) of one MoE layer, plus the shared-expert gate where the model has one."""
    assert m.moe is not None
    shared_gate = m.hidden_size if m.moe.shared_expert_gate else 0
    return m.hidden_size * m.moe.num_experts + shared_gate


def embedding_params(m: ModelSpec) -> int:
    """Word embedding (learned positions are counted separately)."""
    return m.vocab_size * m.hidden_size


def position_params(m: ModelSpec) -> int:
    """Learned absolute position embedding (OPT keeps 2 extra rows: it offsets positions by 2)."""
    if m.position != "learned":
        return 0
    extra = 2 if m.family == "opt" else 0
    return (m.max_position_embeddings + extra) * m.hidden_size


def layer_norms_params(m: ModelSpec) -> int:
    """Norms inside one block (with Qwen3's per-head query and key norms, shared across heads)."""
    qk = 2 * norm_params(m, m.head_size) if m.qk_norm else 0
    return m.norms_per_layer * norm_params(m, m.hidden_size) + qk


def param_breakdown(m: ModelSpec) -> dict[str, int]:
    """Every weight of the model, itemised; the values sum to the total parameter count."""
    out: dict[str, int] = {"embedding/tokens": embedding_params(m)}
    if position_params(m):
        out["embedding/positions"] = position_params(m)
    if m.embedding_norm:
        out["embedding/norm"] = norm_params(m, m.hidden_size)
    L = m.num_layers
    out["attention/qkv"] = L * attention_qkv_params(m)
    out["attention/out"] = L * attention_out_params(m)
    out["norms"] = L * layer_norms_params(m)
    if m.num_dense_layers:
        out["mlp/dense"] = m.num_dense_layers * mlp_params(m, m.ffn_hidden_size)
    if m.moe is not None and m.num_moe_layers:
        n = m.num_moe_layers
        out["mlp/router"] = n * router_params(m)
        out["mlp/experts"] = n * m.moe.num_experts * mlp_params(m, m.moe.expert_ffn_hidden_size)
        if m.moe.num_shared_experts:
            out["mlp/shared_experts"] = n * m.moe.num_shared_experts * mlp_params(m, m.moe.shared_ffn)
    out["final_norm"] = norm_params(m, m.hidden_size)
    if not m.tied_embeddings:
        out["lm_head"] = m.vocab_size * m.hidden_size
    return out


def active_param_breakdown(m: ModelSpec) -> dict[str, int]:
    """Weights a single token passes through: routed experts count only the top-k chosen ones.

    Embeddings and the LM head are included, as model cards do (Mixtral-8x7B: 12.9B active).
    """
    out = param_breakdown(m)
    if m.moe is not None and "mlp/experts" in out:
        out["mlp/experts"] = (
            m.num_moe_layers * m.moe.experts_per_token * mlp_params(m, m.moe.expert_ffn_hidden_size)
        )
    return out
