"""The kernels Transformer Engine's GroupedLinear launches to quantize a routed-expert GEMM's operands
(``quantization.split_quantize_kernels``, ``quantize_kernels``), counted by hand from TE's source at v2.7 and v2.13:
``tex.split_quantize`` fuses the groups into ``nvte_multi_cast_transpose`` launches of up to 64 tensors only for
delayed-scaling FP8 with transposed copies (``multi_tensor_quantize_impl``), NVFP4 into a grouped amax and one cast;
otherwise each group is quantized on its own, in four kernels under current scaling (``quantize_impl``: the amax
zeroed in ``nvte_compute_amax``, the amax, ``nvte_compute_scale_from_amax``, ``nvte_quantize_v2``). Each expert's
weight is quantized on its own (``get_weight_workspace``)."""

import numpy as np
import pytest

from shardplan.costmodel.core.operators import Gemm
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.quantization import split_quantize_kernels
from shardplan.hardware import get_system
from shardplan.models import get_model


@pytest.mark.parametrize(("system", "dtype", "scaling", "experts", "kernels"), [
    ("dgx-h100", "fp8", "current", 8, 32),  # zero, amax, scale, cast for each of 8 experts
    ("dgx-h100", "fp8", "delayed", 8, 1),  # one nvte_multi_cast_transpose over all 8
    ("dgx-h100", "fp8", "delayed", 128, 2),  # up to 64 tensors a launch
    ("dgx-b200", "fp8", "delayed", 8, 8),  # no transposed copy on Blackwell: not the fused path
    ("dgx-b200", "fp8", "mxfp8", 16, 16),
    ("dgx-b200", "fp4", "current", 16, 2),  # v2.13: grouped amax, then one fused cast
    ("dgx-h100", "fp8", "current", 1, 4),
])
def test_kernel_count_by_recipe(system: str, dtype: str, scaling: str, experts: int, kernels: int) -> None:
    assert float(split_quantize_kernels(get_system(system).gpu, dtype, scaling, experts)) == kernels


def _ctx(scaling: str, expert_mlp: str = "te_grouped", fp8_param_gather: bool = False) -> Ctx:
    base = get_system("dgx-h100")
    sw = base.software.model_copy(update={"fp8_scaling": scaling, "expert_mlp": expert_mlp,
                                          "fp8_param_gather": fp8_param_gather})
    system = base.model_copy(update={"software": sw})
    work = TrainWorkload(seq_len=4096, global_batch=4, dtype="fp8")
    return Ctx(get_model("qwen3-30b-a3b"), system, work, LayoutArrays.from_layouts([TrainLayout(microbatch=1)], 4))


def _cast(ctx: Ctx, routed: bool) -> tuple[float, float]:
    g = Gemm("moe.experts.fc1", np.array([4096.0 * 8]), 2048.0, 1536.0, 8.0, routed=routed)
    op = next(op for op in ctx.gemm(g) if op.name.endswith("_cast"))
    return float(op.time[0]), float(op.bwd_time[0])


def test_a_routed_gemm_pays_the_fixed_time_of_every_extra_kernel() -> None:
    """Eight local experts under current scaling: the output gradient in 32 kernels where one is priced for its
    bytes, so 31 more fixed times backward; forward the input's 32 and the weights' 4 × 8 once per step (four
    microbatches here, Transformer Engine's weight cache): 32 + 8 − 1 = 39."""
    ctx = _ctx("current")
    fixed = ctx.gpu.kernel_fixed_s
    plain_fwd, plain_bwd = _cast(ctx, routed=False)  # same bytes, an ordinary linear layer
    fwd, bwd = _cast(ctx, routed=True)
    assert bwd - plain_bwd == pytest.approx(31 * fixed, rel=1e-9)
    assert fwd - plain_fwd == pytest.approx(39 * fixed, rel=1e-9)


def test_fp8_primary_weights_need_no_weight_casts() -> None:
    """With fp8 primary weights (``fp8_param_gather``) the experts' weights arrive quantized: the input's 31 alone."""
    ctx = _ctx("current", fp8_param_gather=True)
    plain_fwd, _ = _cast(ctx, routed=False)
    fwd, _ = _cast(ctx, routed=True)
    assert fwd - plain_fwd == pytest.approx(31 * ctx.gpu.kernel_fixed_s, rel=1e-9)


def test_delayed_scaling_fuses_the_split_and_other_expert_kernels_add_nothing() -> None:
    """Delayed scaling on Hopper: one fused launch for the input (nothing more backward) and the 8 weight casts once
    per step (8 / 4 = 2 more kernels forward); torch._grouped_mm experts: no split quantization."""
    ctx = _ctx("delayed")
    fwd, bwd = _cast(ctx, routed=True)
    plain_fwd, plain_bwd = _cast(ctx, routed=False)
    assert bwd == plain_bwd and fwd - plain_fwd == pytest.approx(2 * ctx.gpu.kernel_fixed_s, rel=1e-9)
    ctx = _ctx("current", expert_mlp="grouped_mm")
    assert _cast(ctx, routed=True) == _cast(ctx, routed=False)
