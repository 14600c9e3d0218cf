"""GPU catalog: memory, dense peak rates and achievable-efficiency curves, one validated spec per SKU.

Peaks are dense (no sparsity). Where a vendor prints only the with-sparsity figure, dense = sparse / 2
(the vendor footnote). bf16/fp16/fp8/fp4 and HBM numbers come from ``published_calibration.json``
(records of kind ``hardware``; each GPU's ``source`` names its record id); fp32/tf32/int8 come from the
same datasheet tables. ``memory_bytes`` is what the driver reports (``nvidia-smi``/``rocm-smi``
memory.total), not the marketing figure, because that is what a framework can allocate from.
"""

from __future__ import annotations

from shardplan.hardware.attention_data import (
    B200_ATTENTION,
    B300_ATTENTION,
    GB200_ATTENTION,
    GB300_ATTENTION,
    H100_ATTENTION,
)
from shardplan.hardware.curves import (  # noqa: F401  (re-exported: the catalog's curves live in curves.py)
    A100_SM_STREAM,
    AMPERE_GEMM_STREAM,
    AMPERE_MATMUL,
    B200_SUSTAINED_CLOCK,
    B200_SUSTAINED_MATMUL,
    EAGER_ELEMENTWISE,
    H100_SM_STREAM,
    HBM_MEMORY,
    HOPPER_GEMM_STREAM,
    HOPPER_MATMUL,
    HOPPER_MATMUL_ISOLATED,
    HOPPER_OPTIMIZER_BANDWIDTH,
    HOPPER_SUSTAINED_MATMUL,
    IN_JOB_OF_ISOLATED,
    KERNEL_FIXED_S,
    Curve,
    scaled_curve,
)
from shardplan.hardware.gpus_amd import (  # noqa: F401
    CDNA3_MATMUL,
    CDNA3_MEMORY,
    MI250X,
    MI300X,
    MI325X,
    MI350X,
    MI355X,
)
from shardplan.hardware.spec import GpuSpec
from shardplan.units import GB, TB, GiB, MiB

# --- NVIDIA Ampere ------------------------------------------------------------------------------
A100_80GB = GpuSpec(
    name="a100-sxm-80gb",
    memory_bytes=80 * GiB,  # nvidia-smi: 81920 MiB
    memory_bandwidth_bytes_per_s=2.039 * TB,
    peak_flops={"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12, "int8": 624e12},
    matmul_efficiency=AMPERE_MATMUL,
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,
    attention_efficiency=0.55,
    kernel_launch_s=4e-6,
    sm_count=108,  # A100 whitepaper: 108 SMs enabled of GA100's 128
    sm_stream_bytes_per_s=A100_SM_STREAM,
    kernel_fixed_s=KERNEL_FIXED_S,
    gemm_stream=AMPERE_GEMM_STREAM,  # published cuBLAS decode GEMMs on an A100 80 GB (curves.py)
    tdp_w=400,
    source="NVIDIA A100 datasheet r4 (published_calibration.json: hw-a100-sxm-80gb)",
)
A100_40GB = A100_80GB.model_copy(
    update={
        "name": "a100-sxm-40gb",
        "memory_bytes": 40 * GiB,  # nvidia-smi: 40960 MiB
        "memory_bandwidth_bytes_per_s": 1.555 * TB,
        "gemm_stream": None,  # measured on the 80 GB part's HBM2e: not transferred to the 40 GB part's HBM2
        "source": "NVIDIA A100 datasheet r4 (published_calibration.json: hw-a100-sxm-40gb)",
    }
)
# A10G: AWS-only variant of GA102; NVIDIA publishes no datasheet (the calibration record has no peaks).
# Rates from the A10G column of Baseten's "NVIDIA A10 vs A10G" spec table; 600 GB/s GDDR6 (AWS G5 page).
A10G = GpuSpec(
    name="a10g",
    memory_bytes=23028 * MiB,  # nvidia-smi on g5 instances (24 GB GDDR6)
    memory_bandwidth_bytes_per_s=600 * GB,
    peak_flops={"fp32": 31.52e12, "tf32": 35e12, "bf16": 70e12, "fp16": 70e12, "int8": 140e12},
    matmul_efficiency=AMPERE_MATMUL,
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,  # GDDR6 streaming measured near HBM fractions; no A10G curve of its own
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=300,
    source="Baseten 'NVIDIA A10 vs A10G for ML model inference' spec table; AWS EC2 G5 "
    "(published_calibration.json: hw-a10g, confidence C)",
)
# GA102 whitepaper appendix (RTX 3090): tensor rates with FP32 accumulate (the FP16-accumulate rate is 2×).
RTX3090 = GpuSpec(
    name="rtx3090",
    memory_bytes=24576 * MiB,  # nvidia-smi: 24576 MiB (24 GB GDDR6X)
    memory_bandwidth_bytes_per_s=936 * GB,
    peak_flops={"fp32": 35.6e12, "tf32": 35.6e12, "bf16": 71e12, "fp16": 71e12, "int8": 284e12},
    matmul_efficiency=AMPERE_MATMUL,
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=350,
    source="NVIDIA Ampere GA102 GPU Architecture whitepaper, Appendix A (GeForce RTX 3090)",
)
# RTX A6000 datasheet: FP32 38.7 TFLOPS, tensor 309.7 TFLOPS with sparsity → 154.8 dense; 768 GB/s.
RTX_A6000 = GpuSpec(
    name="rtx-a6000",
    memory_bytes=49140 * MiB,  # nvidia-smi: 49140 MiB (48 GB GDDR6, ECC off)
    memory_bandwidth_bytes_per_s=768 * GB,
    peak_flops={"fp32": 38.7e12, "tf32": 77.4e12, "bf16": 154.8e12, "fp16": 154.8e12, "int8": 309.7e12},
    matmul_efficiency=AMPERE_MATMUL,
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=300,
    source="NVIDIA RTX A6000 datasheet; GA102 whitepaper Appendix A (RTX A6000 column)",
)

# --- NVIDIA Hopper ------------------------------------------------------------------------------
H100_SXM = GpuSpec(
    name="h100-sxm",
    memory_bytes=81559 * MiB,  # nvidia-smi "NVIDIA H100 80GB HBM3": 81559 MiB
    memory_bandwidth_bytes_per_s=3.35 * TB,
    peak_flops={"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12,
                "int8": 1979e12},
    # GEMMs by (M, N, K) from OpenXLA's measured H100 grid (gemm_data.py) at the clock a 700 W Hopper sustains
    # (curves.HOPPER_SUSTAINED_CLOCK); the FLOPs curve fitted to H100 runs is kept for the PCIe part and the H20.
    matmul_efficiency=HOPPER_SUSTAINED_MATMUL,
    gemm_shape_table="xla-sm90",
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,
    optimizer_bandwidth_fraction=HOPPER_OPTIMIZER_BANDWIDTH,  # measured on H200 (curves.py)
    gemm_stream=HOPPER_GEMM_STREAM,  # measured on H200 (curves.py)
    attention_efficiency=0.6,
    attention_curves=H100_ATTENTION,  # FlashAttention-3 paper Figs. 5-6 (attention_data.py)
    # Maximum achievable matmul (best shape; stas00/ml-engineering compute/accelerator README at 744d01e):
    # bf16 794.5 TFLOP/s = 0.803 of 989.4, fp8 1402.6 = 0.709 of 1978.9 (torch 2.7.0+cu126).
    matmul_peak_fraction={"bf16": 0.803, "fp8": 0.709},
    kernel_launch_s=4e-6,
    sm_count=132,  # H100 whitepaper: H100 SXM5 has 132 SMs
    sm_stream_bytes_per_s=H100_SM_STREAM,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=700,
    source="NVIDIA H100 datasheet (published_calibration.json: hw-h100-sxm)",
)
# H100 PCIe: 1513/3026 TFLOPS with sparsity → 756.5 bf16 / 1513 fp8 dense; 2.0 TB/s HBM2e; 350 W.
H100_PCIE = GpuSpec(
    name="h100-pcie",
    memory_bytes=81559 * MiB,  # nvidia-smi "NVIDIA H100 PCIe": 81559 MiB
    memory_bandwidth_bytes_per_s=2.0 * TB,
    peak_flops={"fp32": 51e12, "tf32": 378e12, "bf16": 756.5e12, "fp16": 756.5e12, "fp8": 1513e12,
                "int8": 1513e12},
    matmul_efficiency=HOPPER_MATMUL,
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,
    attention_efficiency=0.6,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=350,
    source="NVIDIA H100 datasheet, PCIe column (published_calibration.json: hw-h100-pcie)",
)
# H800 SXM: the H100 SXM die with NVLink cut to 400 GB/s and FP64 to 1 TFLOPS; tensor rates unchanged
# (BF16 1,979 / FP8 3,958 TFLOPS with sparsity → 989.5 / 1,979 dense), 80 GB HBM3 at 3.35 TB/s.
H800_SXM = H100_SXM.model_copy(
    update={
        "name": "h800-sxm",
        "peak_flops": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12,
                       "int8": 1979e12},
        "source": "NVIDIA H800 Tensor Core GPU datasheet (SXM column); not in published_calibration.json",
    }
)
H200_SXM = H100_SXM.model_copy(
    update={
        "name": "h200-sxm",
        # best-shape matmul on H200 (same source): bf16 as H100, fp8 1453.4 TFLOP/s = 0.734 of 1979
        "matmul_peak_fraction": {"bf16": 0.803, "fp8": 0.734},
        "memory_bytes": 143771 * MiB,  # nvidia-smi "NVIDIA H200": 143771 MiB (141 GB HBM3e)
        "memory_bandwidth_bytes_per_s": 4.8 * TB,
        "peak_flops": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12,
                       "int8": 1979e12},
        "source": "NVIDIA H200 datasheet (published_calibration.json: hw-h200-sxm)",
    }
)

# H20 (Hopper for China, 400 W): FP8 296 / BF16 148 / TF32 74 / FP32 44 TFLOPS, INT8 296 TOPS (dense), 96 GB
# HBM3 at 4.0 TB/s, NVLink 900 GB/s. No nvidia-smi capacity published: memory_bytes is the datasheet 96 GB.
H20 = H100_SXM.model_copy(
    update={
        "name": "h20",
        "memory_bytes": 96 * GB,
        "memory_bandwidth_bytes_per_s": 4.0 * TB,
        "peak_flops": {"fp32": 44e12, "tf32": 74e12, "bf16": 148e12, "fp16": 148e12, "fp8": 296e12, "int8": 296e12},
        "tdp_w": 400,
        "matmul_peak_fraction": {},  # unmeasured
        "attention_curves": [],  # the H100 curves are absolute TFLOP/s of 132 SMs at 1830 MHz, not this part's
        "sm_count": None, "sm_stream_bytes_per_s": None,  # SM count unpublished
        "gemm_stream": None,  # measured on a 132-SM H200: not transferred to a part of unpublished SM count
        "gemm_shape_table": None, "matmul_efficiency": HOPPER_MATMUL,  # a 400 W part: not the H100 grid
        "source": "NVIDIA H20 product brief (FP8 296 TFLOPS, BF16 148 TFLOPS, 96 GB HBM3, 4.0 TB/s, NVLink 900 GB/s)",
    }
)

# --- NVIDIA Blackwell ---------------------------------------------------------------------------
# No measured GEMM curve yet: Hopper's shape at B200's own isolated best (MAMF 0.776) × the in-job ratio; torchao
# copies H100's 0.92 memory fraction for B200, and so do we.
# fp32/tf32/int8: HGX B200 table (8 GPUs: FP32 600 TFLOPS, TF32 18 PFLOPS*, INT8 72 POPS*) ÷ 8, * ÷ 2.
# NVFP4 on an SM100 GPU (vLLM PR #20646, benchmarks/kernels/bench_nvfp4_gemm.py, "Before" table, N=6144 K=4096):
# the CUTLASS NVFP4 kernel on pre-quantized operands ("nvfp4-noquant") runs 3778.8 and 3904.3 TFLOP/s at M = 8192
# and 16384 against torch bf16's 1421.0 and 1360.1 on the same shapes: 2.66× and 2.87× BF16, mean 2.76×, where the
# B200/GB200 peaks stand 4× apart; so NVFP4 reaches 2.76/4 of BF16's fraction of peak (quantization priced apart).
# The ratio, taken on one machine, cancels that machine's clock: its bf16 ran at 0.78–0.81 of the B200's best-shape
# 1745 TFLOP/s, so the NVFP4 best shape this implies (4,819 TFLOP/s) is above the 3,904 it measured.
B200_NVFP4_OF_BF16 = (3778.8 / 1421.0 + 3904.3 / 1360.1) / 2 / 4
B200 = GpuSpec(
    name="b200",
    memory_bytes=183359 * MiB,  # nvidia-smi "NVIDIA B200": 183359 MiB (180 GB HBM3e)
    memory_bandwidth_bytes_per_s=8.0 * TB,
    peak_flops={"fp32": 75e12, "tf32": 1125e12, "bf16": 2250e12, "fp16": 2250e12, "fp8": 4500e12,
                "int8": 4500e12, "fp4": 9000e12},
    matmul_efficiency=B200_SUSTAINED_MATMUL,  # its grid at the clock a 1000 W B200 sustains (curves.py)
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,
    attention_efficiency=0.6,
    attention_curves=B200_ATTENTION,  # cuDNN and FlashAttention-2 measured on a B200 (attention_data.py)
    # best-shape matmul (ml-engineering at 744d01e): bf16 1745.0 = 0.776, fp8 3432.5 = 0.763 (torch 2.7.1+cu128)
    matmul_peak_fraction={"bf16": 0.776, "fp8": 0.763, "fp4": 0.776 * B200_NVFP4_OF_BF16},
    kernel_fixed_s=KERNEL_FIXED_S,
    # GEMM efficiency by (M, N, K): OpenXLA's measured B200 grid (gemm_data.py); GB200 (same die) and B300/GB300
    # (Blackwell Ultra, unmeasured) take its shape at their own best-shape rates.
    gemm_shape_table="xla-sm100",
    # FP8 GEMMs in any layout: per-tensor FP8 keeps one quantized copy (Transformer Engine d0067d0
    # common/transformer_engine.cpp nvte_is_non_tn_fp8_gemm_supported: SM 10.x; the Blackwell presets below inherit)
    fp8_any_layout=True,
    # Transformer Engine's quantization on a B300 (docs/examples/gemm_profiling at d0067d0, 5B-model layer GEMMs,
    # autocast less pre-quantized: current scaling 2.335 ms, MXFP8 1.823 ms per layer) runs at 0.79 and 0.76 of the
    # streaming rate over the same bytes (1.842 and 1.378 ms; tests/costmodel/test_fp8_quantization.py): 0.77, the
    # Blackwell presets below inherit it. (On an H200 the same benchmark runs at 0.96 and 1.0 of it: Hopper keeps 1.)
    quantize_efficiency=0.77,
    tdp_w=1000,
    source="NVIDIA DGX/HGX B200 datasheet, Blackwell technical brief (published_calibration.json: hw-b200-hgx)",
)
# GB200 (1200 W): NVL72 table ÷ 72 — FP32 5,760 TFLOPS, TF32 180 PFLOPS*, INT8 720 POPS*, HBM 576 TB/s.
# The rate it sustains in a job, measured against a B200 on the same job: MLPerf Training v5.0, NVIDIA llama2_70b_lora
# on 8 GPUs, NGC 25.04 NeMo, TP1 PP1 CP1, fp8 GEMMs and attention; the configs differ in LR, NCCL NVLS (off on the
# B200), CPU binding and 1×8 vs 2×4 GPUs: median train_step_time (median of each of the 10 runs) 1.5127 s on DGX B200
# (nyx_n1) and 1.4864 s on GB200 NVL72 (tyche_ngpu8) (mlcommons/training_results_v5.0@0fdc28f NVIDIA/results/*/
# llama2_70b_lora/result_*.txt, benchmarks/llama2_70b_lora/implementations/*/config_*.sh). The same die at 1200 W
# runs 1.018× the 1000 W part, so its GEMMs take the B200's sustained rate (B200_SUSTAINED_CLOCK) times that, not the
# A100-derived in-job ratio (which put it 1.15× above the B200). The whole step's ratio stands for the GEMMs' (a
# GEMM-only one could lie about 1.00-1.04; the mean of the runs' medians gives 1.024). A check, not used: GB300 NVL72
# runs MLPerf v5.1's identical 72-GPU llama2_70b_lora config 1.156× faster than GB200 (0.1723 against 0.1992 s per
# step, training_results_v5.1 theia/tyche_ngpu72_ngc25.09); the presets' GEMM rates now stand 1.22× apart and their
# measured attention rates 1.02-1.05× (before: GEMMs 1.08×).
GB200_OF_B200_SUSTAINED = 1.5127 / 1.4864
GB200 = B200.model_copy(
    update={
        "name": "gb200",
        "memory_bytes": 189471 * MiB,  # nvidia-smi "NVIDIA GB200": 189471 MiB (186 GB HBM3e)
        "memory_bandwidth_bytes_per_s": 8.0 * TB,
        "peak_flops": {"fp32": 80e12, "tf32": 1250e12, "bf16": 2500e12, "fp16": 2500e12, "fp8": 5000e12,
                       "int8": 5000e12, "fp4": 10000e12},
        "tdp_w": 1200,
        # best-shape matmul (same source): bf16 1822.0 = 0.729 of 2500, fp8 3615.6 = 0.723 of 5000. At 1200 W the
        # GB200 reaches 4.4% more than a 1000 W B200 (1745.0), not the datasheet's 11%, isolated; in a job its GEMMs
        # run at the B200's sustained rate × GB200_OF_B200_SUSTAINED (above).
        "matmul_peak_fraction": {"bf16": 0.729, "fp8": 0.723, "fp4": 0.729 * B200_NVFP4_OF_BF16},
        "matmul_efficiency": scaled_curve(HOPPER_MATMUL_ISOLATED,
                                          0.776 * B200_SUSTAINED_CLOCK * 2250 / 2500 * GB200_OF_B200_SUSTAINED),
        "attention_curves": GB200_ATTENTION,  # measured on a GB200 (attention_data.py)
        "source": "NVIDIA GB200 NVL72 datasheet (published_calibration.json: hw-gb200)",
    }
)

# B300 (Blackwell Ultra, 1100 W): NVIDIA HGX B300 table ÷ 8 — FP4 144 | 108 PFLOPS (sparse | dense), FP8 72*,
# BF16 36*, TF32 18*, INT8 2 POPS*, FP32 600 TFLOPS; 288 GB HBM3e at 8 TB/s per GPU (* with sparsity: ÷ 2).
# No nvidia-smi capacity published: memory_bytes is the datasheet 288 GB. GEMM rates measured (below); GB300
# (same chip, 1400 W) has no measurement and takes the B300's fractions.
B300_NVFP4_OF_BF16 = 3.48 * 2250 / 13500  # TE gemm_profiling on B300, pre-quantized: NVFP4 3.48× BF16 (below)
B300 = B200.model_copy(
    update={
        "name": "b300",
        "attention_curves": B300_ATTENTION,  # the GB300's measured rates at the B300's peak (attention_data.py)
        "memory_bytes": 288 * GB,
        "memory_bandwidth_bytes_per_s": 8.0 * TB,
        "peak_flops": {"fp32": 75e12, "tf32": 1125e12, "bf16": 2250e12, "fp16": 2250e12, "fp8": 4500e12,
                       "int8": 125e12, "fp4": 13500e12},
        # best-shape matmul (ml-engineering at 744d01e): bf16 1769.0 = 0.786 of 2250, fp8 3353.3 = 0.745 of 4500.
        # NVFP4: Transformer Engine's GEMM benchmark on a B300 (docs/examples/gemm_profiling/gemm_profiling.rst at
        # d0067d0, 5B-model layer GEMMs, M = 15,872, operands pre-quantized) runs a layer's Fprop+Dgrad+Wgrad GEMMs
        # in 3.764 ms NVFP4 against 13.102 ms BF16: 3.48× BF16, where the peaks stand 6× apart, so NVFP4 reaches
        # 3.48 × 2250/13500 = 0.58 of BF16's fraction of peak (quantization kernels are priced apart).
        # In a job: its isolated best at the clock a Blackwell die sustains at its air-cooled power limit, the B200's
        # measured drop (B200_SUSTAINED_CLOCK, curves.py). Checked on one job run both ways: MLPerf Training v5.1 Dell
        # llama2_70b_lora on 8 GPUs in the same XE9780 chassis, identical configs (FP8, TP 1 PP 1 CP 1, MBS 1),
        # median train_step_time (median of each run's) 1.3000 s on B300 and 1.2963 s on B200: the B300 runs 0.997×
        # the B200 (training_results_v5.1@441d65f Dell/results/1xXE9780x8{B300-SXM-270GB,B200-SXM-180GB}/
        # llama2_70b_lora/result_*.txt; benchmarks/llama2_70b_lora/implementations/nemo/config_XE9780x8*.sh). Its FP8
        # tensor rate is the B200's (4.5 PFLOPS dense both); the A100-derived in-job ratio had put it 1.07× faster.
        "matmul_efficiency": scaled_curve(HOPPER_MATMUL_ISOLATED, 0.786 * B200_SUSTAINED_CLOCK),
        "matmul_peak_fraction": {"bf16": 0.786, "fp8": 0.745, "fp4": 0.786 * B300_NVFP4_OF_BF16},
        "tdp_w": 1100,
        "source": "NVIDIA HGX B300 datasheet (8-GPU table: FP4 108 PFLOPS dense, FP8 72 / BF16 36 / TF32 18 PFLOPS "
                  "and INT8 2 POPS with sparsity, FP32 600 TFLOPS, 2.3 TB HBM3e)",
    }
)
# GB300 (1400 W): GB300 NVL72 table ÷ 72 — FP4 1440 | 1080 PFLOPS, FP8 720*, BF16 360*, TF32 180*, INT8 24 POPS*,
# FP32 6 PFLOPS; HBM3e up to 21 TB at 576 TB/s (288 GB, 8 TB/s per GPU).
GB300 = B300.model_copy(
    update={
        "name": "gb300",
        "peak_flops": {"fp32": 83.3e12, "tf32": 1250e12, "bf16": 2500e12, "fp16": 2500e12, "fp8": 5000e12,
                       "int8": 166.7e12, "fp4": 15000e12},
        "tdp_w": 1400,
        # no sustained-clock measurement at 1400 W: the A100-derived in-job ratio on the B300's isolated best
        "matmul_efficiency": scaled_curve(HOPPER_MATMUL_ISOLATED, 0.786 * IN_JOB_OF_ISOLATED),
        "attention_curves": GB300_ATTENTION,  # measured on a GB300 (attention_data.py)
        "source": "NVIDIA GB300 NVL72 datasheet (72-GPU table: FP4 1,080 PFLOPS dense, FP8 720 / BF16 360 / TF32 180 "
                  "PFLOPS and INT8 24 POPS with sparsity, FP32 6 PFLOPS, 576 TB/s HBM3e)",
    }
)

# --- NVIDIA Ada, Turing, Volta ------------------------------------------------------------------
# Ada (L40S, L4, RTX 4090) has no measured curve here: it borrows the Ampere GEMM curve.
L40S = GpuSpec(
    name="l40s",
    memory_bytes=46068 * MiB,  # nvidia-smi "NVIDIA L40S": 46068 MiB (48 GB GDDR6 with ECC)
    memory_bandwidth_bytes_per_s=864 * GB,
    peak_flops={"fp32": 91.6e12, "tf32": 183e12, "bf16": 362.05e12, "fp16": 362.05e12, "fp8": 733e12,
                "int8": 733e12},
    matmul_efficiency=AMPERE_MATMUL,
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=350,
    source="NVIDIA L40S datasheet (published_calibration.json: hw-l40s)",
)
# L4: 242 / 485 TFLOPS with sparsity → 121 bf16 / 242.5 fp8 dense; FP32 30.3; TF32 120* → 60.
L4 = GpuSpec(
    name="l4",
    memory_bytes=23034 * MiB,  # nvidia-smi "NVIDIA L4": 23034 MiB (24 GB GDDR6)
    memory_bandwidth_bytes_per_s=300 * GB,
    peak_flops={"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12,
                "int8": 242.5e12},
    matmul_efficiency=AMPERE_MATMUL,  # 72 W cap: like the T4, real GEMMs may sit well below this
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=72,
    source="NVIDIA L4 datasheet (published_calibration.json: hw-l4)",
)
# Ada whitepaper appendix (RTX 4090): FP32-accumulate tensor rates; INT8 660.6 TOPS dense.
RTX4090 = GpuSpec(
    name="rtx4090",
    memory_bytes=24564 * MiB,  # nvidia-smi "NVIDIA GeForce RTX 4090": 24564 MiB
    memory_bandwidth_bytes_per_s=1.008 * TB,
    peak_flops={"fp32": 82.6e12, "tf32": 82.6e12, "bf16": 165.2e12, "fp16": 165.2e12, "fp8": 330.3e12,
                "int8": 660.6e12},
    matmul_efficiency=AMPERE_MATMUL,
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=450,
    source="NVIDIA Ada Lovelace architecture whitepaper, Appendix (published_calibration.json: hw-rtx4090)",
)
T4 = GpuSpec(
    name="t4",
    memory_bytes=15 * GiB,  # 16 GB GDDR6, 15 GiB usable as reported by nvidia-smi (15360 MiB)
    memory_bandwidth_bytes_per_s=320 * GB,
    peak_flops={"fp32": 8.1e12, "fp16": 65e12, "int8": 130e12},
    matmul_efficiency=[(1e7, 0.05), (1e8, 0.15), (1e9, 0.30), (1e10, 0.40), (1e11, 0.45), (1e12, 0.45)],
    memory_efficiency=[(1e5, 0.10), (1e6, 0.40), (1e7, 0.70), (1e8, 0.80), (1e9, 0.82)],
    elementwise_efficiency=EAGER_ELEMENTWISE,
    attention_efficiency=0.3,
    kernel_launch_s=6e-6,
    kernel_fixed_s=6e-6,  # the T4 launch floor above, paid by every kernel
    tdp_w=70,
    source="NVIDIA T4 datasheet (published_calibration.json: hw-t4); 70 W cap keeps GEMMs below half of peak",
)
# V100: fp16 tensor cores only (no bf16, no int8 tensor cores); FlashAttention-2 needs sm80+, hence 0.3.
V100_SXM2 = GpuSpec(
    name="v100-sxm2",
    memory_bytes=32768 * MiB,  # nvidia-smi "Tesla V100-SXM2-32GB": 32768 MiB
    memory_bandwidth_bytes_per_s=900 * GB,
    peak_flops={"fp32": 15.7e12, "fp16": 125e12},
    matmul_efficiency=AMPERE_MATMUL,
    memory_efficiency=HBM_MEMORY,
    elementwise_efficiency=EAGER_ELEMENTWISE,
    attention_efficiency=0.3,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=300,
    source="NVIDIA Tesla V100 datasheet, SXM2 32GB (published_calibration.json: hw-v100-sxm2)",
)

GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        A100_40GB, A100_80GB, H100_SXM, H100_PCIE, H800_SXM, H200_SXM, H20, B200, GB200, B300, GB300, L40S, L4, A10G,
        T4,
        V100_SXM2, RTX3090, RTX4090, RTX_A6000, MI250X, MI300X, MI325X, MI355X, MI350X,
    )
}
