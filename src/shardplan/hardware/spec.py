"""What the machines are: GPUs, links, nodes, and a cluster of N GPUs built from a system preset.

All quantities are SI with the unit in the field name (bytes, bytes_per_s, flops, s). Achievable
efficiencies are data here (overridable by the user in a YAML/JSON file), never constants in code.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
Positive = Annotated[float, Field(gt=0.0)]
NonNeg = Annotated[float, Field(ge=0.0)]

# Datatypes that can carry a peak rate. int4/fp4 weights are dequantised to the compute dtype.
PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")


class AttentionKernel(StrEnum):
    """How core attention runs on a system's software stack."""

    FLASH = "flash"
    """Fused IO-aware kernel (FlashAttention-2/3, cuDNN): no s² tensor in memory, causal blocks skipped."""
    UNFUSED = "unfused"
    """Batched GEMMs plus a fused softmax kernel (Megatron-LM 2021–22): the s² scores pass through HBM."""


class LinkSpec(BaseModel):
    """A communication link as seen by one GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bandwidth_bytes_per_s: Positive = Field(description="Peak bandwidth per GPU, one direction.")
    latency_s: NonNeg = Field(description="Per-message (per ring step) latency.")
    efficiency: Fraction = Field(0.8, description="Achievable fraction of peak for large messages.")

    @property
    def effective_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency


class GpuSpec(BaseModel):
    """One accelerator: memory, peak rates per datatype, and what fraction of peak is achievable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Catalog name, e.g. h100-sxm.")
    vendor: str = Field("nvidia", description="nvidia, amd, …")
    memory_bytes: Annotated[int, Field(gt=0)] = Field(description="Device memory (HBM/GDDR) in bytes.")
    memory_bandwidth_bytes_per_s: Positive = Field(description="Peak device-memory bandwidth.")
    peak_flops: dict[str, Positive] = Field(
        description="Dense (no sparsity) peak FLOP/s per datatype: fp32, tf32, bf16, fp16, fp8, int8, fp4."
    )
    matmul_efficiency: list[tuple[Positive, Fraction]] = Field(
        description="Achieved fraction of peak for one GEMM vs its FLOPs, as (flops, fraction) points; "
        "interpolated in log(flops), clamped at the ends."
    )
    memory_efficiency: list[tuple[Positive, Fraction]] = Field(
        description="Achieved fraction of peak memory bandwidth vs bytes moved by one kernel, as points."
    )
    attention_efficiency: Fraction = Field(
        0.55, description="Fused (flash) attention forward: fraction of the matmul peak it reaches."
    )
    kernel_launch_s: NonNeg = Field(4e-6, description="Floor on any one kernel's time (launch + tail).")
    tdp_w: NonNeg = Field(0.0, description="Board power, for reference.")
    source: str = Field("", description="Datasheet or measurement the numbers come from.")

    @field_validator("peak_flops")
    @classmethod
    def _known_dtypes(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(set(v) - set(PEAK_DTYPES))
        if bad:
            raise ValueError(f"unknown datatype(s) {bad}; allowed: {', '.join(PEAK_DTYPES)}")
        if not ({"bf16", "fp16"} & set(v)):
            raise ValueError("needs a bf16 or fp16 peak")
        return v

    @field_validator("matmul_efficiency", "memory_efficiency")
    @classmethod
    def _sorted(cls, v: list[tuple[float, float]]) -> list[tuple[float, float]]:
        if not v:
            raise ValueError("needs at least one (size, fraction) point")
        xs = [x for x, _ in v]
        if xs != sorted(xs) or len(set(xs)) != len(xs):
            raise ValueError("points must be sorted by size, without repeats")
        return v

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for a compute datatype, falling back along fp8→bf16→fp16→fp32 where absent."""
        chain = {
            "fp4": ("fp4", "fp8", "bf16", "fp16"),
            "fp8": ("fp8", "bf16", "fp16"),
            "int8": ("int8", "fp16", "bf16"),
            "bf16": ("bf16", "fp16"),
            "fp16": ("fp16", "bf16"),
            "tf32": ("tf32", "fp32"),
            "fp32": ("fp32",),
        }[dtype]
        for d in chain:
            if d in self.peak_flops:
                return self.peak_flops[d]
        return self.peak_flops.get("fp32", min(self.peak_flops.values()))


class SoftwareSpec(BaseModel):
    """The software stack the efficiencies were measured with (kernels and overlap behaviour)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attention: AttentionKernel = Field(AttentionKernel.FLASH, description="Core-attention implementation.")
    overlap_grad_reduce: bool = Field(True, description="Data-parallel gradient reduction overlaps backward.")
    overlap_param_gather: bool = Field(True, description="ZeRO-3 parameter all-gathers overlap compute.")
    zero3_overlap_fraction: Fraction = Field(
        0.8, description="Share of ZeRO-3 communication hidden behind compute when overlap is on."
    )
    zero3_rail_parallel: bool = Field(
        True, description="ZeRO-3 gathers spread a node's share over all its NICs (NCCL rings per rail); "
        "False: one flat ring, each GPU's NIC carries the whole (n−1)/n of every gather."
    )
    step_overhead_fraction: NonNeg = Field(
        0.0, description="Unmodelled per-step time (data loading, logging, host sync) as a fraction."
    )


class SystemSpec(BaseModel):
    """A node design (GPUs, links, host) from which clusters of any size are built."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Catalog name, e.g. dgx-h100.")
    description: str = Field("", description="What machine this is.")
    gpu: GpuSpec = Field(description="The GPU in every slot.")
    gpus_per_node: Annotated[int, Field(ge=1)] = Field(description="GPUs sharing the fast intra-node fabric.")
    intra_node: LinkSpec = Field(description="GPU↔GPU inside a node (NVLink/xGMI or PCIe).")
    inter_node: LinkSpec | None = Field(None, description="GPU↔GPU across nodes, per GPU (None: one node only).")
    pcie: LinkSpec = Field(description="Host↔GPU link, per GPU.")
    host_memory_bytes: Annotated[int, Field(gt=0)] = Field(description="CPU DRAM per node.")
    cpu_flops: Positive = Field(1e12, description="CPU fp32 FLOP/s per node, for CPU-side compute.")
    cpu_memory_bandwidth_bytes_per_s: Positive = Field(1e11, description="CPU DRAM bandwidth per node.")
    disk_bytes: NonNeg = Field(0.0, description="Local disk capacity per node.")
    disk_read_bytes_per_s: NonNeg = Field(0.0, description="Disk sequential read bandwidth per node.")
    disk_write_bytes_per_s: NonNeg = Field(0.0, description="Disk sequential write bandwidth per node.")
    max_nodes: Annotated[int, Field(ge=1)] | None = Field(None, description="Largest cluster of this kind.")
    software: SoftwareSpec = Field(default_factory=SoftwareSpec, description="Software stack defaults.")
    source: str = Field("", description="Where the numbers come from.")


class Cluster(BaseModel):
    """N GPUs of one system kind: whole nodes when more than one node is used."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    system: SystemSpec
    num_gpus: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _check(self) -> Self:
        g, n = self.system.gpus_per_node, self.num_gpus
        if n > g and n % g:
            raise ValueError(f"gpus ({n}) must be ≤ {g} or a multiple of {g} (GPUs per node of {self.system.name})")
        if n > g and self.system.inter_node is None:
            raise ValueError(f"gpus ({n}) exceeds one node of {self.system.name} ({g}), which has no network")
        if self.system.max_nodes and self.num_nodes > self.system.max_nodes:
            raise ValueError(f"gpus ({n}) exceeds {self.system.max_nodes} nodes of {self.system.name}")
        return self

    @property
    def gpu(self) -> GpuSpec:
        return self.system.gpu

    @property
    def gpus_per_node(self) -> int:
        return min(self.system.gpus_per_node, self.num_gpus)

    @property
    def num_nodes(self) -> int:
        return max(1, -(-self.num_gpus // self.system.gpus_per_node))
