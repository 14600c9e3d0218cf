"""Matmuls outside Transformer Engine's fp8 recipe (``kernels.outside_recipe``): under an fp8 job a batched matmul
(unfused attention's QKᵀ and scores·V, Mamba-2's SSD scan, Gated DeltaNet's core) runs in 16 bit, at the bf16 rate,
as the router and the LM head do. In today's models these are memory-bound, so the price only shows on a
compute-bound one."""

import numpy as np
import pytest

from shardplan.costmodel.core.kernels import kernel_time, outside_recipe
from shardplan.costmodel.offload.terms import FlexGenPricer
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model

FLOPS, BYTES = np.array([1e12]), np.array([1e6])  # 1 TFLOP over 1 MB: compute-bound on any GPU


def test_the_recipe_reaches_fp8_and_fp4_only() -> None:
    assert [outside_recipe(d) for d in ("fp8", "fp4", "bf16", "fp16", "fp32")] == [
        "bf16", "bf16", "bf16", "fp16", "fp32"]


@pytest.mark.parametrize("dtype", ["fp8", "fp4"])
def test_a_training_bmm_runs_at_the_bf16_rate_under_a_low_precision_recipe(dtype: str) -> None:
    system = get_system("dgx-b200")
    work = TrainWorkload(seq_len=4096, global_batch=1, dtype=dtype)
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, pp=1, dp=1, recompute=Recompute.NONE, zero_stage=1)], 1)
    op = Ctx(get_model("llama-3.1-8b"), system, work, rows).bmm("x", FLOPS, BYTES, selective=False)
    bf16 = float(kernel_time(system.gpu, FLOPS, BYTES, "bf16")[0])
    assert float(op.time[0]) == pytest.approx(bf16, rel=1e-12)
    assert bf16 > 1.9 * float(kernel_time(system.gpu, FLOPS, BYTES, dtype)[0])


def test_an_offload_bmm_runs_at_the_bf16_rate_under_fp8() -> None:
    system = get_system("dgx-h100")
    op = FlexGenPricer(get_model("llama-3.1-8b"), system, "fp8").bmm("x", FLOPS, BYTES, selective=False)
    assert float(op.time[0]) == pytest.approx(float(kernel_time(system.gpu, FLOPS, BYTES, "bf16")[0]), rel=1e-12)
