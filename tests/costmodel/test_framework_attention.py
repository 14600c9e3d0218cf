"""A framework names its attention kernel whatever the system preset's (``frameworks._CUDNN``/``_FLASH2``): the A100
preset describes Selene 2021's software, unfused softmax, which no PyTorch-native stack runs."""

from __future__ import annotations

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.frameworks import framework_system
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.hardware.software import AttentionKernel
from shardplan.models import get_model

MODEL = get_model("llama-3.1-8b")  # 32 heads of 128, no dropout
WORK = TrainWorkload(seq_len=8192, global_batch=64)
LAYOUT = TrainLayout(dp=64, microbatch=1, zero_stage=3)


@pytest.mark.parametrize(("framework", "kernel"), [("torchtitan", AttentionKernel.CUDNN),
                                                   ("automodel", AttentionKernel.CUDNN),
                                                   ("fsdp", AttentionKernel.FLASH2)])
def test_framework_attention_keeps_no_scores(framework: str, kernel: AttentionKernel) -> None:
    preset = get_system("dgx-a100-80gb")
    assert preset.software.attention == AttentionKernel.UNFUSED
    system = framework_system(preset, framework)
    assert system.software.attention == kernel
    fused = {r.kind: r for r in estimate_training(MODEL, system, 64, WORK, LAYOUT).layers}
    unfused = {r.kind: r for r in estimate_training(MODEL, preset, 64, WORK, LAYOUT).layers}
    # By hand, per attention layer and sequence: the unfused softmax keeps its 16-bit probabilities, 32 heads × 8192²
    # (no dropout mask or output), where a fused kernel keeps an fp32 log-sum-exp per head and token
    scores, lse = 32 * 8192 * 8192 * 2, 32 * 8192 * 4
    assert unfused["attention"].activations_bytes - fused["attention"].activations_bytes == pytest.approx(
        scores - lse, rel=1e-12)
    assert fused["mlp"].activations_bytes == unfused["mlp"].activations_bytes


def test_automodel_moe_dispatches_with_deepep() -> None:
    """AutoModel's MoE backend dispatches with DeepEP by default (``frameworks._AUTOMODEL``): a token goes once to each
    other rank holding one of its experts, where Megatron's alltoall dispatcher sends one copy per routed expert."""
    from math import comb

    model = get_model("qwen3-30b-a3b")  # 128 experts, top 8
    work = TrainWorkload(seq_len=4096, global_batch=64)
    layout = TrainLayout(dp=8, ep=8, microbatch=1, zero_stage=3)
    preset = get_system("dgx-h100")
    system = framework_system(preset, "automodel")
    assert system.software.ep_dispatcher == "deepep"
    deepep = {r.kind: r for r in estimate_training(model, system, 8, work, layout).layers}["moe"].comm_ep_s
    a2a = {r.kind: r for r in estimate_training(model, preset, 8, work, layout).layers}["moe"].comm_ep_s
    # By hand: uniform routing over 8 ranks of 16 experts; a rank is missed by all 8 picks with probability
    # C(112, 8)/C(128, 8), so a token reaches 8·(1 − that) ≈ 5.34 ranks against 8 copies, 7/8 of them other ranks of
    # the node; each call is NCCL's Simple protocol: its base latency, one NVLink hop per peer, the bytes at the
    # link's rate (both sides scale alike by the busiest rank's load, which cancels)
    ranks = 8 * (1 - comb(112, 8) / comb(128, 8))
    link = preset.intra_node

    def call(copies: float) -> float:
        return 8.4e-6 + 7 * link.latency_s + 4096 * copies * 2048 * 2 * 7 / 8 / (link.bandwidth_bytes_per_s
                                                                                * link.efficiency)

    assert deepep / a2a == pytest.approx(call(ranks) / call(8), rel=1e-6)
