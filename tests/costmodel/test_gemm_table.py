"""GEMM time from a measured (M, N, K) grid (``core.gemm_shape.table_fraction``, ``hardware/gemm_data.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from shardplan.costmodel.core.gemm_shape import dtype_grid, table_fraction
from shardplan.costmodel.core.kernels import gemm_time
from shardplan.hardware.catalog import GPUS
from shardplan.hardware.curves import HOPPER_SUSTAINED_CLOCK
from shardplan.hardware.spec import GpuSpec

H100_MAMF = 794.5  # ml-engineering best-shape bf16 TFLOP/s, the plateau the H100 grid is read against


@pytest.mark.parametrize(("m", "n", "k", "tflops"), [
    # OpenXLA matmul_interpolator_data.h@71feeddf7cc3, sm_90, b = 1, bf16 (copied from the source file)
    (4096, 4096, 4096, 780.2), (1024, 4096, 2048, 639.1), (512, 2048, 256, 84.5), (2048, 1024, 1024, 386.8),
])
def test_grid_points_read_back_the_published_rates(m: int, n: int, k: int, tflops: float) -> None:
    assert float(table_fraction("xla-sm90", m, n, k)) * H100_MAMF == pytest.approx(tflops, rel=1e-6)


def test_k_beyond_the_grid_extends_the_affine_kernel_time() -> None:
    """2048×4096 at K = 2048 and 4096 runs 725.5 and 752.3 TFLOP/s: times 47.4 and 91.3 µs, a straight line in K
    whose value at K = 6144 is 135.3 µs, 762 TFLOP/s (hand calculation)."""
    mn = 2.0 * 2048 * 4096
    t2, t4 = mn * 2048 / 725.5e12, mn * 4096 / 752.3e12
    t6 = t4 + (t4 - t2)
    assert mn * 6144 / t6 / 1e12 == pytest.approx(762, abs=1)
    assert float(table_fraction("xla-sm90", 2048, 4096, 6144)) * H100_MAMF == pytest.approx(mn * 6144 / t6 / 1e12)


def test_between_grid_points_interpolates_in_log_dims() -> None:
    """M = 1448 ≈ √(1024·2048) sits halfway (in log2) between the 1024 and 2048 rows at N = K = 4096."""
    mid = float(table_fraction("xla-sm90", 2 ** 10.5, 4096, 4096)) * H100_MAMF
    assert mid == pytest.approx((751.9 + 752.3) / 2, rel=1e-6)


def test_grid_agrees_with_an_independent_h100_measurement() -> None:
    """zzc0721/torch-performance-test-data issue #79 (H100 80GB HBM3, torch 2.7.0+cu128): bf16 4096³ 788.72 and
    8192³ 797.51 TFLOP/s; the grid (4096³ measured, 8192³ read from its batched rows and extended in K, 791.6, below
    the best-shape cap) within 2%."""
    assert float(table_fraction("xla-sm90", 8192, 8192, 8192)) < 1.0
    assert float(table_fraction("xla-sm90", 4096, 4096, 4096)) * H100_MAMF == pytest.approx(788.72, rel=0.02)
    assert float(table_fraction("xla-sm90", 8192, 8192, 8192)) * H100_MAMF == pytest.approx(797.51, rel=0.02)


def test_grid_shape_replaces_the_flops_curve_where_m_grows() -> None:
    """At N = K = 4096 the grid runs M = 1024 at 0.95 of M = 4096 (752 vs 780 TFLOP/s), where a FLOPs-keyed curve
    gives a 4× larger GEMM a much higher rate: the planner gains little from a larger microbatch once the output
    fills the GPU."""
    f = table_fraction("xla-sm90", np.array([1024.0, 4096.0, 16384.0]), 4096, 4096)
    assert f[0] / f[1] == pytest.approx(751.9 / 780.2, rel=1e-6)
    assert 1.0 <= f[2] / f[1] <= 1.05


def test_h100_gemm_runs_at_the_grid_rate_and_the_sustained_clock() -> None:
    """A 4096³ bf16 GEMM on the H100: 2·4096³ FLOPs at 780.2 TFLOP/s × 1575/1980 (the clock a 700 W Hopper sustains
    in a job, DeepGEMM issue #120), plus the 4 µs every kernel pays; the memory roofline is far below."""
    gpu = GPUS["h100-sxm"]
    m = n = k = 4096
    flops, nbytes = 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)
    expected = flops / (780.2e12 * HOPPER_SUSTAINED_CLOCK) + gpu.kernel_fixed_s
    assert float(gemm_time(gpu, flops, nbytes, "bf16", m=m, n=n)) == pytest.approx(expected, rel=0.01)


B200_FP8_MAMF = 3432.5  # ml-engineering best-shape fp8 (e4m3) TFLOP/s on B200, the plateau of the fp8 grid


@pytest.mark.parametrize(("m", "n", "k", "tflops"), [
    # OpenXLA xla/backends/gpu/cost_model/matmul_interpolator_data.h, sm_100, f8e4m3fn×f8e4m3fn→bf16 (copied from the
    # source file): b = 1 2048³ and 2048×4096×4096; b = 4 4096³ read as one 8192×8192 output
    (2048, 2048, 2048, 1427.7), (2048, 4096, 4096, 2491.3), (8192, 8192, 4096, 3279.7),
])
def test_b200_fp8_grid_reads_back_the_published_rates(m: int, n: int, k: int, tflops: float) -> None:
    assert dtype_grid("xla-sm100", "fp8") == "xla-sm100-fp8"
    assert float(table_fraction("xla-sm100-fp8", m, n, k)) * B200_FP8_MAMF == pytest.approx(tflops, rel=1e-3)


def test_fp8_gains_over_bf16_on_b200_are_the_measured_ones_by_shape() -> None:
    """On B200 an fp8 GEMM of 2048³ runs 1427.7 TFLOP/s where bf16 runs 985.8 (1.45×), and of 2048×1024×1024 504.5
    where bf16 runs 496.1 (1.02×) — not the 2× of the peaks. The model's kernel times (less the fixed per-kernel
    time) keep those ratios; a datatype with no grid of its own (fp4 on B200) reads the bf16 grid."""
    gpu = GPUS["b200"]
    for (m, n, k), gain in (((2048, 2048, 2048), 1427.7 / 985.8), ((4096, 512, 1024), 510.3 / 490.6)):
        flops = 2.0 * m * n * k
        t = {dt: float(gemm_time(gpu, flops, e * (m * k + k * n) + 2.0 * m * n, dt, m=m, n=n, k=k))
             - gpu.kernel_fixed_s for dt, e in (("bf16", 2.0), ("fp8", 1.0))}
        assert t["bf16"] / t["fp8"] == pytest.approx(gain, rel=0.005)
    assert dtype_grid("xla-sm100", "fp4") == "xla-sm100" and dtype_grid("xla-sm90", "bf16") == "xla-sm90"


def test_parts_without_a_grid_keep_the_flops_curve() -> None:
    """The H100 PCIe and the H20 (other clocks and SM counts) are not priced from the SXM grid."""
    assert GPUS["h100-pcie"].gemm_shape_table is None and GPUS["h20"].gemm_shape_table is None
    assert GPUS["h200-sxm"].gemm_shape_table == "xla-sm90" and GPUS["gb200"].gemm_shape_table == "xla-sm100"


def test_time_never_falls_with_k_and_the_rate_stays_in_range() -> None:
    """The H100 grid's 256×256 cell runs 31.9 TFLOP/s at K = 2048 and 90.9 at 4096 (another kernel): more work may
    not take less time, and K beyond the grid extends at no more than the best-shape rate (review of wave 8: the raw
    line reached zero time near K = 8.9k)."""
    k = np.array([256.0, 1024, 2048, 4096, 8192, 9000, 16384, 65536, 1e6])
    for name in ("xla-sm90", "xla-sm100"):
        for m, n in ((256, 256), (256, 400), (512, 256), (4096, 4096), (100, 7168)):
            f = table_fraction(name, m, n, k)
            assert np.all((f > 0) & (f <= 1))
            t = k / f  # time per (m·n) output at each K, in units of the best-shape rate
            assert np.all(np.diff(t) >= -1e-9 * t[1:])


def test_expert_gemms_read_the_grid_at_their_own_k() -> None:
    """64 routed rows over 256 experts (fewer rows than experts): each expert's GEMM is read at K = 7168, not at the
    K its FLOPs imply once its rows are floored at one."""
    gpu = GPUS["h100-sxm"]
    m, n, k, e = 64.0, 2048.0, 7168.0, 256.0
    flops, nbytes = 2.0 * m * n * k, 2.0 * (m * k + e * k * n + m * n)
    with_k = float(gemm_time(gpu, flops, nbytes, "bf16", experts=e, m=m, n=n, k=k))
    one = float(gemm_time(gpu, flops / e, nbytes / e, "bf16", m=m / e, n=n, k=k))
    assert with_k == pytest.approx(e * one)


def test_unknown_grid_name_is_rejected() -> None:
    spec = GPUS["h100-sxm"].model_dump()
    spec["gemm_shape_table"] = "sm_42"
    with pytest.raises(ValidationError, match="gemm_shape_table"):
        GpuSpec(**spec)


def test_shape_cache_is_exact_and_survives_being_emptied(monkeypatch) -> None:
    """The per-process cache of grid reads returns the uncached read's floats, also in the call that empties it (one
    shape already cached, two new ones, the cache at its bound)."""
    import numpy as np

    from shardplan.costmodel.core import gemm_shape as G

    monkeypatch.setattr(G, "_CACHE", {})
    monkeypatch.setattr(G, "_CACHE_MAX", 3)
    G.table_fraction("xla-sm90", np.array([4096.0]), np.array([4096.0]), np.array([4096.0]))
    G.table_fraction("xla-sm90", np.array([512.0, 1024.0]), np.array([3072.0, 3072.0]), np.array([4096.0, 4096.0]))
    m, n, k = np.array([4096.0, 700.0, 9000.0]), np.array([4096.0, 1536.0, 2048.0]), np.array([4096.0, 100.0, 512.0])
    got = G.table_fraction("xla-sm90", m, n, k)
    assert np.array_equal(got, G._read("xla-sm90", m, n, k))
