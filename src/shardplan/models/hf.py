"""Offline import of a Hugging Face ``config.json`` into a ``ModelSpec``.

One small reader per ``model_type`` maps that architecture's key names onto ModelSpec fields, with
the defaults of the matching transformers config class where a key may be left out. Anything
missing, of the wrong type or out of range becomes a one-line ``ConfigFileError`` naming the key.
Nothing here touches the network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from pydantic import ValidationError

from shardplan.errors import ConfigFileError
from shardplan.models.spec import (
    MAX_CONTEXT,
    MAX_DIM,
    MAX_LAYERS,
    MLASpec,
    MlpKind,
    ModelSpec,
    MoESpec,
    NormKind,
    PositionKind,
)

Fields = dict[str, Any]

# Upper bounds of integer keys (checked before anything iterates over layers); every other integer ≤ MAX_DIM.
_MAXIMUM = {"num_hidden_layers": MAX_LAYERS, "n_layer": MAX_LAYERS, "max_position_embeddings": MAX_CONTEXT,
            "n_positions": MAX_CONTEXT, "n_ctx": MAX_CONTEXT, "seq_length": MAX_CONTEXT, "sliding_window": MAX_CONTEXT}


def _short(v: float) -> str:
    """A number for a message, however many digits it has."""
    text = str(int(v)) if isinstance(v, int) else repr(v)
    return text if len(text) <= 15 else f"a {len(text)}-digit number"


class _Config:
    """A parsed config.json with typed getters; a JSON ``null`` counts as absent, as in transformers."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigFileError(f"config.json: '{key}' {problem}", field="model")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def key(self, *keys: str) -> str:
        """The first of ``keys`` present (HF renames keys between families), else the first one."""
        return next((k for k in keys if self.has(k)), keys[0])

    def num(self, *keys: str, default: int | None = None, minimum: int = 1) -> int:
        k = self.key(*keys)
        if not self.has(k):
            if default is None:
                self.fail(k, "is missing")
            return default
        v = self.data[k]
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
            self.fail(k, f"must be an integer, got {v!r}")
        if v < minimum:
            self.fail(k, f"must be ≥ {minimum}, got {v!r}")
        top = _MAXIMUM.get(k, MAX_DIM)
        if v > top:
            self.fail(k, f"must be ≤ {top:,}, got {_short(v)}")
        return int(v)

    def opt_int(self, key: str, default: int | None = None) -> int | None:
        """For keys where null means "none": absent takes ``default``, null gives None."""
        if key not in self.data:
            return default
        return self.num(key) if self.has(key) else None

    def flag(self, key: str, default: bool) -> bool:
        v = self.data.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.fail(key, f"must be true or false, got {v!r}")
        return v

    def text(self, *keys: str, default: str) -> str:
        k = self.key(*keys)
        v = self.data.get(k, default)
        if v is None:
            return default
        if not isinstance(v, str):
            self.fail(k, f"must be a string, got {v!r}")
        return v

    def int_list(self, key: str) -> list[int]:
        v = self.data.get(key) or []
        if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            self.fail(key, f"must be a list of layer indices, got {v!r}")
        return v


# --- shared pieces ------------------------------------------------------------------------------

def _heads(c: _Config, *, hidden: tuple[str, ...], heads: tuple[str, ...], kv: tuple[str, ...] = (),
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


def _plain_mlp(act: str) -> MlpKind:
    return MlpKind.RELU if "relu" in act.lower() else MlpKind.GELU


def _gated_mlp(c: _Config) -> MlpKind:
    """SwiGLU for silu/swish, GeGLU for the gelu variants (Gemma); transformers reads ``hidden_activation`` first."""
    key = c.key("hidden_activation", "hidden_act")
    act = c.text(key, default="silu").lower()
    if act in ("silu", "swish"):
        return MlpKind.SWIGLU
    if act.startswith("gelu"):
        return MlpKind.GEGLU
    c.fail(key, f"'{act}' is not a supported gated activation (silu, swish, gelu*)")


def _moe_layout(c: _Config, num_layers: int, is_moe: Callable[[int], bool], key: str) -> tuple[int, int] | None:
    """``(first_dense_layers, layer_freq)`` of the MoE layers, or None when every layer is dense.

    ModelSpec describes MoE layers as "the first k dense, then every n-th"; other patterns are refused.
    """
    idx = [i for i in range(num_layers) if is_moe(i)]
    if not idx:
        return None
    first = idx[0]
    freq = idx[1] - first if len(idx) > 1 else num_layers - first
    if idx != [first + j * freq for j in range((num_layers - first) // freq)]:
        c.fail(key, f"puts MoE layers at {idx}: only 'k dense layers, then every n-th' is supported")
    return first, freq


def _moe(c: _Config, *, experts: int, top_k: int, ffn: int, layout: tuple[int, int] | None, **extra: Any
         ) -> MoESpec | None:
    if layout is None:
        return None
    if top_k > experts:
        c.fail("num_experts_per_tok", f"({top_k}) must be ≤ the number of experts ({experts})")
    return MoESpec(num_experts=experts, experts_per_token=top_k, expert_ffn_hidden_size=ffn,
                   first_dense_layers=layout[0], layer_freq=layout[1], **extra)


def _rope_decoder(c: _Config, family: str, *, tied: bool, ctx: int, kv_default: int | None = None,
                  head_dim_default: int | None = None) -> Fields:
    """The Llama-style decoder (RMSNorm, RoPE, gated MLP) that most families extend."""
    bias = c.flag("attention_bias", False)
    return dict(
        family=family, num_layers=c.num("num_hidden_layers"),
        **_heads(c, hidden=("hidden_size",), heads=("num_attention_heads",), kv=("num_key_value_heads",),
                 kv_default=kv_default, head_dim_default=head_dim_default),
        ffn_hidden_size=c.num("intermediate_size"), mlp=_gated_mlp(c), vocab_size=c.num("vocab_size"),
        tied_embeddings=c.flag("tie_word_embeddings", tied), position=PositionKind.ROPE,
        max_position_embeddings=c.num("max_position_embeddings", default=ctx), norm=NormKind.RMSNORM,
        qkv_bias=bias, out_bias=bias, mlp_bias=c.flag("mlp_bias", False),
    )


# --- GPT-2, OPT, BLOOM, GPT-NeoX, Falcon: LayerNorm families --------------------------------------

def _gpt2(c: _Config) -> Fields:
    h = c.num("n_embd", "hidden_size")
    return dict(
        family="gpt", num_layers=c.num("n_layer", "num_hidden_layers"),
        **_heads(c, hidden=("n_embd", "hidden_size"), heads=("n_head", "num_attention_heads")),
        ffn_hidden_size=c.num("n_inner", default=4 * h),
        mlp=_plain_mlp(c.text("activation_function", default="gelu_new")), vocab_size=c.num("vocab_size"),
        tied_embeddings=c.flag("tie_word_embeddings", True),
        position=PositionKind.LEARNED, max_position_embeddings=c.num("n_positions", "n_ctx", default=1024),
        norm=NormKind.LAYERNORM, qkv_bias=True, out_bias=True, mlp_bias=True,
    )


def _opt(c: _Config) -> Fields:
    # OPT-350m projects a 512-wide embedding to 1024 (word_embed_proj_dim); those two small matrices are not counted.
    bias = c.flag("enable_bias", True)
    return dict(
        family="opt", num_layers=c.num("num_hidden_layers"),
        **_heads(c, hidden=("hidden_size",), heads=("num_attention_heads",)),
        ffn_hidden_size=c.num("ffn_dim"), mlp=_plain_mlp(c.text("activation_function", default="relu")),
        vocab_size=c.num("vocab_size"), tied_embeddings=c.flag("tie_word_embeddings", True),
        position=PositionKind.LEARNED, max_position_embeddings=c.num("max_position_embeddings", default=2048),
        norm=NormKind.LAYERNORM, qkv_bias=bias, out_bias=bias, mlp_bias=bias,
    )


def _bloom(c: _Config) -> Fields:
    # BloomConfig maps n_layer/n_head onto num_hidden_layers/num_attention_heads and accepts n_embed for
    # hidden_size; BloomMLP is always 4·hidden_size wide; ALiBi; a LayerNorm right after the embedding.
    hidden = ("hidden_size", "n_embed")
    return dict(
        family="bloom", num_layers=c.num("n_layer", "num_hidden_layers"),
        **_heads(c, hidden=hidden, heads=("n_head", "num_attention_heads")),
        ffn_hidden_size=4 * c.num(*hidden), mlp=MlpKind.GELU, vocab_size=c.num("vocab_size", default=250880),
        tied_embeddings=c.flag("tie_word_embeddings", True), position=PositionKind.ALIBI,
        max_position_embeddings=c.num("seq_length", default=2048), norm=NormKind.LAYERNORM,
        qkv_bias=True, out_bias=True, mlp_bias=True, embedding_norm=True,
    )


def _gpt_neox(c: _Config) -> Fields:
    bias = c.flag("attention_bias", True)
    return dict(
        family="gpt-neox", num_layers=c.num("num_hidden_layers"),
        **_heads(c, hidden=("hidden_size",), heads=("num_attention_heads",)),
        ffn_hidden_size=c.num("intermediate_size"), mlp=_plain_mlp(c.text("hidden_act", default="gelu")),
        vocab_size=c.num("vocab_size"), tied_embeddings=c.flag("tie_word_embeddings", False),
        position=PositionKind.ROPE, max_position_embeddings=c.num("max_position_embeddings", default=2048),
        norm=NormKind.LAYERNORM, qkv_bias=bias, out_bias=bias, mlp_bias=True,
        parallel_block=c.flag("use_parallel_residual", True),
    )


def _falcon(c: _Config, *, refined_web_40b: bool = False) -> Fields:
    """Falcon, in both config styles: the 7B ``multi_query`` one and the 40B/180B ``new_decoder_architecture``.

    The remote-code ``RefinedWeb`` (40B) type predates the flag and always has the new architecture.
    """
    new_arch = c.flag("new_decoder_architecture", refined_web_40b)
    parallel = c.flag("parallel_attn", True)
    heads = ("num_attention_heads", "n_head")
    if new_arch:
        attn = _heads(c, hidden=("hidden_size", "n_embed"), heads=heads, kv=("num_kv_heads", "n_head_kv"))
        # Two norms (ln_attn, ln_mlp) unless num_ln_in_parallel_attn says one.
        norms = c.num("num_ln_in_parallel_attn", default=2)
    else:
        attn = _heads(c, hidden=("hidden_size", "n_embed"), heads=heads)
        attn["num_kv_heads"] = 1 if c.flag("multi_query", True) else attn["num_heads"]
        norms = 1 if parallel else 2
    bias = c.flag("bias", False)
    return dict(
        family="falcon", num_layers=c.num("num_hidden_layers", "n_layer"), **attn,
        ffn_hidden_size=c.num("ffn_hidden_size", default=4 * attn["hidden_size"]),
        mlp=_plain_mlp(c.text("activation", default="gelu")), vocab_size=c.num("vocab_size"),
        tied_embeddings=c.flag("tie_word_embeddings", True),
        position=PositionKind.ALIBI if c.flag("alibi", False) else PositionKind.ROPE,
        max_position_embeddings=c.num("max_position_embeddings", default=2048), norm=NormKind.LAYERNORM,
        norms_per_layer=norms, qkv_bias=bias, out_bias=bias, mlp_bias=bias, parallel_block=parallel,
    )


# --- Llama-style families -------------------------------------------------------------------------

def _llama(c: _Config) -> Fields:
    return _rope_decoder(c, "llama", tied=False, ctx=2048)


def _mistral(c: _Config, family: str = "mistral", window: int | None = 4096) -> Fields:
    f = _rope_decoder(c, family, tied=False, ctx=4096 * 32, kv_default=8)
    return f | dict(sliding_window=c.opt_int("sliding_window", window))


def _mixtral(c: _Config) -> Fields:
    f = _mistral(c, "mixtral", window=None)
    moe = _moe(c, experts=c.num("num_local_experts", default=8), top_k=c.num("num_experts_per_tok", default=2),
               ffn=f["ffn_hidden_size"], layout=(0, 1))
    return f | dict(moe=moe)


def _qwen2(c: _Config) -> Fields:
    # Qwen2Attention always has Q/K/V biases (no config key) and none on the output projection.
    f = _rope_decoder(c, "qwen", tied=False, ctx=32768) | dict(qkv_bias=True, out_bias=False)
    window = c.opt_int("sliding_window", 4096) if c.flag("use_sliding_window", False) else None
    return f | dict(sliding_window=window)


def _qwen_moe_layout(c: _Config, num_layers: int) -> tuple[int, int] | None:
    """transformers' Qwen MoE rule: layer i is sparse unless listed in mlp_only_layers, if (i+1) % step == 0."""
    dense, step = set(c.int_list("mlp_only_layers")), c.num("decoder_sparse_step", default=1)
    key = "mlp_only_layers" if dense else "decoder_sparse_step"
    return _moe_layout(c, num_layers, lambda i: i not in dense and (i + 1) % step == 0, key)


def _qwen2_moe(c: _Config) -> Fields:
    f = _qwen2(c) | dict(qkv_bias=c.flag("qkv_bias", True))
    shared = c.num("shared_expert_intermediate_size", default=5632, minimum=0)
    moe = _moe(c, experts=c.num("num_experts", default=60), top_k=c.num("num_experts_per_tok", default=4),
               ffn=c.num("moe_intermediate_size", default=1408), layout=_qwen_moe_layout(c, f["num_layers"]),
               num_shared_experts=1 if shared else 0, shared_expert_ffn_hidden_size=shared,
               shared_expert_gate=bool(shared))
    return f | dict(moe=moe)


def _qwen3(c: _Config) -> Fields:
    f = _rope_decoder(c, "qwen", tied=False, ctx=32768, head_dim_default=128) | dict(qk_norm=True)
    window = c.opt_int("sliding_window", 4096) if c.flag("use_sliding_window", False) else None
    return f | dict(sliding_window=window)


def _qwen3_moe(c: _Config) -> Fields:
    f = _qwen3(c)
    moe = _moe(c, experts=c.num("num_experts", default=128), top_k=c.num("num_experts_per_tok", default=8),
               ffn=c.num("moe_intermediate_size", default=768), layout=_qwen_moe_layout(c, f["num_layers"]))
    return f | dict(moe=moe)


def _gemma(c: _Config) -> Fields:
    return _rope_decoder(c, "gemma", tied=True, ctx=8192, head_dim_default=256)


def _gemma2(c: _Config) -> Fields:
    # Four RMSNorms per block: input, post-attention, pre-feedforward and post-feedforward.
    return _gemma(c) | dict(norms_per_layer=4, sliding_window=c.opt_int("sliding_window", 4096))


def _phi3(c: _Config) -> Fields:
    # Phi-3 fuses Q/K/V into one qkv_proj and gate/up into gate_up_proj: the same weights, counted the same.
    return _rope_decoder(c, "phi", tied=False, ctx=4096) | dict(sliding_window=c.opt_int("sliding_window"))


def _deepseek(c: _Config, *, v3: bool) -> Fields:
    """DeepSeek-V2/V3: MLA attention and a DeepSeekMoE feed-forward with shared experts and dense first layers."""
    f = _rope_decoder(c, "deepseek", tied=False, ctx=4096 if v3 else 2048) | dict(num_kv_heads=None, head_dim=None)
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
        layout = _moe_layout(c, f["num_layers"], lambda i: i >= k and i % freq == 0,
                             "moe_layer_freq" if freq > 1 else "first_k_dense_replace")
    moe = _moe(c, experts=routed or 0, top_k=top_k or 0, layout=layout,
               ffn=c.num("moe_intermediate_size", default=2048 if v3 else 1407),
               num_shared_experts=c.num("n_shared_experts", default=1 if v3 else 2, minimum=0))
    return f | dict(mla=mla, moe=moe)


READERS: dict[str, Callable[[_Config], Fields]] = {
    "gpt2": _gpt2,
    "opt": _opt,
    "bloom": _bloom,
    "gpt_neox": _gpt_neox,
    "falcon": _falcon,
    "RefinedWebModel": _falcon,
    "RefinedWeb": lambda c: _falcon(c, refined_web_40b=True),
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


def _dtype(c: _Config) -> str:
    """Datatype of the released weights: FP8 when quantization_config says so, else torch_dtype."""
    quant = c.data.get("quantization_config")
    if isinstance(quant, dict) and str(quant.get("quant_method", "")).lower() == "fp8":
        return "fp8"
    d = str(c.data.get("torch_dtype") or c.data.get("dtype") or "bfloat16")
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(d, "bf16")


def spec_from_hf_config(cfg: dict[str, Any], *, name: str) -> ModelSpec:
    """A ``ModelSpec`` from a parsed config.json; unknown ``model_type`` lists the supported ones."""
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str):
        raise ConfigFileError("config.json: 'model_type' is missing", field="model")
    reader = READERS.get(model_type)
    if reader is None:
        raise ConfigFileError(
            f"config.json: model_type '{model_type}' is not supported; supported: {', '.join(sorted(READERS))}",
            field="model",
        )
    c = _Config(cfg)
    fields = {k: v for k, v in reader(c).items() if v is not None}
    fields.setdefault("dtype", _dtype(c))
    try:
        return ModelSpec(name=name, source=f"config.json ({model_type})", **fields)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "model"
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigFileError(f"config.json: {loc}: {msg}", field="model") from None
