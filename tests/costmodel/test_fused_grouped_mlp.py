"""Transformer Engine's fused grouped MLP (``SoftwareSpec.expert_mlp`` 'fused_ops' with MXFP8 on Blackwell:
TransformerEngine@d0067d0 transformer_engine/pytorch/ops/fused/grouped_mlp.py ``_GroupedMLP_CuTeGEMMBase``, which
``is_supported`` only at compute capability 10 with block-scaled quantizers). FC1 is one grouped GEMM whose epilogue
applies the activation, the routing probabilities and FC2's input quantization; FC2's dgrad epilogue applies the
activation's backward and quantizes FC1's output gradient. So against Megatron-Core's TEGroupedMLP the activation
kernel is gone both ways, FC2's forward cast moves only its weight, FC1's backward cast nothing, and each expert GEMM
is one kernel over all local experts. On Hopper or per-tensor FP8 the op fuser keeps its separate kernels."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.stages import kind_costs
from shardplan.hardware import get_system
from shardplan.models import get_model

H, W, TOPK, E = 2048, 768, 8, 128  # Qwen3-30B-A3B: hidden, expert FFN width, top-k, experts


def _ctx(system: str, expert_mlp: str, scaling: str = "mxfp8", dtype: str = "fp8") -> Ctx:
    base = get_system(system)
    sw = base.software.model_copy(update={"expert_mlp": expert_mlp, "fp8_scaling": scaling,
                                          "moe_balanced_routing": True})
    work = TrainWorkload(seq_len=4096, global_batch=64, dtype=dtype)
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, pp=1, dp=8, ep=8, microbatch=2, zero_stage=1)], 64)
    return Ctx(get_model("qwen3-30b-a3b"), base.model_copy(update={"software": sw}), work, rows)


def _ops(ctx: Ctx) -> dict[str, object]:
    moe = kind_costs(ctx)["moe"]
    return {o.name: o for o in moe.fwd_ops + moe.bwd_ops}


def _f(x: object) -> float:
    return float(np.ravel(x)[0])


def test_fused_mlp_drops_the_activation_and_the_two_inner_casts() -> None:
    fused, unfused = _ops(_ctx("gb300-nvl72", "fused_ops")), _ops(_ctx("gb300-nvl72", "te_grouped"))
    assert "moe.experts.act" in unfused and "moe.experts.act" not in fused
    assert not any(name.startswith("moe.experts.act") for name in fused)
    m = 2 * 4096 * TOPK  # routed copies on one EP rank of 8 under balanced routing: all 128 experts' share
    per = 2.0 + 2 * (1.0 + 1 / 32)  # MXFP8: read 16-bit once, write row- and column-wise fp8 with e8m0 scales
    steps = 64 / (8 * 2)  # microbatches per step: the weight cast is spread over them
    weight = per * W * H * (E / 8) / steps
    fc2 = "moe.experts.fc2.fp8_cast"
    assert _f(unfused[fc2].nbytes) == pytest.approx(per * m * W + weight)
    assert _f(fused[fc2].nbytes) == pytest.approx(weight)  # FC2's input arrives quantized from FC1's epilogue
    fc1 = "moe.experts.fc1.fp8_cast"
    assert _f(unfused[fc1].bwd_time) > 0 and _f(fused[fc1].bwd_time) == 0.0  # FC2's dgrad epilogue quantizes it
    assert _f(fused[fc1].nbytes) == pytest.approx(_f(unfused[fc1].nbytes))  # FC1's own input is still cast


def test_fused_mlp_gemms_are_one_grouped_kernel_no_slower_than_per_expert_ones() -> None:
    fused, unfused = _ops(_ctx("gb300-nvl72", "fused_ops")), _ops(_ctx("gb300-nvl72", "te_grouped"))
    for name in ("moe.experts.fc1", "moe.experts.fc2"):
        assert _f(fused[name].flops) == pytest.approx(_f(unfused[name].flops))
        assert _f(fused[name].time) <= _f(unfused[name].time)


@pytest.mark.parametrize(("system", "scaling", "dtype"), [("dgx-h100", "mxfp8", "fp8"),  # no SM100
                                                           ("gb300-nvl72", "current", "fp8"),  # per-tensor FP8
                                                           ("gb300-nvl72", "mxfp8", "bf16")])
def test_without_sm100_block_scaling_the_op_fuser_keeps_its_kernels(system: str, scaling: str, dtype: str) -> None:
    fused = _ops(_ctx(system, "fused_ops", scaling, dtype))
    plain = _ops(_ctx(system, "te_grouped", scaling, dtype))
    assert "moe.experts.act" in fused
    assert {n: _f(o.time) for n, o in fused.items()} == {n: _f(o.time) for n, o in plain.items()}
