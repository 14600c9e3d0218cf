"""Llama-style decoders up to 2024: Llama, Mistral, Mixtral, Qwen2/3 (+MoE), Gemma 1/2, Phi-3, DeepSeek-V2/V3."""

from __future__ import annotations

from collections.abc import Callable

from shardplan.models.hf_types.common import moe_block, moe_layout, rope_decoder, router
from shardplan.models.hf_types.config import Fields, HFConfig
from shardplan.models.parts import MLASpec

# --- Llama-style families -------------------------------------------------------------------------

def _llama(c: HFConfig) -> Fields:
    return rope_decoder(c, "llama", tied=False, ctx=2048)


def _mistral(c: HFConfig, family: str = "mistral", window: int | None = 4096) -> Fields:
    f = rope_decoder(c, family, tied=False, ctx=4096 * 32, kv_default=8)
    return f | dict(sliding_window=c.opt_int("sliding_window", window))


def _mixtral(c: HFConfig) -> Fields:
    f = _mistral(c, "mixtral", window=None)
    moe = moe_block(c, experts=c.num("num_local_experts", default=8), top_k=c.num("num_experts_per_tok", default=2),
               ffn=f["ffn_hidden_size"], layout=(0, 1))
    return f | dict(moe=moe)


def _qwen2(c: HFConfig) -> Fields:
    # Qwen2Attention always has Q/K/V biases (no config key) and none on the output projection.
    f = rope_decoder(c, "qwen", tied=False, ctx=32768) | dict(qkv_bias=True, out_bias=False)
    window = c.opt_int("sliding_window", 4096) if c.flag("use_sliding_window", False) else None
    return f | dict(sliding_window=window)


def qwen_moe_layout(c: HFConfig, num_layers: int) -> tuple[int, int] | None:
    """transformers' Qwen MoE rule: layer i is sparse unless listed in mlp_only_layers, if (i+1) % step == 0."""
    dense, step = set(c.int_list("mlp_only_layers")), c.num("decoder_sparse_step", default=1)
    key = "mlp_only_layers" if dense else "decoder_sparse_step"
    return moe_layout(c, num_layers, lambda i: i not in dense and (i + 1) % step == 0, key)


def _qwen2_moe(c: HFConfig) -> Fields:
    f = _qwen2(c) | dict(qkv_bias=c.flag("qkv_bias", True))
    shared = c.num("shared_expert_intermediate_size", default=5632, minimum=0)
    moe = moe_block(c, experts=c.num("num_experts", default=60), top_k=c.num("num_experts_per_tok", default=4),
               ffn=c.num("moe_intermediate_size", default=1408), layout=qwen_moe_layout(c, f["num_layers"]),
               num_shared_experts=1 if shared else 0, shared_expert_ffn_hidden_size=shared,
               shared_expert_gate=bool(shared))
    return f | dict(moe=moe)


def _qwen3(c: HFConfig) -> Fields:
    f = rope_decoder(c, "qwen", tied=False, ctx=32768, head_dim_default=128) | dict(qk_norm=True)
    window = c.opt_int("sliding_window", 4096) if c.flag("use_sliding_window", False) else None
    return f | dict(sliding_window=window)


def _qwen3_moe(c: HFConfig) -> Fields:
    f = _qwen3(c)
    moe = moe_block(c, experts=c.num("num_experts", default=128), top_k=c.num("num_experts_per_tok", default=8),
               ffn=c.num("moe_intermediate_size", default=768), layout=qwen_moe_layout(c, f["num_layers"]))
    return f | dict(moe=moe)


def _gemma(c: HFConfig) -> Fields:
    return rope_decoder(c, "gemma", tied=True, ctx=8192, head_dim_default=256)


def _gemma2(c: HFConfig) -> Fields:
    # Four RMSNorms per block: input, post-attention, pre-feedforward and post-feedforward.
    # Gemma2DecoderLayer: even layers slide (window 4096), odd layers attend globally.
    return _gemma(c) | dict(norms_per_layer=4, sliding_window=c.opt_int("sliding_window", 4096),
                            layer_pattern=("S", "F"))


def _phi3(c: HFConfig) -> Fields:
    # Phi-3 fuses Q/K/V into one qkv_proj and gate/up into gate_up_proj: the same weights, counted the same.
    return rope_decoder(c, "phi", tied=False, ctx=4096) | dict(sliding_window=c.opt_int("sliding_window"))


def _deepseek(c: HFConfig, *, v3: bool) -> Fields:
    """DeepSeek-V2/V3: MLA attention and a DeepSeekMoE feed-forward with shared experts and dense first layers."""
    f = rope_decoder(c, "deepseek", tied=False, ctx=4096 if v3 else 2048) | dict(num_kv_heads=None, head_dim=None)
    # A null means "none": q_lora_rank null is V2-Lite's full-rank query, n_routed_experts or
    # num_experts_per_tok null a dense model. An absent key takes the transformers default (None for
    # V2's num_experts_per_tok).
    q_rank = c.opt_int("q_lora_rank", 1536) or 0
    mla = MLASpec(q_lora_rank=q_rank, kv_lora_rank=c.num("kv_lora_rank", default=512),
                  qk_nope_head_dim=c.num("qk_nope_head_dim", default=128),
                  qk_rope_head_dim=c.num("qk_rope_head_dim", default=64), v_head_dim=c.num("v_head_dim", default=128))
    routed = c.opt_int("n_routed_experts", 256 if v3 else 64)
    top_k = c.opt_int("num_experts_per_tok", 8 if v3 else None)
    layout = None
    if routed is not None and top_k is not None:
        # The DeepSeek code makes layer i an MoE layer if i >= first_k_dense_replace and i % moe_layer_freq == 0.
        k = c.num("first_k_dense_replace", default=3 if v3 else 0, minimum=0)
        freq = c.num("moe_layer_freq", default=1)
        layout = moe_layout(c, f["num_layers"], lambda i: i >= k and i % freq == 0,
                             "moe_layer_freq" if freq > 1 else "first_k_dense_replace")
    moe = moe_block(c, experts=routed or 0, top_k=top_k or 0, layout=layout,
               ffn=c.num("moe_intermediate_size", default=2048 if v3 else 1407),
               num_shared_experts=c.num("n_shared_experts", default=1 if v3 else 2, minimum=0),
               **router(c, score="sigmoid" if v3 else "softmax"))
    # num_nextn_predict_layers: the MTP modules the checkpoint ships (DeepSeek-V3 §2.2), counted apart.
    return f | dict(mla=mla, moe=moe, mtp_layers=c.num("num_nextn_predict_layers", default=0, minimum=0))


READERS: dict[str, Callable[[HFConfig], Fields]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v2": lambda c: _deepseek(c, v3=False),
    "deepseek_v3": lambda c: _deepseek(c, v3=True),
    "gemma": _gemma,
    "gemma2": _gemma2,
    "phi3": _phi3,
}
