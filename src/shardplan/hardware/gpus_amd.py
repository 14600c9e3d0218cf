"""AMD Instinct GPUs of the catalog (CDNA2-4): peaks from the data sheets, GEMM rates from AMD's measured
Max-Achievable FLOPs."""

from __future__ import annotations

from shardplan.hardware.curves import (
    HBM_MEMORY,
    HOPPER_MATMUL_ISOLATED,
    IN_JOB_OF_ISOLATED,
    KERNEL_FIXED_S,
    Curve,
    scaled_curve,
)
from shardplan.hardware.spec import GpuSpec
from shardplan.units import TB

# AMD CDNA3: AMD's Max-Achievable FLOPs (MAF: hipBLASLt best shape, trig_float data, thermally stable, cold caches,
# the same method as MAMF; ROCm/rocm-blogs@8e01195 measuring-max-achievable-flops-part2 Table 1) — MI300X (750 W)
# FP16 654, BF16 708, FP8 1273 TFLOP/s at median clocks 1115/1207/1230 MHz; MI325X (1000 W) 794/843/1519 at
# 1354/1447/1464 MHz: the same CUs sustain higher clocks under the higher power limit. The plateau is the MAF × the
# in-job ratio above, on the Hopper shape. torchao measures 0.72 of peak HBM bandwidth for a large pointwise kernel.
MI300X_MAF = {"fp16": 654 / 1307.4, "bf16": 708 / 1307.4, "fp8": 1273 / 2614.9}
MI325X_MAF = {"fp16": 794 / 1307.4, "bf16": 843 / 1307.4, "fp8": 1519 / 2614.9}
CDNA3_MATMUL: Curve = scaled_curve(HOPPER_MATMUL_ISOLATED, MI300X_MAF["bf16"] * IN_JOB_OF_ISOLATED)
CDNA3_MEMORY: Curve = scaled_curve(HBM_MEMORY, 0.72)

# --- AMD Instinct -------------------------------------------------------------------------------
# MI250X is two GCDs that software sees as two devices: one entry here is one GCD, i.e. half the
# package numbers of hw-mi250x (383 TFLOPS bf16/fp16/int8, 95.7 TFLOPS fp32 matrix, 3.2 TB/s, 560 W).
# No measured curve: borrows the MI300X (CDNA3) curves, whose MAF reflects the MI300X's own power limit and
# clocks (an assumption for CDNA2; no MI250X record is validated).
MI250X = GpuSpec(
    name="mi250x",
    vendor="amd",
    memory_bytes=68702699520,  # rocm-smi VRAM Total per GCD (64 GB HBM2e; 16 MiB short of 64 GiB)
    memory_bandwidth_bytes_per_s=1.6 * TB,
    peak_flops={"fp32": 47.85e12, "bf16": 191.5e12, "fp16": 191.5e12, "int8": 191.5e12},
    matmul_efficiency=CDNA3_MATMUL,
    memory_efficiency=CDNA3_MEMORY,
    attention_efficiency=0.35,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=280,
    source="AMD Instinct MI250X data sheet, per GCD = package / 2 (published_calibration.json: hw-mi250x)",
)
# HBM capacities are binary: MI300X's "192 GB" is 192 GiB, of which rocm-smi reports 205822885888 B
# (VRAM Total) usable. No tool report was found for MI325X/MI355X: they keep the same usable fraction.
MI300X_USABLE = 205822885888
# MI300X: FP32 matrix 163.4, TF32 653.7, INT8 2614.9 TOPS dense (AMD data sheet). Attention 0.35 ≈ H100's 0.6
# scaled by torchao's GEMM plateau ratio 0.47/0.78 (an estimate: Azure's ND MI300X v5 results measure FlashAttention-2
# at 328.6 TFLOP/s = 0.25 of peak for head dim 64, batch 2, sequence 8192, direction not stated).
MI300X = GpuSpec(
    name="mi300x",
    vendor="amd",
    memory_bytes=MI300X_USABLE,  # rocm-smi VRAM Total (192 GB HBM3)
    memory_bandwidth_bytes_per_s=5.3 * TB,
    peak_flops={"fp32": 163.4e12, "tf32": 653.7e12, "bf16": 1307.4e12, "fp16": 1307.4e12, "fp8": 2614.9e12,
                "int8": 2614.9e12},
    matmul_efficiency=CDNA3_MATMUL,
    matmul_peak_fraction=MI300X_MAF,
    memory_efficiency=CDNA3_MEMORY,
    attention_efficiency=0.35,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=750,
    source="AMD Instinct MI300X data sheet (published_calibration.json: hw-mi300x); GEMM: AMD MAF (ROCm blog), "
    "HBM: torchao roofline_utils",
)
MI325X = MI300X.model_copy(
    update={
        "name": "mi325x",
        "memory_bytes": 256 * MI300X_USABLE // 192,  # 8 stacks × 32 GiB HBM3E, same driver reserve as MI300X
        "memory_bandwidth_bytes_per_s": 6.0 * TB,
        "matmul_efficiency": scaled_curve(HOPPER_MATMUL_ISOLATED, MI325X_MAF["bf16"] * IN_JOB_OF_ISOLATED),
        "matmul_peak_fraction": MI325X_MAF,
        "tdp_w": 1000,
        "source": "AMD Instinct MI325X data sheet (published_calibration.json: hw-mi325x); same CDNA3 compute",
    }
)
# MI355X (CDNA4): FP32 157.3 TFLOPS; no TF32 rate listed; INT8 = FP8 rate. AMD publishes no MAF for CDNA4: its
# fractions of peak are taken as the MI325X's, the CDNA3 part at a high power limit (an assumption, not a measurement).
MI355X = GpuSpec(
    name="mi355x",
    vendor="amd",
    memory_bytes=288 * MI300X_USABLE // 192,  # 8 stacks × 36 GiB HBM3E, same driver reserve as MI300X
    memory_bandwidth_bytes_per_s=8.0 * TB,
    peak_flops={"fp32": 157.3e12, "bf16": 2516.6e12, "fp16": 2516.6e12, "fp8": 5033.2e12, "int8": 5033.2e12,
                "fp4": 10066.4e12},
    matmul_efficiency=scaled_curve(HOPPER_MATMUL_ISOLATED, MI325X_MAF["bf16"] * IN_JOB_OF_ISOLATED),
    matmul_peak_fraction=MI325X_MAF,
    memory_efficiency=CDNA3_MEMORY,
    attention_efficiency=0.35,
    kernel_fixed_s=KERNEL_FIXED_S,
    tdp_w=1400,
    source="AMD Instinct MI355X data sheet / CDNA 4 whitepaper (published_calibration.json: hw-mi355x)",
)
# MI350X: the MI355X's CDNA4 package air-cooled at 1000 W TBP with a 2.2 GHz peak engine clock against the MI355X's
# 1400 W and 2.4 GHz (AMD at Hot Chips 2025, as reported in its MI350 series presentation); the same 256 CUs, so
# every peak rate is the MI355X's × 2.2/2.4 (AMD's MI350X data sheet lists FP16/BF16 dense 2.3 PFLOPS:
# 2516.6 × 2.2/2.4 = 2306.9). The same 288 GB HBM3E at 8 TB/s. The GEMM fractions of peak are the MI355X's
# (the MI325X's: an assumption, not a measurement, as for the MI355X).
MI350X_CLOCK = 2.2 / 2.4
MI350X = MI355X.model_copy(
    update={
        "name": "mi350x",
        "peak_flops": {k: v * MI350X_CLOCK for k, v in MI355X.peak_flops.items()},
        "tdp_w": 1000,
        "source": "AMD Instinct MI350X: the MI355X die at 2.2 of 2.4 GHz peak clock, 1000 W (AMD MI350 series, "
        "Hot Chips 2025; data sheet FP16 2.3 PFLOPS dense)",
    }
)
