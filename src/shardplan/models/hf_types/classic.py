"""GPT-2, OPT, BLOOM, GPT-NeoX and Falcon: the LayerNorm families."""

from __future__ import annotations

from collections.abc import Callable

from shardplan.models.hf_types.common import heads, plain_mlp
from shardplan.models.hf_types.config import Fields, HFConfig
from shardplan.models.kinds import MlpKind, NormKind, PositionKind

# --- GPT-2, OPT, BLOOM, GPT-NeoX, Falcon: LayerNorm families --------------------------------------

def _gpt2(c: HFConfig) -> Fields:
    h = c.num("n_embd", "hidden_size")
    return dict(
        family="gpt", num_layers=c.num("n_layer", "num_hidden_layers"),
        **heads(c, hidden=("n_embd", "hidden_size"), heads=("n_head", "num_attention_heads")),
        ffn_hidden_size=c.num("n_inner", default=4 * h),
        mlp=plain_mlp(c.text("activation_function", default="gelu_new")), vocab_size=c.num("vocab_size"),
        tied_embeddings=c.flag("tie_word_embeddings", True),
        position=PositionKind.LEARNED, max_position_embeddings=c.num("n_positions", "n_ctx", default=1024),
        norm=NormKind.LAYERNORM, qkv_bias=True, out_bias=True, mlp_bias=True,
    )


def _opt(c: HFConfig) -> Fields:
    # OPT-350m projects a 512-wide embedding to 1024 (word_embed_proj_dim); those two small matrices are not counted.
    bias = c.flag("enable_bias", True)
    return dict(
        family="opt", num_layers=c.num("num_hidden_layers"),
        **heads(c, hidden=("hidden_size",), heads=("num_attention_heads",)),
        ffn_hidden_size=c.num("ffn_dim"), mlp=plain_mlp(c.text("activation_function", default="relu")),
        vocab_size=c.num("vocab_size"), tied_embeddings=c.flag("tie_word_embeddings", True),
        position=PositionKind.LEARNED, max_position_embeddings=c.num("max_position_embeddings", default=2048),
        norm=NormKind.LAYERNORM, qkv_bias=bias, out_bias=bias, mlp_bias=bias,
    )


def _bloom(c: HFConfig) -> Fields:
    # BloomConfig maps n_layer/n_head onto num_hidden_layers/num_attention_heads and accepts n_embed for
    # hidden_size; BloomMLP is always 4·hidden_size wide; ALiBi; a LayerNorm right after the embedding.
    hidden = ("hidden_size", "n_embed")
    return dict(
        family="bloom", num_layers=c.num("n_layer", "num_hidden_layers"),
        **heads(c, hidden=hidden, heads=("n_head", "num_attention_heads")),
        ffn_hidden_size=4 * c.num(*hidden), mlp=MlpKind.GELU, vocab_size=c.num("vocab_size", default=250880),
        tied_embeddings=c.flag("tie_word_embeddings", True), position=PositionKind.ALIBI,
        max_position_embeddings=c.num("seq_length", default=2048), norm=NormKind.LAYERNORM,
        qkv_bias=True, out_bias=True, mlp_bias=True, embedding_norm=True,
    )


def _gpt_neox(c: HFConfig) -> Fields:
    bias = c.flag("attention_bias", True)
    return dict(
        family="gpt-neox", num_layers=c.num("num_hidden_layers"),
        **heads(c, hidden=("hidden_size",), heads=("num_attention_heads",)),
        ffn_hidden_size=c.num("intermediate_size"), mlp=plain_mlp(c.text("hidden_act", default="gelu")),
        vocab_size=c.num("vocab_size"), tied_embeddings=c.flag("tie_word_embeddings", False),
        position=PositionKind.ROPE, max_position_embeddings=c.num("max_position_embeddings", default=2048),
        norm=NormKind.LAYERNORM, qkv_bias=bias, out_bias=bias, mlp_bias=True,
        parallel_block=c.flag("use_parallel_residual", True),
    )


def _falcon(c: HFConfig, *, refined_web_40b: bool = False) -> Fields:
    """Falcon, in both config styles: the 7B ``multi_query`` one and the 40B/180B ``new_decoder_architecture``.

    The remote-code ``RefinedWeb`` (40B) type predates the flag and always has the new architecture.
    """
    new_arch = c.flag("new_decoder_architecture", refined_web_40b)
    parallel = c.flag("parallel_attn", True)
    head_keys = ("num_attention_heads", "n_head")
    if new_arch:
        attn = heads(c, hidden=("hidden_size", "n_embed"), heads=head_keys, kv=("num_kv_heads", "n_head_kv"))
        # Two norms (ln_attn, ln_mlp) unless num_ln_in_parallel_attn says one.
        norms = c.num("num_ln_in_parallel_attn", default=2)
    else:
        attn = heads(c, hidden=("hidden_size", "n_embed"), heads=head_keys)
        attn["num_kv_heads"] = 1 if c.flag("multi_query", True) else attn["num_heads"]
        norms = 1 if parallel else 2
    bias = c.flag("bias", False)
    return dict(
        family="falcon", num_layers=c.num("num_hidden_layers", "n_layer"), **attn,
        ffn_hidden_size=c.num("ffn_hidden_size", default=4 * attn["hidden_size"]),
        mlp=plain_mlp(c.text("activation", default="gelu")), vocab_size=c.num("vocab_size"),
        tied_embeddings=c.flag("tie_word_embeddings", True),
        position=PositionKind.ALIBI if c.flag("alibi", False) else PositionKind.ROPE,
        max_position_embeddings=c.num("max_position_embeddings", default=2048), norm=NormKind.LAYERNORM,
        norms_per_layer=norms, qkv_bias=bias, out_bias=bias, mlp_bias=bias, parallel_block=parallel,
    )


READERS: dict[str, Callable[[HFConfig], Fields]] = {
    "gpt2": _gpt2,
    "opt": _opt,
    "bloom": _bloom,
    "gpt_neox": _gpt_neox,
    "falcon": _falcon,
    "RefinedWebModel": _falcon,
    "RefinedWeb": lambda c: _falcon(c, refined_web_40b=True),
}
