"""Routed experts' FC2 biases added outside the GEMM (Megatron-Core TEGroupedMLP._apply_bias, NeMo AutoModel
GroupedExpertsDeepEP._apply_bias): per element of the FC2 output, 28 B forward and 40 B backward at 16 bit
(core.passes ``expert_bias``, counted from the eager ops); none for models without expert biases, none in serving."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core.routing import ep_imbalance
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.stages import kind_costs
from shardplan.hardware import get_system
from shardplan.models import get_model


def _moe_ops(model: str) -> tuple[list, list, Ctx]:
    work = TrainWorkload(seq_len=4096, global_batch=64)
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, pp=1, dp=8, ep=8, microbatch=2, zero_stage=1)], 64)
    ctx = Ctx(get_model(model), get_system("dgx-h100"), work, rows)
    moe = kind_costs(ctx)["moe"]
    return moe.fwd_ops, moe.bwd_ops, ctx


def test_gpt_oss_pays_the_eager_bias_add_on_every_routed_copy() -> None:
    fwd, bwd, ctx = _moe_ops("gpt-oss-120b")
    m = ctx.model
    # the FC2 output's rows: its GEMM's M (2·M·K·N FLOPs, K = N = 2880), the busiest EP rank's copies
    (fc2,) = [op for op in fwd if op.name == "moe.experts.fc2"]
    rows = float(np.ravel(fc2.flops)[0]) / (2 * 2880 * 2880)
    # hand count: 2 sequences × 4096 tokens × top-4 copies on this GPU (EP 8, dropless), a busiest rank within 2%
    assert rows == pytest.approx(2 * 4096 * 4, rel=0.02)
    # expert-side kernels run at the busiest EP rank's load (training.layers.moe_ops): 1 + √(2·ln 8 / 32768)
    elements = rows * 2880 * float(ep_imbalance(8, 2 * 4096 * 4))
    (f,) = [op for op in fwd if op.name == "moe.experts.fc2_bias"]
    (b,) = [op for op in bwd if op.name == "moe.experts.fc2_bias.bwd"]
    assert m.mlp_bias and float(np.ravel(f.nbytes)[0]) == pytest.approx(28.0 * elements)
    assert float(np.ravel(b.nbytes)[0]) == pytest.approx(40.0 * elements)
    assert float(np.ravel(f.time)[0]) > 0


def test_models_without_expert_biases_have_no_such_op() -> None:
    fwd, bwd, _ = _moe_ops("qwen3-30b-a3b")
    assert not any("fc2_bias" in op.name for op in fwd + bwd)



def test_automodel_adds_fc1_biases_after_the_gemm_too() -> None:
    """NeMo AutoModel (SoftwareSpec.expert_mlp 'compiled') adds FC1's per-expert bias after its grouped GEMM: ``t + b``
    and a cat, 4 passes of 2 B forward and 3 backward per element of FC1's output (2 × 2880 per routed copy);
    Megatron-Core's TEGroupedMLP adds it inside the GEMM (skip_bias_add=False) and prices none."""
    base = get_system("dgx-h100")
    compiled = base.model_copy(update={"software": base.software.model_copy(update={"expert_mlp": "compiled"})})
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, pp=1, dp=8, ep=8, microbatch=2, zero_stage=1)], 64)
    work = TrainWorkload(seq_len=4096, global_batch=64)
    moe = kind_costs(Ctx(get_model("gpt-oss-120b"), compiled, work, rows))["moe"]
    elements = 2 * 4096 * 4 * 2 * 2880 * float(ep_imbalance(8, 2 * 4096 * 4))
    (f,) = [op for op in moe.fwd_ops if op.name == "moe.experts.fc1_bias"]
    (b,) = [op for op in moe.bwd_ops if op.name == "moe.experts.fc1_bias.bwd"]
    assert float(np.ravel(f.nbytes)[0]) == pytest.approx(8.0 * elements)
    assert float(np.ravel(b.nbytes)[0]) == pytest.approx(6.0 * elements)
    fwd, _, _ = _moe_ops("gpt-oss-120b")  # TEGroupedMLP (the default)
    assert not any(op.name == "moe.experts.fc1_bias" for op in fwd)
