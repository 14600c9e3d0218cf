"""Catalog of GPUs and systems. Plain dicts of validated specs; every number carries its source.

Peak rates are dense (no sparsity) datasheet values, as in ``published_calibration.json`` (kind
``hardware``). Achievable efficiencies are measured fractions (torchao ``roofline_utils.py``, NCCL
tests, the Megatron-LM runs in ``validation/``); where a GPU has no measurement of its own, it borrows
the curve of its architecture sibling and says so.
"""

from __future__ import annotations

from shardplan.errors import UnknownNameError
from shardplan.hardware.spec import GpuSpec, LinkSpec, SoftwareSpec, SystemSpec
from shardplan.units import GB, TB, GiB

# --- achievable-efficiency curves (data, shared by GPUs of one generation) -------------------------
# GEMM: fraction of dense peak vs FLOPs of one GEMM. Large-GEMM plateau: A100 ≈ 0.8 (cuBLAS bf16
# 8192³ ≈ 250 TFLOP/s), H100 0.78 and MI300X 0.47 (torchao roofline_utils.py, "pct_achievable_gemm_tops").
AMPERE_MATMUL: list[tuple[float, float]] = [
    (1e7, 0.08), (1e8, 0.25), (1e9, 0.50), (1e10, 0.66), (1e11, 0.74), (1e12, 0.78), (1e13, 0.80),
]
HOPPER_MATMUL: list[tuple[float, float]] = [
    (1e7, 0.05), (1e8, 0.16), (1e9, 0.38), (1e10, 0.58), (1e11, 0.70), (1e12, 0.76), (1e13, 0.78),
]
# Streaming kernels: fraction of peak HBM bandwidth vs bytes moved (torchao: 0.92 on H100, 0.72 MI300X).
HBM_MEMORY: list[tuple[float, float]] = [(1e5, 0.10), (1e6, 0.35), (1e7, 0.70), (1e8, 0.85), (1e9, 0.90)]

A100_80GB = GpuSpec(
    name="a100-sxm-80gb",
    memory_bytes=80 * GiB,
    memory_bandwidth_bytes_per_s=2.039 * TB,
    peak_flops={"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12, "int8": 624e12},
    matmul_efficiency=AMPERE_MATMUL,
    memory_efficiency=HBM_MEMORY,
    attention_efficiency=0.55,
    kernel_launch_s=4e-6,
    tdp_w=400,
    source="NVIDIA A100 datasheet r4 (published_calibration.json: hw-a100-sxm-80gb)",
)
A100_40GB = A100_80GB.model_copy(
    update={
        "name": "a100-sxm-40gb",
        "memory_bytes": 40 * GiB,
        "memory_bandwidth_bytes_per_s": 1.555 * TB,
        "source": "NVIDIA A100 datasheet r4 (published_calibration.json: hw-a100-sxm-40gb)",
    }
)
H100_SXM = GpuSpec(
    name="h100-sxm",
    memory_bytes=80 * GiB,
    memory_bandwidth_bytes_per_s=3.35 * TB,
    peak_flops={"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12,
                "int8": 1979e12},
    matmul_efficiency=HOPPER_MATMUL,
    memory_efficiency=HBM_MEMORY,
    attention_efficiency=0.6,
    kernel_launch_s=4e-6,
    tdp_w=700,
    source="NVIDIA H100 datasheet (published_calibration.json: hw-h100-sxm)",
)
T4 = GpuSpec(
    name="t4",
    memory_bytes=15 * GiB,  # 16 GB GDDR6, 15 GiB usable as reported by nvidia-smi (15360 MiB)
    memory_bandwidth_bytes_per_s=320 * GB,
    peak_flops={"fp32": 8.1e12, "fp16": 65e12, "int8": 130e12},
    matmul_efficiency=[(1e7, 0.05), (1e8, 0.15), (1e9, 0.30), (1e10, 0.40), (1e11, 0.45), (1e12, 0.45)],
    memory_efficiency=[(1e5, 0.10), (1e6, 0.40), (1e7, 0.70), (1e8, 0.80), (1e9, 0.82)],
    attention_efficiency=0.3,
    kernel_launch_s=6e-6,
    tdp_w=70,
    source="NVIDIA T4 datasheet (published_calibration.json: hw-t4); 70 W cap keeps GEMMs below half of peak",
)

GPUS: dict[str, GpuSpec] = {g.name: g for g in (A100_40GB, A100_80GB, H100_SXM, T4)}

# --- links ------------------------------------------------------------------------------------
NVLINK3 = LinkSpec(bandwidth_bytes_per_s=300 * GB, latency_s=8e-6, efficiency=0.78)  # 600 GB/s bidir
NVLINK4 = LinkSpec(bandwidth_bytes_per_s=450 * GB, latency_s=8e-6, efficiency=0.80)  # 900 GB/s bidir
HDR_IB_PER_GPU = LinkSpec(bandwidth_bytes_per_s=25 * GB, latency_s=10e-6, efficiency=0.85)  # 200 Gb/s
NDR_IB_PER_GPU = LinkSpec(bandwidth_bytes_per_s=50 * GB, latency_s=10e-6, efficiency=0.85)  # 400 Gb/s
PCIE3_X16 = LinkSpec(bandwidth_bytes_per_s=16 * GB, latency_s=10e-6, efficiency=0.78)
PCIE4_X16 = LinkSpec(bandwidth_bytes_per_s=32 * GB, latency_s=10e-6, efficiency=0.8)
PCIE5_X16 = LinkSpec(bandwidth_bytes_per_s=64 * GB, latency_s=10e-6, efficiency=0.8)

# The Megatron-LM papers' software on Selene (2021-22): fused softmax, no flash attention, gradient
# all-reduce after the backward pass (no overlap).
MEGATRON_2021 = SoftwareSpec(attention="unfused", overlap_grad_reduce=False)

DGX_A100_80GB = SystemSpec(
    name="dgx-a100-80gb",
    description="NVIDIA DGX A100 640GB as in Selene: 8× A100-SXM4-80GB, NVLink3/NVSwitch, 8×200 Gb/s HDR IB",
    gpu=A100_80GB,
    gpus_per_node=8,
    intra_node=NVLINK3,
    inter_node=HDR_IB_PER_GPU,
    pcie=PCIE4_X16,
    host_memory_bytes=2 * 1024 * GiB,
    cpu_flops=9.2e12,  # 2× EPYC 7742: 128 cores × 2.25 GHz × 32 fp32 FLOP/cycle
    cpu_memory_bandwidth_bytes_per_s=409.6 * GB,  # 16 channels DDR4-3200
    disk_bytes=15 * TB,
    disk_read_bytes_per_s=25 * GB,
    disk_write_bytes_per_s=10 * GB,
    software=MEGATRON_2021,
    source="DGX A100 user guide; Selene as described in Narayanan et al. 2021 §5",
)
DGX_A100_40GB = DGX_A100_80GB.model_copy(
    update={
        "name": "dgx-a100-40gb",
        "description": "NVIDIA DGX A100 320GB: 8× A100-SXM4-40GB, NVLink3/NVSwitch, 8×200 Gb/s HDR IB",
        "gpu": A100_40GB,
        "host_memory_bytes": 1024 * GiB,
    }
)
DGX_H100 = SystemSpec(
    name="dgx-h100",
    description="NVIDIA DGX H100: 8× H100-SXM5-80GB, NVLink4/NVSwitch, 8×400 Gb/s NDR IB",
    gpu=H100_SXM,
    gpus_per_node=8,
    intra_node=NVLINK4,
    inter_node=NDR_IB_PER_GPU,
    pcie=PCIE5_X16,
    host_memory_bytes=2 * 1024 * GiB,
    cpu_flops=10.7e12,  # 2× Xeon 8480C: 112 cores × 3.0 GHz × 32 (AVX-512 FMA counted once per cycle)
    cpu_memory_bandwidth_bytes_per_s=614 * GB,  # 16 channels DDR5-4800
    disk_bytes=30 * TB,
    disk_read_bytes_per_s=25 * GB,
    disk_write_bytes_per_s=10 * GB,
    source="NVIDIA DGX H100 datasheet",
)
GCP_T4 = SystemSpec(
    name="gcp-t4",
    description="FlexGen's machine: GCP n1-highmem-32 with one T4 16GB, 208 GB DRAM, 1.5 TB NVMe",
    gpu=T4,
    gpus_per_node=1,
    intra_node=PCIE3_X16,
    inter_node=None,
    pcie=PCIE3_X16,
    host_memory_bytes=208 * GB,
    cpu_flops=1.0e12,
    cpu_memory_bandwidth_bytes_per_s=60 * GB,
    disk_bytes=1.5 * TB,
    disk_read_bytes_per_s=2.0 * GB,
    disk_write_bytes_per_s=1.0 * GB,
    max_nodes=1,
    source="Sheng et al. 2023 (FlexGen) §6 setup; published_calibration.json flexgen-* hardware block",
)

SYSTEMS: dict[str, SystemSpec] = {s.name: s for s in (DGX_A100_40GB, DGX_A100_80GB, DGX_H100, GCP_T4)}


def get_gpu(name: str) -> GpuSpec:
    key = name.strip().lower()
    if key not in GPUS:
        raise UnknownNameError("GPU", name, GPUS, field="gpu", listing="`shardplan hardware list`")
    return GPUS[key]


def get_system(name: str) -> SystemSpec:
    key = name.strip().lower()
    if key not in SYSTEMS:
        raise UnknownNameError(
            "system", name, list(SYSTEMS) + list(GPUS), field="hardware", listing="`shardplan hardware list`"
        )
    return SYSTEMS[key]


def generic_system(gpu: GpuSpec) -> SystemSpec:
    """A single-kind node for a bare GPU name: 8 GPUs on PCIe Gen4 with 100 GB/s-class links."""
    return SystemSpec(
        name=f"{gpu.name}-generic",
        description=f"Generic node of 8× {gpu.name} (no preset system: links are typical, not measured)",
        gpu=gpu,
        gpus_per_node=8,
        intra_node=PCIE4_X16,
        inter_node=HDR_IB_PER_GPU,
        pcie=PCIE4_X16,
        host_memory_bytes=1024 * GiB,
    )
