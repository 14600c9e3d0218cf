"""How `models show` describes a model: one readable line per architectural fact, plus the counting convention."""

from __future__ import annotations

from typing import Any

from shardplan.units import format_count

CONVENTION = ("total: every weight of the text model, tied embeddings once; active: the weights one token passes "
              "through (top-k routed experts, shared experts, dense layers, embedding and head); MTP layers and the "
              "vision tower of a multimodal wrapper are counted apart, not in either")

_MIXER_NAMES = {"F": "full attention", "S": "sliding-window attention", "C": "chunked attention",
                "L": "linear attention (Gated DeltaNet)", "M": "Mamba-2", "N": "no mixer"}


def _heads(m: Any) -> str:
    if m.mla is not None:
        a = m.mla
        q = f"q_lora_rank {a.q_lora_rank}" if a.q_lora_rank else "full-rank q"
        return (f"{m.num_heads} heads; q/k {a.qk_head_dim} (nope {a.qk_nope_head_dim} + rope {a.qk_rope_head_dim}), "
                f"v {a.v_head_dim}; kv_lora_rank {a.kv_lora_rank}, {q}")
    return f"{m.num_heads} query / {m.kv_heads} KV heads of {m.head_size}"


def _layers(m: Any) -> str:
    kinds = m.layer_kinds()
    parts = []
    for (mixer, slot), n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        what = _MIXER_NAMES[mixer.value]
        if mixer.value == "S":
            what += f" ({m.sliding_window})"
        if mixer.value == "C":
            what += f" ({m.attention_chunk_size})"
        mlp = {"d": "dense MLP", "e": "MoE", "n": "no MLP"}[slot.value]
        parts.append(f"{n} × {what} + {mlp}")
    pattern = " ".join(m.layer_pattern) if m.layer_pattern else m.default_mixer.value
    return f"{m.num_layers} layers, pattern [{pattern}] repeated: " + "; ".join(parts)


def _moe(m: Any) -> str:
    mo = m.moe
    shared = f", {mo.num_shared_experts} shared × {mo.shared_ffn}" if mo.num_shared_experts else ", no shared expert"
    route = f"{mo.score_function.value} router"
    if mo.expert_bias:
        route += " with expert bias"
    if mo.router_bias:
        route += " with bias"
    if mo.num_groups:
        route += f", groups {mo.topk_groups}/{mo.num_groups}"
    if mo.topk_scaling_factor != 1.0:
        route += f", top-k scale {mo.topk_scaling_factor:g}"
    return (f"{mo.num_experts} experts × {mo.expert_ffn_hidden_size}, top-{mo.experts_per_token}{shared}; {route}; "
            f"{m.num_moe_layers} MoE / {m.num_dense_layers} dense-MLP layers (dense FFN {m.ffn_hidden_size})")


def _rope(m: Any) -> str:
    r = m.rope
    text = f"theta {r.theta:g}"
    if r.partial_rotary_factor != 1.0:
        text += f", rotary share {r.partial_rotary_factor:g}"
    if r.scaling.value != "none":
        text += f", {r.scaling.value} ×{r.factor:g}"
        if r.original_max_position_embeddings:
            text += f" from {r.original_max_position_embeddings}"
    if r.local_theta:
        text += f", local layers theta {r.local_theta:g}"
    return text


def describe(m: Any) -> list[tuple[str, str]]:
    """(label, text) rows for the human view of ``models show``."""
    rows = [("family", m.family), ("layers", _layers(m)), ("width", f"hidden {m.hidden_size}, vocab {m.vocab_size}"
             + (", tied embeddings" if m.tied_embeddings else "")), ("attention", f"{m.attention_kind}: {_heads(m)}")]
    extras = [name for flag, name in ((m.qk_norm, "qk-norm" + ("" if m.qk_norm_per_head else " (whole projection)")),
                                      (m.qkv_bias, "qkv bias"), (m.attention_sinks, "sinks"),
                                      (m.attn_output_gate, "output gate"), (m.parallel_block, "parallel block"))
              if flag]
    if extras:
        rows.append(("attention extras", ", ".join(extras)))
    if m.sparse_attention is not None:
        s = m.sparse_attention
        rows.append(("sparse attention", f"indexer {s.index_heads} heads × {s.index_head_dim}, top-{s.index_topk}"))
    if m.linear_attention is not None:
        la = m.linear_attention
        rows.append(("linear attention", f"{la.num_key_heads} qk heads × {la.key_head_dim}, {la.num_value_heads} "
                     f"v heads × {la.value_head_dim}, conv {la.conv_kernel}"))
    if m.mamba is not None:
        s = m.mamba
        rows.append(("mamba-2", f"{s.num_heads} heads × {s.head_dim}, d_state {s.d_state}, groups {s.n_groups}, "
                     f"conv {s.conv_kernel}"))
    act = m.mlp.value + (f" (gate ≤ {m.activation_clamp:g}, up within ±{m.activation_clamp:g})"
                         if m.activation_clamp is not None else "")
    rows.append(("mlp", f"{act}, FFN {m.ffn_hidden_size}" if m.moe is None else f"{act}; {_moe(m)}"))
    rows.append(("norm", f"{m.norm.value} × {m.norms_per_layer} per layer"))
    rows.append(("position", f"{m.position.value}" + (f"; {_rope(m)}" if m.rope is not None else "")))
    rows.append(("context", str(m.max_position_embeddings)))
    if m.mtp_layers:
        rows.append(("MTP layers", f"{m.mtp_layers} ({format_count(m.mtp_params)} params, apart)"))
    if m.vision_params:
        rows.append(("vision tower", f"{format_count(m.vision_params)} params (apart; the text model is planned)"))
    rows += [("weights dtype", m.dtype), ("params", f"{format_count(m.total_params)} total, "
             f"{format_count(m.active_params)} active"), ("convention", CONVENTION), ("source", m.source)]
    return rows


def payload_extras(m: Any) -> dict[str, Any]:
    """Keys `models show --json` adds to the ModelSpec dump."""
    extra: dict[str, Any] = {
        "layer_kinds": {f"{mix.value}{slot.value}": n for (mix, slot), n in sorted(m.layer_kinds().items())},
        "mtp_params": m.mtp_params, "vision_params": m.vision_params, "param_convention": CONVENTION,
        "kv_layers_full": m.kv_layers_full, "num_attention_layers": m.num_attention_layers,
        "recurrent_state_elements_per_seq": m.recurrent_state_elements_per_seq(),
    }
    if m.mla is not None:
        extra["mla_head_dims"] = {"qk": m.mla.qk_head_dim, "qk_nope": m.mla.qk_nope_head_dim,
                                  "qk_rope": m.mla.qk_rope_head_dim, "v": m.mla.v_head_dim}
    if m.moe is not None:
        extra["shared_expert_ffn_hidden_size"] = m.moe.shared_ffn if m.moe.num_shared_experts else 0
    return extra
