"""Weight-streaming (memory-bound) GEMMs on Hopper and the A100 80 GB at their measured latency and bandwidth
(``curves.HOPPER_GEMM_STREAM``, ``curves.AMPERE_GEMM_STREAM``, ``kernels.gemm_kernel_time``), checked against the
kernel times they come from: an H200 run of ours, and published cuBLAS times on an A100."""

import json
from pathlib import Path

import numpy as np
import pytest

from shardplan.costmodel.core.kernels import compute_time, gemm_time, kernel_time
from shardplan.hardware.catalog import get_system
from shardplan.hardware.curves import AMPERE_GEMM_STREAM, HOPPER_GEMM_STREAM, KERNEL_FIXED_S

RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "results" / "h200_run1.json"
A100 = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "published" / "a100_decode_gemms.json"
A100_L2_BYTES = 40e6  # A100 whitepaper: 40 MB L2
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


@pytest.mark.parametrize(("system", "dtype", "n", "k", "fixed", "frac", "bandwidth", "stream_us", "copy_us"), [
    # H100, M = 1, 1280×8192 (Llama-3.1-70B's TP-8 QKV): 10.6 µs + 21.0 MB / (0.813 · 3.35 TB/s) = 18.3 µs, where a
    # copy of the same bytes is priced at 12.4 µs
    ("dgx-h100", "bf16", 1280, 8192, 10.6e-6, 0.813, 3.35e12, 18.3, 12.4),
    # A100 80 GB, M = 1, 28672×4096 (Llama-3.1-8B's gate/up at TP 1): 4 µs + 234.9 MB / (0.726 · 2.039 TB/s) =
    # 162.7 µs; the copy curve (0.87 of the bandwidth at this size, plus 4 µs) had priced it 136.7 µs
    ("dgx-a100-80gb", "fp16", 28672, 4096, 4e-6, 0.726, 2.039e12, 162.7, 136.7),
])
def test_a_weight_stream_pays_the_gemm_latency_and_rate_by_hand(system: str, dtype: str, n: int, k: int, fixed: float,
                                                                 frac: float, bandwidth: float, stream_us: float,
                                                                 copy_us: float) -> None:
    gpu = get_system(system).gpu
    nbytes = _bytes(1, n, k)
    t = float(gemm_time(gpu, np.array(2.0 * n * k), np.array(nbytes), dtype, m=1, n=n, k=k))
    assert t == pytest.approx(fixed + nbytes / (frac * bandwidth), rel=1e-6)
    assert t * 1e6 == pytest.approx(stream_us, abs=0.05)
    assert float(kernel_time(gpu, np.array(0.0), np.array(nbytes), dtype)) * 1e6 == pytest.approx(copy_us, abs=0.1)


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


def _a100_rows() -> list[tuple[int, int, int, float]]:
    """(M, N, K, seconds) of the published A100 80 GB fp16 GEMMs whose weights exceed the L2."""
    rows = json.loads(A100.read_text())["rows"]
    return [(r["m"], r["n"], r["k"], r["us"] * 1e-6) for r in rows if 2.0 * r["n"] * r["k"] > A100_L2_BYTES]


def test_the_a100_fraction_is_the_least_squares_fit_of_the_published_decode_gemms_at_the_kernel_fixed_time() -> None:
    """Both published sources (BitBLAS's artifact at M = 1, vLLM layer benchmarks at M = 1…64), 62 rows; the
    intercept is the per-kernel fixed time (the data cannot fix it: alone, each source puts it at 9.4 or 4.3 µs)."""
    rows = _a100_rows()
    assert len(rows) == 62 and {m for m, *_ in rows} == {1, 4, 8, 16, 32, 48, 64}
    fixed, frac = AMPERE_GEMM_STREAM
    assert fixed == KERNEL_FIXED_S
    b = np.array([_bytes(m, n, k) for m, n, k, _ in rows])
    t = np.array([t for *_, t in rows]) - fixed
    assert 1.0 / ((b @ t) / (b @ b) * 2.039e12) == pytest.approx(frac, abs=0.0005)
    for source in ("bitblas", "vllm-layers"):  # each source alone: (intercept, fraction) far apart
        alone = [r for r in json.loads(A100.read_text())["rows"]
                 if r["source"] == source and 2.0 * r["n"] * r["k"] > A100_L2_BYTES]
        a = np.array([[1.0, _bytes(r["m"], r["n"], r["k"])] for r in alone])
        (c, _), *_ = np.linalg.lstsq(a, np.array([r["us"] * 1e-6 for r in alone]), rcond=None)
        assert c * 1e6 == pytest.approx({"bitblas": 9.4, "vllm-layers": 4.3}[source], abs=0.05)


def test_a100_prices_every_published_decode_gemm_within_ten_percent() -> None:
    """Every fitted row within −8…+10% (the two harnesses differ by ~15% at equal bytes)."""
    gpu = get_system("dgx-a100-80gb").gpu
    errs = []
    for m, n, k, measured in _a100_rows():
        t = float(gemm_time(gpu, np.array(2.0 * m * n * k), np.array(_bytes(m, n, k)), "fp16", m=m, n=n, k=k))
        errs.append(t / measured - 1)
    assert -0.09 < min(errs) < -0.07 and 0.09 < max(errs) < 0.10


def test_a_weight_stream_is_never_faster_than_a_copy_of_its_bytes() -> None:
    """Below ~50 MB the A100's stream (4 µs + bytes at 0.726) would undercut the copy curve (whose fraction falls
    with size): there the GEMM costs the copy, as before. 4.2 MB (512×4096): copy 7.6 µs, stream 6.8 µs → 7.6 µs."""
    gpu = get_system("dgx-a100-80gb").gpu
    for n, k in ((512, 4096), (1024, 8192), (2048, 8192), (28672, 4096)):
        nbytes, flops = _bytes(1, n, k), 2.0 * n * k
        copy = float(kernel_time(gpu, np.array(flops), np.array(nbytes), "fp16"))
        t = float(gemm_time(gpu, np.array(flops), np.array(nbytes), "fp16", m=1, n=n, k=k))
        stream = KERNEL_FIXED_S + nbytes / (0.726 * 2.039e12)
        assert t == pytest.approx(max(copy, stream), rel=1e-9)
    small = _bytes(1, 512, 4096)
    assert float(kernel_time(gpu, np.array(0.0), np.array(small), "fp16")) * 1e6 == pytest.approx(7.6, abs=0.05)
    assert (KERNEL_FIXED_S + small / (0.726 * 2.039e12)) * 1e6 == pytest.approx(6.8, abs=0.05)


def test_a_gpu_without_the_measurement_keeps_the_roofline() -> None:
    """The A100 40 GB states no GEMM stream: a decode GEMM is the copy-curve roofline plus the fixed time."""
    gpu = get_system("dgx-a100-40gb").gpu
    assert gpu.gemm_stream is None
    nbytes, flops = _bytes(1, 1280, 8192), 2.0 * 1280 * 8192
    assert float(gemm_time(gpu, np.array(flops), np.array(nbytes), "bf16")) == pytest.approx(
        float(kernel_time(gpu, np.array(flops), np.array(nbytes), "bf16")))


def test_the_measured_parts_carry_it_and_no_other_gpu_does() -> None:
    from shardplan.hardware.gpus import H20, H100_PCIE

    for name in ("dgx-h100", "hgx-h200", "dgx-h800"):
        assert get_system(name).gpu.gemm_stream == HOPPER_GEMM_STREAM, name
    assert get_system("dgx-a100-80gb").gpu.gemm_stream == AMPERE_GEMM_STREAM
    for name in ("dgx-a100-40gb", "dgx-b200", "gb200-nvl72", "gcp-t4", "mi300x-8"):
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
