"""Hand-computed memory of serving: KV bytes per token (MHA/GQA/MQA/MLA), weight bytes, KV slots, max batch."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.serving import layers as O
from shardplan.costmodel.serving.cost import InferLayout, InferRows, InferWorkload, infer_cost
from shardplan.hardware import get_system
from shardplan.models import get_model, param_breakdown

W = InferWorkload(prompt_len=512, gen_len=128)


def _cost(model: str, *layouts: InferLayout, system: str = "dgx-h100", work: InferWorkload = W):
    return infer_cost(get_model(model), get_system(system), work, InferRows.from_layouts(list(layouts)))


def test_kv_bytes_per_token_mha() -> None:
    # Llama-2-7B: K and V, 32 heads × 128, 2 bytes, per layer: 16 KiB; ÷ TP.
    tp = np.array([1, 2, 4])
    assert O.kv_layer_bytes_per_token(get_model("llama-2-7b"), "bf16", tp).tolist() == [16384, 8192, 4096]


def test_kv_bytes_per_token_gqa_replicates_heads_beyond_tp() -> None:
    # Llama-3.1-70B: 8 KV heads × 128 × 2 (K, V) × 2 bytes = 4 KiB per layer; TP 16 keeps one head per rank.
    tp = np.array([1, 4, 8, 16])
    got = O.kv_layer_bytes_per_token(get_model("llama-3.1-70b"), "bf16", tp).tolist()
    assert got == [4096, 1024, 512, 512]
    assert O.kv_layer_bytes_per_token(get_model("llama-3.1-70b"), "fp8", tp).tolist() == [2048, 512, 256, 256]


def test_kv_bytes_per_token_mla_is_the_latent() -> None:
    # DeepSeek-V3: (kv_lora_rank 512 + rope 64) × 2 bytes = 1152 per layer, whole on every TP rank.
    got = O.kv_layer_bytes_per_token(get_model("deepseek-v3"), "bf16", np.array([1, 8]))
    assert got.tolist() == [1152, 1152]


def test_weights_tp1_bf16_are_two_bytes_per_parameter() -> None:
    m = get_model("llama-3.1-8b")
    c = _cost("llama-3.1-8b", InferLayout(tp=1))
    assert float(c.memory[0].weights[0]) == 2 * m.total_params


def test_int4_weights_quantise_only_block_linears() -> None:
    m = get_model("llama-3.1-8b")
    p = param_breakdown(m)
    linear = p["attention/qkv"] + p["attention/out"] + p["mlp/dense"]
    rest = m.total_params - linear
    c = _cost("llama-3.1-8b", InferLayout(tp=1), work=W.model_copy(update={"weight_dtype": "int4"}))
    # 0.5 byte per weight + one 16-bit scale per group of 128 (GPTQ/AWQ); norms, embeddings, head in 16-bit.
    assert float(c.memory[0].weights[0]) == pytest.approx(linear * (0.5 + 2 / 128) + 2 * rest, rel=1e-12)


def test_weights_split_over_tp_and_experts_over_ep() -> None:
    m = get_model("mixtral-8x7b")
    c = _cost("mixtral-8x7b", InferLayout(tp=2, replicas=4), InferLayout(tp=2, replicas=4, ep=4))
    experts = param_breakdown(m)["mlp/experts"] * 2  # bytes
    assert float(c.memory[0].weights[0] - c.memory[0].weights[1]) == pytest.approx(experts / 2 * (1 - 1 / 4))


def test_kv_slots_are_whole_blocks_of_the_pool() -> None:
    c = _cost("llama-3.1-8b", InferLayout(tp=1))
    mem = c.memory[0]
    per_token = 32 * 4096 / 4 * 2 * 2 / 8 * 8  # 32 layers × 8 KV heads × 128 × K,V × 2 bytes = 128 KiB
    assert float(mem.kv_token[0]) == per_token
    expected = np.floor(float(mem.kv_pool[0]) / (16 * per_token)) * 16
    assert float(c.kv_tokens[0]) == expected
    # the pool is vLLM's: 0.9 × capacity − weights − activation workspace − non-torch memory
    cap = get_system("dgx-h100").gpu.memory_bytes
    assert float(mem.kv_pool[0]) == pytest.approx(0.9 * cap - float(mem.weights[0]) - float(mem.activations[0])
                                                  - W.non_torch_bytes)


def test_max_batch_counts_blocks_per_sequence() -> None:
    c = _cost("llama-3.1-8b", InferLayout(tp=1))
    assert c.blocks_per_seq == 40  # 640 tokens / 16
    assert float(c.max_batch[0]) == float(c.kv_blocks[0]) // 40


def test_workspace_grows_with_the_token_budget() -> None:
    small = _cost("llama-3.1-8b", InferLayout(tp=1), work=W.model_copy(update={"max_num_batched_tokens": 512}))
    big = _cost("llama-3.1-8b", InferLayout(tp=1), work=W.model_copy(update={"max_num_batched_tokens": 8192}))
    # per token: residual + layer output 2h and gate/up + activation (2+1)·f, 16-bit: 2·(8192 + 43008) bytes
    per_token = 2 * (2 * 4096 + 3 * 14336)
    diff = float(big.memory[0].activations[0] - small.memory[0].activations[0])
    assert diff == pytest.approx((8192 - 512) * per_token)


def test_distinct_experts() -> None:
    assert O.distinct_experts(8, 2, np.array([1.0]))[0] == pytest.approx(2.0)
    assert O.distinct_experts(8, 2, np.array([2.0]))[0] == pytest.approx(8 * (1 - 0.75**2))
    assert O.distinct_experts(256, 8, np.array([4096.0]))[0] == pytest.approx(256, rel=1e-6)
