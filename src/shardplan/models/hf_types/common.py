"""Pieces most readers share: heads, MLP kind, MoE layout, the Llama-style decoder, RoPE."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardplan.models.hf_types.config import Fields, HFConfig
from shardplan.models.kinds import MlpKind, NormKind, PositionKind, RopeScaling, RouterScore
from shardplan.models.parts import MoESpec, RopeSpec


def heads(c: HFConfig, *, hidden: tuple[str, ...], heads: tuple[str, ...], kv: tuple[str, ...] = (),
           kv_default: int | None = None, head_dim_default: int | None = None) -> Fields:
    """Width, query heads, KV heads and head size, with the divisibility rules checked on the HF keys."""
    h, a = c.num(*hidden), c.num(*heads)
    n_kv = c.num(*kv, default=kv_default or a) if kv else a
    d = c.num("head_dim", default=head_dim_default) if c.has("head_dim") or head_dim_default else None
    if d is None and h % a:
        c.fail(c.key(*hidden), f"({h}) must be divisible by '{c.key(*heads)}' ({a})")
    if n_kv > a or a % n_kv:
        c.fail(c.key(*kv), f"({n_kv}) must divide '{c.key(*heads)}' ({a})")
    return dict(hidden_size=h, num_heads=a, num_kv_heads=n_kv, head_dim=d)


def plain_mlp(act: str) -> MlpKind:
    return MlpKind.RELU if "relu" in act.lower() else MlpKind.GELU


def gated_mlp(c: HFConfig) -> MlpKind:
    """SwiGLU for silu/swish, GeGLU for the gelu variants (Gemma); transformers reads ``hidden_activation`` first."""
    key = c.key("hidden_activation", "hidden_act")
    act = c.text(key, default="silu").lower()
    if act in ("silu", "swish"):
        return MlpKind.SWIGLU
    if act.startswith("gelu"):
        return MlpKind.GEGLU
    c.fail(key, f"'{act}' is not a supported gated activation (silu, swish, gelu*)")


def moe_layout(c: HFConfig, num_layers: int, is_moe: Callable[[int], bool], key: str) -> tuple[int, int] | None:
    """``(first_dense_layers, layer_freq)`` of the MoE layers, or None when every layer is dense.

    ModelSpec describes MoE layers as "the first k dense, then every n-th"; other patterns are refused.
    """
    idx = [i for i in range(num_layers) if is_moe(i)]
    if not idx:
        return None
    first = idx[0]
    freq = idx[1] - first if len(idx) > 1 else num_layers - first
    if idx != [first + j * freq for j in range(-(-(num_layers - first) // freq))]:
        c.fail(key, f"puts MoE layers at {idx}: only 'k dense layers, then every n-th' is supported")
    return first, freq


def moe_block(c: HFConfig, *, experts: int, top_k: int, ffn: int, layout: tuple[int, int] | None, **extra: Any
         ) -> MoESpec | None:
    if layout is None:
        return None
    if top_k > experts:
        c.fail("num_experts_per_tok", f"({top_k}) must be ≤ the number of experts ({experts})")
    return MoESpec(num_experts=experts, experts_per_token=top_k, expert_ffn_hidden_size=ffn,
                   first_dense_layers=layout[0], layer_freq=layout[1], **extra)


def rope_decoder(c: HFConfig, family: str, *, tied: bool, ctx: int, kv_default: int | None = None,
                  head_dim_default: int | None = None) -> Fields:
    """The Llama-style decoder (RMSNorm, RoPE, gated MLP) that most families extend."""
    bias = c.flag("attention_bias", False)
    return dict(
        family=family, num_layers=c.num("num_hidden_layers"),
        **heads(c, hidden=("hidden_size",), heads=("num_attention_heads",), kv=("num_key_value_heads",),
                 kv_default=kv_default, head_dim_default=head_dim_default),
        ffn_hidden_size=c.num("intermediate_size"), mlp=gated_mlp(c), vocab_size=c.num("vocab_size"),
        tied_embeddings=c.flag("tie_word_embeddings", tied), position=PositionKind.ROPE,
        max_position_embeddings=c.num("max_position_embeddings", default=ctx), norm=NormKind.RMSNORM,
        qkv_bias=bias, out_bias=bias, mlp_bias=c.flag("mlp_bias", False), rope=rope_spec(c),
    )



_SCALINGS = {s.value: s for s in RopeScaling}


def rope_spec(c: HFConfig, *, theta: float = 10000.0) -> RopeSpec:
    """``rope_theta``, ``partial_rotary_factor`` and ``rope_scaling`` (``rope_type`` or the older ``type``); newer
    transformers configs put all of them in one ``rope_parameters`` object instead."""
    if isinstance(c.data.get("rope_parameters"), dict):
        params = c.sub("rope_parameters")
        c = HFConfig(c.data | params.data | {"rope_scaling": params.data}, prefix=c.prefix)
    s = c.sub("rope_scaling")
    kind = s.text("rope_type", "type", default="none").lower()
    if kind == "default":
        kind = "none"
    if kind not in _SCALINGS:
        s.fail("rope_type", f"'{kind}' is not one of {', '.join(_SCALINGS)}")
    opt = {k: s.real(k, 0.0) or None for k in ("low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow",
                                               "mscale")}
    mad = s.data.get("mscale_all_dim")
    return RopeSpec(
        theta=c.real("rope_theta", theta), partial_rotary_factor=min(c.real("partial_rotary_factor", 1.0), 1.0),
        scaling=_SCALINGS[kind], factor=s.real("factor", 1.0),
        original_max_position_embeddings=s.opt_int("original_max_position_embeddings"),
        mscale_all_dim=float(mad) if isinstance(mad, int | float) and not isinstance(mad, bool) else None, **opt,
    )


def router(c: HFConfig, *, score: str = "softmax", expert_bias: bool = False) -> Fields:
    """DeepSeek-style router keys: scoring_func, topk_method noaux_tc (expert bias), routed_scaling_factor,
    n_group/topk_group, norm_topk_prob."""
    func = c.text("scoring_func", default=score).lower()
    if func not in ("softmax", "sigmoid"):
        c.fail("scoring_func", f"'{func}' is not softmax or sigmoid")
    bias = expert_bias or c.text("topk_method", default="").lower() == "noaux_tc"
    groups = c.opt_int("n_group", None) or 0
    return dict(score_function=RouterScore(func), expert_bias=bias,
                topk_scaling_factor=c.real("routed_scaling_factor", 1.0),
                num_groups=groups if groups > 1 else 0, topk_groups=(c.opt_int("topk_group", None) or 0)
                if groups > 1 else 0, norm_topk_prob=c.flag("norm_topk_prob", True))
