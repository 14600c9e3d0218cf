"""What a low-precision (fp8/fp4) training recipe stores per element: the datatypes it covers and the bytes of the
quantized copies Transformer Engine writes for a GEMM operand."""

from __future__ import annotations

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
