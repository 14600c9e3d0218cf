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
