"""GEMM tile and wave quantisation (costmodel.core.gemm_shape) against hand-counted tiles and waves."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core import kernels
from shardplan.costmodel.core.gemm_shape import expected_fill, reference_fill, shape_factor, slot_fill
from shardplan.costmodel.core.kernels import gemm_time, interp_efficiency
from shardplan.hardware.curves import HOPPER_MATMUL
from shardplan.hardware.gpus import A100_80GB
from shardplan.hardware.gpus import H100_SXM as H100_GRID

# The tile/wave correction of the FLOPs curve, on an H100 priced from that curve (the catalog's H100 reads its GEMMs
# from a measured (M, N, K) grid instead: tests/costmodel/test_gemm_table.py).
H100_SXM = H100_GRID.model_copy(update={"gemm_shape_table": None, "matmul_efficiency": HOPPER_MATMUL})


@pytest.fixture
def shape_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shape term is off by default (``kernels.GEMM_SHAPE_TERM``); these tests time GEMMs with it on."""
    monkeypatch.setattr(kernels, "GEMM_SHAPE_TERM", True)


def test_h100_4096_by_1024_hand_count() -> None:
    # 128×128 tiles: 32 × 8 = 256 tiles over 132 SMs = 2 waves of 264 slots → 256/264; 256×128: 16·8 = 128 tiles,
    # 1 wave of 132 slots → 128/132; 128×256: 32·4 = 128 tiles → 128/132. Best: 128/132.
    assert slot_fill(132, 4096, 1024) == pytest.approx(128 / 132)


def test_a100_2048_by_1024_hand_count() -> None:
    # A100, 108 SMs. 256×128: 8·8 = 64 tiles, one wave of 108 → 64/108; 128×256: 16·4 = 64 → 64/108;
    # 128×128: 16·8 = 128 tiles, 2 waves of 216 slots → 128/216. Best: 64/108 = 0.593.
    assert slot_fill(108, 2048, 1024) == pytest.approx(64 / 108)


def test_a100_tile_quantisation_hand_count() -> None:
    # A100, M = 3000 rows, N = 1000: 256×128 → ⌈3000/256⌉=12 × ⌈1000/128⌉=8 = 96 tiles (one wave of 108 slots,
    # 96·256·128 = 3,145,728 computed, 3,000,000 useful → fill 3e6 / (108·32768)); 128×256: 24·4 = 96 tiles, same
    # slots; 128×128: 24·8 = 192 tiles → 2 waves = 216·16384 slots. Best: 3e6 / 3,538,944.
    assert slot_fill(108, 3000, 1000) == pytest.approx(3e6 / (108 * 256 * 128))


def test_grouped_experts_share_waves() -> None:
    # 4 experts of 512 rows each, N = 1024 on H100: 128×128 → 4 · 4 · 8 = 128 tiles in one wave → 128/132. Four
    # separate kernels of 32 tiles would each fill 32/132 of the GPU.
    assert slot_fill(132, 2048, 1024, experts=4) == pytest.approx(128 / 132)
    assert slot_fill(132, 512, 1024) == pytest.approx(32 / 132)
    # per-expert tile quantisation: 4 experts of 100 rows each pad to 128 rows each (not 400 → 512 once)
    assert slot_fill(132, 400, 128, experts=4) == pytest.approx(400 * 128 / (132 * 128 * 128))


def test_expected_fill_is_the_mean_over_tile_counts() -> None:
    # brute force: tile counts spread evenly over one wave around w, each filling x / ⌈x⌉ of its slots
    for w in (0.3, 0.8, 1.0, 2.67, 6.4, 29.1):
        x = np.linspace(max(w - 0.5, 0.0), w + 0.5, 200001)[1:]
        brute = np.mean(x / np.ceil(x)) if w >= 0.5 else w
        assert expected_fill(w) == pytest.approx(brute, rel=1e-4)


def test_curve_scaled_by_fill_over_expected_fill(shape_on: None) -> None:
    # H100, M = N = K = 8448: 128×128 tiles 66·66 = 4356 = 33 whole waves (fill 1); the curve stands for GEMMs of
    # this output size whose tile count is unknown: expected fill over [32.5, 33.5] waves, by hand.
    side = 66 * 128
    flops = 2.0 * side**3
    assert slot_fill(132, side, side) == pytest.approx(1.0)
    exp = (33**2 - 32.5**2) / 66 + (33.5**2 - 33**2) / 68
    assert reference_fill(132, side, side) == pytest.approx(exp)
    assert shape_factor(132, side, side) == pytest.approx(1.0 / exp)
    gpu = H100_SXM
    eff = interp_efficiency(gpu.matmul_efficiency, flops) * gpu.scales.gemm
    assert gemm_time(gpu, flops, 0.0, "bf16") == pytest.approx(flops / (gpu.peak("bf16") * eff) + gpu.kernel_fixed_s)
    # whole waves run faster than the curve's average shape, capped at the curve's plateau
    plateau = max(f for _, f in gpu.matmul_efficiency) * gpu.scales.gemm
    eff_shape = min(eff / exp, plateau)
    assert gemm_time(gpu, flops, 0.0, "bf16", m=side, n=side) == pytest.approx(
        flops / (gpu.peak("bf16") * eff_shape) + gpu.kernel_fixed_s)


def test_curve_holds_on_average_over_shapes() -> None:
    # A100 and H100, M = 4096 tokens, N swept over every multiple of 64 from 2048 to 8192: the shape factor
    # averages to 1 within 2% (the curve was fitted to GEMMs of many shapes).
    n = np.arange(2048, 8193, 64, dtype=float)
    for sms in (108, 132):
        assert float(np.mean(shape_factor(sms, 4096.0, n))) == pytest.approx(1.0, abs=0.02)


def test_one_expert_gemm_each_by_default() -> None:
    # 16 experts of 512 rows, N = 1536 on H100, each its own GEMM: 128×128 → 4·12 = 48 tiles, one wave of 132
    # (fill 48/132); expected fill of 512·1536 outputs = 48 tiles' worth = 0.364 waves (below half a wave: itself).
    assert shape_factor(132, 16 * 512, 1536, experts=16) == pytest.approx(1.0)
    # 4 experts of 100 rows: each pads to 128 rows → fill 100·128 / (132·128·128); expected 100·128 / (128·128·132)
    assert shape_factor(132, 400, 128, experts=4) == pytest.approx(1.0)
    # 2048 × 1152 on H100: 144 tiles of 128×128 (2 waves) or 72 of 256×128 (1 wave of 132): fill 72/132 either way;
    # expected: 2048·1152 / (16384·132) = 1.0909 waves, window [0.5909, 1.5909] → (1 - a²)/2 + (b² - 1)/4
    w = 2048 * 1152 / (16384 * 132)
    a, b = w - 0.5, w + 0.5
    assert shape_factor(132, 2048, 1152) == pytest.approx((72 / 132) / ((1 - a * a) / 2 + (b * b - 1) / 4))


def test_partial_wave_is_slower_per_flop_than_full_waves(shape_on: None) -> None:
    # Same M and K: N = 640 leaves a partial wave whatever the tile (256×128: 16·5 = 80 tiles in one wave of 132;
    # 128×128: 160 tiles in 2 waves, the second 28/132 full → fill 0.606); N = 8448 fills 16 whole waves
    # (128×128: 32·66 = 2112 tiles = 16·132).
    gpu = H100_SXM
    k, m = 8192, 4096
    rate = []
    for n in (640, 8448):
        flops = 2.0 * m * k * n
        t = float(gemm_time(gpu, flops, 0.0, "bf16", m=m, n=n))
        rate.append(flops / t)
    assert rate[0] < 0.7 * rate[1]


def test_a100_reference_fill_below_one_wave() -> None:
    # 1000 × 1000 outputs on A100: 1e6 / (128·128·108) = 0.565 waves of 128×128 tiles; window [0.065, 1.065] spans
    # wave 1 (fill x) and a sliver of wave 2 (fill x/2): (1 - 0.065²)/2 + (1.065² - 1)/4
    w = 1e6 / (128 * 128 * 108)
    a, b = w - 0.5, w + 0.5
    assert reference_fill(108, 1000, 1000) == pytest.approx((1 - a * a) / 2 + (b * b - 1) / 4)


def test_shape_term_never_lifts_above_the_curve_plateau(shape_on: None) -> None:
    gpu = A100_80GB
    m = np.array([64.0, 2048.0, 16384.0])
    n = np.full(3, 128.0 * 108)
    flops = 2.0 * m * 64.0 * n  # shallow K: small FLOPs, many tiles
    t = gemm_time(gpu, flops, np.zeros(3), "bf16", m=m, n=n)
    plateau = max(f for _, f in gpu.matmul_efficiency)
    assert np.all(flops / (t - gpu.kernel_fixed_s) <= gpu.peak("bf16") * plateau * gpu.scales.gemm * (1 + 1e-9))


def test_switch_off_keeps_the_flops_curve() -> None:
    assert kernels.GEMM_SHAPE_TERM is False  # the default (see its comment for the validate figures)
    flops = 2.0 * 4096 * 8192 * 640
    assert gemm_time(H100_SXM, flops, 0.0, "bf16", m=4096, n=640) == pytest.approx(
        gemm_time(H100_SXM, flops, 0.0, "bf16"))
