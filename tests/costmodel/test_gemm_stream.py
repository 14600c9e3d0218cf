"""Weight-streaming (memory-bound) GEMMs on Hopper at their measured latency and bandwidth
(``curves.HOPPER_GEMM_STREAM``, ``kernels.gemm_kernel_time``), checked against the H200 kernel times they come from."""

import json
from pathlib import Path

import numpy as np
import pytest

from shardplan.costmodel.core.kernels import compute_time, gemm_time, kernel_time
from shardplan.hardware.catalog import get_system
from shardplan.hardware.curves import HOPPER_GEMM_STREAM, KERNEL_FIXED_S

RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "results" / "h200_run1.json"
SHAPES = {"llama8b.tp1.fc1": (28672, 4096), "llama70b.tp8.fc1": (7168, 8192), "llama70b.tp8.qkv": (1280, 8192)}


def _decode_rows(max_m: int = 128) -> list[tuple[int, int, int, float]]:
    """(M, N, K, seconds) of the run's decode GEMMs (bf16, cuBLAS through torch)."""
    rows = json.loads(RUN.read_text())["gemm"]
    return [(r["m"], *SHAPES[r["name"]], r["s"]) for r in rows if r["pass"] == "decode" and r["m"] <= max_m]


def _bytes(m: int, n: int, k: int) -> float:
    return 2.0 * (n * k + m * k + m * n)  # bf16 weights, input and output


def test_the_constants_are_the_least_squares_fit_of_the_measured_decode_gemms() -> None:
    """t = fixed + bytes / (fraction · 4.8 TB/s) over the 12 decode rows with M ≤ 128, refitted here."""
    rows = _decode_rows()
    assert len(rows) == 12
    a = np.array([[1.0, _bytes(m, n, k)] for m, n, k, _ in rows])
    (fixed, slope), *_ = np.linalg.lstsq(a, np.array([t for *_, t in rows]), rcond=None)
    h200 = get_system("hgx-h200").gpu
    assert fixed == pytest.approx(HOPPER_GEMM_STREAM[0], abs=0.1e-6)
    assert 1.0 / (slope * h200.memory_bandwidth_bytes_per_s) == pytest.approx(HOPPER_GEMM_STREAM[1], abs=0.002)


def test_h200_prices_every_measured_decode_gemm_within_eight_percent() -> None:
    gpu = get_system("hgx-h200").gpu
    for m, n, k, measured in _decode_rows():
        t = float(gemm_time(gpu, np.array(2.0 * m * n * k), np.array(_bytes(m, n, k)), "bf16", m=m, n=n, k=k))
        assert t == pytest.approx(measured, rel=0.08), (m, n, k)


def test_a_weight_stream_pays_the_gemm_latency_and_rate_by_hand() -> None:
    """H100, M = 1, N×K = 1280×8192 (Llama-3.1-70B's TP-8 QKV): 10.6 µs + 21.0 MB / (0.813 · 3.35 TB/s) = 18.3 µs,
    where a copy of the same bytes is priced at 12.4 µs."""
    gpu = get_system("dgx-h100").gpu
    nbytes = _bytes(1, 1280, 8192)
    t = float(gemm_time(gpu, np.array(2.0 * 1280 * 8192), np.array(nbytes), "bf16", m=1, n=1280, k=8192))
    assert t == pytest.approx(10.6e-6 + nbytes / (0.813 * 3.35e12), rel=1e-6)
    assert t * 1e6 == pytest.approx(18.3, abs=0.05)
    assert float(kernel_time(gpu, np.array(0.0), np.array(nbytes), "bf16")) * 1e6 == pytest.approx(12.4, abs=0.1)


def test_a_compute_bound_gemm_keeps_its_math_time() -> None:
    """M = N = K = 8192 on H100: the stream (10.6 µs + 403 MB at 0.813) is far below the math, so the time is the
    math at the measured grid plus the fixed per-kernel time, as before."""
    gpu = get_system("dgx-h100").gpu
    flops, nbytes = 2.0 * 8192**3, 3 * 2.0 * 8192**2
    t = float(gemm_time(gpu, np.array(flops), np.array(nbytes), "bf16", m=8192, n=8192, k=8192))
    from shardplan.costmodel.core.gemm_shape import dtype_grid, table_fraction

    frac = table_fraction(dtype_grid(gpu.gemm_shape_table, "bf16"), np.array(8192.0), np.array(8192.0),
                          np.array(8192.0))
    assert t == pytest.approx(float(compute_time(gpu, np.array(flops), "bf16", of_plateau=frac)) + KERNEL_FIXED_S)


def test_a_gpu_without_the_measurement_keeps_the_roofline() -> None:
    """The A100 states no GEMM stream: a decode GEMM is the copy-curve roofline plus the fixed time."""
    gpu = get_system("dgx-a100-80gb").gpu
    assert gpu.gemm_stream is None
    nbytes, flops = _bytes(1, 1280, 8192), 2.0 * 1280 * 8192
    assert float(gemm_time(gpu, np.array(flops), np.array(nbytes), "bf16")) == pytest.approx(
        float(kernel_time(gpu, np.array(flops), np.array(nbytes), "bf16")))


def test_the_hopper_sxm_parts_share_it_and_no_other_gpu_does() -> None:
    from shardplan.hardware.gpus import H20, H100_PCIE

    for name in ("dgx-h100", "hgx-h200", "dgx-h800"):
        assert get_system(name).gpu.gemm_stream == HOPPER_GEMM_STREAM, name
    for name in ("dgx-a100-80gb", "dgx-b200", "gb200-nvl72", "gcp-t4", "mi300x-8"):
        assert get_system(name).gpu.gemm_stream is None, name
    assert H20.gemm_stream is None and H100_PCIE.gemm_stream is None


def test_a_grouped_kernel_pays_the_latency_once_and_per_expert_gemms_each() -> None:
    """16 experts of 8 decode rows, N×K = 1536×4096 (bf16) on H100, both ways bound by the weights' stream: as 16
    cuBLAS GEMMs each pays 10.6 µs, as one grouped kernel (``one_kernel``) the 16 experts' stream pays it once."""
    gpu = get_system("dgx-h100").gpu
    fixed, frac = HOPPER_GEMM_STREAM
    m, n, k, e = 16 * 8, 1536, 4096, 16
    w = 2.0 * (e * n * k + m * k + m * n)
    flops = 2.0 * m * n * k
    per = float(gemm_time(gpu, np.array(flops), np.array(w), "bf16", experts=np.array(float(e)), m=m, n=n, k=k))
    one = float(gemm_time(gpu, np.array(flops), np.array(w), "bf16", experts=np.array(float(e)), m=m, n=n, k=k,
                          one_kernel=True))
    stream = w / (frac * gpu.memory_bandwidth_bytes_per_s)
    assert per == pytest.approx(e * fixed + stream, rel=1e-9)
    assert one == pytest.approx(fixed + stream, rel=1e-9)
