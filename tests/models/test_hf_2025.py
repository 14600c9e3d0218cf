"""2025 model types read from their published config.json (tests/data/hf_configs/<name>/, URL in SOURCE.md).

Counts follow the convention ``models show`` states: tied embeddings once; MTP layers and vision towers
apart. Each expected figure names where it is published; the tolerance is 0.5% unless the figure itself
is rounded coarser (then it is compared at its published precision).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardplan.models import Mixer, MlpSlot, ModelSpec, param_breakdown
from shardplan.models.hf import spec_from_hf_config

CONFIGS = Path(__file__).parent.parent / "data" / "hf_configs"


def model(name: str) -> ModelSpec:
    return spec_from_hf_config(json.loads((CONFIGS / name / "config.json").read_text()), name=name)


def without_embedding(m: ModelSpec, value: int) -> int:
    return value - param_breakdown(m)["embedding/tokens"]


def test_every_folder_has_a_source_note():
    for folder in CONFIGS.glob("*/config.json"):
        assert "huggingface.co" in (folder.parent / "SOURCE.md").read_text()


# Gemma 3 report (arXiv 2503.19786) Table 1, parameters in millions: vision encoder, embedding, non-embedding.
GEMMA3_TABLE1 = {"gemma-3-1b-it": (0, 302, 698), "gemma-3-4b-it": (417, 675, 3209),
                 "gemma-3-27b-it": (417, 1416, 25600)}


@pytest.mark.parametrize("name", sorted(GEMMA3_TABLE1))
def test_gemma3_matches_the_report_table(name: str):
    vision, embedding, non_embedding = GEMMA3_TABLE1[name]
    m = model(name)
    assert without_embedding(m, m.total_params) == pytest.approx(non_embedding * 1e6, rel=0.005)
    assert m.total_params + m.vision_params == pytest.approx((vision + embedding + non_embedding) * 1e6, rel=0.005)
    assert m.layer_pattern == ("S*5", "F") and m.qk_norm and m.tied_embeddings
    assert m.mixer_counts()[Mixer.FULL] == m.num_layers // 6


def test_gemma3_27b_sliding_layers_cap_the_kv_cache():
    # 62 layers, pattern 5 local (window 1024) : 1 global → 10 global + 52 local; vLLM's hybrid allocator keeps
    # min(seq, window) tokens for a sliding layer.
    m = model("gemma-3-27b-it")
    assert (m.kv_layers_full, m.sliding_window) == (10, 1024)
    assert m.kv_cached_tokens(32768) == 10 * 32768 + 52 * 1024
    assert m.kv_window_for_layer(5) is None and m.kv_window_for_layer(0) == 1024


@pytest.mark.parametrize(("name", "total", "active_no_embedding"), [
    # gpt-oss model card (arXiv 2508.10925) Table 1: total and active parameters; active leaves the
    # input embedding out (it counts the unembedding).
    ("gpt-oss-120b", 116.83e9, 5.13e9),
    ("gpt-oss-20b", 20.91e9, 3.61e9),
])
def test_gpt_oss_matches_the_model_card(name: str, total: float, active_no_embedding: float):
    m = model(name)
    assert m.total_params == pytest.approx(total, rel=0.0005)
    assert without_embedding(m, m.active_params) == pytest.approx(active_no_embedding, rel=0.005)
    assert m.attention_sinks and m.layer_pattern == ("S", "F") and m.sliding_window == 128
    assert m.dtype == "mxfp4" and m.moe is not None and m.moe.router_bias


def test_nemotron_3_nano_matches_the_report():
    """Nemotron 3 Nano report (arXiv 2512.20848 §1): "31.6B parameters out of which only 3.2B are activated per
    forward pass (3.6B including embeddings)"; 23 Mamba-2, 23 MoE and 6 attention layers."""
    m = model("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert m.total_params == pytest.approx(31.6e9, abs=0.05e9)
    assert m.active_params == pytest.approx(3.6e9, abs=0.05e9)
    assert without_embedding(m, m.active_params) == pytest.approx(3.2e9, abs=0.05e9)
    assert m.mixer_counts() == {Mixer.MAMBA: 23, Mixer.FULL: 6, Mixer.NONE: 23} and m.num_moe_layers == 23


def test_llama4_scout_matches_the_safetensors_total():
    """https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E: "109B total" (the Hub's safetensors count:
    108.6B, text and vision); active "17B" (rounded: ours is 17.17B with the embedding)."""
    m = model("Llama-4-Scout-17B-16E")
    assert m.total_params + m.vision_params == pytest.approx(108.6e9, rel=0.005)
    assert round(m.active_params / 1e9) == 17
    assert m.layer_pattern == ("C*3", "F") and m.attention_chunk_size == 8192
    assert m.moe is not None and (m.moe.num_shared_experts, m.num_moe_layers) == (1, 48)


def test_llama4_maverick_interleaves_dense_and_moe_layers():
    # https://huggingface.co/meta-llama/Llama-4-Maverick-17B-128E: 400B total, 17B active; MoE on odd layers.
    m = model("Llama-4-Maverick-17B-128E")
    assert m.total_params == pytest.approx(400e9, rel=0.005)
    assert round(m.active_params / 1e9) == 17
    assert (m.num_moe_layers, m.num_dense_layers, m.ffn_hidden_size) == (24, 24, 16384)


def test_llama4_text_config_alone_is_the_scout_text_model():
    assert model("llama4_text-scout").total_params == model("Llama-4-Scout-17B-16E").total_params


def test_qwen3_next_hybrid_layers():
    """https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct: "80B in total and 3B activated" (rounded)."""
    m = model("Qwen3-Next-80B-A3B-Instruct")
    assert m.total_params == pytest.approx(80e9, rel=0.005)
    assert 3e9 <= without_embedding(m, m.active_params) < 4e9  # 3.56B; "A3B" in the name
    assert m.mixer_counts() == {Mixer.LINEAR: 36, Mixer.FULL: 12}
    assert m.attn_output_gate and m.linear_attention is not None
    # Gated DeltaNet state per sequence: 32 value heads × 128 × 128, plus the conv window (3 × 8192).
    assert m.linear_attention.state_elements == 32 * 128 * 128 + 3 * (2 * 2048 + 4096)
    assert m.kv_cached_tokens(1000) == 12 * 1000


def test_mistral3_text_model_and_pixtral_tower():
    # https://huggingface.co/mistralai/Mistral-Small-3.1-24B-Instruct-2503: "24 billion parameters".
    m = model("Mistral-Small-3.1-24B-Instruct-2503")
    assert m.total_params + m.vision_params == pytest.approx(24.0e9, rel=0.005)
    assert 0.4e9 < m.vision_params < 0.45e9 and m.family == "mistral"


def test_kimi_k2_is_deepseek_v3_shaped():
    # https://huggingface.co/moonshotai/Kimi-K2-Instruct: "1 trillion total parameters", "32 billion activated".
    m = model("Kimi-K2-Instruct")
    # Both published figures are rounded to the unit: compare at that precision (±0.5 unit).
    assert abs(m.total_params - 1e12) < 0.05e12 and abs(without_embedding(m, m.active_params) - 32e9) < 0.5e9
    assert m.moe is not None and (m.moe.num_experts, m.num_dense_layers, m.moe.topk_scaling_factor) == (384, 1, 2.827)
    assert m.mla is not None and m.head_size == 192 and m.mtp_layers == 0


def test_deepseek_v32_adds_the_indexer():
    """https://huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp: 685B on the Hub = main model + MTP layer, whose
    checkpoint keeps its own copy of the embedding and the head (DeepSeek-V3 card: 671B + 14B MTP)."""
    m = model("DeepSeek-V3.2-Exp")
    copies = 2 * m.vocab_size * m.hidden_size
    assert m.total_params + m.mtp_params + copies == pytest.approx(685e9, rel=0.005)
    s = m.sparse_attention
    assert s is not None and (s.index_heads, s.index_head_dim, s.index_topk) == (64, 128, 2048)
    # Indexer per layer: wq_b 1536→64·128, wk 7168→128, LayerNorm(128) with bias, weights_proj 7168→64.
    assert param_breakdown(m)["attention/indexer"] == 61 * (1536 * 8192 + 7168 * 128 + 256 + 7168 * 64)


@pytest.mark.parametrize(("name", "hub_total", "card_total", "card_active"), [
    # Hub safetensors totals (main + MTP layer + its embedding/head copies): GLM-4.5 358B, GLM-4.5-Air 110B;
    # https://huggingface.co/zai-org/GLM-4.5 card: 355B total / 32B active and 106B / 12B (rounded).
    ("GLM-4.5", 358e9, 355e9, 32e9),
    ("GLM-4.5-Air", 110e9, 106e9, 12e9),
])
def test_glm45(name: str, hub_total: float, card_total: float, card_active: float):
    m = model(name)
    copies = 2 * m.vocab_size * m.hidden_size
    assert m.total_params + m.mtp_params + copies == pytest.approx(hub_total, rel=0.005)
    assert m.total_params == pytest.approx(card_total, rel=0.01)
    assert without_embedding(m, m.active_params) == pytest.approx(card_active, rel=0.07)
    assert m.mtp_layers == 1 and m.qkv_bias and not m.out_bias


def test_olmo2_norms_cover_the_whole_projection():
    # https://huggingface.co/allenai/OLMo-2-1124-7B: 7.3B; norms: post-attention, post-MLP, q_norm(4096), k_norm(4096).
    m = model("OLMo-2-1124-7B")
    assert round(m.total_params / 1e9, 1) == 7.3
    assert param_breakdown(m)["norms"] == 32 * (2 * 4096 + 4096 + 4096)


def test_cohere2_parallel_block_one_norm():
    # https://huggingface.co/CohereForAI/c4ai-command-r7b-12-2024: 8.03B on the Hub (tied embedding once).
    m = model("c4ai-command-r7b-12-2024")
    assert m.total_params == pytest.approx(8.03e9, rel=0.005)
    assert m.layer_pattern == ("S*3", "F") and m.parallel_block and m.norms_per_layer == 1


def test_nemotron_h_layers_are_single_blocks():
    """Nemotron-H report (arXiv 2504.03624) §2: the 8B model has 52 layers — 24 Mamba-2, 24 FFN, 4 attention."""
    m = model("Nemotron-H-8B-Base-8K")
    assert m.mixer_counts() == {Mixer.MAMBA: 24, Mixer.NONE: 24, Mixer.FULL: 4}
    assert m.mlp_counts() == {MlpSlot.NONE: 28, MlpSlot.DENSE: 24}
    assert round(m.total_params / 1e9) == 8
    s = m.mamba
    assert s is not None and (s.inner, s.conv_dim) == (8192, 8192 + 2 * 8 * 128)


def test_granite_hybrid_every_layer_has_moe():
    # ibm-granite/granite-4.0-h-tiny model card: 7B total, 1B active (rounded).
    m = model("granite-4.0-h-tiny")
    assert m.mixer_counts() == {Mixer.MAMBA: 36, Mixer.FULL: 4}
    assert round(m.total_params / 1e9) == 7 and round(m.active_params / 1e9) == 1


# catalog preset → the fixture folder holding the config.json it was written from
PRESET_FIXTURES = {
    "gemma-3-27b": "gemma-3-27b-it", "gemma-3-4b": "gemma-3-4b-it", "llama-4-scout": "Llama-4-Scout-17B-16E",
    "llama-4-maverick": "Llama-4-Maverick-17B-128E", "gpt-oss-20b": "gpt-oss-20b", "gpt-oss-120b": "gpt-oss-120b",
    "qwen3-next-80b-a3b": "Qwen3-Next-80B-A3B-Instruct", "kimi-k2": "Kimi-K2-Instruct", "glm-4.5": "GLM-4.5",
    "glm-4.5-air": "GLM-4.5-Air", "olmo-2-7b": "OLMo-2-1124-7B",
    "nemotron-3-nano-30b-a3b": "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
}


@pytest.mark.parametrize(("preset", "folder"), sorted(PRESET_FIXTURES.items()))
def test_preset_equals_the_import_of_its_config(preset: str, folder: str):
    from shardplan.models import MODELS

    m, ref = model(folder), MODELS[preset]
    skip = {"name", "source", "num_kv_heads", "head_dim"}
    assert m.model_dump(exclude=skip) == ref.model_dump(exclude=skip)
    assert (m.kv_heads, m.head_size, m.total_params, m.active_params, m.mtp_params) == \
        (ref.kv_heads, ref.head_size, ref.total_params, ref.active_params, ref.mtp_params)


def test_qwen3_32b_matches_the_card():
    # https://huggingface.co/Qwen/Qwen3-32B: "Number of Parameters: 32.8B; Number of Parameters (Non-Embedding): 31.2B".
    from shardplan.models import MODELS

    m = MODELS["qwen3-32b"]
    assert m.total_params == pytest.approx(32.8e9, rel=0.005)
    embeddings = param_breakdown(m)["embedding/tokens"] + param_breakdown(m)["lm_head"]
    assert m.total_params - embeddings == pytest.approx(31.2e9, rel=0.005)


def _cfg(name: str, **override: object) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text()) | override


def _text(name: str, **override: object) -> dict:
    cfg = _cfg(name)
    return cfg | {"text_config": cfg["text_config"] | override}


BAD = [
    ("layer_types length", _cfg("gpt-oss-20b", layer_types=["full_attention"] * 3), "'layer_types' has 3 entries"),
    ("layer type unknown", _cfg("Qwen3-Next-80B-A3B-Instruct", layer_types=["mamba"] * 48),
     "'layer_types' has unsupported layer type(s) ['mamba']"),
    ("hybrid pattern char", _cfg("Nemotron-H-8B-Base-8K", hybrid_override_pattern="X" * 52),
     "'hybrid_override_pattern' must have one of"),
    ("rope type", _text("gemma-3-4b-it", rope_scaling={"rope_type": "weird", "factor": 2.0}),
     "'text_config.rope_scaling.rope_type' 'weird' is not one of"),
    ("text_config type", _cfg("Llama-4-Scout-17B-16E", text_config=[1]), "'text_config' must be a JSON object"),
    ("nested key type", _text("Llama-4-Scout-17B-16E", num_local_experts="16"),
     "'text_config.num_local_experts' must be an integer"),
]


@pytest.mark.parametrize(("case", "cfg", "expected"), BAD, ids=[b[0] for b in BAD])
def test_malformed_2025_config_is_one_line_naming_the_key(case: str, cfg: dict, expected: str):
    from shardplan.errors import ConfigFileError

    with pytest.raises(ConfigFileError) as e:
        spec_from_hf_config(cfg, name=case)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_bad_config_on_the_command_line_exits_2(run_cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_cfg("Nemotron-H-8B-Base-8K", hybrid_override_pattern="M*")))
    r = run_cli("models", "show", str(path))
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1 and "hybrid_override_pattern" in r.err


def test_llama4_explicit_moe_layers():
    # Llama4TextConfig.moe_layers overrides interleave_moe_layer_step: the same odd layers written out.
    cfg = _text("Llama-4-Maverick-17B-128E", moe_layers=list(range(1, 48, 2)))
    assert spec_from_hf_config(cfg, name="x").total_params == model("Llama-4-Maverick-17B-128E").total_params


def test_rope_parameters_object_reads_like_rope_theta_and_scaling():
    # transformers v5 configs: {"rope_parameters": {"rope_theta": …, "rope_type": …, "factor": …}}.
    cfg = _cfg("gpt-oss-20b")
    v5 = {k: v for k, v in cfg.items() if k not in ("rope_theta", "rope_scaling")}
    v5["rope_parameters"] = cfg["rope_scaling"] | {"rope_theta": cfg["rope_theta"]}
    assert spec_from_hf_config(v5, name="v5").rope == model("gpt-oss-20b").rope


def test_mistral3_reads_its_text_model_type():
    # A mistral3 wrapper around a DeepSeek-V3 text model (the Mistral Large 3 layout) reads as DeepSeek-V3.
    ds = json.loads((CONFIGS / "deepseek_v3.json").read_text())
    cfg = _cfg("Mistral-Small-3.1-24B-Instruct-2503") | {"text_config": ds}
    m = spec_from_hf_config(cfg, name="x")
    assert m.mla is not None and m.moe is not None and m.vision_params > 0


def test_nemotron_h_moe_layers():
    """Nemotron-H MoE variants (pattern letter E): squared-ReLU experts (up + down, no gate), a sigmoid router
    with a correction bias, one shared expert; checked weight by weight on a tiny config."""
    h, e, f, shared = 64, 4, 32, 48
    cfg = _cfg("Nemotron-H-8B-Base-8K", hybrid_override_pattern="ME*E", num_hidden_layers=4, hidden_size=h,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16, n_routed_experts=e, num_experts_per_tok=2,
               moe_intermediate_size=f, moe_shared_expert_intermediate_size=shared, vocab_size=100)
    m = spec_from_hf_config(cfg, name="tiny")
    b = param_breakdown(m)
    assert m.mlp_counts() == {MlpSlot.NONE: 2, MlpSlot.MOE: 2}
    assert b["mlp/router"] == 2 * (h * e + e)
    assert b["mlp/experts"] == 2 * e * 2 * h * f and b["mlp/shared_experts"] == 2 * 2 * h * shared
    assert b["attention/qkv"] == h * (4 + 2 * 2) * 16 and b["norms"] == 4 * h
