"""Catalog of GPUs and systems. Plain dicts of validated specs; every number carries its source.

The data lives in ``gpus.py`` (GPUs and efficiency curves) and ``systems.py`` (links and node designs);
this module re-exports it and holds the lookups. Peak rates are dense (no sparsity) datasheet values, as
in ``published_calibration.json`` (kind ``hardware``). Achievable efficiencies are measured fractions
(torchao ``roofline_utils.py``, NCCL tests, the Megatron-LM runs in ``shardplan/data/``); where a GPU has no
measurement of its own, it borrows the curve of its architecture sibling and says so.
"""

from __future__ import annotations

from shardplan.errors import UnknownNameError

# Names that lived here before the data moved to gpus.py / systems.py stay importable from here.
from shardplan.hardware.gpus import (
    A100_40GB,
    A100_80GB,
    AMPERE_MATMUL,
    GPUS,
    H100_SXM,
    HBM_MEMORY,
    HOPPER_MATMUL,
    T4,
)
from shardplan.hardware.spec import GpuSpec, SystemSpec
from shardplan.hardware.systems import (
    DGX_A100_40GB,
    DGX_A100_80GB,
    DGX_H100,
    GCP_T4,
    HDR_IB_PER_GPU,
    MEGATRON_2021,
    NDR_IB_PER_GPU,
    NVLINK3,
    NVLINK4,
    PCIE3_X16,
    PCIE4_X16,
    PCIE5_X16,
    SYSTEMS,
)

__all__ = [
    "A100_40GB", "A100_80GB", "AMPERE_MATMUL", "DGX_A100_40GB", "DGX_A100_80GB", "DGX_H100", "GCP_T4", "GPUS",
    "H100_SXM", "HBM_MEMORY", "HDR_IB_PER_GPU", "HOPPER_MATMUL", "MEGATRON_2021", "NDR_IB_PER_GPU", "NVLINK3",
    "NVLINK4", "PCIE3_X16", "PCIE4_X16", "PCIE5_X16", "SYSTEMS", "T4", "generic_system", "get_gpu", "get_system",
]


def get_gpu(name: str) -> GpuSpec:
    """A GPU preset by name (case-insensitive); unknown names suggest close matches."""
    key = name.strip().lower()
    if key not in GPUS:
        raise UnknownNameError("GPU", name, GPUS, field="gpu", listing="`shardplan hardware list`")
    return GPUS[key]


def get_system(name: str) -> SystemSpec:
    """A system preset by name (case-insensitive); unknown names suggest close systems and GPUs."""
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
        host_memory_bytes=1024 * 1024**3,
    )
