"""The shared operator inventory and the kernel physics behind it.

Independent sources: hand calculations of GEMM and attention FLOPs, the FlashAttention-3 paper's measured
H100 throughputs (docs/physics_sources.md §3), the measured best-matmul fractions per datatype, and the same
layer priced by two jobs (training and serving must agree on FLOPs: they read one inventory).
"""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core import operators as inv
from shardplan.costmodel.core.kernels import attention_efficiency, compute_time, dtype_gemm_ratio
from shardplan.costmodel.serving import layers as S
from shardplan.costmodel.training import layers as L
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model

H100 = get_system("dgx-h100").gpu


def _ctx(model: str, *, seq: int = 4096, tp: int = 1, cp: int = 1, attention: str | None = None) -> Ctx:
    rows = LayoutArrays.from_layouts([TrainLayout(tp=tp, dp=1, cp=cp, recompute=Recompute.NONE,
                                                  sequence_parallel=False)], global_batch=1)
    work = TrainWorkload(seq_len=seq, global_batch=1, attention=attention)
    return Ctx(get_model(model), get_system("dgx-h100"), work, rows)


def _flops(ops: list, kind: str) -> float:
    return float(sum(op.flops[0] for op in ops if op.kind == kind))


def test_gemm_flops_and_bytes_by_hand() -> None:
    g = inv.Gemm("x", 4096.0, 8192.0, 1024.0, experts=4.0)
    assert float(g.flops) == 2 * 4096 * 8192 * 1024
    # input 2 B, weights 1 B for each of 4 experts, output 2 B
    assert float(g.nbytes(2, 1, 2)) == 2 * 4096 * 8192 + 1 * 8192 * 1024 * 4 + 2 * 4096 * 1024


def test_llama_layer_gemm_flops_by_hand() -> None:
    """Llama-3.1-8B, 4096 tokens, TP 1: QKV (h→(32+2·8)·128), out (h→h), gate+up (h→2·14336), down."""
    T, h, ffn = 4096, 4096, 14336
    ctx = _ctx("llama-3.1-8b")
    attn = _flops(L.attention_ops(ctx), "gemm")
    mlp = _flops(L.mlp_ops(ctx), "gemm")
    assert attn == pytest.approx(2 * T * h * (32 + 16) * 128 + 2 * T * h * h)
    assert mlp == pytest.approx(2 * T * h * 2 * ffn + 2 * T * ffn * h)


def test_training_and_serving_price_the_same_gemms() -> None:
    """One inventory: a serving prefill chunk of T tokens runs the same GEMM FLOPs as a training forward of T."""
    T = 2048.0
    ctx = _ctx("llama-3.1-70b", seq=2048, tp=4)
    m = ctx.model
    one = np.array([1])
    sctx = S.InferCtx(model=m, system=ctx.system, tp=np.array([4]), pp=one, ep=one, weight_dtype="bf16",
                      kv_dtype="bf16", gemm_dtype="bf16")
    step = S.Step("prefill", np.array([T]), np.array([T * (T + 1) / 2]), np.array([T]), np.array([1.0]))
    for train, serve in ((L.attention_ops, S.attention_ops), (L.mlp_ops, S.mlp_ops)):
        assert _flops(train(ctx), "gemm") == pytest.approx(_flops(serve(sctx, step), "gemm"))
    # attention core: 2·pairs·heads·(d_qk + d_v) in both; the pair counts are each job's
    pairs = T * (T + 1) / 2
    assert _flops(S.attention_ops(sctx, step), "attn") == pytest.approx(2 * pairs * 64 / 4 * 256)


def test_attention_efficiency_is_the_measured_curve() -> None:
    """cuDNN causal forward, head dim 128, 8k tokens: 529 TFLOP/s on H100 (FA3 paper Fig. 5)."""
    eff = attention_efficiency(H100, "cudnn", backward=False, causal=True, head_dim=128, seq=8192)
    assert float(eff) == pytest.approx(529e12 / 989.4e12)
    # between measured lengths: linear in log(length) — 3k sits at log-weight ln(1.5)/ln(2) between 2k and 4k
    w = np.log(1.5) / np.log(2)
    mid = attention_efficiency(H100, "flash2", backward=False, causal=False, head_dim=128, seq=3072)
    assert float(mid) == pytest.approx(((1 - w) * 362 + w * 368) * 1e12 / 989.4e12)
    # measured backward (non-causal, hd 128) and the derived causal backward: bwd_nc × fwd_c / fwd_nc
    bwd = attention_efficiency(H100, "flash3", backward=True, causal=False, head_dim=128, seq=16384)
    assert float(bwd) == pytest.approx(561e12 / 989.4e12)
    bwd_c = attention_efficiency(H100, "flash3", backward=True, causal=True, head_dim=128, seq=16384)
    assert float(bwd_c) == pytest.approx(561 * 616 / 648 * 1e12 / 989.4e12)
    # FlashAttention-2 on Hopper reaches ~35% (FA3 paper abstract); cuDNN and FA3 well above it
    fa2, fa3 = (float(attention_efficiency(H100, k, backward=False, causal=True, head_dim=128, seq=16384))
                for k in ("flash2", "flash3"))
    assert 0.30 < fa2 < 0.36 < 0.6 < fa3
    # a GPU without curves (H20) or an unknown kernel falls back to the scalar
    assert attention_efficiency(get_system("hgx-h20").gpu, "cudnn", backward=False, causal=True, head_dim=128,
                                seq=4096) is None


def test_context_parallel_mixes_causal_and_full_blocks() -> None:
    """CP 4 on 32k tokens: kernels on 8k chunks, 1/4 of the pairs causal and 3/4 full (FLOP-weighted)."""
    ctx = _ctx("llama-3.1-8b", seq=32768, cp=4)
    flops, nbytes = np.array([1e12]), np.array([1.0])
    t = float(ctx.flash_time(flops, nbytes, backward=False)[0])
    ec = 529e12 / 989.4e12  # cuDNN causal at 8k
    ef = 600e12 / 989.4e12  # cuDNN non-causal at 8k
    assert t == pytest.approx(1e12 / 989.4e12 * (0.25 / ec + 0.75 / ef) + H100.kernel_fixed_s)  # one kernel


def test_stack_picks_the_kernel() -> None:
    """The DGX H100 preset runs Transformer Engine (cuDNN attention); FlashAttention-2 is slower on Hopper."""
    cudnn, fa2 = (float(sum(op.time[0] - H100.kernel_fixed_s for op in L.attention_ops(
        _ctx("llama-3.1-8b", seq=8192, attention=k)) if op.kind == "attn")) for k in (None, "flash2"))
    assert fa2 / cudnn == pytest.approx(529 / 333, rel=1e-6)  # the work, less the fixed time each kernel pays


def test_fp8_gemms_run_at_the_measured_fp8_fraction() -> None:
    """Best achievable matmul on H100: bf16 0.803 of 989.4, fp8 0.709 of 1978.9 (ml-engineering MAMF)."""
    assert dtype_gemm_ratio(H100, "fp8") == pytest.approx(0.709 / 0.803)
    assert dtype_gemm_ratio(H100, "bf16") == 1.0
    f = np.array(1e13)
    ratio = float(compute_time(H100, f, "bf16") / compute_time(H100, f, "fp8"))
    assert ratio == pytest.approx(1978.9 / 989.4 * 0.709 / 0.803)


def test_rotary_only_where_the_model_has_it() -> None:
    names = {op.name for op in L.attention_ops(_ctx("llama-3.1-8b"))}
    assert "attn.rope" in names
    rope = next(op for op in L.attention_ops(_ctx("llama-3.1-8b")) if op.name == "attn.rope")
    assert float(rope.nbytes[0]) == pytest.approx(4096 * (32 + 8) * 128 * 2 * 2)  # read+write Q and K, bf16
    assert "attn.rope" not in {op.name for op in L.attention_ops(_ctx("opt-13b", seq=2048))}
