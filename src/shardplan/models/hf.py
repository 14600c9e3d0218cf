"""Offline import of a Hugging Face ``config.json`` into a ``ModelSpec``.

One small reader per ``model_type``: each maps that architecture's key names onto ModelSpec fields.
Missing or malformed keys become a one-line ``ConfigFileError`` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from shardplan.errors import ConfigFileError
from shardplan.models.spec import MlpKind, ModelSpec, NormKind, PositionKind

Reader = Callable[[dict[str, Any], str], dict[str, Any]]


def _req(cfg: dict[str, Any], *keys: str) -> int:
    """The first present key among ``keys`` as a positive integer (HF renames keys between families)."""
    for k in keys:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            if isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v or v <= 0:
                raise ConfigFileError(f"config.json: '{k}' must be a positive integer, got {v!r}", field=k)
            return int(v)
    raise ConfigFileError(f"config.json: missing '{keys[0]}'", field=keys[0])


def _opt(cfg: dict[str, Any], key: str, default: Any) -> Any:
    v = cfg.get(key)
    return default if v is None else v


def _gelu_or_relu(act: str) -> MlpKind:
    return MlpKind.RELU if "relu" in str(act).lower() else MlpKind.GELU


def _dtype(cfg: dict[str, Any]) -> str:
    d = str(_opt(cfg, "torch_dtype", _opt(cfg, "dtype", "bfloat16")))
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(d, "bf16")


def _gpt2(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    h = _req(cfg, "n_embd", "hidden_size")
    return dict(
        family="gpt", num_layers=_req(cfg, "n_layer", "num_hidden_layers"), hidden_size=h,
        num_heads=_req(cfg, "n_head", "num_attention_heads"),
        ffn_hidden_size=int(_opt(cfg, "n_inner", 4 * h)),
        mlp=_gelu_or_relu(_opt(cfg, "activation_function", "gelu_new")),
        vocab_size=_req(cfg, "vocab_size"), tied_embeddings=bool(_opt(cfg, "tie_word_embeddings", True)),
        position=PositionKind.LEARNED, max_position_embeddings=_req(cfg, "n_positions", "n_ctx"),
        norm=NormKind.LAYERNORM, qkv_bias=True, out_bias=True, mlp_bias=True,
    )


def _opt_model(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    bias = bool(_opt(cfg, "enable_bias", True))
    return dict(
        family="opt", num_layers=_req(cfg, "num_hidden_layers"), hidden_size=_req(cfg, "hidden_size"),
        num_heads=_req(cfg, "num_attention_heads"), ffn_hidden_size=_req(cfg, "ffn_dim"),
        mlp=_gelu_or_relu(_opt(cfg, "activation_function", "relu")), vocab_size=_req(cfg, "vocab_size"),
        tied_embeddings=bool(_opt(cfg, "tie_word_embeddings", True)), position=PositionKind.LEARNED,
        max_position_embeddings=_req(cfg, "max_position_embeddings"), norm=NormKind.LAYERNORM,
        qkv_bias=bias, out_bias=bias, mlp_bias=bias,
    )


def _llama(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    heads = _req(cfg, "num_attention_heads")
    return dict(
        family="llama", num_layers=_req(cfg, "num_hidden_layers"), hidden_size=_req(cfg, "hidden_size"),
        num_heads=heads, num_kv_heads=int(_opt(cfg, "num_key_value_heads", heads)),
        head_dim=cfg.get("head_dim"), ffn_hidden_size=_req(cfg, "intermediate_size"), mlp=MlpKind.SWIGLU,
        vocab_size=_req(cfg, "vocab_size"), tied_embeddings=bool(_opt(cfg, "tie_word_embeddings", False)),
        position=PositionKind.ROPE, max_position_embeddings=int(_opt(cfg, "max_position_embeddings", 4096)),
        norm=NormKind.RMSNORM, qkv_bias=bool(_opt(cfg, "attention_bias", False)),
        out_bias=bool(_opt(cfg, "attention_bias", False)), mlp_bias=bool(_opt(cfg, "mlp_bias", False)),
    )


READERS: dict[str, Reader] = {"gpt2": _gpt2, "opt": _opt_model, "llama": _llama}


def spec_from_hf_config(cfg: dict[str, Any], *, name: str) -> ModelSpec:
    """A ``ModelSpec`` from a parsed config.json; unknown ``model_type`` lists the supported ones."""
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str):
        raise ConfigFileError("config.json: missing 'model_type'", field="model_type")
    reader = READERS.get(model_type)
    if reader is None:
        raise ConfigFileError(
            f"config.json: model_type '{model_type}' is not supported; supported: {', '.join(sorted(READERS))}",
            field="model_type",
        )
    fields = reader(cfg, name)
    fields = {k: v for k, v in fields.items() if v is not None}
    fields.setdefault("dtype", _dtype(cfg))
    try:
        return ModelSpec(name=name, source=f"config.json ({model_type})", **fields)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "model"
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigFileError(f"config.json: {loc}: {msg}", field=loc) from None
