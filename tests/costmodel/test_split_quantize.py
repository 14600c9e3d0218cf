"""The kernels Transformer Engine's GroupedLinear launches to quantize a routed-expert GEMM's operands, one local expert
at a time (``quantization.split_quantize_kernels``), read from TE's source at v2.7 and v2.13: ``tex.split_quantize``
fuses every group into one cast-transpose only for delayed-scaling FP8 with transposed copies
(``multi_tensor_quantize_impl``) and into one kernel for NVFP4; otherwise each group is quantized on its own, in three
kernels under current scaling (``Float8CurrentScalingQuantizer::quantize_impl``: amax, scale, cast)."""

import numpy as np
import pytest

from shardplan.costmodel.core.operators import Gemm
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.quantization import split_quantize_kernels
from shardplan.hardware import get_system
from shardplan.models import get_model


@pytest.mark.parametrize(("system", "dtype", "scaling", "experts", "kernels"), [
    ("dgx-h100", "fp8", "current", 8, 24),  # amax, scale, cast for each of 8 experts
    ("dgx-h100", "fp8", "delayed", 8, 1),  # nvte_multi_cast_transpose over all 8
    ("dgx-b200", "fp8", "delayed", 8, 8),  # no transposed copy on Blackwell: not the fused path
    ("dgx-b200", "fp8", "mxfp8", 16, 16),
    ("dgx-b200", "fp4", "current", 16, 1),  # v2.13's fused NVFP4 split quantization
    ("dgx-h100", "fp8", "current", 1, 3),
])
def test_kernel_count_by_recipe(system: str, dtype: str, scaling: str, experts: int, kernels: int) -> None:
    assert float(split_quantize_kernels(get_system(system).gpu, dtype, scaling, experts)) == kernels


def _ctx(scaling: str, expert_mlp: str = "te_grouped") -> Ctx:
    base = get_system("dgx-h100")
    sw = base.software.model_copy(update={"fp8_scaling": scaling, "expert_mlp": expert_mlp})
    system = base.model_copy(update={"software": sw})
    work = TrainWorkload(seq_len=4096, global_batch=4, dtype="fp8")
    return Ctx(get_model("qwen3-30b-a3b"), system, work, LayoutArrays.from_layouts([TrainLayout(microbatch=1)], 4))


def _cast(ctx: Ctx, routed: bool) -> tuple[float, float]:
    g = Gemm("moe.experts.fc1", np.array([4096.0 * 8]), 2048.0, 1536.0, 8.0, routed=routed)
    op = next(op for op in ctx.gemm(g) if op.name.endswith("_cast"))
    return float(op.time[0]), float(op.bwd_time[0])


def test_a_routed_gemm_pays_the_fixed_time_of_every_extra_kernel() -> None:
    """Eight local experts under current scaling: 24 kernels where one is priced for the bytes, so 23 more fixed
    times backward (the output gradient), and 23 for the input plus 23 for the weights forward, the weights' share
    once per step (four microbatches here, Transformer Engine's weight cache)."""
    ctx = _ctx("current")
    fixed = ctx.gpu.kernel_fixed_s
    plain_fwd, plain_bwd = _cast(ctx, routed=False)  # same bytes, an ordinary linear layer
    fwd, bwd = _cast(ctx, routed=True)
    assert bwd - plain_bwd == pytest.approx(23 * fixed, rel=1e-9)
    assert fwd - plain_fwd == pytest.approx(23 * fixed * (1 + 1 / 4), rel=1e-9)


def test_delayed_scaling_and_other_expert_kernels_add_nothing() -> None:
    for ctx in (_ctx("delayed"), _ctx("current", expert_mlp="grouped_mm")):
        assert _cast(ctx, routed=True) == _cast(ctx, routed=False)
