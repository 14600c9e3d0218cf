"""2025 decoders: Gemma 3, Llama 4, gpt-oss, Mistral 3, GLM-4.5, OLMo 2, Cohere2, Kimi-K2, DeepSeek-V3.2.

Multimodal wrappers (gemma3, llama4, mistral3) are read through ``text_config``; their vision tower is
counted by ``vision`` and kept apart in ``vision_params``.
"""

from __future__ import annotations

from collections.abc import Callable

from shardplan.models.hf_types import vision
from shardplan.models.hf_types.common import moe_block, moe_layout, rope_decoder, rope_spec, router
from shardplan.models.hf_types.config import Fields, HFConfig
from shardplan.models.hf_types.decoders import READERS as _DECODERS
from shardplan.models.kinds import MlpKind, NormKind
from shardplan.models.parts import SparseAttnSpec
from shardplan.models.pattern import compress


def layer_types(c: HFConfig, num_layers: int, codes: dict[str, str], key: str = "layer_types"
                ) -> tuple[str, ...] | None:
    """transformers' per-layer ``layer_types`` list as run-length pattern codes, or None when absent."""
    types = c.str_list(key)
    if types is None:
        return None
    if len(types) != num_layers:
        c.fail(key, f"has {len(types)} entries, num_hidden_layers is {num_layers}")
    bad = sorted(set(types) - set(codes))
    if bad:
        c.fail(key, f"has unsupported layer type(s) {bad}; supported: {', '.join(codes)}")
    return compress([codes[t] for t in types])


_ATTN_TYPES = {"full_attention": "F", "sliding_attention": "S", "chunked_attention": "C"}


def _every_nth_global(n: int) -> tuple[str, ...]:
    """``sliding_window_pattern`` n: n−1 local layers, then one global (Gemma 3, Cohere2)."""
    return (f"S*{n - 1}", "F") if n > 2 else ("S", "F") if n == 2 else ("F",)


# transformers Gemma3TextConfig defaults (multimodal configs leave most text keys out).
_GEMMA3_DEFAULTS = dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
                        hidden_activation="gelu_pytorch_tanh")


def _gemma3_text(c: HFConfig) -> Fields:
    # Window 4096 and sliding_window_pattern 6 by default, rope_theta 1e6 (global layers) and
    # rope_local_base_freq 1e4 (local layers); four norms per block and per-head q/k RMSNorms.
    c = HFConfig(_GEMMA3_DEFAULTS | {k: v for k, v in c.data.items() if v is not None}, prefix=c.prefix)
    f = rope_decoder(c, "gemma", tied=True, ctx=131072, head_dim_default=256)
    n = f["num_layers"]
    pattern = layer_types(c, n, _ATTN_TYPES) or _every_nth_global(c.num("sliding_window_pattern", default=6))
    rope = rope_spec(c, theta=1e6).model_copy(update={"local_theta": c.real("rope_local_base_freq", 10000.0)})
    return f | dict(norms_per_layer=4, qk_norm=True,
                    sliding_window=c.num("sliding_window", default=4096), layer_pattern=pattern, rope=rope)


def _gemma3(c: HFConfig) -> Fields:
    f = _gemma3_text(c.sub("text_config"))
    return f | dict(vision_params=vision.siglip(c.sub("vision_config"), f["hidden_size"]))


def _llama4_text(c: HFConfig) -> Fields:
    """Llama 4: chunked local attention with RoPE on 3 of 4 layers, global NoPE attention on the 4th
    (no_rope_layers); MoE every ``interleave_moe_layer_step``-th layer with one shared expert and a
    sigmoid top-1 router; dense layers use intermediate_size_mlp; qk-norm is a weightless L2 norm."""
    f = rope_decoder(c, "llama", tied=False, ctx=10485760, head_dim_default=128, kv_default=8)
    n, step = f["num_layers"], c.num("interleave_moe_layer_step", default=1)
    nope = c.int_list("no_rope_layers")
    # no_rope_layers[i] 1: the layer uses RoPE (chunked), 0: a global NoPE layer; absent: every 4th is global.
    pattern = compress(["C" if r else "F" for r in nope[:n]]) if nope else ("C*3", "F")
    experts = c.num("num_local_experts", default=16)
    ffn = c.num("intermediate_size", default=8192)
    # Llama4TextConfig: moe_layers, by default range(step - 1, layers, step) — the odd layers for step 2.
    listed = set(c.int_list("moe_layers"))
    layout = moe_layout(c, n, (lambda i: i in listed) if listed else (lambda i: (i + 1) % step == 0),
                        "moe_layers" if listed else "interleave_moe_layer_step")
    moe = moe_block(c, experts=experts, top_k=c.num("num_experts_per_tok", default=1), ffn=ffn, layout=layout,
                    num_shared_experts=1, score_function="sigmoid", norm_topk_prob=False)
    return f | dict(ffn_hidden_size=c.num("intermediate_size_mlp", default=16384), moe=moe, layer_pattern=pattern,
                    attention_chunk_size=c.num("attention_chunk_size", default=8192), qk_norm=False,
                    vocab_size=c.num("vocab_size", default=202048), rope=rope_spec(c, theta=500000.0))


def _llama4(c: HFConfig) -> Fields:
    f = _llama4_text(c.sub("text_config"))
    return f | dict(vision_params=vision.llama4_vision(c.sub("vision_config"), f["hidden_size"]))


def _gpt_oss(c: HFConfig) -> Fields:
    """gpt-oss: every layer MoE (biased router, biased experts), alternating sliding (128) and full
    attention with biases and a learned sink per head. MXFP4 expert weights count as parameters."""
    f = rope_decoder(c, "gpt-oss", tied=False, ctx=131072, head_dim_default=64, kv_default=8)
    n = f["num_layers"]
    pattern = layer_types(c, n, _ATTN_TYPES) or ("S", "F")
    ffn = c.num("intermediate_size", default=2880)
    moe = moe_block(c, experts=c.num("num_local_experts", default=128),
                    top_k=c.num("num_experts_per_tok", "experts_per_token", default=4), ffn=ffn, layout=(0, 1),
                    router_bias=True)
    return f | dict(qkv_bias=c.flag("attention_bias", True), out_bias=c.flag("attention_bias", True),
                    mlp_bias=True, attention_sinks=True, activation_clamp=c.real("swiglu_limit", 7.0), moe=moe,
                    layer_pattern=pattern,
                    sliding_window=c.num("sliding_window", default=128), rope=rope_spec(c, theta=150000.0))


def _mistral3(c: HFConfig) -> Fields:
    """Mistral Small 3.x: a Mistral text decoder behind a Pixtral vision tower."""
    text = c.sub("text_config")
    # The text model is a Mistral decoder, or another known type (Mistral Large 3: deepseek_v3); unknown text
    # types of the family (ministral3) are read as Mistral.
    f = _DECODERS.get(text.text("model_type", default="mistral"), _DECODERS["mistral"])(text)
    merge = c.num("spatial_merge_size", default=2)
    vis = vision.pixtral(c.sub("vision_config"), f["hidden_size"], merge=merge,
                         projector_bias=c.flag("multimodal_projector_bias", False))
    return f | dict(vision_params=vis)


def _glm4_moe(c: HFConfig) -> Fields:
    """GLM-4.5: DeepSeek-V3-style MoE (dense first layers, shared expert, sigmoid router with expert bias)
    on GQA attention with Q/K/V biases, optional per-head qk-norm, partial RoPE; MTP layers apart."""
    f = rope_decoder(c, "glm", tied=False, ctx=131072, head_dim_default=128)
    n = f["num_layers"]
    k = c.num("first_k_dense_replace", default=1, minimum=0)
    layout = moe_layout(c, n, lambda i: i >= k, "first_k_dense_replace")
    moe = moe_block(c, experts=c.num("n_routed_experts", default=128), top_k=c.num("num_experts_per_tok", default=8),
                    ffn=c.num("moe_intermediate_size", default=1408), layout=layout,
                    num_shared_experts=c.num("n_shared_experts", default=1, minimum=0),
                    **router(c, score="sigmoid", expert_bias=True))
    return f | dict(qkv_bias=c.flag("attention_bias", False), out_bias=False, qk_norm=c.flag("use_qk_norm", False),
                    moe=moe, mtp_layers=c.num("num_nextn_predict_layers", default=0, minimum=0))


def _olmo2(c: HFConfig) -> Fields:
    """OLMo 2: norms after attention and after the MLP (two per block) and RMSNorms over the whole q and k
    projections (q_norm of heads·d, k_norm of kv_heads·d)."""
    return rope_decoder(c, "olmo", tied=False, ctx=4096) | dict(qk_norm=True, qk_norm_per_head=False)


def _cohere2(c: HFConfig) -> Fields:
    """Cohere2 (Command R7B / A): parallel attention + MLP after one bias-free LayerNorm, tied embeddings,
    three sliding-window layers then one global."""
    f = rope_decoder(c, "cohere", tied=True, ctx=8192)
    n = f["num_layers"]
    pattern = layer_types(c, n, _ATTN_TYPES) or _every_nth_global(c.num("sliding_window_pattern", default=4))
    return f | dict(norm=NormKind.LAYERNORM_NO_BIAS, norms_per_layer=1, parallel_block=True,
                    sliding_window=c.num("sliding_window", default=4096), layer_pattern=pattern,
                    rope=rope_spec(c, theta=10000.0), mlp=MlpKind.SWIGLU)


def _kimi_k2(c: HFConfig) -> Fields:
    """Kimi-K2: the DeepSeek-V3 architecture (model_type kimi_k2, architectures DeepseekV3ForCausalLM)."""
    return _DECODERS["deepseek_v3"](c) | dict(family="kimi")


def _deepseek_v32(c: HFConfig) -> Fields:
    """DeepSeek-V3.2: DeepSeek-V3 plus the lightning indexer of DeepSeek sparse attention."""
    f = _DECODERS["deepseek_v3"](c)
    dsa = SparseAttnSpec(index_heads=c.num("index_n_heads", default=64), index_head_dim=c.num("index_head_dim",
                         default=128), index_topk=c.num("index_topk", default=2048))
    return f | dict(sparse_attention=dsa)


READERS: dict[str, Callable[[HFConfig], Fields]] = {
    "gemma3": _gemma3,
    "gemma3_text": _gemma3_text,
    "llama4": _llama4,
    "llama4_text": _llama4_text,
    "gpt_oss": _gpt_oss,
    "mistral3": _mistral3,
    "glm4_moe": _glm4_moe,
    "olmo2": _olmo2,
    "cohere2": _cohere2,
    "kimi_k2": _kimi_k2,
    "deepseek_v32": _deepseek_v32,
}
