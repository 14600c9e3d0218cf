"""What a low-precision (fp8/fp4) training recipe stores per element: the datatypes it covers and the bytes of the
quantized copies Transformer Engine writes for a GEMM operand."""

from __future__ import annotations

import numpy as np

from shardplan.hardware.spec import GpuSpec

# Low-precision GEMM recipes keep activations, attention and everything outside the GEMMs in bf16.
LOW_PRECISION = ("fp8", "fp4")
# NVFP4 operands: E2M1 values plus one FP8 E4M3 scale per 16 (NVIDIA, "Pretraining LLMs with NVFP4", arXiv
# 2509.25149 §2): 4.5 bits per element.
NVFP4_BYTES = 4.5 / 8
MXFP8_SCALE_BYTES = 1 / 32  # one e8m0 scale per 32 elements (OCP Microscaling spec v1.0)


def quantized_copy_bytes(gpu: GpuSpec, dtype: str, scaling: str) -> float:
    """Bytes per element of the copies a cast to ``dtype`` writes: a row-wise one, and a column-wise one where that use
    needs its own (FP8 GEMMs in TN layout only, Hopper: a transposed copy; MXFP8 and NVFP4: scales along the other
    axis), one where per-tensor FP8 GEMMs take any layout (Blackwell, ``GpuSpec.fp8_any_layout``; TE quantizer.cpp
    ``nvte_is_non_tn_fp8_gemm_supported`` at d0067d0); ``scaling`` is the fp8 recipe (``SoftwareSpec.fp8_scaling``).
    Zero outside fp8/fp4."""
    if dtype not in LOW_PRECISION:
        return 0.0
    if dtype == "fp4":
        return 2 * NVFP4_BYTES
    if scaling == "mxfp8":
        return 2 * (1.0 + MXFP8_SCALE_BYTES)
    return 1.0 if gpu.fp8_any_layout else 2.0


def gathered_bytes(dtype: str, scaling: str, act_bytes: float, *, both_usages: bool = False) -> float:
    """Bytes per element a sequence-parallel all-gather of a GEMM input moves under ``dtype``'s recipe: Transformer
    Engine quantizes the input before gathering it (v2.7 ``layernorm_linear.py`` l.236-258: the norm output cast
    with the input quantizer, then ``gather_along_first_dim(..., quantizer=...)``; likewise the row-parallel output
    gradient; torchao's float8 TP the same, torchtitan ``docs/float8.md``), so per-tensor FP8 gathers one copy, 1 B
    (the transpose made locally after it). MXFP8 gathers its data with its scales, and where both usages travel
    (``both_usages``: the output gradient, for the data and the weight gradient, ``linear.py`` l.555, ``distributed.py``
    ``_all_gather_mxfp8``) both copies. 16-bit recipes move ``act_bytes``, and so does NVFP4 here (its gather path is
    not read)."""
    if dtype != "fp8":
        return act_bytes
    if scaling != "mxfp8":
        return 1.0
    return (2.0 if both_usages else 1.0) * (1.0 + MXFP8_SCALE_BYTES)


def amax_reduced(dtype: str, scaling: str) -> bool:
    """Whether a gathered GEMM input's cast waits for an all-reduce of its amax over the TP group: FP8 current
    scaling under sequence parallelism, so every rank casts its shard with one scale (TE v2.7 ``linear.py``
    l.1614-1621 input, l.1630-1637 output gradient; ``quantizer.cpp`` l.524-530 ``allreduce(MAX)``); delayed and
    block scaling need none (their scales are known before the cast, or local to a block)."""
    return dtype == "fp8" and scaling == "current"


def quantize_kernels(dtype: str, scaling: str) -> float:
    """Kernels Transformer Engine launches to quantize one tensor on its own: four under current scaling (the amax
    zeroed, the amax, the scale from it, the cast: ``Float8CurrentScalingQuantizer::quantize_impl`` in quantizer.cpp,
    ``nvte_compute_amax`` in common/recipe/current_scaling.cu, a memset at v2.7 and ``zero_amax_kernel`` at v2.13), one
    under delayed scaling or MXFP8 (the cast computes its own scales), two for NVFP4 (v2.13: an amax pass, then the
    cast; its random Hadamard and unaligned splits add more, not modelled)."""
    if dtype == "fp4":
        return 2.0
    return 4.0 if scaling == "current" else 1.0


def split_quantize_kernels(gpu: GpuSpec, dtype: str, scaling: str, splits: np.ndarray | float) -> np.ndarray:
    """Kernels Transformer Engine's ``GroupedLinear`` launches to quantize one activation or gradient cut into
    ``splits`` local-expert groups (``tex.split_quantize``, TE v2.7 and v2.13 ``pytorch/csrc/extensions/cast.cpp``):
    delayed-scaling FP8 that needs transposed copies (Hopper) fuses the groups into ``nvte_multi_cast_transpose``
    launches of up to 64 tensors each (``multi_tensor_quantize_impl``), NVFP4 into one grouped amax and one cast
    (v2.13 ``split_quantize_nvfp4_impl``); every other recipe quantizes each group on its own
    (``quantize_kernels``)."""
    groups = np.maximum(np.asarray(splits, dtype=float), 1.0)
    if dtype == "fp4":
        return np.full_like(groups, quantize_kernels(dtype, scaling))
    if scaling == "delayed" and not gpu.fp8_any_layout:
        return np.ceil(groups / 64.0)
    return quantize_kernels(dtype, scaling) * groups
