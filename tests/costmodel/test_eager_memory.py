"""Activation memory of eager PyTorch stacks (torchtitan without torch.compile): what autograd keeps beyond the fused
kernels, checked by hand against PyTorch's autograd formulas (derivatives.yaml: pow and mul keep their operands)."""

import numpy as np
import pytest

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.memory import layer_activations
from shardplan.hardware import get_system
from shardplan.models import get_model

MODEL = get_model("llama-3.1-8b")
WORK = TrainWorkload(seq_len=4096, global_batch=8, dtype="bf16", attention="flash")


def _acts(kind: str, **software: str) -> float:
    system = get_system("dgx-h100")
    system = system.model_copy(update={"software": system.software.model_copy(update=software)})
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, dp=8, recompute=Recompute.NONE, zero_stage=1)], 8)
    return float(np.asarray(layer_activations(Ctx(MODEL, system, WORK, rows), kind).none).ravel()[0])


def test_composite_norm_and_eager_swiglu_keep_more_by_hand() -> None:
    """Microbatch 1 × 4096 tokens, hidden 4096, FFN 14336: torchtitan's RMSNorm keeps its fp32 input (4 B) and its
    16-bit normalized output (2 B) where the fused norm keeps the 16-bit input: +4 B × 4096 per token in each of the
    two norms; eager SwiGLU keeps silu's output too: +2 B × 14336 per token."""
    T, h, f = 4096, 4096, 14336
    eager = dict(elementwise_kernels="eager", norm_kernel="composite")
    assert _acts("attention", **eager) - _acts("attention") == pytest.approx(T * 4 * h)
    assert _acts("mlp", **eager) - _acts("mlp") == pytest.approx(T * (4 * h + 2 * f))


def test_native_norm_keeps_what_the_fused_one_keeps() -> None:
    """PyTorch's native layer_norm kernel (llm-foundry's LPLayerNorm) saves its input and row statistics only."""
    assert _acts("attention", norm_kernel="native") == pytest.approx(_acts("attention"))
    assert _acts("mlp", norm_kernel="native") == pytest.approx(_acts("mlp"))
