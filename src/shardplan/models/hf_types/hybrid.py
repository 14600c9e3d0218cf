"""Hybrid decoders that mix attention with recurrent layers: Qwen3-Next (Gated DeltaNet), Nemotron-H and
Granite 4.0-H (Mamba-2)."""

from __future__ import annotations

from collections.abc import Callable

from shardplan.models.hf_types.common import heads, moe_block, rope_decoder
from shardplan.models.hf_types.config import Fields, HFConfig
from shardplan.models.hf_types.decoders import qwen_moe_layout
from shardplan.models.hf_types.recent import layer_types
from shardplan.models.kinds import MlpKind, NormKind, PositionKind
from shardplan.models.parts import LinearAttnSpec, MambaSpec
from shardplan.models.pattern import compress


def _qwen3_next(c: HFConfig) -> Fields:
    """Qwen3-Next: three Gated DeltaNet layers then one gated full-attention layer (full_attention_interval),
    every layer a high-sparsity MoE with one gated shared expert; per-head qk-norm; MTP layers apart."""
    f = rope_decoder(c, "qwen", tied=False, ctx=262144, head_dim_default=256, kv_default=2)
    n = f["num_layers"]
    pattern = layer_types(c, n, {"linear_attention": "L", "full_attention": "F"})
    if pattern is None:
        k = c.num("full_attention_interval", default=4)
        pattern = (f"L*{k - 1}", "F") if k > 1 else ("F",)
    lin = LinearAttnSpec(num_key_heads=c.num("linear_num_key_heads", default=16),
                         num_value_heads=c.num("linear_num_value_heads", default=32),
                         key_head_dim=c.num("linear_key_head_dim", default=128),
                         value_head_dim=c.num("linear_value_head_dim", default=128),
                         conv_kernel=c.num("linear_conv_kernel_dim", default=4))
    shared = c.num("shared_expert_intermediate_size", default=512, minimum=0)
    moe = moe_block(c, experts=c.num("num_experts", default=512), top_k=c.num("num_experts_per_tok", default=10),
                    ffn=c.num("moe_intermediate_size", default=512), layout=qwen_moe_layout(c, n),
                    num_shared_experts=1 if shared else 0, shared_expert_ffn_hidden_size=shared,
                    shared_expert_gate=bool(shared), norm_topk_prob=c.flag("norm_topk_prob", True))
    mtp = c.num("num_nextn_predict_layers", "mtp_num_hidden_layers", default=0, minimum=0)
    return f | dict(layer_pattern=pattern, linear_attention=lin, moe=moe, qk_norm=True, attn_output_gate=True,
                    mtp_layers=mtp)


# Nemotron-H hybrid_override_pattern characters → layer codes: Mamba-2 mixer only, attention only, MLP only,
# MoE only (NemotronHConfig docstring: "M: Mamba2, *: Attention, -: MLP", "E" in the MoE variants).
_NEMOTRON = {"M": "Mn", "*": "Fn", "-": "Nd", "E": "Ne"}


def _mamba(c: HFConfig, h: int, *, prefix: str) -> MambaSpec:
    if prefix == "mamba_":  # Granite 4.0-H names
        return MambaSpec(num_heads=c.num("mamba_n_heads", default=128), head_dim=c.num("mamba_d_head", default=64),
                         d_state=c.num("mamba_d_state", default=256), n_groups=c.num("mamba_n_groups", default=1),
                         conv_kernel=c.num("mamba_d_conv", default=4), expand=c.num("mamba_expand", default=2),
                         chunk_size=c.num("mamba_chunk_size", default=256),
                         proj_bias=c.flag("mamba_proj_bias", False), conv_bias=c.flag("mamba_conv_bias", True))
    return MambaSpec(num_heads=c.num("mamba_num_heads", default=128), head_dim=c.num("mamba_head_dim", default=64),
                     d_state=c.num("ssm_state_size", default=128), n_groups=c.num("n_groups", default=8),
                     conv_kernel=c.num("conv_kernel", default=4), expand=c.num("expand", default=2),
                     chunk_size=c.num("chunk_size", default=128), proj_bias=c.flag("use_bias", False),
                     conv_bias=c.flag("use_conv_bias", True))


def _nemotron_h(c: HFConfig) -> Fields:
    """Nemotron-H: each layer is one block — a Mamba-2 mixer, NoPE GQA attention, or a squared-ReLU MLP —
    after a single RMSNorm, as ``hybrid_override_pattern`` lists them."""
    n = c.num("num_hidden_layers", default=52)
    raw = c.text("hybrid_override_pattern", default="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-")
    if len(raw) != n or set(raw) - set(_NEMOTRON):
        c.fail("hybrid_override_pattern", f"must have one of {''.join(_NEMOTRON)} per layer ({n}), got {raw!r}")
    attn = heads(c, hidden=("hidden_size",), heads=("num_attention_heads",), kv=("num_key_value_heads",),
                 kv_default=8, head_dim_default=128)
    fields: Fields = dict(
        family="nemotron-h", num_layers=n, **attn, ffn_hidden_size=c.num("intermediate_size", default=21504),
        mlp=MlpKind.RELU2 if c.text("mlp_hidden_act", default="relu2") == "relu2" else MlpKind.GELU,
        vocab_size=c.num("vocab_size", default=131072), tied_embeddings=c.flag("tie_word_embeddings", False),
        position=PositionKind.NOPE, max_position_embeddings=c.num("max_position_embeddings", default=4096),
        norm=NormKind.RMSNORM, norms_per_layer=1, qkv_bias=c.flag("attention_bias", False),
        out_bias=c.flag("attention_bias", False), mlp_bias=c.flag("mlp_bias", False),
        layer_pattern=compress([_NEMOTRON[ch] for ch in raw]), mamba=_mamba(c, attn["hidden_size"], prefix=""),
    )
    if "E" in raw:
        shared = c.num("moe_shared_expert_intermediate_size", default=0, minimum=0)
        fields["moe"] = moe_block(c, experts=c.num("n_routed_experts", default=128),
                                  top_k=c.num("num_experts_per_tok", default=6),
                                  ffn=c.num("moe_intermediate_size", default=1856), layout=(0, 1),
                                  num_shared_experts=1 if shared else 0, shared_expert_ffn_hidden_size=shared,
                                  score_function="sigmoid", expert_bias=True)
    return fields


def _granite_hybrid(c: HFConfig) -> Fields:
    """Granite 4.0-H: Mamba-2 and attention layers (layer_types); every layer has a shared gated MLP of
    shared_intermediate_size and, when num_local_experts > 0, a routed MoE of intermediate_size experts."""
    n = c.num("num_hidden_layers")
    attn = heads(c, hidden=("hidden_size",), heads=("num_attention_heads",), kv=("num_key_value_heads",))
    pattern = layer_types(c, n, {"mamba": "M", "attention": "F"}) or ("F",)
    experts = c.num("num_local_experts", default=0, minimum=0)
    shared = c.num("shared_intermediate_size", default=1024)
    moe = moe_block(c, experts=experts, top_k=c.num("num_experts_per_tok", default=0, minimum=0),
                    ffn=c.num("intermediate_size"), layout=(0, 1), num_shared_experts=1,
                    shared_expert_ffn_hidden_size=shared) if experts else None
    rope = c.text("position_embedding_type", default="nope") == "rope"
    return dict(
        family="granite", num_layers=n, **attn, ffn_hidden_size=shared, mlp=MlpKind.SWIGLU,
        vocab_size=c.num("vocab_size"), tied_embeddings=c.flag("tie_word_embeddings", False),
        position=PositionKind.ROPE if rope else PositionKind.NOPE,
        max_position_embeddings=c.num("max_position_embeddings", default=4096), norm=NormKind.RMSNORM,
        qkv_bias=c.flag("attention_bias", False), out_bias=c.flag("attention_bias", False), moe=moe,
        layer_pattern=pattern, mamba=_mamba(c, attn["hidden_size"], prefix="mamba_"),
    )


READERS: dict[str, Callable[[HFConfig], Fields]] = {
    "qwen3_next": _qwen3_next,
    "nemotron_h": _nemotron_h,
    "granitemoehybrid": _granite_hybrid,
}
