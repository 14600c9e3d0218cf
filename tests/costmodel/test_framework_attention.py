"""A framework names its attention kernel (``frameworks._CUDNN``/``_FLASH2``) where the GPU has that kernel's measured
curves; elsewhere a fused kernel replaces the A100 preset's unfused softmax of Selene 2021, which no PyTorch-native
stack runs."""

from __future__ import annotations

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.frameworks import framework_system
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.hardware.software import AttentionKernel
from shardplan.models import get_model
from shardplan.models.spec import ModelSpec

MODEL = get_model("llama-3.1-8b")  # 32 heads of 128, no dropout
MOE = get_model("qwen3-30b-a3b")
WORK = TrainWorkload(seq_len=8192, global_batch=64)
LAYOUT = TrainLayout(dp=64, microbatch=1, zero_stage=3)


@pytest.mark.parametrize(("framework", "model", "kernel"), [("torchtitan", MODEL, AttentionKernel.FLASH2),
                                                            ("automodel", MODEL, AttentionKernel.FLASH2),
                                                            ("automodel", MOE, AttentionKernel.CUDNN),
                                                            ("fsdp", MODEL, AttentionKernel.FLASH2)])
def test_framework_attention_on_measured_kernels(framework: str, model: ModelSpec, kernel: AttentionKernel) -> None:
    """torchtitan's FlexAttention at FlashAttention-2's curves, AutoModel's SDPA (dense) and Transformer Engine
    (its MoE models), llm-foundry's flash-attn 2: on the H100, which has all three kernels' curves."""
    assert framework_system(get_system("dgx-h100"), framework, model).software.attention == kernel


@pytest.mark.parametrize("framework", ["torchtitan", "automodel", "fsdp"])
def test_framework_attention_keeps_no_scores(framework: str) -> None:
    preset = get_system("dgx-a100-80gb")
    assert preset.software.attention == AttentionKernel.UNFUSED and not preset.gpu.attention_curves
    system = framework_system(preset, framework, MODEL)
    assert system.software.attention == AttentionKernel.FLASH  # no curves on the A100: the fused kernel, scalar rate
    fused = {r.kind: r for r in estimate_training(MODEL, system, 64, WORK, LAYOUT).layers}
    unfused = {r.kind: r for r in estimate_training(MODEL, preset, 64, WORK, LAYOUT).layers}
    # By hand, per attention layer and sequence: the unfused softmax keeps its 16-bit probabilities, 32 heads × 8192²
    # (no dropout mask or output), where a fused kernel keeps an fp32 log-sum-exp per head and token
    scores, lse = 32 * 8192 * 8192 * 2, 32 * 8192 * 4
    assert unfused["attention"].activations_bytes - fused["attention"].activations_bytes == pytest.approx(
        scores - lse, rel=1e-12)
    assert fused["mlp"].activations_bytes == unfused["mlp"].activations_bytes


def test_a_fused_preset_kernel_stays_where_the_framework_kernel_has_no_curves() -> None:
    """MI300X: no measured curves for any kernel; its preset's fused kernel stays (an export names what runs)."""
    preset = get_system("mi300x-8")
    assert framework_system(preset, "torchtitan", MODEL).software.attention == preset.software.attention


def test_automodel_moe_dispatches_with_deepep() -> None:
    """AutoModel's MoE backend dispatches with DeepEP by default (``frameworks._AUTOMODEL``): a token goes once to each
    other rank holding one of its experts, where Megatron's alltoall dispatcher sends one copy per routed expert."""
    from math import comb

    model = MOE  # 128 experts, top 8
    work = TrainWorkload(seq_len=4096, global_batch=64)
    layout = TrainLayout(dp=8, ep=8, microbatch=1, zero_stage=3)
    preset = get_system("dgx-h100")
    system = framework_system(preset, "automodel", model)
    assert system.software.ep_dispatcher == "deepep"
    deepep = {r.kind: r for r in estimate_training(model, system, 8, work, layout).layers}["moe"].comm_ep_s
    a2a = {r.kind: r for r in estimate_training(model, preset, 8, work, layout).layers}["moe"].comm_ep_s
    # By hand: uniform routing over 8 ranks of 16 experts; a rank is missed by all 8 picks with probability
    # C(112, 8)/C(128, 8), so a token reaches 8·(1 − that) ≈ 5.34 ranks against 8 copies, 7/8 of them other ranks of
    # the node; each call is NCCL's Simple protocol: its base latency, one NVLink hop per peer, the bytes at the
    # link's rate for NCCL, at DeepEP's measured intranode rate for DeepEP (hardware.ep_data: 305.72 GB/s dispatch,
    # 319.88 combine of received bytes on 8 H200, 7/8 of them leaving the GPU); both sides scale alike by the
    # busiest rank's load, which cancels
    ranks = 8 * (1 - comb(112, 8) / comb(128, 8))
    link = preset.intra_node
    deepep_rate = (305.72 + 319.88) / 2 * 1e9 * 7 / 8

    def call(copies: float, rate: float) -> float:
        return 8.4e-6 + 7 * link.latency_s + 4096 * copies * 2048 * 2 * 7 / 8 / rate

    nccl_rate = link.bandwidth_bytes_per_s * link.efficiency
    assert deepep / a2a == pytest.approx(call(ranks, deepep_rate) / call(8, nccl_rate), rel=1e-6)
