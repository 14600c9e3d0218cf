"""The GPU and system catalogs: every entry validates, peaks match the published records, names resolve."""

from __future__ import annotations

import re

import pytest

from shardplan.errors import UnknownNameError
from shardplan.hardware import GPUS, SYSTEMS, GpuSpec, SystemSpec, get_gpu, get_system
from shardplan.hardware.catalog import generic_system
from shardplan.hardware.gpus import CDNA3_MATMUL, CDNA3_MEMORY, HBM_MEMORY, HOPPER_MATMUL, scaled_curve
from shardplan.units import GB, GiB, MiB

REQUIRED_GPUS = {
    "a100-sxm-40gb", "a100-sxm-80gb", "h100-sxm", "h100-pcie", "h800-sxm", "h200-sxm", "b200", "gb200", "l40s",
    "l4", "a10g", "t4", "v100-sxm2", "rtx3090", "rtx4090", "rtx-a6000", "mi250x", "mi300x", "mi325x", "mi355x",
}
REQUIRED_SYSTEMS = {
    "dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "dgx-h800", "hgx-h200", "dgx-b200", "gb200-nvl72", "mi300x-8",
    "mi325x-8", "mi355x-8", "gcp-t4", "a6000-ws", "rtx3090-pc", "rtx4090-pc", "l40s-8", "h100-pcie-8",
}

# Dense peaks (TFLOP/s) and HBM bandwidth (TB/s) copied from ../shared/reference/published_calibration.json,
# records of kind "hardware" (id → numbers). MI250X is catalogued per GCD: half the package record.
RECORDS: dict[str, tuple[str, dict[str, float], float | None]] = {
    "h100-sxm": ("hw-h100-sxm", {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, 3.35),
    "h100-pcie": ("hw-h100-pcie", {"bf16": 756.5, "fp8": 1513}, 2.0),
    "h200-sxm": ("hw-h200-sxm", {"bf16": 989.5, "fp8": 1979}, 4.8),
    "b200": ("hw-b200-hgx", {"bf16": 2250, "fp16": 2250, "fp8": 4500, "fp4": 9000}, 8.0),
    "gb200": ("hw-gb200", {"bf16": 2500, "fp16": 2500, "fp8": 5000, "fp4": 10000}, None),
    "a100-sxm-40gb": ("hw-a100-sxm-40gb", {"bf16": 312, "fp16": 312}, 1.555),
    "a100-sxm-80gb": ("hw-a100-sxm-80gb", {"bf16": 312, "fp16": 312}, 2.039),
    "l40s": ("hw-l40s", {"bf16": 362.05, "fp16": 362.05, "fp8": 733}, 0.864),
    "l4": ("hw-l4", {"bf16": 121, "fp8": 242.5}, 0.3),
    "t4": ("hw-t4", {"fp16": 65}, 0.32),
    "v100-sxm2": ("hw-v100-sxm2", {"fp16": 125}, 0.9),
    "rtx4090": ("hw-rtx4090", {"bf16": 165.2, "fp16": 165.2, "fp8": 330.3}, 1.008),
    "mi250x": ("hw-mi250x", {"bf16": 383.0 / 2, "fp16": 383.0 / 2}, 3.2 / 2),
    "mi300x": ("hw-mi300x", {"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}, 5.3),
    "mi325x": ("hw-mi325x", {"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}, 6.0),
    "mi355x": ("hw-mi355x", {"bf16": 2516.6, "fp16": 2516.6, "fp8": 5033.2, "fp4": 10066.4}, 8.0),
}
HAS_FP8 = {"h100-sxm", "h100-pcie", "h800-sxm", "h200-sxm", "h20", "b200", "gb200", "b300", "gb300", "l40s", "l4",
           "rtx4090", "mi300x", "mi325x", "mi355x", "mi350x"}
HAS_FP4 = {"b200", "gb200", "b300", "gb300", "mi355x", "mi350x"}
NO_INT8_TENSOR_CORES = {"v100-sxm2"}


def test_catalogs_hold_every_required_name():
    assert set(GPUS) >= REQUIRED_GPUS
    assert set(SYSTEMS) >= REQUIRED_SYSTEMS


@pytest.mark.parametrize("name", sorted(GPUS))
def test_gpu_validates_and_is_keyed_by_its_name(name: str):
    g = GPUS[name]
    assert GpuSpec.model_validate(g.model_dump()) == g
    assert g.name == name and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name)
    assert g.source, "every GPU names its source"
    assert g.peak("bf16") > g.peak("fp32") > 0


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_system_validates_and_is_keyed_by_its_name(name: str):
    s = SYSTEMS[name]
    assert SystemSpec.model_validate(s.model_dump()) == s
    assert s.name == name and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name)
    assert s.source and s.description
    assert s.gpu == GPUS[s.gpu.name], "systems use catalog GPUs"


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_peaks_equal_the_published_records(name: str):
    record_id, tflops, hbm_tbs = RECORDS[name]
    g = GPUS[name]
    assert record_id in g.source
    for dtype, value in tflops.items():
        assert g.peak_flops[dtype] == pytest.approx(value * 1e12, rel=1e-9), dtype
    if hbm_tbs is not None:
        assert g.memory_bandwidth_bytes_per_s == pytest.approx(hbm_tbs * 1e12, rel=1e-9)


@pytest.mark.parametrize("name", sorted(GPUS))
def test_low_precision_rates_only_where_the_hardware_has_them(name: str):
    dtypes = set(GPUS[name].peak_flops)
    assert ("fp8" in dtypes) == (name in HAS_FP8)
    assert ("fp4" in dtypes) == (name in HAS_FP4)
    assert ("int8" in dtypes) == (name not in NO_INT8_TENSOR_CORES)


def test_memory_is_what_the_driver_reports():
    # nvidia-smi / rocm-smi memory.total as printed on real machines
    assert GPUS["a100-sxm-80gb"].memory_bytes == 80 * GiB
    assert GPUS["h100-sxm"].memory_bytes == 81559 * MiB
    assert GPUS["h200-sxm"].memory_bytes == 143771 * MiB
    assert GPUS["b200"].memory_bytes == 183359 * MiB
    assert GPUS["t4"].memory_bytes == 15360 * MiB
    assert GPUS["mi300x"].memory_bytes == 205822885888
    assert GPUS["mi250x"].memory_bytes == 68702699520


def test_scaled_curve_moves_the_plateau_and_keeps_the_shape():
    c = scaled_curve(HOPPER_MATMUL, 0.47)
    assert [x for x, _ in c] == [x for x, _ in HOPPER_MATMUL]
    assert max(f for _, f in c) == pytest.approx(0.47)
    ratios = {round(f / g, 12) for (_, f), (_, g) in zip(c, HOPPER_MATMUL, strict=True)}
    assert len(ratios) == 1


def test_amd_curves_use_amds_max_achievable_flops():
    """AMD's MAF (ROCm blog 'Measuring Max-Achievable FLOPs - Part 2', Table 1): MI300X BF16 708, FP8 1273 TFLOP/s;
    MI325X BF16 843, FP8 1519 (higher power limit, higher sustained clocks); × the in-job ratio of A100's
    Megatron-fitted plateau 0.768 to its MAMF 0.869. MI355X (no MAF published) takes the MI325X's fractions;
    torchao's pct_achievable_mem_bw 0.72 for HBM."""
    in_job = 0.768 / 0.869
    assert max(f for _, f in CDNA3_MATMUL) == pytest.approx(708 / 1307.4 * in_job)
    assert max(f for _, f in CDNA3_MEMORY) == pytest.approx(0.72)
    assert GPUS["mi300x"].matmul_efficiency == CDNA3_MATMUL and GPUS["mi250x"].matmul_efficiency == CDNA3_MATMUL
    for name in ("mi325x", "mi355x"):
        assert max(f for _, f in GPUS[name].matmul_efficiency) == pytest.approx(843 / 1307.4 * in_job)
        assert GPUS[name].matmul_peak_fraction["fp8"] == pytest.approx(1519 / 2614.9)
    assert GPUS["mi300x"].matmul_peak_fraction["fp8"] == pytest.approx(1273 / 2614.9)
    for name in ("mi250x", "mi300x", "mi325x", "mi355x"):
        assert GPUS[name].memory_efficiency == CDNA3_MEMORY


def test_mi300x_all_reduce_matches_rccl_bus_bandwidth():
    """8× MI300X, 8 GB all-reduce: RCCL 2.22.3 bus bandwidth 316.82 GB/s (Azure ND MI300X v5 results): time =
    2·7/8·S / busbw, within the protocol's base latency."""
    from shardplan.costmodel.core import comm
    from shardplan.hardware import get_system

    s = 8e9
    t = float(comm.all_reduce_time(get_system("mi300x-8"), s, 8, 1))
    assert t == pytest.approx(2 * 7 / 8 * s / 316.82e9 + comm.SIMPLE_BASE_S + 14 * 10e-6, rel=1e-3)  # ring: 14 hops


def test_hopper_and_blackwell_share_one_curve_shape_at_their_own_in_job_plateaus():
    # plateau = isolated best GEMM (MAMF: H100 0.803, B200 0.776, GB200 0.729) × A100's in-job ratio 0.768 / 0.869;
    # the H100 SXM die priced from its measured GEMM grid runs at the clock a 700 W Hopper sustains, 1575/1980 MHz
    # (DeepGEMM issue #120), and its curve (GEMMs of unknown shape) keeps the same shape at that plateau
    for name in ("h100-sxm", "h800-sxm", "h200-sxm"):
        curve = GPUS[name].matmul_efficiency
        assert max(f for _, f in curve) == pytest.approx(0.803 * 1575 / 1980)
        assert {round(f / g, 12) for (_, f), (_, g) in zip(curve, HOPPER_MATMUL, strict=True)} == {
            round(1575 / 1980 / (0.768 / 0.869), 12)}
    for name in ("h100-pcie", "h20"):
        assert GPUS[name].matmul_efficiency == HOPPER_MATMUL
    assert max(f for _, f in HOPPER_MATMUL) == pytest.approx(0.803 * 0.768 / 0.869)
    # B200 at the clock a 1000 W B200 sustains (1580 of 1965 MHz, flashinfer PR #2899); GB200 (1200 W) at the B200's
    # sustained TFLOP/s times the two GPUs' measured ratio on one MLPerf v5.0 job (llama2_70b_lora, 8 GPUs, NGC 25.04:
    # median step 1.5127 s on DGX B200, 1.4864 s on GB200), as a fraction of its own 2,500 TFLOP/s bf16 peak
    gb200 = 0.776 * 1580 / 1965 * 2250 * (1.5127 / 1.4864) / 2500
    # B300 (1100 W): its own isolated best (0.786) at the B200's sustained clock; GB300 (1400 W, unmeasured) at A100's
    # in-job ratio
    for name, plateau in (("b200", 0.776 * 1580 / 1965), ("gb200", gb200), ("b300", 0.786 * 1580 / 1965),
                          ("gb300", 0.786 * 0.768 / 0.869)):
        curve = GPUS[name].matmul_efficiency
        assert max(f for _, f in curve) == pytest.approx(plateau)
        assert [x for x, _ in curve] == [x for x, _ in HOPPER_MATMUL]
        ratios = {round(f / g, 12) for (_, f), (_, g) in zip(curve, HOPPER_MATMUL, strict=True)}
        assert len(ratios) == 1
    # ml-engineering MAMF: GB200 1822.0 TFLOP/s at 1200 W is 4.4% above B200's 1745.0 (the datasheets differ by 11%);
    # the best-shape fractions keep that measured ratio, not the datasheet's
    gb200, b200 = GPUS["gb200"], GPUS["b200"]
    best = {g.name: g.matmul_peak_fraction["bf16"] * g.peak("bf16") for g in (gb200, b200)}
    assert best["gb200"] / best["b200"] == pytest.approx(1822.0 / 1745.0, rel=2e-3)
    for name in ("b200", "gb200", "h800-sxm", "h200-sxm", "h100-pcie"):
        assert GPUS[name].memory_efficiency == HBM_MEMORY


def test_links_carry_per_direction_bandwidth():
    assert SYSTEMS["dgx-h100"].intra_node.bandwidth_bytes_per_s == 450 * GB  # 900 GB/s bidirectional
    assert SYSTEMS["dgx-h800"].intra_node.bandwidth_bytes_per_s == 200 * GB  # 400 GB/s bidirectional
    assert SYSTEMS["dgx-b200"].intra_node.bandwidth_bytes_per_s == 900 * GB  # 1.8 TB/s bidirectional
    assert SYSTEMS["mi300x-8"].intra_node.bandwidth_bytes_per_s == 7 * 64 * GB  # 7 xGMI links to 7 peers
    assert SYSTEMS["dgx-h800"].inter_node.bandwidth_bytes_per_s == 50 * GB  # 400 Gb/s per GPU
    # GB200 NVL72 trays carry one ConnectX-7 (400 Gb/s) per GPU, GB300's a ConnectX-8 (800 Gb/s): MLPerf Training
    # v5.1 NVIDIA/systems tyche_* ("4x ConnectX-7 IB NDR 400 Gb/s") and theia_* ("4x ConnectX-8 IB XDR 800 Gb/s")
    assert SYSTEMS["gb200-nvl72"].inter_node.bandwidth_bytes_per_s == 50 * GB
    assert SYSTEMS["gb300-nvl72"].inter_node.bandwidth_bytes_per_s == 100 * GB
    assert SYSTEMS["gb200-nvl72"].gpus_per_node == 72
    for name in ("l40s-8", "h100-pcie-8"):
        assert SYSTEMS[name].intra_node.bandwidth_bytes_per_s <= 64 * GB, "PCIe-only GPU↔GPU"
    for s in SYSTEMS.values():
        assert 0.6 <= s.intra_node.efficiency <= 0.9


@pytest.mark.parametrize("name", ["gcp-t4", "a6000-ws", "rtx3090-pc", "rtx4090-pc"])
def test_single_gpu_machines_have_no_network(name: str):
    s = SYSTEMS[name]
    assert s.gpus_per_node == 1 and s.inter_node is None and s.max_nodes == 1
    assert s.disk_bytes > 0 and s.disk_read_bytes_per_s > 0 and s.disk_write_bytes_per_s > 0


def test_gcp_t4_is_flexgens_machine():
    # Sheng et al. 2023 §6: one T4 16GB, 208 GB DRAM, 1.5 TB SSD, ~2 GB/s read, ~1 GB/s write;
    # FlexGen cost_model.py: fitted CPU→GPU bandwidth 12.89 GiB/s on PCIe 3.0 x16.
    s = SYSTEMS["gcp-t4"]
    assert s.gpu.name == "t4"
    assert s.host_memory_bytes == 208 * GiB
    assert s.disk_read_bytes_per_s == 2 * GB and s.disk_write_bytes_per_s == 1 * GB
    assert s.pcie.effective_bytes_per_s == pytest.approx(12.89 * GiB, rel=0.01)


def test_a6000_workstation_as_specified():
    s = SYSTEMS["a6000-ws"]
    assert s.gpu.name == "rtx-a6000" and s.host_memory_bytes == 252 * GiB
    assert s.disk_read_bytes_per_s == 5.6 * GB and s.pcie.bandwidth_bytes_per_s == 32 * GB


def test_lookups_ignore_case_and_spaces():
    assert get_gpu(" H100-SXM ") is GPUS["h100-sxm"]
    assert get_system("DGX-H100") is SYSTEMS["dgx-h100"]


@pytest.mark.parametrize(("lookup", "typo", "expected"), [
    (get_gpu, "h100", "h100-sxm"),
    (get_gpu, "mi300", "mi300x"),
    (get_system, "dgx-h10", "dgx-h100"),
    (get_system, "gb200-nvl", "gb200-nvl72"),
])
def test_unknown_names_suggest_close_matches(lookup, typo: str, expected: str):
    with pytest.raises(UnknownNameError) as e:
        lookup(typo)
    msg = str(e.value)
    assert f"'{typo}'" in msg and "Did you mean" in msg and expected in msg
    assert "\n" not in msg


def test_generic_system_wraps_a_bare_gpu():
    s = generic_system(GPUS["l4"])
    assert s.gpu is GPUS["l4"] and s.gpus_per_node == 8 and s.name == "l4-generic"


# Datasheet system tables (whole system, * = with 2:4 sparsity) → dense per-GPU peaks: ÷ GPUs, * ÷ 2.
# NVIDIA HGX B300 (8 GPUs): FP4 108 PFLOPS dense, FP8 72*, BF16 36*, TF32 18*, INT8 2 POPS*, FP32 600 TFLOPS.
# NVIDIA GB300 NVL72 (72 GPUs): FP4 1,080 PFLOPS dense, FP8 720*, BF16 360*, TF32 180*, INT8 24 POPS*, FP32 6 PF.
# NVIDIA H20 product brief (one GPU, dense): FP8 296, BF16 148, TF32 74, FP32 44 TFLOPS, INT8 296 TOPS.
SYSTEM_TABLES = {
    "b300": (8, {"fp4": (108e15, False), "fp8": (72e15, True), "bf16": (36e15, True), "tf32": (18e15, True),
                 "int8": (2e15, True), "fp32": (600e12, False)}),
    "gb300": (72, {"fp4": (1080e15, False), "fp8": (720e15, True), "bf16": (360e15, True), "tf32": (180e15, True),
                   "int8": (24e15, True), "fp32": (6e15, False)}),
    "h20": (1, {"fp8": (296e12, False), "bf16": (148e12, False), "tf32": (74e12, False), "fp32": (44e12, False),
                "int8": (296e12, False)}),
}


@pytest.mark.parametrize("name", sorted(SYSTEM_TABLES))
def test_new_gpus_are_the_datasheet_tables_per_gpu(name: str):
    gpus, table = SYSTEM_TABLES[name]
    for dtype, (value, sparse) in table.items():
        assert GPUS[name].peak_flops[dtype] == pytest.approx(value / gpus / (2 if sparse else 1), rel=1e-3), dtype


def test_new_systems():
    from shardplan.hardware import SYSTEMS

    assert (SYSTEMS["dgx-b300"].gpu.name, SYSTEMS["dgx-b300"].gpus_per_node) == ("b300", 8)
    assert (SYSTEMS["gb300-nvl72"].gpu.name, SYSTEMS["gb300-nvl72"].gpus_per_node) == ("gb300", 72)
    assert (SYSTEMS["hgx-h20"].gpu.name, SYSTEMS["hgx-h20"].gpus_per_node) == ("h20", 8)
    # NVLink 5: 1.8 TB/s bidirectional per GPU = 900 GB/s each way; H20 NVLink 900 GB/s bidir = 450 GB/s.
    assert SYSTEMS["dgx-b300"].intra_node.bandwidth_bytes_per_s == 900e9
    assert SYSTEMS["hgx-h20"].intra_node.bandwidth_bytes_per_s == 450e9
    # 288 GB HBM3e at 8 TB/s per Blackwell Ultra GPU; 96 GB at 4.0 TB/s per H20.
    assert (GPUS["b300"].memory_bytes, GPUS["b300"].memory_bandwidth_bytes_per_s) == (288e9, 8e12)
    assert (GPUS["h20"].memory_bytes, GPUS["h20"].memory_bandwidth_bytes_per_s) == (96e9, 4e12)


def test_b300_nvfp4_gemm_runs_at_transformer_engines_measured_speedup():
    """Transformer Engine's GEMM benchmark on a B300 (gemm_profiling.rst at d0067d0, pre-quantized operands): a 5B
    layer's GEMMs take 13.102 ms in BF16 and 3.764 ms in NVFP4, 3.48× — not the 6× of the peaks. A large GEMM in the
    model keeps that ratio (quantization kernels are separate ops); fp8 at the B300's own best-shape 3353.3 TFLOP/s
    against 1769.0 bf16 (ml-engineering)."""
    from shardplan.costmodel.core.kernels import gemm_time

    gpu = GPUS["b300"]
    m, n, k = 15872, 16384, 4096
    flops, nbytes = 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)
    t = {d: float(gemm_time(gpu, flops, nbytes, d, m=m, n=n)) for d in ("bf16", "fp8", "fp4")}
    assert t["bf16"] / t["fp4"] == pytest.approx(13.102 / 3.764, rel=0.01)
    assert t["bf16"] / t["fp8"] == pytest.approx(3353.3 / 1769.0, rel=0.01)
    assert GPUS["gb300"].matmul_peak_fraction == GPUS["b300"].matmul_peak_fraction


@pytest.mark.parametrize("name", ["b200", "gb200"])
def test_b200_nvfp4_gemm_runs_at_vllms_measured_speedup(name: str):
    """vLLM PR #20646 (bench_nvfp4_gemm.py on an SM100 GPU, N=6144 K=4096, pre-quantized "nvfp4-noquant"): NVFP4
    3778.8 and 3904.3 TFLOP/s at M = 8192 and 16384 against torch bf16's 1421.0 and 1360.1 — 2.76× BF16 on average,
    not the 4× of the B200/GB200 peaks. A large GEMM in the model keeps that ratio on both parts (within the 4 µs
    every kernel pays beside its work, ~1% of this GEMM's NVFP4 time)."""
    from shardplan.costmodel.core.kernels import gemm_time

    m, n, k = 16384, 6144, 4096
    flops, nbytes = 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)
    t = {d: float(gemm_time(GPUS[name], flops, nbytes, d, m=m, n=n)) for d in ("bf16", "fp4")}
    assert t["bf16"] / t["fp4"] == pytest.approx((3778.8 / 1421.0 + 3904.3 / 1360.1) / 2, rel=0.02)


def test_mi350x_is_the_mi355x_die_at_its_lower_clock():
    # AMD: MI350X peak engine clock 2.2 GHz at 1000 W against the MI355X's 2.4 GHz at 1400 W, same CDNA4 package;
    # AMD's MI350X data sheet prints FP16/BF16 dense 2.3 PFLOPS
    mi350, mi355 = GPUS["mi350x"], GPUS["mi355x"]
    assert mi350.peak("bf16") == pytest.approx(2516.6e12 * 2.2 / 2.4)
    assert round(mi350.peak("bf16") / 1e15, 1) == 2.3
    assert mi350.memory_bytes == mi355.memory_bytes and mi350.memory_bandwidth_bytes_per_s == 8.0e12
    assert mi350.tdp_w == 1000
