"""Offline Hugging Face config.json import: one real config per model_type, and malformed configs.

The fixtures in tests/data/hf_configs/ copy the published config.json of the model named in each
file's ``_source`` key (bookkeeping keys such as ``transformers_version`` left out).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from shardplan.errors import ConfigFileError
from shardplan.models import MODELS, MlpKind, ModelSpec, active_param_breakdown, param_breakdown
from shardplan.models.hf import READERS, spec_from_hf_config

CONFIGS = Path(__file__).parent.parent / "data" / "hf_configs"


def load(stem: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{stem}.json").read_text())


def imported(stem: str, **override: Any) -> ModelSpec:
    return spec_from_hf_config(load(stem) | override, name=stem)


def without(stem: str, key: str) -> dict[str, Any]:
    cfg = copy.deepcopy(load(stem))
    del cfg[key]
    return cfg


def test_every_model_type_has_a_fixture():
    flat = {load(p.stem)["model_type"] for p in CONFIGS.glob("*.json")}
    folders = {json.loads(p.read_text())["model_type"] for p in CONFIGS.glob("*/config.json")}
    text_only = {"gemma3_text", "llama4_text"}  # also read inside the gemma3/llama4 wrappers
    assert flat | folders == set(READERS)
    assert text_only <= folders
    assert set(READERS) >= {"gpt2", "opt", "bloom", "gpt_neox", "falcon", "llama", "mistral", "mixtral", "qwen2",
                            "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gemma", "gemma2", "phi3"}


# fixture → the catalog preset built from the same config.json
SAME_AS_PRESET = {
    "opt": "opt-6.7b",
    "bloom": "bloom-176b",
    "gpt_neox": "gpt-neox-20b",
    "falcon": "falcon-180b",
    "falcon_40b_refinedweb": "falcon-40b",
    "llama": "llama-2-7b",
    "mistral": "mistral-7b",
    "mixtral": "mixtral-8x7b",
    "qwen2": "qwen2.5-72b",
    "qwen3_moe": "qwen3-30b-a3b",
    "deepseek_v3": "deepseek-v3",
    "gemma2": "gemma-2-9b",
}


@pytest.mark.parametrize(("stem", "preset"), sorted(SAME_AS_PRESET.items()))
def test_import_equals_the_catalog_preset(stem: str, preset: str):
    m, ref = imported(stem), MODELS[preset]
    skip = {"name", "source", "dtype", "num_kv_heads", "head_dim"}  # the last two compared as resolved below
    assert m.model_dump(exclude=skip) == ref.model_dump(exclude=skip)
    assert (m.kv_heads, m.head_size) == (ref.kv_heads, ref.head_size)
    assert param_breakdown(m) == param_breakdown(ref)
    assert active_param_breakdown(m) == active_param_breakdown(ref)


def test_gpt2_small_is_124m():
    # openai-community/gpt2 model card: 124M parameters; 124,439,808 counting the tied head once.
    m = imported("gpt2")
    assert m.total_params == 124_439_808
    assert (m.tied_embeddings, m.ffn_hidden_size, m.max_position_embeddings) == (True, 3072, 1024)


def test_gemma_7b_matches_the_paper_to_the_parameter():
    # Gemma report (arXiv 2403.08295) Table 2, 7B: 786,432,000 embedding + 7,751,248,896 non-embedding.
    m = imported("gemma")
    assert param_breakdown(m)["embedding/tokens"] == 786_432_000
    assert m.total_params == 786_432_000 + 7_751_248_896
    assert (m.mlp, m.head_size, m.tied_embeddings) == (MlpKind.GEGLU, 256, True)


def test_phi3_mini_is_3_8b():
    # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct: "3.8B parameters"; fused qkv/gate_up count the same.
    m = imported("phi3")
    assert round(m.total_params / 1e9, 1) == 3.8
    assert (m.mlp, m.kv_heads, m.sliding_window, m.tied_embeddings) == (MlpKind.SWIGLU, 32, 2047, False)


def test_qwen3_8b_matches_the_card_and_counts_qk_norms():
    # https://huggingface.co/Qwen/Qwen3-8B: 8.2B parameters, 6.95B non-embedding.
    m = imported("qwen3")
    embeddings = param_breakdown(m)["embedding/tokens"] + param_breakdown(m)["lm_head"]
    assert round(m.total_params / 1e9, 1) == 8.2
    assert m.total_params - embeddings == pytest.approx(6.95e9, rel=0.005)
    assert m.qk_norm and m.head_size == 128
    assert param_breakdown(m)["norms"] == 36 * (2 * 4096 + 2 * 128)


def test_qwen2_moe_57b_a14b():
    # https://huggingface.co/Qwen/Qwen2-57B-A14B: 57B total, 14B activated; one gated shared expert of 20480.
    m = imported("qwen2_moe")
    assert round(m.total_params / 1e9) == 57 and round(m.active_params / 1e9) == 14
    assert m.moe is not None and (m.moe.num_shared_experts, m.moe.shared_ffn, m.moe.shared_expert_gate) == \
        (1, 20480, True)
    assert m.qkv_bias and not m.out_bias


def test_deepseek_v2_lite_has_a_full_rank_query():
    """https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite: 15.7B total, 2.4B activated.

    As for V3, the activated figure leaves out the input embedding: ours is 2.45B without it (2.66B with).
    """
    m = imported("deepseek_v2")
    assert m.mla is not None and m.mla.q_lora_rank == 0  # "q_lora_rank": null
    assert m.moe is not None and (m.num_dense_layers, m.moe.num_shared_experts, m.moe.experts_per_token) == (1, 2, 6)
    assert m.total_params == pytest.approx(15.7e9, rel=0.005)
    assert 2.4e9 <= m.active_params - param_breakdown(m)["embedding/tokens"] < 2.5e9


def test_deepseek_v3_import_reads_fp8_weights():
    assert imported("deepseek_v3").dtype == "fp8"


def test_falcon_7b_remote_code_config_is_multi_query_with_one_norm():
    # tiiuae/falcon-7b (RefinedWebModel): multi_query → one KV head; parallel_attn → one input LayerNorm.
    m = imported("falcon_7b_refinedwebmodel")
    assert (m.kv_heads, m.norms_per_layer, m.parallel_block, m.qkv_bias) == (1, 1, True, False)
    h, a, d, L, V = 4544, 71, 64, 32, 65024
    per_layer = h * (a + 2) * d + h * h + 2 * h * 4 * h + 2 * h
    assert m.total_params == V * h + L * per_layer + 2 * h


def test_falcon_new_architecture_with_a_single_parallel_norm():
    assert imported("falcon", num_ln_in_parallel_attn=1).norms_per_layer == 1
    assert imported("falcon", new_decoder_architecture=False, multi_query=False).kv_heads == 232


def test_qwen_moe_dense_layers_and_deepseek_layer_frequency():
    m = imported("qwen3_moe", mlp_only_layers=[0, 1])
    assert m.moe is not None and (m.num_dense_layers, m.moe.first_dense_layers) == (2, 2)
    m = imported("deepseek_v2", num_hidden_layers=28, moe_layer_freq=2)  # MoE at layers 2, 4, …, 26
    assert m.moe is not None and (m.moe.first_dense_layers, m.moe.layer_freq, m.num_moe_layers) == (2, 2, 13)
    assert imported("deepseek_v3", n_routed_experts=None).moe is None


def test_null_means_none_and_absent_means_the_transformers_default():
    m = spec_from_hf_config(without("deepseek_v2", "q_lora_rank"), name="x")
    assert m.mla is not None and m.mla.q_lora_rank == 1536  # DeepseekV2Config default
    assert spec_from_hf_config(without("deepseek_v2", "num_experts_per_tok"), name="x").moe is None  # default None
    assert imported("mistral", sliding_window=None).sliding_window is None
    assert spec_from_hf_config(without("mistral", "sliding_window"), name="x").sliding_window == 4096
    assert spec_from_hf_config(without("mistral", "num_key_value_heads"), name="x").kv_heads == 8


# --- malformed configs ----------------------------------------------------------------------------

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("missing key", without("llama", "hidden_size"), "'hidden_size' is missing"),
    ("missing ffn", without("opt", "ffn_dim"), "'ffn_dim' is missing"),
    ("missing model_type", without("llama", "model_type"), "'model_type' is missing"),
    ("string count", load("llama") | {"num_hidden_layers": "32"}, "'num_hidden_layers' must be an integer"),
    ("fractional", load("mistral") | {"intermediate_size": 14336.5}, "'intermediate_size' must be an integer"),
    ("bool as int", load("gpt2") | {"n_layer": True}, "'n_layer' must be an integer"),
    ("zero vocab", load("qwen2") | {"vocab_size": 0}, "'vocab_size' must be ≥ 1, got 0"),
    ("negative width", load("bloom") | {"hidden_size": -14336}, "'hidden_size' must be ≥ 1"),
    ("indivisible heads", load("gpt2") | {"n_head": 7}, "'n_embd' (768) must be divisible by 'n_head' (7)"),
    ("kv not dividing", load("llama") | {"num_key_value_heads": 5}, "'num_key_value_heads' (5) must divide"),
    ("falcon kv", load("falcon_40b_refinedweb") | {"n_head_kv": 3}, "'n_head_kv' (3) must divide 'n_head'"),
    ("bad flag", load("llama") | {"tie_word_embeddings": "no"}, "'tie_word_embeddings' must be true or false"),
    ("bad activation", load("llama") | {"hidden_act": "relu"}, "'hidden_act'"),
    ("top-k > experts", load("mixtral") | {"num_experts_per_tok": 9}, "'num_experts_per_tok' (9) must be ≤"),
    ("irregular dense", load("qwen3_moe") | {"mlp_only_layers": [3, 7]}, "'mlp_only_layers' puts MoE layers"),
    ("not a list", load("qwen2_moe") | {"mlp_only_layers": "0"}, "'mlp_only_layers' must be a list"),
    ("unknown type", load("llama") | {"model_type": "mamba"}, "model_type 'mamba' is not supported; supported:"),
]


@pytest.mark.parametrize(("case", "cfg", "expected"), BAD, ids=[b[0] for b in BAD])
def test_malformed_config_is_one_line_naming_the_key(case: str, cfg: dict[str, Any], expected: str):
    with pytest.raises(ConfigFileError) as e:
        spec_from_hf_config(cfg, name="bad")
    msg = str(e.value)
    assert expected in msg
    assert "\n" not in msg
    assert e.value.field == "model"


def test_unknown_model_type_lists_every_supported_type():
    with pytest.raises(ConfigFileError) as e:
        spec_from_hf_config({"model_type": "t5"}, name="t5")
    assert all(t in str(e.value) for t in READERS)


def test_every_other_layer_moe_keeps_the_last_one():
    # transformers Qwen2MoeDecoderLayer: layer i is sparse iff (i + 1) % decoder_sparse_step == 0, i.e. layers
    # 1, 3, …, 27 of 28 — 14 MoE layers (the last one included).
    m = imported("qwen2_moe", decoder_sparse_step=2)
    assert m.moe is not None and (m.moe.first_dense_layers, m.moe.layer_freq) == (1, 2)
    assert (m.num_moe_layers, m.num_dense_layers) == (14, 14)
