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


def split_quantize_kernels(gpu: GpuSpec, dtype: str, scaling: str, splits: np.ndarray | float) -> np.ndarray:
    """Kernels Transformer Engine's ``GroupedLinear`` launches to quantize one tensor cut into ``splits`` local-expert
    groups (``tex.split_quantize``, TE v2.7 and v2.13 ``pytorch/csrc/extensions/cast.cpp``). One fused kernel over
    all groups for delayed-scaling FP8 that needs transposed copies (``multi_tensor_quantize_impl``:
    ``nvte_multi_cast_transpose``, Hopper) and for NVFP4 (v2.13 ``split_quantize_nvfp4_impl``). Otherwise each group
    on its own: three kernels under current scaling (``Float8CurrentScalingQuantizer::quantize_impl`` in
    quantizer.cpp: amax, the scale from it, the cast), one under MXFP8 or delayed scaling."""
    if dtype == "fp4" or (scaling == "delayed" and not gpu.fp8_any_layout):
        return np.ones_like(np.asarray(splits, dtype=float))
    return (3.0 if scaling == "current" else 1.0) * np.maximum(np.asarray(splits, dtype=float), 1.0)
