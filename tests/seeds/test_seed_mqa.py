"""Seed 004: multi-query vs multi-head attention at decode — KV-cache size, decode time, speed-up.

The seed's inputs: batch 10, 16 heads, width 768, 24 layers, decoding positions 1..1023 on an A100 taken
as 0.5 × 312 TFLOP/s and 1935 GB/s with a 5 µs floor per kernel, fp16. Expected values are hand
calculations from those inputs. Slips in the seed (they do not move its default result, where every
kernel but MHA attention sits on the 5 µs floor): ``qkv_mqa_exec`` counts only the K/V weights
(``2·(2/h)·d²`` bytes; the Q matrix, ``2·d²`` bytes, is read too), and ``att2_mqa_exec`` reads the
attention scores as ``bs·n·d/h`` elements instead of ``bs·h·n``.
"""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.serving import layers as O
from shardplan.costmodel.serving.cost import InferLayout, InferRows, InferWorkload, infer_cost
from shardplan.hardware.spec import GpuSpec, LinkSpec, SystemSpec
from shardplan.models import param_breakdown
from shardplan.models.spec import MlpKind, ModelSpec, NormKind, PositionKind

BS, HEADS, D, LAYERS, N = 10, 16, 768, 24, 1024
TFLOPS, GBPS, FLOOR = 0.5 * 312e12, 1935e9, 5e-6
GPU = GpuSpec(name="a100-seed", memory_bytes=40 * 2**30, memory_bandwidth_bytes_per_s=GBPS,
              peak_flops={"fp16": 312e12, "bf16": 312e12}, matmul_efficiency=[(1.0, 0.5)],
              memory_efficiency=[(1.0, 1.0)], attention_efficiency=0.5, kernel_launch_s=FLOOR)
LINK = LinkSpec(bandwidth_bytes_per_s=300e9, latency_s=8e-6)
SYSTEM = SystemSpec(name="a100-seed", gpu=GPU, gpus_per_node=8, intra_node=LINK, pcie=LINK, host_memory_bytes=2**40)


def _model(kv_heads: int) -> ModelSpec:
    return ModelSpec(name=f"seed-kv{kv_heads}", family="gpt", num_layers=LAYERS, hidden_size=D, num_heads=HEADS,
                     num_kv_heads=kv_heads, ffn_hidden_size=4 * D, mlp=MlpKind.GELU, vocab_size=64,
                     norm=NormKind.LAYERNORM, position=PositionKind.LEARNED, dtype="fp16")


MHA, MQA = _model(HEADS), _model(1)


def _roofline(flops: float, nbytes: float) -> float:
    return max(flops / TFLOPS, nbytes / GBPS, FLOOR)


def _hand_layer(kv_heads: int, n: float) -> float:
    """One decode step of one layer at context n: the seed's roofline over our kernel list (fused attention)."""
    dh, b = D // HEADS, BS
    qkv_n = D + 2 * kv_heads * dh
    t = _roofline(0, 2 * 2 * b * D)  # norm
    t += _roofline(2 * b * D * qkv_n, 2 * (D * qkv_n + b * D + b * qkv_n))  # QKV projection
    t += _roofline(0, 2 * 2 * b * (HEADS + kv_heads) * dh + b * 2 * kv_heads * dh * 2)  # rotary + cache write
    # fused attention: QKᵀ and PV over n positions, reading K and V of every position once
    kv_read = b * n * 2 * kv_heads * dh * 2 + 2 * b * HEADS * 2 * dh
    t += max(2 * b * n * HEADS * 2 * dh / TFLOPS, kv_read / GBPS, FLOOR)
    t += _roofline(2 * b * D * D, 2 * (D * D + 2 * b * D))  # output projection
    t += _roofline(0, 3 * 2 * b * D)  # residual
    t += _roofline(0, 2 * 2 * b * D) + _roofline(0, 3 * 2 * b * D)  # MLP norm, residual
    t += 2 * _roofline(2 * b * D * 4 * D, 2 * (4 * D * D + b * D + b * 4 * D))  # fc1, fc2
    t += _roofline(0, 2 * b * 4 * D * 2)  # GeLU
    return t


def test_kv_cache_sizes_are_the_seeds() -> None:
    # The seed: 2·bs·l·(d/h)·h·2·n bytes = 0.75 GB for MHA, 1/h of it (0.05 GB) for MQA.
    w = InferWorkload(prompt_len=N - 1, gen_len=2, dtype="fp16")
    for model, kv in ((MHA, HEADS), (MQA, 1)):
        c = infer_cost(model, SYSTEM, w, InferRows.from_layouts([InferLayout(batch=BS)]))
        assert float(c.kv_layer_bytes[0]) * LAYERS * BS * N == 2 * BS * LAYERS * (D // HEADS) * kv * 2 * N
    assert pytest.approx(0.75, abs=0.005) == 2 * BS * LAYERS * D * 2 * N / 1e9
    assert pytest.approx(0.05, abs=0.005) == 2 * BS * LAYERS * (D // HEADS) * 2 * N / 1e9


def test_parameters_are_the_seeds() -> None:
    # The seed: 12·l·d² for MHA, (10 + 2/h)·l·d² for MQA (its formula is right).
    for model, per_layer in ((MHA, 12 * D * D), (MQA, (10 + 2 / HEADS) * D * D)):
        p = param_breakdown(model)
        assert p["attention/qkv"] + p["attention/out"] + p["mlp/dense"] == pytest.approx(LAYERS * per_layer)


@pytest.mark.parametrize(("model", "kv"), [(MHA, HEADS), (MQA, 1)])
def test_decode_layer_time_is_the_hand_roofline(model: ModelSpec, kv: int) -> None:
    w = InferWorkload(prompt_len=N - 1, gen_len=2, dtype="fp16")  # mean context 1024
    c = infer_cost(model, SYSTEM, w, InferRows.from_layouts([InferLayout(batch=BS)]))
    layer = float(c.decode.sums["attention"].time[0] + c.decode.sums["mlp"].time[0])
    assert layer == pytest.approx(_hand_layer(kv, N), rel=1e-9)


def _generation_time(model: ModelSpec) -> float:
    """Σ over positions 1..1023 of a decode step of all layers (the seed's total), with our kernels."""
    n = np.arange(1, N, dtype=float)
    ones = np.ones(len(n), dtype=np.int64)
    ctx = O.InferCtx(model=model, system=SYSTEM, tp=ones, pp=ones, ep=ones, weight_dtype="fp16", kv_dtype="fp16",
                     gemm_dtype="fp16")
    b = np.full(len(n), float(BS))
    step = O.Step("decode", b, b * n, b * n, b)
    per_layer = sum(op.time for op in O.attention_ops(ctx, step) + O.mlp_ops(ctx, step))
    return float(LAYERS * per_layer.sum())


def test_speedup_of_mqa_over_mha() -> None:
    mha, mqa = _generation_time(MHA), _generation_time(MQA)
    hand_mha = sum(LAYERS * _hand_layer(HEADS, n) for n in range(1, N))
    hand_mqa = sum(LAYERS * _hand_layer(1, n) for n in range(1, N))
    assert mha == pytest.approx(hand_mha, rel=1e-9)
    assert mqa == pytest.approx(hand_mqa, rel=1e-9)
    # The seed prints 1.02×: its 12 unfused kernels per layer all pay the 5 µs floor. Fused attention leaves
    # MHA's KV read as the one kernel above the floor, so MQA's gain shows: 1.07× over the whole generation.
    assert mha / mqa == pytest.approx(hand_mha / hand_mqa, rel=1e-9)
    assert 1.06 < mha / mqa < 1.08
