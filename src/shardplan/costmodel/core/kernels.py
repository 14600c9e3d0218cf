"""Time of one kernel by roofline: the slower of compute and memory traffic, plus the fixed time every kernel pays
(``GpuSpec.kernel_fixed_s``: launch, first memory round trips, last wave's drain), never below the launch floor;
achievable fractions of peak depend on the kernel's size (data in the GPU preset).

Every function takes numpy arrays (or scalars) and broadcasts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardplan.costmodel.core.gemm_shape import dtype_gemm_ratio, grid_fraction, shape_factor
from shardplan.errors import ShardplanError
from shardplan.hardware.spec import AttentionCurve, GpuSpec

# GEMM efficiency carries the tile/wave fill of the GEMM's (M, N) shape (``core.gemm_shape``) when the GPU states its
# SM count. Off: on ``shardplan validate`` it moved korthikanti-t5 MAPE 1.73 → 2.12%, korthikanti-t4 2.65 → 2.86%,
# narayanan 7.71 → 7.76%, modern 16.56 → 16.91% (the H100 MoE records furthest), so the FLOPs-only curve stays.
GEMM_SHAPE_TERM = False

# Row tile of torch._grouped_mm's small-problem kernel on Hopper (64×128×128, ping-pong; 128×256×64 for large
# problems): pytorch aten/src/ATen/native/cuda/GroupMM.cu ``dispatch_bf16_grouped_kernel_on_tile_size``.
GROUPED_TILE_ROWS = 64.0

# FlashAttention-2 reaches ~73% of A100 peak forward and ~63% backward (Dao 2023, arXiv 2307.08691 §4.1):
# backward runs at 0.86 of the forward efficiency.
FLASH_BWD_EFFICIENCY_RATIO = 0.86
# Triton FlashAttention (llm-foundry's attn_impl 'triton': flash-attn's flash_attn_triton.py, on triton-pre-mlir).
# "FlashAttention-2 is around 1.3-1.5x faster than FlashAttention in Triton in the forward pass and around 2x faster
# in the backward pass" (Dao 2023, arXiv 2307.08691 §4.1, A100 80GB, head dim 64/128, causal and not): measured
# against OpenAI Triton's fused attention (the paper's script, flash-attn c082294
# benchmarks/benchmark_flash_attention.py, times triton.ops.flash_attention), the kernel flash_attn_triton.py started
# from ("We use the FlashAttention implementation from Phil Tillet as a starting point"), so a proxy for it. Its own
# docstring agrees in size: forward faster than FlashAttention(-1), backward slower, "overall ... slightly slower",
# with FlashAttention-2 1.7-3.0x FlashAttention (the same §4.1): these factors give 1.8x over a forward and backward.
# The forward takes the middle of its range. Both are Ampere-style kernels (mma.sync, no Hopper wgmma/TMA), so the A100
# ratio is taken on Hopper.
TRITON_SLOWDOWN = (1.4, 2.0)


def interp_efficiency(points: list[tuple[float, float]], size: np.ndarray | float) -> np.ndarray:
    """Achieved fraction at ``size``: piecewise-linear in log(size) through ``points``, clamped at the ends."""
    xs = np.log(np.array([p[0] for p in points], dtype=float))
    ys = np.array([p[1] for p in points], dtype=float)
    return np.interp(np.log(np.maximum(np.asarray(size, dtype=float), 1.0)), xs, ys)


def compute_time(gpu: GpuSpec, flops: np.ndarray, dtype: str, *, efficiency: np.ndarray | float | None = None,
                 shape: np.ndarray | float = 1.0, of_plateau: np.ndarray | None = None) -> np.ndarray:
    """Seconds to execute ``flops`` of matrix work: FLOPs / (peak · achievable fraction). ``shape`` is a GEMM's
    tile and wave fill relative to the expected fill of its size (``gemm_shape.shape_factor``); it never lifts the
    fraction above the curve's plateau. ``of_plateau``: the GEMM's fraction of the plateau read from a measured
    (M, N, K) grid (``gemm_shape.table_fraction``), in place of the FLOPs curve."""
    flops = np.asarray(flops, dtype=float)
    if efficiency is None:
        curve = gpu.matmul_efficiency
        plateau = max(f for _, f in curve)
        base = np.minimum(interp_efficiency(curve, flops) * shape, plateau) if of_plateau is None \
            else np.asarray(of_plateau, dtype=float) * plateau
        eff = base * gpu.scales.gemm * dtype_gemm_ratio(gpu, dtype)
    else:  # attention kernels pass their own fraction
        eff = np.asarray(efficiency, dtype=float) * gpu.scales.attention
    # A calibration scale (hardware.spec.Calibration) never lifts a kernel above peak.
    return flops / (gpu.peak(dtype) * np.minimum(eff, 1.0))


def memory_time(gpu: GpuSpec, nbytes: np.ndarray) -> np.ndarray:
    """Seconds to stream ``nbytes`` through device memory: bytes / (bandwidth · achievable fraction)."""
    nbytes = np.asarray(nbytes, dtype=float)
    return nbytes / (gpu.memory_bandwidth_bytes_per_s * _bandwidth_fraction(gpu, gpu.memory_efficiency, nbytes))


def multi_tensor_time(gpu: GpuSpec, nbytes: np.ndarray) -> np.ndarray:
    """Seconds for the optimizer step's multi-tensor kernels to stream ``nbytes``: at the GPU's measured
    ``optimizer_bandwidth_fraction`` where it has one (times the calibration's elementwise scale), else as
    ``memory_time``."""
    if gpu.optimizer_bandwidth_fraction is None:
        return memory_time(gpu, nbytes)
    frac = min(gpu.optimizer_bandwidth_fraction * gpu.scales.elementwise, 1.0)
    return np.asarray(nbytes, dtype=float) / (gpu.memory_bandwidth_bytes_per_s * frac)


def _bandwidth_fraction(gpu: GpuSpec, curve: list[tuple[float, float]], nbytes: np.ndarray) -> np.ndarray:
    """Achieved fraction of memory bandwidth, times the calibration's elementwise scale, never above 1."""
    return np.minimum(interp_efficiency(curve, nbytes) * gpu.scales.elementwise, 1.0)


def with_launch(gpu: GpuSpec, work_s: np.ndarray) -> np.ndarray:
    """A kernel's time from its work: the work plus the fixed per-kernel time, at least the launch floor. A chain
    of small dependent kernels pays the fixed time once per kernel however little each one moves (a max with the
    floor alone would let a decode layer's dozen tiny kernels cost no more than one)."""
    return np.maximum(np.asarray(work_s, dtype=float) + gpu.kernel_fixed_s, gpu.kernel_launch_s)


def elementwise_time(gpu: GpuSpec, nbytes: np.ndarray) -> np.ndarray:
    """A framework elementwise kernel (norm, activation, dropout, softmax): bytes at its own achieved rate,
    with the launch floor."""
    nbytes = np.asarray(nbytes, dtype=float)
    curve = gpu.elementwise_efficiency or gpu.memory_efficiency
    t = nbytes / (gpu.memory_bandwidth_bytes_per_s * _bandwidth_fraction(gpu, curve, nbytes))
    return with_launch(gpu, t)


def kernel_time(gpu: GpuSpec, flops: np.ndarray, nbytes: np.ndarray, dtype: str, *,
                efficiency: np.ndarray | float | None = None, shape: np.ndarray | float = 1.0,
                of_plateau: np.ndarray | None = None, stream_share: float = 1.0,
                stream_cap: float | None = None) -> np.ndarray:
    """Roofline time of one kernel (torchao roofline_utils: max of compute and memory) with the per-kernel fixed
    time and launch floor (``with_launch``). A kernel measured below the roofline moves its bytes at
    ``stream_share`` of the streaming rate and at no more than ``stream_cap`` bytes/s."""
    t_c = compute_time(gpu, flops, dtype, efficiency=efficiency, shape=shape, of_plateau=of_plateau)
    t_m = memory_time(gpu, nbytes) / stream_share
    if stream_cap is not None:
        t_m = np.maximum(t_m, np.asarray(nbytes, dtype=float) / stream_cap)
    return with_launch(gpu, np.maximum(t_c, t_m))


def gemm_kernel_time(gpu: GpuSpec, flops: np.ndarray, nbytes: np.ndarray, dtype: str, *,
                     shape: np.ndarray | float = 1.0, of_plateau: np.ndarray | None = None) -> np.ndarray:
    """One GEMM kernel: its math with the fixed per-kernel time, or, where the GPU states how its GEMMs stream
    weights (``GpuSpec.gemm_stream``: a measured latency and fraction of bandwidth), that stream when it is slower,
    never faster than a copy of the same bytes (``kernel_time``'s memory side); elsewhere the roofline of
    ``kernel_time``."""
    copy = kernel_time(gpu, flops, nbytes, dtype, shape=shape, of_plateau=of_plateau)
    if gpu.gemm_stream is None:
        return copy
    fixed, frac = gpu.gemm_stream
    t_s = fixed + np.asarray(nbytes, dtype=float) / (gpu.memory_bandwidth_bytes_per_s
                                                      * min(frac * gpu.scales.elementwise, 1.0))
    return np.maximum(copy, t_s)


def gemm_time(gpu: GpuSpec, flops: np.ndarray, nbytes: np.ndarray, dtype: str, *,
              experts: np.ndarray | float = 1.0, sustained_flops: float | None = None,
              m: np.ndarray | float | None = None, n: np.ndarray | float | None = None,
              k: np.ndarray | float | None = None, one_kernel: bool = False,
              split_accumulate: bool = False) -> np.ndarray:
    """A linear layer's GEMM: roofline time. A grouped GEMM over ``experts`` weight matrices runs as that many
    GEMMs of one expert's share (its curve efficiency is that of the smaller GEMM, its launches one per expert:
    Transformer Engine's per-expert cuBLAS GEMMs); with ``one_kernel`` (a CUTLASS grouped GEMM scheduling every
    expert's tiles in one launch: ``torch._grouped_mm``) as one GEMM over all ``m`` rows, each expert's at least one
    row tile (``GROUPED_TILE_ROWS``), which is how it measures (benchmarks/gpu/RESULTS.md §4: measured time 0.88–1.07
    of that price over 36 shapes, up to 4.5× faster than per-expert GEMMs at 128 experts).
    Given the output shape (``m`` rows of all experts together, ``n`` columns; ``k`` the inner dimension, else
    FLOPs / (2·m·n)), a GPU with a measured GEMM grid
    (``GpuSpec.gemm_shape_table``, or its grid for ``dtype``: ``gemm_shape.dtype_grid``) runs each expert's GEMM at
    that grid's efficiency for its (M, N, K) shape (``gemm_shape.table_fraction``) times the in-job plateau
    (``split_accumulate``: a gradient GEMM, which Transformer Engine runs with fp8 split accumulation);
    otherwise the FLOPs curve (with the tile and wave fill of ``gemm_shape.shape_factor`` when ``GEMM_SHAPE_TERM``).
    ``sustained_flops`` caps the rate where a system states the GEMM rate it sustains (e.g. a T4 held at its power
    limit)."""
    flops = np.asarray(flops, dtype=float)
    if one_kernel:
        if m is not None:  # an expert with fewer rows than a tile still computes a whole tile
            rows = np.asarray(m, dtype=float)
            m = np.maximum(rows, GROUPED_TILE_ROWS * np.asarray(experts, dtype=float))
            flops = flops * m / np.maximum(rows, 1.0)
        experts = 1.0
    shape = shape_factor(gpu.sm_count if GEMM_SHAPE_TERM else None, m, n, experts)
    experts = np.maximum(np.asarray(experts, dtype=float), 1e-9)
    of_plateau = None
    if gpu.gemm_shape_table is not None and m is not None and n is not None:
        rows = np.maximum(np.asarray(m, dtype=float) / experts, 1.0)
        cols = np.maximum(np.asarray(n, dtype=float), 1.0)
        inner = flops / experts / (2.0 * rows * cols) if k is None else k
        of_plateau = grid_fraction(gpu, dtype, rows, cols, inner, split_accumulate=split_accumulate)
    t = experts * gemm_kernel_time(gpu, flops / experts, np.asarray(nbytes, dtype=float) / experts, dtype,
                                   shape=shape, of_plateau=of_plateau)
    if sustained_flops:
        t = np.maximum(t, np.asarray(flops, dtype=float) / sustained_flops)
    return t


def _curve(gpu: GpuSpec, kernel: str, direction: str, causal: bool, head_dim: float) -> AttentionCurve | None:
    """The measured curve of this kernel, direction and mask at the head dim nearest ``head_dim`` (log scale)."""
    cands = [c for c in gpu.attention_curves if (c.kernel, c.direction, c.causal) == (kernel, direction, causal)]
    if not cands:
        return None
    return min(cands, key=lambda c: (abs(np.log(c.head_dim / head_dim)), c.head_dim))


def _tflops(c: AttentionCurve, seq: np.ndarray) -> np.ndarray:
    """TFLOP/s at ``seq``: piecewise-linear in log(length), clamped at the measured ends."""
    return np.interp(np.log(np.maximum(seq, 1.0)), np.log(np.asarray(c.seq, dtype=float)), np.asarray(c.tflops))


def rate_of(kernel: str, backward: bool) -> tuple[str, float]:
    """The kernel whose measured rate prices ``kernel`` and the factor it runs slower by: the Triton kernel at
    FlashAttention-2's rate over ``TRITON_SLOWDOWN``, every other kernel at its own."""
    return ("flash2", TRITON_SLOWDOWN[int(backward)]) if kernel == "triton" else (kernel, 1.0)


# AttentionKernel.CUDNN_FP8 / CUDNN_MXFP8: cuDNN's rate times fp8_attention_ratio
FP8_ATTENTION = ("cudnn-fp8", "cudnn-mxfp8")


def outside_recipe(dtype: str) -> str:
    """The datatype of a matmul the fp8/fp4 recipe does not reach: 16 bit under an fp8 or fp4 recipe, the job's own
    otherwise. Transformer Engine's ``autocast`` is a state its own modules read (TransformerEngine@d0067d0
    ``pytorch/quantization.py`` ``autocast``); kernels outside them run on their bf16 inputs: Mamba-2's SSD scan
    (Triton, mamba_ssm ``mamba_chunk_scan_combined``, Megatron-LM@d98e8a6 ``core/ssm/mamba_mixer.py`` l.72), FLA's
    Gated DeltaNet kernels, ``torch.baddbmm`` in unfused attention, the router and the LM head."""
    return "bf16" if dtype in ("fp8", "fp4") else dtype


def attention_peak(gpu: GpuSpec, kernel: str, gemm_dtype: str) -> tuple[str, float]:
    """The datatype whose peak an attention kernel's rate is taken against, and the factor that turns a fraction of
    the bf16 peak into a fraction of it: fp8 attention (``cudnn-fp8``, ``cudnn-mxfp8``) against the fp8 peak, where
    the GPU has one (its measured rate can pass the bf16 peak); any other kernel in 16 bit under an fp8 or fp4 GEMM
    recipe."""
    if kernel in FP8_ATTENTION and "fp8" in gpu.peak_flops:
        return "fp8", gpu.peak("bf16") / gpu.peak("fp8")
    return outside_recipe(gemm_dtype), 1.0


def fp8_attention_reference(gpu: GpuSpec, kernel: str) -> str | None:
    """The GPU whose measured fp8 (``cudnn-fp8``) or MXFP8 (``cudnn-mxfp8``) attention prices ``gpu``: its own or its
    die's (``hardware.attention_data.FP8_ATTENTION_REFERENCE``); None where that kernel is not measured for its family
    (MXFP8 attention runs on Blackwell only: Transformer Engine turns it off below sm100)."""
    from shardplan.hardware.attention_data import FP8_ATTENTION_MS, FP8_ATTENTION_REFERENCE

    ref = FP8_ATTENTION_REFERENCE.get(gpu.name)
    return ref if ref in FP8_ATTENTION_MS.get(kernel, {}) else None


def check_fp8_attention(gpu: GpuSpec, kernel: str, dtype: str) -> None:
    """Refuse fp8 attention where it does not run or is not measured: Transformer Engine's fp8_dpa runs inside an fp8
    (or NVFP4) recipe's autocast, never under 16-bit GEMMs; MXFP8 attention needs Blackwell (TE turns its fused kernel
    off below sm100); other families have no measured rate."""
    if kernel not in FP8_ATTENTION:
        return
    if dtype not in ("fp8", "fp4"):
        raise ShardplanError(f"{kernel} needs dtype fp8 or fp4 (got {dtype})", field="attention")
    if fp8_attention_reference(gpu, kernel) is None:
        where = "Blackwell (b200, gb200, b300, gb300)" if kernel == "cudnn-mxfp8" else "Hopper and Blackwell"
        raise ShardplanError(f"{kernel} is measured on {where} GPUs only (got {gpu.name}): use --attention cudnn",
                             field="attention")


def fp8_attention_ratio(gpu: GpuSpec, *, backward: bool, seq: np.ndarray | float,
                        kernel: str = "cudnn-fp8") -> np.ndarray:
    """How much faster cuDNN's fused attention runs on fp8 (``cudnn-fp8``) or MXFP8 (``cudnn-mxfp8``) Q/K/V than on
    bf16 at length ``seq``: the measured time ratio (``hardware.attention_data.FP8_ATTENTION_MS``) on the GPU or the
    measured GPU of its die (``FP8_ATTENTION_REFERENCE``), piecewise-linear in log(length), clamped at the measured
    ends; 1 for a GPU of no measured family. Measured at head dim 128 under a causal mask; taken for every head dim
    and mask."""
    from shardplan.hardware.attention_data import FP8_ATTENTION_MS, FP8_ATTENTION_SEQ

    seq = np.asarray(seq, dtype=float)
    ref = fp8_attention_reference(gpu, kernel)
    if ref is None:
        return np.ones_like(seq)
    bf16, fp8 = FP8_ATTENTION_MS[kernel][ref]["bwd" if backward else "fwd"]
    ratio = np.asarray(bf16) / np.asarray(fp8)
    return np.interp(np.log(np.maximum(seq, 1.0)), np.log(FP8_ATTENTION_SEQ), ratio)


def attention_efficiency(gpu: GpuSpec, kernel: str, *, backward: bool, causal: bool, head_dim: float,
                         seq: np.ndarray | float, rescale: bool = True) -> np.ndarray | None:
    """Fraction of the BF16 peak one attention kernel reaches, from the GPU's measured curves; None when the GPU
    has none for ``kernel``. A backward curve missing for a mask or head dim is the forward curve scaled by the
    measured backward/forward ratio of the nearest head dim with both (non-causal). A curve measured at another head
    dim than ``head_dim`` (the Blackwell GPUs' are at 128 only) is scaled by the ratio the H100's curves show between
    the two (``head_dim_factor``; ``rescale=False``: the nearest curve as it is). The Triton kernel (``triton``) runs
    at FlashAttention-2's rate over ``TRITON_SLOWDOWN``; cuDNN on fp8 or MXFP8 (``cudnn-fp8``, ``cudnn-mxfp8``) at
    cuDNN's rate times ``fp8_attention_ratio``, so above 1 where fp8 runs faster than the bf16 peak allows."""
    seq = np.asarray(seq, dtype=float)
    if kernel in FP8_ATTENTION:
        eff = attention_efficiency(gpu, "cudnn", backward=backward, causal=causal, head_dim=head_dim, seq=seq,
                                   rescale=rescale)
        return None if eff is None else eff * fp8_attention_ratio(gpu, backward=backward, seq=seq, kernel=kernel)
    base, slower = rate_of(kernel, backward)
    if slower != 1.0:
        eff = attention_efficiency(gpu, base, backward=backward, causal=causal, head_dim=head_dim, seq=seq,
                                   rescale=rescale)
        return None if eff is None else eff / slower
    fwd = _curve(gpu, kernel, "fwd", causal, head_dim)
    if fwd is None:
        # measured under the other mask only (the Blackwell curves are causal): that rate × the H100's ratio between
        # the two masks for the same kernel, head dim and length (its forward curves have both)
        if not rescale or _curve(gpu, kernel, "fwd", not causal, head_dim) is None:
            return None
        other = attention_efficiency(gpu, kernel, backward=backward, causal=not causal, head_dim=head_dim, seq=seq)
        return None if other is None else other * mask_factor(kernel, causal=causal, head_dim=head_dim, seq=seq)
    t = _tflops(fwd, seq)
    if backward:
        bwd = _curve(gpu, kernel, "bwd", causal, head_dim)
        if bwd is not None and bwd.head_dim == fwd.head_dim:
            t = _tflops(bwd, seq)
        else:
            ref = _curve(gpu, kernel, "bwd", False, head_dim)
            if ref is None:
                return None
            base = _curve(gpu, kernel, "fwd", False, ref.head_dim)
            assert base is not None
            t = t * _tflops(ref, seq) / _tflops(base, seq)
    eff = t * 1e12 / gpu.peak("bf16")
    if rescale and fwd.head_dim != head_dim:  # measured at another head dim: the H100's ratio between the two
        eff = eff * head_dim_factor(kernel, backward=backward, causal=causal, head_dim=head_dim, seq=seq,
                                    have=float(fwd.head_dim))
    return eff


def attention_time(gpu: GpuSpec, flops: np.ndarray, nbytes: np.ndarray, dtype: str, *, backward: bool = False,
                   kernel: str = "flash", causal: bool = True, head_dim: float = 128.0,
                   seq: np.ndarray | float = 4096.0) -> np.ndarray:
    """A fused attention kernel: roofline at the efficiency measured for ``kernel`` at this head dim, mask and
    sequence length (``attention_efficiency``); a kernel the GPU has no curves for runs at the GPU's scalar
    ``attention_efficiency`` (backward at ``FLASH_BWD_EFFICIENCY_RATIO`` of it). fp8 GEMM recipes keep attention
    in 16-bit unless the kernel is ``cudnn-fp8`` or ``cudnn-mxfp8``, whose rate (a fraction of the bf16 peak that may
    pass 1) is taken against the fp8 peak (``attention_peak``)."""
    eff = attention_efficiency(gpu, kernel, backward=backward, causal=causal, head_dim=head_dim, seq=seq)
    if eff is None:
        base, slower = rate_of(kernel, backward)
        eff = gpu.attention_efficiency * (FLASH_BWD_EFFICIENCY_RATIO if backward else 1.0) \
            * head_dim_factor(base, backward=backward, causal=causal, head_dim=head_dim, seq=seq) / slower
        if kernel in FP8_ATTENTION:
            eff = eff * fp8_attention_ratio(gpu, backward=backward, seq=seq, kernel=kernel)
    dtype, to_peak = attention_peak(gpu, kernel, dtype)
    return kernel_time(gpu, flops, nbytes, dtype, efficiency=eff * to_peak)


def _h100_ratio(kernel: str, seq: np.ndarray | float, a: dict[str, Any], b: dict[str, Any]) -> np.ndarray:
    """The H100's measured rate of ``kernel`` (cuDNN where the H100 has none of that name) at settings ``a`` over
    its rate at ``b`` (``attention_efficiency`` keywords), at length ``seq``; 1 where either is unmeasured."""
    from shardplan.hardware.gpus import H100_SXM

    ref = kernel if any(c.kernel == kernel for c in H100_SXM.attention_curves) else "cudnn"
    at = [attention_efficiency(H100_SXM, ref, seq=seq, rescale=False, **kw) for kw in (a, b)]
    if at[0] is None or at[1] is None:
        return np.ones_like(np.asarray(seq, dtype=float))
    return np.asarray(at[0] / at[1], dtype=float)


def mask_factor(kernel: str, *, causal: bool, head_dim: float, seq: np.ndarray | float) -> np.ndarray:
    """A fused attention kernel's rate under mask ``causal`` over its rate under the other, as the H100's measured
    forward curves show it for the same kernel (cuDNN where the H100 has none of that name), head dim and length
    (FlashAttention-3 paper Figs. 5-6: cuDNN at head dim 128, 4096 tokens, causal 518 against non-causal 609)."""
    return _h100_ratio(kernel, seq, {"backward": False, "causal": causal, "head_dim": head_dim},
                       {"backward": False, "causal": not causal, "head_dim": head_dim})


def window_factor(gpu: GpuSpec, kernel: str, *, backward: bool, head_dim: float, seq: np.ndarray | float,
                  window: float | None, span: np.ndarray | float | None = None) -> np.ndarray:
    """A sliding-window kernel's rate over the same kernel's causal rate at the same length and head dim. Per 128-row
    query tile the kernel does fixed work t₀ and t_b per key block, over n(w) = w/128 + 1/2 blocks (the window and
    half the diagonal), so 1/R(w) = 1/R∞ + (n(w₀)/n(w))·(1/R(w₀) − 1/R∞): R∞ the causal rate (the GPU's curves), R(w₀)
    cuDNN's measured rate at a 128-key window (``hardware.attention_data.WINDOW_TFLOPS``, head dim 64: gpt-oss's
    layer) on the GPU or the measured GPU of its die (``WINDOW_REFERENCE``; others the H200's). The ratio at head dim
    64 stands for every head dim. 1 where the window spans the sequence or no curve prices the kernel.
    fp8 and MXFP8 kernels on a die with their windowed rates measured (``WINDOW_FP8_FWD_TFLOPS``: GB200, GB300): the
    forward as above at those rates; the backward runs every causal block, as measured (90.3 ms fp8 against 3.69 bf16
    at 32k tokens on a GB200), so its rate is the causal rate times the executed pairs' share, window over causal,
    of the whole sequence ``span`` (``seq`` is a context-parallel rank's kernel length; default: ``seq``)."""
    from shardplan.costmodel.core.operators import window_pairs
    from shardplan.hardware.attention_data import (
        FP8_ATTENTION_REFERENCE,
        WINDOW_FP8_FWD_TFLOPS,
        WINDOW_HEAD_DIM,
        WINDOW_MEASURED,
        WINDOW_REFERENCE,
        WINDOW_SEQ,
        WINDOW_TFLOPS,
    )
    from shardplan.hardware.gpus import GPUS

    seq = np.asarray(seq, dtype=float)
    if window is None:
        return np.ones_like(seq)
    fp8_ref = FP8_ATTENTION_REFERENCE.get(gpu.name) if kernel in FP8_ATTENTION else None
    fp8_measured = fp8_ref in WINDOW_FP8_FWD_TFLOPS.get(kernel, {})
    if fp8_measured and backward:  # every causal block, the window's pairs counted: executed pairs as core_attention
        s = np.asarray(seq if span is None else span, dtype=float)
        executed = (window_pairs(s, window=window) + 64.0 * s) / (s * s / 2 + 64.0 * s)
        return np.broadcast_to(np.where(window < s, executed, 1.0), np.broadcast(seq, s).shape).astype(float)
    ref = GPUS[fp8_ref] if fp8_measured else \
        GPUS[gpu.name if gpu.name in WINDOW_TFLOPS else WINDOW_REFERENCE.get(gpu.name, "h200-sxm")]
    causal = attention_efficiency(ref, kernel, backward=backward, causal=True, head_dim=WINDOW_HEAD_DIM, seq=seq)
    if causal is None:
        return np.ones_like(seq)
    measured = WINDOW_FP8_FWD_TFLOPS[kernel][ref.name] if fp8_measured else \
        WINDOW_TFLOPS[ref.name]["bwd" if backward else "fwd"]
    # the benchmark counts the window's pairs; the cost model prices the pairs the kernel executes, half a block more
    # per query (``training.layers.core_attention``): at that count the same time is a rate (w₀ + 64)/w₀ higher
    per_pair = (WINDOW_MEASURED + 64.0) / WINDOW_MEASURED
    at_w0 = np.interp(np.log(np.maximum(seq, 1.0)), np.log(WINDOW_SEQ), measured) * per_pair * 1e12 / ref.peak("bf16")

    def blocks(w: float) -> float:  # key blocks per 128-row query tile: the window and half the diagonal
        return w / 128.0 + 0.5

    inv = 1.0 / causal + blocks(WINDOW_MEASURED) / blocks(window) * np.maximum(1.0 / at_w0 - 1.0 / causal, 0.0)
    return np.where(window < seq, 1.0 / (causal * inv), 1.0)


def head_dim_factor(kernel: str, *, backward: bool, causal: bool, head_dim: float, seq: np.ndarray | float,
                    have: float = 128.0) -> np.ndarray:
    """How a head dim other than 128 changes a fused attention kernel's rate where the GPU has no measured curve for the
    kernel (its scalar ``attention_efficiency`` is a head-dim-128 figure): the ratio the H100's measured curves show
    for the same kernel (cuDNN where the H100 has none of that name), mask and length (FlashAttention-3 paper Figs.
    5-6, ``hardware/attention_data.py``), at the nearest measured head dim on a log scale (64, 128, 256: a step, not
    an interpolation). Backward takes the forward's ratio, as ``attention_efficiency`` derives it. At head dim 64 a
    tile does half the MMA work per exponential and per byte of K and V; on Blackwell "tensor core throughput
    doubles while other functional units (shared memory bandwidth, exponential units) scale more slowly or remain
    unchanged" (FlashAttention-4 paper, Zadouri et al., abstract), so the H100 ratio is a floor on the penalty
    there."""
    return _h100_ratio(kernel, seq, {"backward": backward, "causal": causal, "head_dim": head_dim},
                       {"backward": backward, "causal": causal, "head_dim": have})
