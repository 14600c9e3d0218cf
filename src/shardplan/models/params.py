"""Parameter counts of a ``ModelSpec``, itemised by component (weights only, no buffers).

Each function counts one component of one layer; ``param_breakdown`` sums them over the model's
layer kinds with path-like keys (``attention/qkv``, ``mlp/experts``), in the spirit of nanoGPT's
sizing notebook. Convention: tied embeddings once; MTP layers (``mtp_param_breakdown``) and the
vision tower of a multimodal wrapper (``ModelSpec.vision_params``) are not in the total.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardplan.models.kinds import Mixer, MlpSlot, NormKind

if TYPE_CHECKING:
    from shardplan.models.spec import ModelSpec


def norm_params(m: ModelSpec, width: int) -> int:
    """One norm layer: weight (RMSNorm) or weight + bias (LayerNorm)."""
    return width * (2 if m.norm == NormKind.LAYERNORM else 1)


def attention_qkv_params(m: ModelSpec) -> int:
    """Query, key and value projections of one attention layer (MLA: the low-rank path with its norms;
    Qwen3-Next's output gate doubles the query projection)."""
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
    q_heads = 2 * a if m.attn_output_gate else a
    weights = h * (q_heads + 2 * kv_heads) * d
    bias = (q_heads + 2 * kv_heads) * d if m.qkv_bias else 0
    return weights + bias


def attention_out_params(m: ModelSpec) -> int:
    """Attention output projection of one layer."""
    width = m.num_heads * (m.mla.v_head_dim if m.mla else m.head_size)
    return width * m.hidden_size + (m.hidden_size if m.out_bias else 0)


def attention_extra_params(m: ModelSpec) -> dict[str, int]:
    """Per-attention-layer extras: gpt-oss sinks (one logit per head) and the DeepSeek-V3.2 indexer."""
    out: dict[str, int] = {}
    if m.attention_sinks:
        out["attention/sinks"] = m.num_heads
    if m.sparse_attention is not None:
        s, h = m.sparse_attention, m.hidden_size
        # DeepSeek-V3.2-Exp inference/model.py Indexer: wq_b (q_lora_rank → heads·d), wk (h → d),
        # k_norm LayerNorm(d) with bias, weights_proj (h → heads).
        q_in = m.mla.q_lora_rank if m.mla and m.mla.q_lora_rank else h
        out["attention/indexer"] = q_in * s.index_heads * s.index_head_dim + h * s.index_head_dim \
            + 2 * s.index_head_dim + h * s.index_heads
    return out


def linear_attention_params(m: ModelSpec) -> int:
    """One Gated DeltaNet layer (transformers Qwen3NextGatedDeltaNet): in_proj_qkvz, in_proj_ba, conv1d
    (no bias), dt_bias and A_log per value head, gated RMSNorm(d_v), out_proj."""
    la = m.linear_attention
    assert la is not None
    h, kd, vd, hv = m.hidden_size, la.key_dim, la.value_dim, la.num_value_heads
    return h * (2 * kd + 2 * vd) + h * 2 * hv + (2 * kd + vd) * la.conv_kernel + 2 * hv + la.value_head_dim \
        + vd * h


def mamba_params(m: ModelSpec) -> int:
    """One Mamba-2 mixer (transformers Mamba2Mixer / NemotronHMamba2Mixer): in_proj h → (2·inner +
    2·groups·N + heads), depthwise conv over inner + 2·groups·N, dt_bias, A_log and D per head,
    gated RMSNorm(inner), out_proj inner → h."""
    s = m.mamba
    assert s is not None
    h, inner, conv = m.hidden_size, s.inner, s.conv_dim
    in_proj = h * (inner + conv + s.num_heads) + ((inner + conv + s.num_heads) if s.proj_bias else 0)
    conv1d = conv * s.conv_kernel + (conv if s.conv_bias else 0)
    out_proj = inner * h + (h if s.proj_bias else 0)
    return in_proj + conv1d + 3 * s.num_heads + inner + out_proj


def mlp_params(m: ModelSpec, ffn: int) -> int:
    """One (dense or expert) MLP of intermediate size ``ffn``: 2·h·f plain, 3·h·f gated."""
    h = m.hidden_size
    mats = 3 if m.mlp.gated else 2
    bias = (ffn * (mats - 1) + h) if m.mlp_bias else 0
    return mats * h * ffn + bias


def router_params(m: ModelSpec) -> int:
    """Router (gate) of one MoE layer with its bias and expert-bias vectors, plus any shared-expert gate."""
    assert m.moe is not None
    mo = m.moe
    shared_gate = m.hidden_size if mo.shared_expert_gate else 0
    biases = mo.num_experts * (int(mo.router_bias) + int(mo.expert_bias))
    return m.hidden_size * mo.num_experts + shared_gate + biases


def embedding_params(m: ModelSpec) -> int:
    """Word embedding (learned positions are counted separately)."""
    return m.vocab_size * m.hidden_size


def position_params(m: ModelSpec) -> int:
    """Learned absolute position embedding (OPT keeps 2 extra rows: it offsets positions by 2)."""
    if m.position != "learned":
        return 0
    extra = 2 if m.family == "opt" else 0
    return (m.max_position_embeddings + extra) * m.hidden_size


def qk_norm_params(m: ModelSpec) -> int:
    """Query and key norms of one attention layer: per head (Qwen3) or over the whole projection (OLMo 2)."""
    if not m.qk_norm:
        return 0
    if m.qk_norm_per_head:
        return 2 * norm_params(m, m.head_size)
    return norm_params(m, m.num_heads * m.head_size) + norm_params(m, m.kv_heads * m.head_size)


def layer_norms_params(m: ModelSpec) -> int:
    """Norms inside one attention block (with the qk norms)."""
    return m.norms_per_layer * norm_params(m, m.hidden_size) + qk_norm_params(m)


def _moe_layer(m: ModelSpec, n: int, out: dict[str, int], *, active: bool) -> None:
    assert m.moe is not None
    mo = m.moe
    out["mlp/router"] = out.get("mlp/router", 0) + n * router_params(m)
    experts = mo.experts_per_token if active else mo.num_experts
    out["mlp/experts"] = out.get("mlp/experts", 0) + n * experts * mlp_params(m, mo.expert_ffn_hidden_size)
    if mo.num_shared_experts:
        out["mlp/shared_experts"] = out.get("mlp/shared_experts", 0) + n * mo.num_shared_experts * mlp_params(
            m, mo.shared_ffn)


def _layers(m: ModelSpec, kinds: dict[tuple[Mixer, MlpSlot], int], *, active: bool) -> dict[str, int]:
    """The blocks of ``kinds`` (layer counts per kind), itemised."""
    out: dict[str, int] = {}
    n_attn = sum(n for (mixer, _), n in kinds.items() if mixer.is_attention)
    n_all = sum(kinds.values())
    if n_attn:
        out["attention/qkv"] = n_attn * attention_qkv_params(m)
        out["attention/out"] = n_attn * attention_out_params(m)
        for k, v in attention_extra_params(m).items():
            out[k] = n_attn * v
    n_lin = sum(n for (mixer, _), n in kinds.items() if mixer == Mixer.LINEAR)
    if n_lin:
        out["linear_attention"] = n_lin * linear_attention_params(m)
    n_ssm = sum(n for (mixer, _), n in kinds.items() if mixer == Mixer.MAMBA)
    if n_ssm:
        out["mamba"] = n_ssm * mamba_params(m)
    out["norms"] = n_all * m.norms_per_layer * norm_params(m, m.hidden_size) + n_attn * qk_norm_params(m)
    n_dense = sum(n for (_, slot), n in kinds.items() if slot == MlpSlot.DENSE)
    if n_dense:
        out["mlp/dense"] = n_dense * mlp_params(m, m.ffn_hidden_size)
    n_moe = sum(n for (_, slot), n in kinds.items() if slot == MlpSlot.MOE)
    if n_moe:
        _moe_layer(m, n_moe, out, active=active)
    return out


def _breakdown(m: ModelSpec, *, active: bool) -> dict[str, int]:
    out: dict[str, int] = {"embedding/tokens": embedding_params(m)}
    if position_params(m):
        out["embedding/positions"] = position_params(m)
    if m.embedding_norm:
        out["embedding/norm"] = norm_params(m, m.hidden_size)
    out |= _layers(m, m.layer_kinds(), active=active)
    out["final_norm"] = norm_params(m, m.hidden_size)
    if not m.tied_embeddings:
        out["lm_head"] = m.vocab_size * m.hidden_size
    return out


def param_breakdown(m: ModelSpec) -> dict[str, int]:
    """Every weight of the model, itemised; the values sum to the total parameter count."""
    return _breakdown(m, active=False)


def active_param_breakdown(m: ModelSpec) -> dict[str, int]:
    """Weights a single token passes through: routed experts count only the top-k chosen ones.

    Embeddings and the LM head are included, as model cards do (Mixtral-8x7B: 12.9B active).
    """
    return _breakdown(m, active=True)


def layer_param_breakdown(m: ModelSpec, mixer: Mixer, slot: MlpSlot, *, active: bool = False) -> dict[str, int]:
    """One layer of the given kind, itemised (e.g. a Qwen3-Next linear-attention MoE layer): what a cost model
    multiplies by ``ModelSpec.layer_kinds()[(mixer, slot)]``."""
    return _layers(m, {(mixer, slot): 1}, active=active)


def mtp_param_breakdown(m: ModelSpec, *, active: bool = False) -> dict[str, int]:
    """The MTP layers (DeepSeek-V3 §2.2; GLM-4.5; Qwen3-Next): per layer one full-attention block with the
    model's last-layer MLP kind, enorm + hnorm, the 2h→h projection and a final norm. The embedding and the
    output head are shared with the main model and not counted again (checkpoints store copies of them)."""
    if not m.mtp_layers:
        return {}
    slot = MlpSlot.MOE if m.moe is not None and m.num_moe_layers else MlpSlot.DENSE
    out = {f"mtp/{k}": v for k, v in _layers(m, {(Mixer.FULL, slot): m.mtp_layers}, active=active).items()}
    out["mtp/proj"] = m.mtp_layers * (2 * m.hidden_size * m.hidden_size + 3 * norm_params(m, m.hidden_size))
    return out
