"""The backward GEMMs at their own shapes and traffic (``Ctx.gemm_grads``), against measurement and hand counts.

dgrad computes dX = dY·Wᵀ (M×K over inner N), wgrad dW = Xᵀ·dY (K×N over the M tokens). Transformer Engine's GEMM
benchmark (docs/examples/gemm_profiling/gemm_profiling.rst at d0067d0, "Worked Example: 5B Model on H200",
pre-quantized table) times the three of each of a layer's four GEMMs separately on an H200 NVL at M = 15,872 tokens:
BF16 Fprop 10.632, Dgrad 10.747, Wgrad 10.530 ms; FP8 current scaling 5.577, 5.661, 5.547 ms. The wgrad writes
Megatron-Core's fp32 ``main_grad`` and reads it back on every microbatch after a step's first (Transformer Engine
``fuse_wgrad_accumulation``): 8 bytes per weight element, so with few tokens per expert it is bound by that traffic.
"""

import numpy as np
import pytest

from shardplan.costmodel.core.kernels import memory_time, with_launch
from shardplan.costmodel.core.operators import Gemm
from shardplan.costmodel.training.backward import backward
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.hardware.curves import HOPPER_GEMM_STREAM
from shardplan.models import get_model

M, H, FFN, QKV = 15872, 4096, 16384, 3 * 4096
FPROP = [(M, H, QKV), (M, H, H), (M, H, FFN), (M, FFN, H)]  # (M, K, N)
MEASURED_MS = {"bf16": (10.632, 10.747, 10.530), "fp8": (5.577, 5.661, 5.547)}


def _phase_ms(dtype: str) -> tuple[float, float, float]:
    """Fprop, dgrad and wgrad sums of the layer's four GEMMs as the training context prices them."""
    base = get_system("hgx-h200")
    system = base.model_copy(update={"software": base.software.model_copy(update={"fp8_scaling": "current"})})
    ctx = Ctx(get_model("llama-3.1-8b"), system, TrainWorkload(seq_len=512, global_batch=31, dtype=dtype),
              LayoutArrays.from_layouts([TrainLayout(microbatch=31)], 31))
    fwd = [op for m, k, n in FPROP for op in ctx.gemm(Gemm("g", np.array([float(m)]), float(k), float(n)))
           if not op.name.endswith("_cast")]
    bwd = backward(ctx, fwd)
    total = [sum(float(op.time[0]) for op in ops) for ops in
             (fwd, [o for o in bwd if o.name.endswith(".dgrad")], [o for o in bwd if o.name.endswith(".wgrad")])]
    return total[0] * 1e3, total[1] * 1e3, total[2] * 1e3


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_backward_gemms_match_transformer_engine_h200(dtype: str) -> None:
    """Each phase within 10% of TE's measured sum (the H200 measured is the 600 W NVL card, the preset the SXM): a
    check of the level only, which the forward's shape passed as well (at M = 15,872 the three shapes run within 1%
    on the grid, as measured within 2%); the hand counts below are what tell the two pricings apart."""
    for got, want in zip(_phase_ms(dtype), MEASURED_MS[dtype], strict=True):
        assert got == pytest.approx(want, rel=0.10)


def _expert_wgrad(microbatches: int) -> tuple[Ctx, float, float]:
    """Qwen3-235B-A22B's routed FC1 (hidden 4096 → 2·1536) on an H100 EP rank with 16 local experts of 512 token
    copies each (TP 4 × EP 8 in one node, one 4096-token sequence per microbatch): wgrad time and bytes."""
    model = get_model("qwen3-235b-a22b")
    work = TrainWorkload(seq_len=4096, global_batch=8 * microbatches, dtype="bf16", grad_dtype="fp32")
    rows = LayoutArrays.from_layouts([TrainLayout(tp=4, dp=8, ep=8, etp=1, microbatch=1)], 8 * microbatches)
    ctx = Ctx(model, get_system("dgx-h100"), work, rows)
    g = Gemm("moe.experts.fc1", np.array([8192.0]), 4096.0, 3072.0, experts=16.0, routed=True)
    op = backward(ctx, ctx.gemm(g))
    wgrad = next(o for o in op if o.name.endswith(".wgrad"))
    return ctx, float(wgrad.time[0]), float(wgrad.nbytes[0])


def test_expert_wgrad_traffic_by_hand() -> None:
    """Reads X (8192×4096) and dY (8192×3072) in bf16; writes the 16 experts' 4096×3072 gradients in fp32 and, on
    255 of 256 microbatches, reads them back: 2·8192·(4096 + 3072) + 4·(2 − 1/256)·16·4096·3072 bytes."""
    _, _, nbytes = _expert_wgrad(256)
    assert nbytes == pytest.approx(2 * 8192 * (4096 + 3072) + 4 * (2 - 1 / 256) * 16 * 4096 * 3072, rel=1e-12)
    _, _, one = _expert_wgrad(1)  # a single microbatch writes the gradient once
    assert one == pytest.approx(2 * 8192 * (4096 + 3072) + 4 * 16 * 4096 * 3072, rel=1e-12)


def test_small_expert_wgrad_is_bound_by_gradient_traffic() -> None:
    """512 tokens per expert: 2·512 FLOPs per 8-byte gradient element, below the H100's ridge (~295 FLOP/byte at
    989 TFLOP/s over 3.35 TB/s), so each of the 16 per-expert GEMMs (Transformer Engine's per-expert cuBLAS calls)
    takes its share of the traffic's time at the rate a Hopper GEMM streams (``curves.HOPPER_GEMM_STREAM``: 10.6 µs
    plus bytes at 0.813 of the bandwidth), longer than the forward GEMM's math."""
    ctx, t, nbytes = _expert_wgrad(256)
    fixed, frac = HOPPER_GEMM_STREAM
    per_expert = fixed + nbytes / 16 / (frac * ctx.gpu.memory_bandwidth_bytes_per_s)
    assert t == pytest.approx(16 * per_expert, rel=1e-9)
    assert per_expert > float(with_launch(ctx.gpu, memory_time(ctx.gpu, np.array([nbytes / 16])))[0])
    fwd = next(o for o in ctx.gemm(Gemm("moe.experts.fc1", np.array([8192.0]), 4096.0, 3072.0, experts=16.0,
                                        routed=True)))
    assert t > 1.2 * float(fwd.time[0])
