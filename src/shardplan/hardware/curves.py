"""Achievable-efficiency curves and per-kernel constants shared by the GPU catalog (gpus.py, gpus_amd.py): data
with their sources, one place for each."""

from __future__ import annotations

Curve = list[tuple[float, float]]

# --- achievable-efficiency curves (data, shared by GPUs of one generation) -------------------------
# GEMM: fraction of dense peak vs FLOPs of one GEMM. Large-GEMM plateau: A100 ≈ 0.8 (cuBLAS bf16
# 8192³ ≈ 250 TFLOP/s), H100 0.78 (torchao roofline_utils.py, "pct_achievable_gemm_tops"; torchao's MI300X 0.47
# gave way to AMD's own MAF below).
# The Ampere curve is fitted to the Megatron-LM runs on Selene (Korthikanti et al. 2022 Tables 4-5,
# Narayanan et al. 2021 Tables 1-2; see shardplan/data/): 0.71 of peak at 1e11 FLOPs, 0.77 at 1e13.
AMPERE_MATMUL: Curve = [
    (1e7, 0.077), (1e8, 0.24), (1e9, 0.48), (1e10, 0.634), (1e11, 0.71), (1e12, 0.749), (1e13, 0.768),
]
# Hopper, one GEMM alone: torchao's 0.78 plateau for large GEMMs; below ~1e11 FLOPs the shape fitted to the H100
# Megatron/NeMo runs of shardplan/data/modern_training_runs.json (small GEMMs leave Hopper's tensor cores idle).
HOPPER_MATMUL_ISOLATED: Curve = [
    (1e7, 0.04), (1e8, 0.128), (1e9, 0.304), (1e10, 0.464), (1e11, 0.56), (1e12, 0.76), (1e13, 0.78),
]
# Streaming kernels: fraction of peak HBM bandwidth vs bytes moved (torchao: 0.92 on H100, 0.72 MI300X).
HBM_MEMORY: Curve = [(1e5, 0.10), (1e6, 0.35), (1e7, 0.70), (1e8, 0.85), (1e9, 0.90)]
# Framework elementwise kernels (PyTorch eager / Megatron fused layernorm, bias-dropout-add, masked
# softmax, GeLU): 0.70 of peak bandwidth for large tensors, fitted to the 22B layer times of Korthikanti
# et al. 2022 Table 4 (fwd 7.7 ms, 7.2 ms with sequence parallelism) with the Ampere GEMM curve; the same
# fraction fits the H100 Megatron/NeMo runs (shardplan/data/modern_training_runs.json).
EAGER_ELEMENTWISE: Curve = [(1e5, 0.078), (1e6, 0.27), (1e7, 0.55), (1e8, 0.66), (1e9, 0.70)]


def scaled_curve(curve: Curve, plateau: float) -> Curve:
    """The same curve shape with its largest fraction moved to ``plateau`` (every point scaled alike)."""
    top = max(f for _, f in curve)
    return [(x, min(1.0, f * plateau / top)) for x, f in curve]


# GEMMs inside a training or serving job vs the best isolated GEMM (MAMF, docs/physics_sources.md [MLE]): on A100 the
# curve fitted to the Megatron-LM runs plateaus at 0.768 of peak where the isolated best reaches 0.869 (MAMF 271.2
# TFLOP/s): in a job, GPUs run at their power limit for hours with other kernels and communication beside the GEMMs
# (sustained clocks: DeepGEMM issue #120 sees H800 clocks fall from 1980 to 1575 MHz under compute + communication).
# GPUs with only isolated measurements and no sustained-clock measurement (GB300, AMD, the H100 PCIe and H20)
# take the same ratio: plateau = MAMF × 0.884 (GB200 is measured against a B200 on one job: gpus.py).
IN_JOB_OF_ISOLATED = 0.768 / 0.869
HOPPER_MATMUL: Curve = scaled_curve(HOPPER_MATMUL_ISOLATED, 0.803 * IN_JOB_OF_ISOLATED)  # H100 MAMF 0.803
# The SM clock a Hopper SXM die (700 W) sustains in a job over the boost clock an isolated benchmark runs at:
# overlapping compute and communication pushes an H800 over its power limit and the core clock falls from 1980 to
# 1575 MHz (DeepGEMM issue #120); TileOPs' H200 CI (PR #1588) finds 1500 MHz, not 1830, the clock a 700 W H200
# sustains under full load. GPUs priced from a measured GEMM grid (gemm_data.py, kernel times at boost) run their
# GEMMs at this share of it; the curve below (its plateau) serves GEMMs whose shape is not known.
HOPPER_SUSTAINED_CLOCK = 1575 / 1980
HOPPER_SUSTAINED_MATMUL: Curve = scaled_curve(HOPPER_MATMUL_ISOLATED, 0.803 * HOPPER_SUSTAINED_CLOCK)
# The same for a 1000 W B200: kernels run back to back draw ~1000 W and the SM clock falls from 1965 to ~1580 MHz
# (flashinfer PR #2899, bf16 FA4 on B200: TFLOP/s 15% down over 100 iterations). GB200 (1200 W) runs 1.018× a B200
# on the same MLPerf job (gpus.GB200_OF_B200_SUSTAINED); the B300 (1100 W) takes the same clock drop, checked against a
# B200 on one job (gpus.B300); GB300 (1400 W) has no such measurement and keeps the A100-derived in-job ratio.
B200_SUSTAINED_CLOCK = 1580 / 1965
B200_SUSTAINED_MATMUL: Curve = scaled_curve(HOPPER_MATMUL_ISOLATED, 0.776 * B200_SUSTAINED_CLOCK)


# Fixed time every kernel pays beside its work: the α of a latency + bytes/bandwidth kernel model (launch to start,
# first DRAM round trips, last wave's drain). Taken as the launch latency, 4 µs: submitting one kernel through the
# CUDA runtime and driver takes ~4-6 µs (RTX 5070 Ti, "pegainfer (3): From Launch Overhead to CUDA Graph",
# susun-blog.com/blog/pegainfer-3-cuda-graph), which an engine without CUDA graphs (TensorRT-LLM's 2024 C++ runtime,
# NIM) pays per dependent kernel when the GPU waits on the host. Where the host runs ahead (training) the GPU-side
# cost of queued back-to-back kernels is smaller, so there it is an upper estimate (docs/physics_sources.md, wave 4).
KERNEL_FIXED_S = 4e-6
# L2 read bandwidth 5120 B/clk on A100 and H100 (A100 whitepaper; PMC10448217 Table 3: 7219 GB/s at 1410 MHz on A100,
# 8986 GB/s at 1755 MHz on H100), shared out per enabled SM: what one SM streams when it works almost alone.
A100_SM_STREAM = 5120 * 1.41e9 / 108
H100_SM_STREAM = 5120 * 1.755e9 / 132


# The optimizer step's multi-tensor kernels (PyTorch fused AdamW, torch._foreach_norm / _copy_ / _zero_, the
# multi_tensor_apply pattern Megatron's fused Adam shares) stream at 0.72 of an H200's 4.8 TB/s, not the 0.90 one large
# copy reaches: on a 2e9-parameter fp32-master step, AdamW 16.1 ms for 56 GB (3.47 TB/s), gradient norm 2.38 ms for
# 8 GB, master-to-bf16 copy 3.47 ms for 12 GB, zeroing the fp32 gradients 2.27 ms for 8 GB (benchmarks/gpu/RESULTS.md,
# H200, torch 2.11, 2026-11-28). Taken for the Hopper SXM die and the GPUs priced from its spec (H100, H800, H200,
# H20: same SMs and kernels; the H100 PCIe keeps its memory curve). The gradient buffer's zeroing is priced at it too,
# as measured (``_foreach_zero_`` over 64 tensors); Megatron zeroes one contiguous buffer, which may stream faster.
HOPPER_OPTIMIZER_BANDWIDTH = 0.72
# A GEMM that streams its weights (memory-bound: decode, M ≤ 128) is slower than a copy of the same bytes: on an H200
# (torch 2.11 → cuBLAS, bf16, 12 shapes N×K = 1280×8192, 7168×8192, 28672×4096 at M = 1, 8, 32, 128;
# benchmarks/gpu/results/h200_run1.json "decode" rows, RESULTS.md §2) the times fit t = 10.6 µs + bytes / (0.813 ·
# 4.8 TB/s), each within −6…+7%, where the copy curve (HBM_MEMORY + KERNEL_FIXED_S) priced those at M ≤ 32 at 0.65–0.87
# of the measured time. Least squares over the 12 rows; tests/costmodel/test_gemm_stream.py refits them. Below the
# smallest (21 MB) the 10.6 µs is the fit's intercept, not a measurement. Taken for the H100, H800 and H200 SXM parts
# (132 SMs and the same cuBLAS kernels; the latency in seconds, the rate as a fraction of each part's own bandwidth);
# the H20 (SM count unpublished), the H100 PCIe and the other generations keep the copy curve (the A100 80 GB has its
# own, AMPERE_GEMM_STREAM), as does serving's fused MoE kernel (Triton/CUTLASS, not measured).
HOPPER_GEMM_STREAM = (10.6e-6, 0.813)
# The same on an A100 80 GB, from published cuBLAS fp16 times (benchmarks/gpu/published/a100_decode_gemms.json):
# BitBLAS's artifact, 13 shapes of 134 MB-1.6 GB at M = 1 (LeiWang1999/mlc-benchmark@6ed98c6 figures/data/
# a100_gemm.py l.5), and vLLM layer benchmarks, 7 shapes of 50-168 MB at M = 1-64 (robertgshaw2-neuralmagic/
# vllm-benchmarking@42d9b36 layer_benchmarking/results_a100/results.csv), the 62 rows whose weights exceed the 40 MB
# L2. They do not fix a latency (each source alone puts the intercept at 9.4 or 4.3 µs; both together at 1.1 µs, below
# any kernel's), so it is the fixed per-kernel time, KERNEL_FIXED_S, and the fraction their least squares given it:
# t = 4 µs + bytes / (0.726 · 2.039 TB/s), each row within -8...+10% (the two harnesses differ by ~15% at equal bytes).
# Taken for the A100 80 GB only: the 40 GB part's HBM2 was not measured.
AMPERE_GEMM_STREAM = (KERNEL_FIXED_S, 0.726)
