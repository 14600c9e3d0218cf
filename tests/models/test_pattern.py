"""Layer patterns: run-length codes, their per-kind counts against a layer-by-layer brute force, and O(pattern) cost."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardplan.models import MODELS, Mixer, MlpSlot, ModelSpec, MoESpec
from shardplan.models.pattern import compress, kind_counts, moe_at, parse_code, period


def brute_force(pattern: list[str] | None, layers: int, default: Mixer, has_moe: bool, first: int, freq: int
                ) -> Counter:
    per = period(pattern) if pattern else [(default, None)]
    out: Counter = Counter()
    for i in range(layers):
        mixer, slot = per[i % len(per)]
        if slot is None:
            slot = MlpSlot.MOE if has_moe and i >= first and (i - first) % freq == 0 else MlpSlot.DENSE
        out[(mixer, slot)] += 1
    return out


codes = st.builds(lambda m, s, n: f"{m}{s}" + (f"*{n}" if n > 1 else ""), st.sampled_from("FSCLMN"),
                  st.sampled_from(["", "d", "e", "n"]), st.integers(1, 5))


@given(st.lists(codes, min_size=1, max_size=5), st.integers(1, 300), st.booleans(), st.integers(0, 7),
       st.integers(1, 4))
def test_counts_equal_the_layer_by_layer_expansion(pattern, layers, has_moe, first, freq):
    got = kind_counts(pattern, layers, Mixer.FULL, has_moe=has_moe, first_dense=first, freq=freq)
    assert got == brute_force(pattern, layers, Mixer.FULL, has_moe, first, freq)


@given(st.lists(st.sampled_from(["F", "S", "L", "Mn", "Nd"]), min_size=1, max_size=40))
def test_compress_round_trips(kinds):
    per = period(compress(kinds))
    expanded = [f"{m.value}{s.value if s else ''}" for m, s in per]
    assert (expanded * (len(kinds) // len(expanded))) == kinds


def test_compress_finds_the_period():
    assert compress(["S", "S", "S", "S", "S", "F"] * 10) == ("S*5", "F")
    assert compress(["Mn", "Nd"] * 3 + ["Fn"]) == ("Mn", "Nd", "Mn", "Nd", "Mn", "Nd", "Fn")


@pytest.mark.parametrize("bad", ["X", "F*0", "Sq", "F*", "", "FF"])
def test_bad_codes_name_the_form(bad):
    with pytest.raises(ValueError, match="mixer letter"):
        parse_code(bad)


def test_ten_thousand_layers_cost_only_the_pattern():
    base = MODELS["gemma-3-27b"].model_dump()
    m = ModelSpec(**(base | {"num_layers": 10_000}))
    start = time.perf_counter()
    for _ in range(100):
        kinds = m.layer_kinds()
    assert time.perf_counter() - start < 0.5  # O(pattern): 100 calls well under a millisecond each
    assert kinds == {(Mixer.SLIDING, MlpSlot.DENSE): 8334, (Mixer.FULL, MlpSlot.DENSE): 1666}


def test_moe_layout_rule():
    # DeepSeek-V3: first_k_dense_replace 3 → layers 3..60 are MoE; Llama-4 Maverick: odd layers.
    assert [i for i in range(8) if moe_at(i, 3, 1)] == [3, 4, 5, 6, 7]
    assert [i for i in range(8) if moe_at(i, 1, 2)] == [1, 3, 5, 7]
    assert MODELS["deepseek-v3"].mlp_counts() == {MlpSlot.DENSE: 3, MlpSlot.MOE: 58}


def test_pattern_needs_its_shape():
    with pytest.raises(ValueError, match="linear_attention is not set"):
        ModelSpec(name="x", num_layers=4, hidden_size=64, num_heads=4, ffn_hidden_size=128, vocab_size=10,
                  layer_pattern=("L*3", "F"))
    with pytest.raises(ValueError, match="moe is not set"):
        ModelSpec(name="x", num_layers=4, hidden_size=64, num_heads=4, ffn_hidden_size=128, vocab_size=10,
                  layer_pattern=("Fe",))
    m = ModelSpec(name="x", num_layers=4, hidden_size=64, num_heads=4, ffn_hidden_size=128, vocab_size=10,
                  layer_pattern=("Fe", "Fd"),
                  moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=32))
    assert (m.num_moe_layers, m.num_dense_layers) == (2, 2)


def test_per_kind_layers_sum_to_the_model():
    from shardplan.models import layer_param_breakdown, param_breakdown

    for name in ("qwen3-next-80b-a3b", "gpt-oss-120b", "deepseek-v3", "llama-4-maverick"):
        m = MODELS[name]
        layers = sum(n * sum(layer_param_breakdown(m, mixer, slot).values())
                     for (mixer, slot), n in m.layer_kinds().items())
        outside = sum(v for k, v in param_breakdown(m).items() if k.startswith(("embedding", "final_norm", "lm_head")))
        assert layers + outside == m.total_params
    # One Gated DeltaNet layer of Qwen3-Next by hand (transformers Qwen3NextGatedDeltaNet): in_proj_qkvz
    # 2048·(2·2048 + 2·4096), in_proj_ba 2048·64, conv1d 8192·4, dt_bias + A_log 2·32, norm 128, out_proj 4096·2048.
    m = MODELS["qwen3-next-80b-a3b"]
    lin = layer_param_breakdown(m, Mixer.LINEAR, MlpSlot.MOE)["linear_attention"]
    assert lin == 2048 * 12288 + 2048 * 64 + 8192 * 4 + 64 + 128 + 4096 * 2048
