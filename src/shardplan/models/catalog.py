"""Catalog of model presets: a plain dict of validated ``ModelSpec``s, each with its source."""

from __future__ import annotations

from shardplan.errors import UnknownNameError
from shardplan.models.spec import MlpKind, ModelSpec, NormKind, PositionKind


def megatron_gpt(name: str, *, layers: int, hidden: int, heads: int, source: str) -> ModelSpec:
    """GPT shape of the Megatron-LM papers: MHA, GeLU MLP of 4h, learned positions, V=51200, tied."""
    return ModelSpec(
        name=name, family="gpt", num_layers=layers, hidden_size=hidden, num_heads=heads,
        ffn_hidden_size=4 * hidden, mlp=MlpKind.GELU, vocab_size=51200, tied_embeddings=True,
        position=PositionKind.LEARNED, max_position_embeddings=2048, norm=NormKind.LAYERNORM,
        qkv_bias=True, out_bias=True, mlp_bias=True, dtype="fp16", source=source,
    )


_NARAYANAN_T1 = "Narayanan et al. 2021 (arXiv 2104.04473) Table 1"

_PRESETS: list[ModelSpec] = [
    megatron_gpt("gpt3-175b", layers=96, hidden=12288, heads=96,
                 source="Brown et al. 2020 (arXiv 2005.14165) Table 2.1; Megatron shape"),
    ModelSpec(
        name="llama-3.1-70b", family="llama", num_layers=80, hidden_size=8192, num_heads=64,
        num_kv_heads=8, ffn_hidden_size=28672, mlp=MlpKind.SWIGLU, vocab_size=128256,
        tied_embeddings=False, position=PositionKind.ROPE, max_position_embeddings=131072,
        norm=NormKind.RMSNORM, dtype="bf16",
        source="huggingface.co/meta-llama/Llama-3.1-70B config.json",
    ),
]

MODELS: dict[str, ModelSpec] = {m.name: m for m in _PRESETS}


def get_model(name: str) -> ModelSpec:
    key = name.strip().lower()
    if key not in MODELS:
        raise UnknownNameError("model", name, MODELS, field="model", listing="`shardplan models list`")
    return MODELS[key]
