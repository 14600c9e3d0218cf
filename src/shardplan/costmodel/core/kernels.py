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
