"""System catalog: node designs (GPUs, GPU↔GPU fabric, network, host memory, CPU, disk).

Link bandwidths are per GPU and per direction. Efficiency is the fraction of that peak a large NCCL/RCCL
collective reaches (bus bandwidth in nccl-tests terms). CPU FLOP/s follow one convention throughout:
cores × base clock × 32 fp32 FLOP/cycle (two 256-bit FMA pipes, or AVX-512 counted once), so
numbers compare across systems; host figures for cloud and OEM machines name the exact instance or
submission they come from, and say "assumed" where a datasheet leaves a choice open.
"""

from __future__ import annotations

from shardplan.hardware.gpus import (
    A100_40GB,
    A100_80GB,
    B200,
    B300,
    GB200,
    GB300,
    H20,
    H100_PCIE,
    H100_SXM,
    H200_SXM,
    H800_SXM,
    L40S,
    MI300X,
    MI325X,
    MI350X,
    MI355X,
    RTX3090,
    RTX4090,
    RTX_A6000,
    T4,
)
from shardplan.hardware.spec import LinkSpec, SoftwareSpec, SystemSpec
from shardplan.units import GB, TB, GiB

# --- links ------------------------------------------------------------------------------------
# Ring all-reduce bus bandwidth (nccl-tests, 8 GPUs, ≥ 4 GiB) over NVSwitch: A100 NVLink3 ≈ 230–250 GB/s → 0.78;
# H100/H200 NVLink4 365.6 GB/s with NCCL_NVLS_ENABLE=0 → 0.80, and 473.1 GB/s with NVLS (NVLink SHARP);
# B200 NVLink5 682.2 GB/s ring → 0.76, 838.0 GB/s NVLS (stas00/ml-engineering@744d01e network/README.md §SHARP,
# 8 GiB payload, NCCL 2.27.7).
NVLINK3 = LinkSpec(bandwidth_bytes_per_s=300 * GB, latency_s=8e-6, efficiency=0.78)  # 600 GB/s bidir
NVLINK4 = LinkSpec(bandwidth_bytes_per_s=450 * GB, latency_s=8e-6, efficiency=0.80,  # 900 GB/s bidir
                   nvls_bus_bytes_per_s=473.1 * GB)
# H800: 400 GB/s bidir; DeepSeek-V3 report §3.2.2 measures 160 GB/s of the 200 GB/s per direction → 0.8.
NVLINK4_H800 = LinkSpec(bandwidth_bytes_per_s=200 * GB, latency_s=8e-6, efficiency=0.80)
NVLINK5 = LinkSpec(bandwidth_bytes_per_s=900 * GB, latency_s=8e-6, efficiency=0.76,  # 1.8 TB/s bidir
                   nvls_bus_bytes_per_s=838.0 * GB)
# MI300X/MI325X xGMI: 7 links × 64 GB/s per direction, one to each peer (fully connected, no switch).
# A collective over all 8 GPUs drives all 7 links (448 GB/s); smaller groups reach fewer peers.
# Efficiency 0.707: RCCL 2.22.3 all-reduce bus bandwidth 316.82 GB/s at 8 GB on 8 MI300X (Azure ND MI300X v5,
# Azure AI-benchmarking-guide results Azure_Results/ND_MI300X_v5_results.md, as mirrored at
# yosoyjay/AI-benchmarking-guide@a8263ef) ÷ 448.
XGMI_MI300 = LinkSpec(bandwidth_bytes_per_s=7 * 64 * GB, latency_s=10e-6, efficiency=0.707)
# MI355X (CDNA4) xGMI: 7 links of 153.6 GB/s bidirectional (AMD MI350-series specifications, read second-hand)
# → 76.8 GB/s per direction each; no RCCL measurement found: MI300X's efficiency.
XGMI_MI355 = LinkSpec(bandwidth_bytes_per_s=7 * 76.8 * GB, latency_s=10e-6, efficiency=0.707)
HDR_IB_PER_GPU = LinkSpec(bandwidth_bytes_per_s=25 * GB, latency_s=10e-6, efficiency=0.85)  # 200 Gb/s
NDR_IB_PER_GPU = LinkSpec(bandwidth_bytes_per_s=50 * GB, latency_s=10e-6, efficiency=0.85)  # 400 Gb/s
XDR_800G_PER_GPU = LinkSpec(bandwidth_bytes_per_s=100 * GB, latency_s=10e-6, efficiency=0.85)  # 800 Gb/s
PCIE3_X16 = LinkSpec(bandwidth_bytes_per_s=16 * GB, latency_s=10e-6, efficiency=0.78)
PCIE4_X16 = LinkSpec(bandwidth_bytes_per_s=32 * GB, latency_s=10e-6, efficiency=0.8)
PCIE5_X16 = LinkSpec(bandwidth_bytes_per_s=64 * GB, latency_s=10e-6, efficiency=0.8)
# GPU↔GPU over PCIe switches (no NVLink): nccl-tests all-reduce bus bandwidth ≈ 0.7 of the x16 link
# in practice, with higher per-step latency than NVLink.
PCIE4_P2P = LinkSpec(bandwidth_bytes_per_s=31.5 * GB, latency_s=15e-6, efficiency=0.7)
PCIE5_P2P = LinkSpec(bandwidth_bytes_per_s=63 * GB, latency_s=15e-6, efficiency=0.7)
# FlexGen's T4 machine, PCIe 3.0 x16 (15.75 GB/s): the fitted CPU→GPU bandwidth is 12.89 GiB/s = 13.8 GB/s
# (FMInference/FlexGen experimental/cost_model.py, CostModelConfig.ctog_bdw) → 0.88.
PCIE3_X16_GCP = LinkSpec(bandwidth_bytes_per_s=15.75 * GB, latency_s=10e-6, efficiency=0.88)
# Grace↔Blackwell NVLink-C2C: 900 GB/s bidir per Grace, shared by its 2 GPUs → 225 GB/s per GPU per direction.
NVLINK_C2C_PER_GPU = LinkSpec(bandwidth_bytes_per_s=225 * GB, latency_s=5e-6, efficiency=0.8)

# The Megatron-LM papers' software on Selene (2021-22): fused softmax, no flash attention, gradient
# all-reduce after the backward pass (no overlap).
# The ZeRO-3 rows of Narayanan et al. 2021 Table 2 (DeepSpeed, 2021) run at the same step time on 768 and
# 1536 GPUs: each GPU's NIC carried the whole of every parameter gather (one flat ring, no rail parallelism).
# Blocking pipeline sends: overlap_p2p_comm came to Megatron-LM in f9283c5a8a (2023-05-31).
MEGATRON_2021 = SoftwareSpec(attention="unfused", overlap_grad_reduce=False, zero3_rail_parallel=False,
                             tp_comm_overlap=0.0, overlap_p2p_comm=False)
# Megatron-LM / NeMo on Hopper and Blackwell: Transformer Engine picks cuDNN fused attention over FlashAttention on
# sm90+ ("Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance reasons",
# transformer_engine/pytorch/attention/dot_product_attention/utils.py at 002a3e57).
TE_FUSED_ATTENTION = SoftwareSpec(attention="cudnn")

# --- NVIDIA DGX / HGX -------------------------------------------------------------------------
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
    software=TE_FUSED_ATTENTION,
    source="NVIDIA DGX H100 datasheet",
)
# DGX H800: the DGX H100 chassis and host with H800s (NVLink 400 GB/s bidir); 8×400 Gb/s IB.
DGX_H800 = DGX_H100.model_copy(
    update={
        "name": "dgx-h800",
        "description": "NVIDIA DGX H800: 8× H800-SXM5-80GB, NVLink 400 GB/s bidir, 8×400 Gb/s NDR IB",
        "gpu": H800_SXM,
        "intra_node": NVLINK4_H800,
        "source": "NVIDIA H800 datasheet; host as DGX H100; DeepSeek-V3 technical report §3.2.2 (H800 cluster)",
    }
)
# HGX H200 server with the DGX H200 host: 2× Xeon 8480C, 2 TB DDR5, 8× 3.84 TB NVMe, 8×400 Gb/s.
HGX_H200 = DGX_H100.model_copy(
    update={
        "name": "hgx-h200",
        "description": "HGX H200 8-GPU server: 8× H200-SXM 141GB, NVLink4/NVSwitch, 8×400 Gb/s NDR IB",
        "gpu": H200_SXM,
        "source": "NVIDIA H200 datasheet; host numbers from the NVIDIA DGX H200 datasheet",
    }
)
DGX_B200 = SystemSpec(
    name="dgx-b200",
    description="NVIDIA DGX B200: 8× B200 180GB, NVLink5 1.8 TB/s bidir, 8×400 Gb/s ConnectX-7",
    gpu=B200,
    gpus_per_node=8,
    software=TE_FUSED_ATTENTION,
    intra_node=NVLINK5,
    inter_node=NDR_IB_PER_GPU,
    pcie=PCIE5_X16,
    host_memory_bytes=2 * 1024 * GiB,  # 2 TB DDR5 (up to 4 TB)
    cpu_flops=7.5e12,  # 2× Xeon Platinum 8570: 112 cores × 2.1 GHz × 32
    cpu_memory_bandwidth_bytes_per_s=716.8 * GB,  # 16 channels DDR5-5600
    disk_bytes=30.72 * TB,  # 8× 3.84 TB U.2 NVMe
    disk_read_bytes_per_s=25 * GB,  # as dgx-h100 (same drive count and class)
    disk_write_bytes_per_s=10 * GB,
    source="NVIDIA DGX B200 datasheet",
)
# One NVL72 rack is one "node": 72 GPUs in one NVLink domain. Host per rack: 36 Grace CPUs, each 72 Neoverse V2 cores
# with 480 GB LPDDR5X at 512 GB/s (datasheet: up to 17 TB, 18.4 TB/s); Grace fp32 peak 7.1 TFLOPS (Grace Superchip
# datasheet). Scale-out one ConnectX-7 (400 Gb/s) per GPU: "4x ConnectX-7 IB NDR 400 Gb/s" per tray in MLPerf Training
# v5.1 NVIDIA/systems/{tyche,hsg}_*.json and Wiwynn's Kinabalu; ConnectX-8 (800 Gb/s) came with GB300 (theia_*.json).
GB200_NVL72 = SystemSpec(
    name="gb200-nvl72",
    description="NVIDIA GB200 NVL72: 72× B200 (GB200) in one NVLink5 domain, 36 Grace CPUs, 400 Gb/s per GPU",
    gpu=GB200,
    gpus_per_node=72,
    software=TE_FUSED_ATTENTION,
    # 18 compute trays of 4 GPUs (2 GB200 superchips each); Megatron-Bridge runs use --gpus_per_node 4 and whole
    # trays, larger jobs as equal NVLink segments of ≤ 18 trays (hardware/domains.py has the sources)
    gpus_per_tray=4,
    intra_node=NVLINK5,
    inter_node=NDR_IB_PER_GPU,
    pcie=NVLINK_C2C_PER_GPU,
    host_memory_bytes=36 * 480 * GB,
    cpu_flops=36 * 7.1e12,
    cpu_memory_bandwidth_bytes_per_s=36 * 512 * GB,
    disk_bytes=18 * 4 * 3.84 * TB,  # assumed: 4× 3.84 TB E1.S NVMe per compute tray, 18 trays
    disk_read_bytes_per_s=18 * 4 * 6.9 * GB,  # assumed: PCIe Gen4/5 datacenter NVMe, 6.9 / 4.1 GB/s per drive
    disk_write_bytes_per_s=18 * 4 * 4.1 * GB,
    source="NVIDIA GB200 NVL72 datasheet; NVIDIA Grace CPU Superchip datasheet",
)
# DGX B300: 8× B300, NVLink5 1.8 TB/s bidir per GPU, 8× ConnectX-8 800 Gb/s; 2× Xeon 6776P (64 cores each,
# 2.3 GHz), 2 TB DDR5 (up to 4 TB; 8 channels DDR5-6400 per socket), 8× 3.84 TB U.2 NVMe data drives.
DGX_B300 = DGX_B200.model_copy(
    update={
        "name": "dgx-b300",
        "description": "NVIDIA DGX B300: 8× B300 288GB, NVLink5 1.8 TB/s bidir, 8×800 Gb/s ConnectX-8",
        "gpu": B300,
        "inter_node": XDR_800G_PER_GPU,
        "cpu_flops": 9.4e12,  # 2× Xeon 6776P: 128 cores × 2.3 GHz × 32
        "cpu_memory_bandwidth_bytes_per_s": 819.2 * GB,  # 16 channels DDR5-6400
        "source": "NVIDIA DGX B300 datasheet; NVIDIA HGX B300 datasheet (GPU table)",
    }
)
# GB300 NVL72: the GB200 NVL72 rack with Blackwell Ultra; datasheet host: 2,592 Grace cores (36 CPUs), up to
# 18 TB LPDDR5X at up to 14.3 TB/s, 72 ConnectX-8 (800 Gb/s per GPU), NVLink 130 TB/s (1.8 TB/s per GPU).
GB300_NVL72 = GB200_NVL72.model_copy(
    update={
        "name": "gb300-nvl72",
        "description": "NVIDIA GB300 NVL72: 72× B300 (GB300) in one NVLink5 domain, 36 Grace CPUs, 800 Gb/s per GPU",
        "gpu": GB300,
        "inter_node": XDR_800G_PER_GPU,
        "host_memory_bytes": 18 * TB,
        "cpu_memory_bandwidth_bytes_per_s": 14.3 * TB,
        "source": "NVIDIA GB300 NVL72 datasheet; NVIDIA Grace CPU Superchip datasheet",
    }
)
# HGX H20 server: 8× H20 on NVLink4/NVSwitch (900 GB/s bidir, as H100); host taken as the DGX H100's
# (2× Xeon 8480C, 2 TB DDR5) since HGX servers are built by OEMs; 8×400 Gb/s NDR.
HGX_H20 = DGX_H100.model_copy(
    update={
        "name": "hgx-h20",
        "description": "HGX H20 8-GPU server: 8× H20 96GB, NVLink4/NVSwitch 900 GB/s bidir, 8×400 Gb/s NDR IB",
        "gpu": H20,
        "source": "NVIDIA H20 product brief; host numbers from the NVIDIA DGX H100 datasheet",
    }
)
# --- AMD Instinct platforms -------------------------------------------------------------------
# Host as AMD's MLPerf Inference v4.1 system 8xMI300X_2xEPYC-9374F: 2× 32 cores at 3.85 GHz, 1.5 TiB
# (24× 64 GB DDR5-4800), 2× 3.5 TB NVMe data disks; network 8×400 Gb/s as Azure ND MI300X v5.
MI300X_8 = SystemSpec(
    name="mi300x-8",
    description="AMD Instinct MI300X platform: 8× MI300X 192GB, xGMI fully connected, 8×400 Gb/s",
    gpu=MI300X,
    gpus_per_node=8,
    intra_node=XGMI_MI300,
    inter_node=NDR_IB_PER_GPU,
    pcie=PCIE5_X16,
    host_memory_bytes=1536 * GiB,
    cpu_flops=7.9e12,  # 64 Zen 4 cores × 3.85 GHz × 32
    cpu_memory_bandwidth_bytes_per_s=921.6 * GB,  # 24 channels DDR5-4800
    disk_bytes=7.0 * TB,
    disk_read_bytes_per_s=13.8 * GB,  # assumed 6.9 GB/s read, 4.1 GB/s write per drive (Gen4 U.2 class)
    disk_write_bytes_per_s=8.2 * GB,
    source="AMD MI300X data sheet; mlcommons/inference_results_v4.1 AMD 8xMI300X_2xEPYC-9374F.json; "
    "Azure ND MI300X v5 (8×400 Gb/s NDR)",
)
MI325X_8 = MI300X_8.model_copy(
    update={
        "name": "mi325x-8",
        "description": "AMD Instinct MI325X platform: 8× MI325X 256GB, xGMI fully connected, 8×400 Gb/s",
        "gpu": MI325X,
        "source": "AMD MI325X data sheet (same xGMI as MI300X); host assumed as mi300x-8",
    }
)
# MLPerf Training v5.1 systems of 8× MI355X (AMD/Supermicro AS-4126GS-NMR-LCC, Dell XE9785L: 2× EPYC 9575F);
# host as mi300x-8 otherwise.
MI355X_8 = MI300X_8.model_copy(
    update={
        "name": "mi355x-8",
        "description": "AMD Instinct MI355X platform: 8× MI355X 288GB, xGMI fully connected, 8×400 Gb/s",
        "gpu": MI355X,
        "intra_node": XGMI_MI355,
        "source": "AMD MI355X data sheet; MLPerf Training v5.1 AMD MI355X_EPYC_9575F system; host assumed as mi300x-8",
    }
)
# MLPerf Training v5.1 systems of 8× MI350X (AMD MI350X_EPYC_9575F, Cisco C885A M8): the MI355X platform's xGMI,
# air-cooled at 1000 W per GPU.
MI350X_8 = MI355X_8.model_copy(
    update={
        "name": "mi350x-8",
        "description": "AMD Instinct MI350X platform: 8× MI350X 288GB, xGMI fully connected, 8×400 Gb/s",
        "gpu": MI350X,
        "source": "AMD MI350X (the MI355X die at 2.2 GHz, 1000 W); platform as mi355x-8",
    }
)
# --- PCIe-only servers ------------------------------------------------------------------------
# AWS g6e.48xlarge: 8× L40S, 192 vCPU (96 cores EPYC 7R13, 2.65 GHz), 1,536 GiB, 400 Gbps EFA for the
# instance (50 Gb/s per GPU), 2× 3.8 TB local NVMe.
L40S_8 = SystemSpec(
    name="l40s-8",
    description="8× L40S 48GB on PCIe Gen4 (no NVLink), as AWS g6e.48xlarge: 400 Gbps per instance",
    gpu=L40S,
    gpus_per_node=8,
    intra_node=PCIE4_P2P,
    inter_node=LinkSpec(bandwidth_bytes_per_s=6.25 * GB, latency_s=15e-6, efficiency=0.8),
    pcie=PCIE4_X16,
    host_memory_bytes=1536 * GiB,
    cpu_flops=8.1e12,  # 96 Zen 3 cores × 2.65 GHz × 32
    cpu_memory_bandwidth_bytes_per_s=409.6 * GB,  # 2 sockets × 8 channels DDR4-3200
    disk_bytes=7.6 * TB,
    disk_read_bytes_per_s=6 * GB,  # assumed: AWS publishes no sequential rate for instance-store NVMe
    disk_write_bytes_per_s=3 * GB,
    source="AWS EC2 G6e instance page (g6e.48xlarge); NVIDIA L40S datasheet",
)
# ASUS ESC8000A-E12 as submitted to MLPerf Inference v4.1 (8× H100 PCIe Gen5 x16, 2× EPYC 9374F,
# 16× 64 GB DDR5-4800); assumed 4×400 Gb/s NICs (one per GPU pair) and 4× 3.84 TB NVMe.
H100_PCIE_8 = SystemSpec(
    name="h100-pcie-8",
    description="8× H100 PCIe 80GB on PCIe Gen5 (no NVLink bridges), 2× EPYC 9374F, 4×400 Gb/s",
    gpu=H100_PCIE,
    gpus_per_node=8,
    intra_node=PCIE5_P2P,
    inter_node=LinkSpec(bandwidth_bytes_per_s=25 * GB, latency_s=10e-6, efficiency=0.85),
    pcie=PCIE5_X16,
    host_memory_bytes=1024 * GiB,
    cpu_flops=7.9e12,  # 64 Zen 4 cores × 3.85 GHz × 32
    cpu_memory_bandwidth_bytes_per_s=614.4 * GB,  # 16 channels DDR5-4800
    disk_bytes=15.36 * TB,
    disk_read_bytes_per_s=27.6 * GB,  # assumed 4 drives × 6.9 / 4.1 GB/s
    disk_write_bytes_per_s=16.4 * GB,
    source="mlcommons/inference_results_v4.1 ASUSTeK ESC8000A_E12_H100x8_TRT system description; H100 PCIe datasheet",
)
# --- single-GPU machines (max_nodes=1, no network) -------------------------------------------
# FlexGen's machine (Sheng et al. 2023 §6; FlexGen README): GCP n1-highmem-32 ("Intel Xeon @ 2.00GHz",
# Skylake: 16 cores / 32 vCPU), 208 GB DRAM (GCP GB = GiB), 4× 375 GB local NVMe striped (1.5 TB),
# measured ~2 GB/s read and ~1 GB/s write. FlexGen's fitted cost-model constants are effective rates
# far below these peaks (CPU attention 0.0123 TFLOP/s, disk→CPU 0.473 GiB/s): see experimental/cost_model.py.
GCP_T4 = SystemSpec(
    name="gcp-t4",
    description="FlexGen's machine: GCP n1-highmem-32 with one T4 16GB, 208 GB DRAM, 1.5 TB NVMe",
    gpu=T4,
    gpus_per_node=1,
    intra_node=PCIE3_X16_GCP,
    inter_node=None,
    pcie=PCIE3_X16_GCP,
    host_memory_bytes=208 * GiB,
    cpu_flops=1.02e12,  # 16 Skylake cores × 2.0 GHz × 32
    cpu_memory_bandwidth_bytes_per_s=128 * GB,  # one Skylake-SP socket: 6 channels DDR4-2666
    disk_bytes=4 * 375 * GiB,
    disk_read_bytes_per_s=2.0 * GB,
    disk_write_bytes_per_s=1.0 * GB,
    max_nodes=1,
    # FlexGen's fitted rates on this machine (FMInference/FlexGen@19753bc0 experimental/cost_model.py,
    # CostModelConfig): prefill GEMMs run at mm_flops_p = 21.24 TFLOP/s (the 70 W T4 throttles below the
    # curve's 29 TFLOP/s on hour-long runs); CPU attention at cpu_flops = 0.0123 TFLOP/s for 4·b·s·h FLOPs,
    # which are exactly the fp16 K and V bytes it reads: 12.3 GB/s of KV cache.
    gpu_sustained_matmul_flops=21.24e12,
    cpu_attention_bytes_per_s=12.3 * GB,
    source="Sheng et al. 2023 (FlexGen) §6 setup and README; FMInference/FlexGen experimental/cost_model.py "
    "(fitted T4 constants); published_calibration.json flexgen-* hardware block; GCP n1 machine types",
)
# The workstation as specified in the Foundation issue: RTX A6000, 252 GiB DRAM (256 GB of DIMMs as the
# OS reports it), NVMe at 5.6 GB/s read, PCIe 4.0 x16. CPU not given: assumed a 32-core workstation
# part with 8 channels of DDR4-3200 (Threadripper PRO 5975WX class, 3.6 GHz); write rate assumed.
A6000_WS = SystemSpec(
    name="a6000-ws",
    description="Workstation: one RTX A6000 48GB, 252 GB DRAM, NVMe 5.6 GB/s read, PCIe 4.0 x16",
    gpu=RTX_A6000,
    gpus_per_node=1,
    intra_node=PCIE4_X16,
    pcie=PCIE4_X16,
    host_memory_bytes=252 * GiB,
    cpu_flops=3.7e12,  # assumed 32 cores × 3.6 GHz × 32
    cpu_memory_bandwidth_bytes_per_s=204.8 * GB,  # assumed 8 channels DDR4-3200
    disk_bytes=2 * TB,  # assumed
    disk_read_bytes_per_s=5.6 * GB,
    disk_write_bytes_per_s=4.0 * GB,  # assumed (PCIe 4.0 NVMe class)
    max_nodes=1,
    source="Foundation issue (GPU, DRAM, NVMe read rate); NVIDIA RTX A6000 datasheet",
)
# Typical desktops (a choice, documented): dual-channel DDR, one PCIe 4.0 x16 slot, one Gen4 NVMe.
# RTX 3090 PC: Ryzen 9 5950X (16 cores, 3.4 GHz), 64 GB DDR4-3200, Samsung 980 PRO 2 TB (7.0 / 5.1 GB/s).
RTX3090_PC = SystemSpec(
    name="rtx3090-pc",
    description="Desktop: one RTX 3090 24GB, Ryzen 9 5950X, 64 GB DDR4-3200, Gen4 NVMe",
    gpu=RTX3090,
    gpus_per_node=1,
    intra_node=PCIE4_X16,
    pcie=PCIE4_X16,
    host_memory_bytes=64 * GiB,
    cpu_flops=1.74e12,  # 16 Zen 3 cores × 3.4 GHz × 32
    cpu_memory_bandwidth_bytes_per_s=51.2 * GB,  # 2 channels DDR4-3200
    disk_bytes=2 * TB,
    disk_read_bytes_per_s=7.0 * GB,
    disk_write_bytes_per_s=5.1 * GB,
    max_nodes=1,
    source="AMD Ryzen 9 5950X and Samsung 980 PRO product pages; GA102 whitepaper",
)
# RTX 4090 PC: Ryzen 9 7950X (16 cores, 4.5 GHz), 128 GB DDR5 as 4 DIMMs (AMD rates 2 DIMMs per channel
# at DDR5-3600), Samsung 990 PRO 2 TB (7.45 / 6.9 GB/s).
RTX4090_PC = SystemSpec(
    name="rtx4090-pc",
    description="Desktop: one RTX 4090 24GB, Ryzen 9 7950X, 128 GB DDR5, Gen4 NVMe",
    gpu=RTX4090,
    gpus_per_node=1,
    intra_node=PCIE4_X16,
    pcie=PCIE4_X16,
    host_memory_bytes=128 * GiB,
    cpu_flops=2.3e12,  # 16 Zen 4 cores × 4.5 GHz × 32
    cpu_memory_bandwidth_bytes_per_s=57.6 * GB,  # 2 channels DDR5-3600
    disk_bytes=2 * TB,
    disk_read_bytes_per_s=7.45 * GB,
    disk_write_bytes_per_s=6.9 * GB,
    max_nodes=1,
    source="AMD Ryzen 9 7950X and Samsung 990 PRO product pages; Ada architecture whitepaper",
)

SYSTEMS: dict[str, SystemSpec] = {
    s.name: s
    for s in (
        DGX_A100_40GB, DGX_A100_80GB, DGX_H100, DGX_H800, HGX_H200, HGX_H20, DGX_B200, GB200_NVL72, DGX_B300,
        GB300_NVL72, MI300X_8, MI325X_8, MI355X_8, MI350X_8,
        L40S_8, H100_PCIE_8, GCP_T4, A6000_WS, RTX3090_PC, RTX4090_PC,
    )
}
