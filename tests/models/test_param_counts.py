"""Golden parameter counts: the catalog presets against model cards and papers, and against a closed form."""

from __future__ import annotations

import pytest

from shardplan.models import MODELS, active_param_breakdown, param_breakdown

# name → (total parameters as published, the model card or paper that publishes it)
CARD_TOTALS: dict[str, tuple[float, str]] = {
    "llama-2-7b": (6.74e9, "https://huggingface.co/meta-llama/Llama-2-7b-hf: 6.74B params"),
    "llama-3.1-8b": (8.03e9, "https://huggingface.co/meta-llama/Llama-3.1-8B: 8.03B params"),
    "llama-3.1-70b": (70.6e9, "https://huggingface.co/meta-llama/Llama-3.1-70B: 70.6B params"),
    "llama-3.1-405b": (405.9e9, "https://huggingface.co/meta-llama/Llama-3.1-405B: 405.9B params"),
    "mistral-7b": (7.24e9, "https://huggingface.co/mistralai/Mistral-7B-v0.1: 7.24B params"),
    "mixtral-8x7b": (46.7e9, "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1: 46.7B params"),
    "qwen2.5-72b": (72.7e9, "https://huggingface.co/Qwen/Qwen2.5-72B: 'Number of Parameters: 72.7B'"),
    "deepseek-v3": (671e9, "https://huggingface.co/deepseek-ai/DeepSeek-V3: 671B (main model; MTP module apart)"),
    "opt-175b": (175e9, "Zhang et al. 2022 (arXiv 2205.01068) Table 1: 175B"),
    "bloom-176b": (176.2e9, "https://huggingface.co/bigscience/bloom: 176,247,271,424 parameters"),
    "gpt-neox-20b": (20.6e9, "https://huggingface.co/EleutherAI/gpt-neox-20b: 20,554,567,680 parameters"),
    "nemotron-4-340b": (341.0e9, "arXiv 2406.11704 §2.1: 9.4B embedding + 331.6B non-embedding parameters"),
}


def test_nemotron_4_340b_splits_as_the_report():
    """Nemotron-4 340B report §2.1: "9.4 billion embedding parameters and 331.6 billion non-embedding"."""
    b = param_breakdown(MODELS["nemotron-4-340b"])
    embedding = b["embedding/tokens"] + b["lm_head"]
    assert embedding == pytest.approx(9.4e9, abs=0.05e9)
    assert sum(b.values()) - embedding == pytest.approx(331.6e9, abs=0.05e9)


@pytest.mark.parametrize("name", sorted(CARD_TOTALS))
def test_total_params_match_the_model_card(name: str):
    expected, _source = CARD_TOTALS[name]
    assert MODELS[name].total_params == pytest.approx(expected, rel=0.005)


@pytest.mark.parametrize(("name", "exact"), [
    ("bloom-176b", 176_247_271_424),  # bigscience/bloom model card, technical specifications
    ("gpt-neox-20b", 20_554_567_680),  # EleutherAI/gpt-neox-20b model card, "Number of parameters"
])
def test_cards_that_print_every_digit_match_exactly(name: str, exact: int):
    assert MODELS[name].total_params == exact


def test_mixtral_active_params_match_the_card():
    # https://huggingface.co/mistralai/Mixtral-8x7B-v0.1: 46.7B params; Mistral AI's release post: 12.9B active.
    m = MODELS["mixtral-8x7b"]
    assert m.active_params == pytest.approx(12.9e9, rel=0.005)
    assert m.total_params > 3.5 * m.active_params


def test_deepseek_v3_active_params():
    """The card's "37B activated" is rounded; our count is 37.55B with the input embedding and output head.

    DeepSeek counts activated parameters without the input embedding (a lookup, not a matmul): our count
    minus it is 36.63B, which matches README_WEIGHTS.md in the deepseek-ai/DeepSeek-V3 repository
    ("Activation parameters: 36.6B", 36.7B in a later revision of that file).
    """
    m = MODELS["deepseek-v3"]
    active = m.active_params
    assert 37e9 <= active < 38e9
    assert active - active_param_breakdown(m)["embedding/tokens"] == pytest.approx(36.6e9, abs=0.1e9)


def test_gemma_non_embedding_params_match_the_papers():
    # Gemma 2 report (arXiv 2408.00118) Table 1, non-embedding parameters: 9B 8,324,201,984; 27B 26,047,480,320.
    for name, exact in (("gemma-2-9b", 8_324_201_984), ("gemma-2-27b", 26_047_480_320)):
        m = MODELS[name]
        assert m.total_params - param_breakdown(m)["embedding/tokens"] == exact


# --- Megatron GPT shapes --------------------------------------------------------------------------

# Narayanan et al. 2021 (arXiv 2104.04473) Table 1, "Number of parameters (billion)".
TABLE1_BILLIONS: dict[str, float] = {
    "gpt-1.7b": 1.7, "gpt-3.6b": 3.6, "gpt-7.5b": 7.5, "gpt-18.4b": 18.4, "gpt-39.1b": 39.1,
    "gpt-76.1b": 76.1, "gpt-145.6b": 145.6, "gpt-310.1b": 310.1, "gpt-529.6b": 529.6, "gpt-1008b": 1008.0,
}
MEGATRON_SHAPES = [*TABLE1_BILLIONS, "gpt3-175b", "gpt-22b", "turing-530b"]


@pytest.mark.parametrize("name", MEGATRON_SHAPES)
def test_megatron_shapes_follow_the_closed_form(name: str):
    """Narayanan et al. 2021 (arXiv 2104.04473): P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)).

    The itemised count differs only by the final LayerNorm (2h), far inside 0.1%.
    """
    m = MODELS[name]
    lay, h, V, s = m.num_layers, m.hidden_size, m.vocab_size, m.max_position_embeddings
    closed = 12 * lay * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * lay * h))
    assert m.total_params == pytest.approx(closed, rel=1e-3)
    assert m.total_params - closed == pytest.approx(2 * h)


@pytest.mark.parametrize("name", sorted(TABLE1_BILLIONS))
def test_megatron_shapes_match_table_1(name: str):
    """Table 1 prints billions to one decimal, so our count must round to the printed figure.

    That is also within 1% from 7.5B up; the two smallest rows are further off only by that rounding
    (1.652B prints as 1.7, 3.562B as 3.6).
    """
    total, printed = MODELS[name].total_params, TABLE1_BILLIONS[name]
    assert round(total / 1e9, 1) == printed
    if printed >= 7.5:
        assert total == pytest.approx(printed * 1e9, rel=0.01)


@pytest.mark.parametrize(("name", "billions"), [("gpt-22b", 22), ("gpt3-175b", 175), ("turing-530b", 530)])
def test_korthikanti_table_3_sizes(name: str, billions: int):
    # Korthikanti et al. 2022 (arXiv 2205.05198) Table 3 names the models by these sizes.
    assert MODELS[name].total_params == pytest.approx(billions * 1e9, rel=0.01)
