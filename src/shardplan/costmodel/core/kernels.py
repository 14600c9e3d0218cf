"""Time of one kernel by roofline: max(compute, memory traffic, launch floor), with achievable
fractions of peak that depend on the kernel's size (data in the GPU preset).

Every function takes numpy arrays (or scalars) and broadcasts.
"""

from __future__ import annotations

import numpy as np

from shardplan.hardware.spec import GpuSpec

# FlashAttention-2 reaches ~73% of A100 peak forward and ~63% backward (Dao 2023, arXiv 2307.08691 §4.1):
# backward runs at 0.86 of the forward efficiency.
FLASH_BWD_EFFICIENCY_RATIO = 0.86


def interp_efficiency(points: list[tuple[float, float]], size: np.ndarray | float) -> np.ndarray:
    """Achieved fraction at ``size``: piecewise-linear in log(size) through ``points``, clamped at the ends."""
    xs = np.log(np.array([p[0] for p in points], dtype=float))
    ys = np.array([p[1] for p in points], dtype=float)
    return np.interp(np.log(np.maximum(np.asarray(size, dtype=float), 1.0)), xs, ys)


def compute_time(gpu: GpuSpec, flops: np.ndarray, dtype: str, *, efficiency: np.ndarray | float | None = None
                 ) -> np.ndarray:
    """Seconds to execute ``flops`` of matrix work: FLOPs / (peak · achievable fraction)."""
    flops = np.asarray(flops, dtype=float)
    eff = interp_efficiency(gpu.matmul_efficiency, flops) if efficiency is None else efficiency
    return flops / (gpu.peak(dtype) * eff)


def memory_time(gpu: GpuSpec, nbytes: np.ndarray) -> np.ndarray:
    """Seconds to stream ``nbytes`` through device memory: bytes / (bandwidth · achievable fraction)."""
    nbytes = np.asarray(nbytes, dtype=float)
    return nbytes / (gpu.memory_bandwidth_bytes_per_s * interp_efficiency(gpu.memory_efficiency, nbytes))


def elementwise_time(gpu: GpuSpec, nbytes: np.ndarray) -> np.ndarray:
    """A framework elementwise kernel (norm, activation, dropout, softmax): bytes at its own achieved rate,
    with the launch floor."""
    nbytes = np.asarray(nbytes, dtype=float)
    curve = gpu.elementwise_efficiency or gpu.memory_efficiency
    t = nbytes / (gpu.memory_bandwidth_bytes_per_s * interp_efficiency(curve, nbytes))
    return np.maximum(t, gpu.kernel_launch_s)


def kernel_time(gpu: GpuSpec, flops: np.ndarray, nbytes: np.ndarray, dtype: str, *,
                efficiency: np.ndarray | float | None = None) -> np.ndarray:
    """Roofline time of one kernel (torchao roofline_utils: max of compute, memory and launch floor)."""
    t_c = compute_time(gpu, flops, dtype, efficiency=efficiency)
    t_m = memory_time(gpu, nbytes)
    return np.maximum(np.maximum(t_c, t_m), gpu.kernel_launch_s)


def gemm_time(gpu: GpuSpec, flops: np.ndarray, nbytes: np.ndarray, dtype: str, *,
              experts: np.ndarray | float = 1.0, sustained_flops: float | None = None) -> np.ndarray:
    """A linear layer's GEMM: roofline time. A grouped GEMM over ``experts`` weight matrices runs as that many
    GEMMs of one expert's share (its efficiency is that of the smaller GEMM). ``sustained_flops`` caps the rate
    where a system states the GEMM rate it sustains (e.g. a T4 held at its power limit)."""
    experts = np.maximum(np.asarray(experts, dtype=float), 1e-9)
    t = experts * kernel_time(gpu, np.asarray(flops, dtype=float) / experts, np.asarray(nbytes, dtype=float)
                              / experts, dtype)
    if sustained_flops:
        t = np.maximum(t, np.asarray(flops, dtype=float) / sustained_flops)
    return t


def attention_time(gpu: GpuSpec, flops: np.ndarray, nbytes: np.ndarray, dtype: str, *,
                   backward: bool = False) -> np.ndarray:
    """A fused attention kernel (flash): roofline at the GPU's attention efficiency; the backward kernel runs
    at ``FLASH_BWD_EFFICIENCY_RATIO`` of it. fp8 GEMM recipes keep attention in 16-bit."""
    dtype = "bf16" if dtype == "fp8" else dtype
    eff = gpu.attention_efficiency * (FLASH_BWD_EFFICIENCY_RATIO if backward else 1.0)
    return kernel_time(gpu, flops, nbytes, dtype, efficiency=eff)
