"""The model catalog: every required preset is there, validates, names its source and resolves by name."""

from __future__ import annotations

import re

import pytest

from shardplan.errors import UnknownNameError
from shardplan.models import MODELS, MlpKind, ModelSpec, NormKind, PositionKind, get_model
from shardplan.models.catalog import megatron_gpt

REQUIRED = {
    "gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18.4b", "gpt-39.1b", "gpt-76.1b", "gpt-145.6b", "gpt-310.1b",
    "gpt-529.6b", "gpt-1008b", "gpt3-175b", "gpt-22b", "turing-530b", "opt-6.7b", "opt-13b", "opt-30b", "opt-66b",
    "opt-175b", "bloom-176b", "gpt-neox-20b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b",
    "llama-3.1-70b", "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-72b",
    "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "falcon-40b", "falcon-180b", "gemma-2-9b", "gemma-2-27b",
}
SOURCE = re.compile(r"https://huggingface\.co/[\w.-]+/[\w.-]+/blob/main/config\.json|arXiv \d{4}\.\d{4,5}")


def test_catalog_holds_every_required_preset():
    assert set(MODELS) >= REQUIRED
    assert len(MODELS) >= 28


@pytest.mark.parametrize("name", sorted(MODELS))
def test_preset_validates_names_its_source_and_is_keyed_by_name(name: str):
    m = MODELS[name]
    assert ModelSpec.model_validate(m.model_dump()) == m
    assert m.name == name and re.fullmatch(r"[a-z0-9.]+(-[a-z0-9.]+)*", name)
    assert SOURCE.search(m.source), f"{name}: source must be a config.json URL or a paper: {m.source!r}"


def test_get_model_is_case_insensitive_and_suggests_close_names():
    assert get_model(" Llama-3.1-8B ") is MODELS["llama-3.1-8b"]
    with pytest.raises(UnknownNameError) as e:
        get_model("llama-3.1-7b")
    assert "Did you mean" in str(e.value) and "llama-3.1-8b" in str(e.value)


def test_megatron_helper_is_still_exported():
    m = megatron_gpt("x", layers=2, hidden=64, heads=4, source="test")
    assert (m.ffn_hidden_size, m.vocab_size, m.tied_embeddings) == (256, 51200, True)


def test_turing_530b_is_the_529_6b_shape():
    a, b = MODELS["turing-530b"].model_dump(), MODELS["gpt-529.6b"].model_dump()
    assert {k: v for k, v in a.items() if k not in ("name", "source")} == \
        {k: v for k, v in b.items() if k not in ("name", "source")}


def test_opt_conventions():
    for name in ("opt-6.7b", "opt-13b", "opt-30b", "opt-66b", "opt-175b"):
        m = MODELS[name]
        assert (m.mlp, m.position, m.max_position_embeddings, m.vocab_size) == \
            (MlpKind.RELU, PositionKind.LEARNED, 2048, 50272)
        assert m.tied_embeddings and m.qkv_bias and m.mlp_bias and m.ffn_hidden_size == 4 * m.hidden_size


def test_family_specific_structure():
    falcon = MODELS["falcon-40b"]
    assert (falcon.kv_heads, falcon.norms_per_layer, falcon.parallel_block, falcon.qkv_bias) == (8, 2, True, False)
    bloom = MODELS["bloom-176b"]
    assert bloom.position == PositionKind.ALIBI and bloom.embedding_norm and bloom.tied_embeddings and bloom.mlp_bias
    neox = MODELS["gpt-neox-20b"]
    assert neox.parallel_block and not neox.tied_embeddings and neox.qkv_bias and neox.norm == NormKind.LAYERNORM
    for name, head_dim in (("gemma-2-9b", 256), ("gemma-2-27b", 128)):
        g = MODELS[name]
        assert (g.head_size, g.mlp, g.norms_per_layer, g.sliding_window) == (head_dim, MlpKind.GEGLU, 4, 4096)
        assert g.tied_embeddings
    for name in ("mixtral-8x7b", "mixtral-8x22b"):
        moe = MODELS[name].moe
        assert moe is not None and (moe.num_experts, moe.experts_per_token, MODELS[name].kv_heads) == (8, 2, 8)
    qwen3 = MODELS["qwen3-235b-a22b"]
    assert qwen3.qk_norm and qwen3.moe is not None and qwen3.moe.num_shared_experts == 0
    assert (qwen3.moe.num_experts, qwen3.moe.experts_per_token, qwen3.head_size) == (128, 8, 128)


def test_deepseek_v3_shape_without_mtp():
    m = MODELS["deepseek-v3"]
    assert m.num_layers == 61  # the MTP module (num_nextn_predict_layers) is not counted
    assert m.mla is not None and (m.mla.q_lora_rank, m.mla.kv_lora_rank, m.mla.qk_nope_head_dim,
                                  m.mla.qk_rope_head_dim, m.mla.v_head_dim) == (1536, 512, 128, 64, 128)
    assert m.moe is not None and (m.moe.num_experts, m.moe.experts_per_token, m.moe.expert_ffn_hidden_size,
                                  m.moe.num_shared_experts, m.moe.first_dense_layers) == (256, 8, 2048, 1, 3)
    assert (m.num_dense_layers, m.num_moe_layers, m.ffn_hidden_size) == (3, 58, 18432)
    assert not m.tied_embeddings and m.vocab_size == 129280
