"""Inputs of the offload cost model: workload, placement policy, tier capacities, and knob arrays.

An offloading run (FlexGen, Sheng et al. 2023) generates ``gen_len`` tokens for a *block* of
``gpu_batch_size × num_gpu_batches`` prompts on one GPU. Three tensor classes — weights, KV cache and
activations (the hidden states between sublayers) — are split over three tiers (GPU, CPU, disk) by
fractions that sum to one per class. The split is byte-exact (a runtime that splits tensors), so every
time and memory term is linear in the fractions for fixed batch knobs (what the CP-SAT planner needs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from shardplan.errors import ShardplanError
from shardplan.hardware.spec import SystemSpec

CLASSES = ("weights", "kv_cache", "activations")
TIERS = ("gpu", "cpu", "disk")
W, KV, ACT = 0, 1, 2  # class indices
GPU, CPU, DISK = 0, 1, 2  # tier indices

Frac = Annotated[float, Field(ge=0.0, le=1.0)]
PosInt = Annotated[int, Field(ge=1)]


class OffloadObjective(StrEnum):
    """What an offload plan is judged by."""

    THROUGHPUT = "throughput"
    """Generated tokens per second over the whole block (FlexGen's generation throughput): large blocks win."""
    LATENCY = "latency"
    """Time from the start of prefill to the last generated token of one request (the block's total time)."""


class Placement(BaseModel):
    """Fractions of one tensor class on GPU, CPU and disk (they sum to 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: Frac = Field(description="Fraction resident in GPU memory.")
    cpu: Frac = Field(description="Fraction in CPU (host) memory, streamed over PCIe when used.")
    disk: Frac = Field(description="Fraction on disk, read through host memory when used.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        total = self.gpu + self.cpu + self.disk
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"gpu + cpu + disk must be 1 (got {self.gpu:g} + {self.cpu:g} + {self.disk:g})")
        return self

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.gpu, self.cpu, self.disk)

    @classmethod
    def of(cls, g: float, c: float, d: float) -> Placement:
        return cls(gpu=g, cpu=c, disk=d)


class OffloadWorkload(BaseModel):
    """What is generated: prompt and generation lengths, and the datatype weights and KV are kept in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_len: PosInt = Field(description="Prompt tokens per sequence (prefill).")
    gen_len: PosInt = Field(description="Generated tokens per sequence (the first one comes from prefill).")
    dtype: Literal["fp16", "bf16"] = Field("fp16", description="Datatype of weights, activations and KV cache.")
    decode_segments: PosInt | None = Field(
        None, description="Decode steps are costed in this many equal segments, each at its mean KV length "
        "(None: one per quarter of growth of the KV cache, at most 4).")

    @property
    def segments(self) -> int:
        """Decode segments: enough that the KV length changes by at most a quarter of its final size within one
        (every term is linear in it, so only a change of the binding resource inside a segment costs accuracy)."""
        if self.decode_segments is not None:
            return self.decode_segments
        growth = (self.gen_len - 1) / (self.prompt_len + self.gen_len - 1)
        return max(1, min(4, math.ceil(4 * growth - 1e-9)))


class OffloadPolicy(BaseModel):
    """One point of the offload space: the block, the placement and the runtime switches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_batch_size: PosInt = Field(description="Sequences computed together on the GPU.")
    num_gpu_batches: PosInt = Field(description="GPU batches sharing one load of each layer's weights (the block).")
    weights: Placement
    kv_cache: Placement
    activations: Placement
    cpu_attention: bool = Field(False, description="Decode attention over the CPU/disk KV cache runs on the CPU.")
    compress_weights: bool = Field(False, description="Weights stored as 4-bit group-wise (g=64) quantised values.")
    compress_kv_cache: bool = Field(False, description="KV cache stored as 4-bit group-wise quantised values.")
    pin_weights: bool = Field(True, description="CPU-resident weights in pinned memory (direct DMA to the GPU).")

    @property
    def block_size(self) -> int:
        return self.gpu_batch_size * self.num_gpu_batches

    def fractions(self) -> np.ndarray:
        """Placement as a (class, tier) array of fractions."""
        return np.array([self.weights.as_tuple(), self.kv_cache.as_tuple(), self.activations.as_tuple()])


class Capacities(BaseModel):
    """Bytes each tier may hold for this run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_bytes: float = Field(ge=0, description="GPU memory for the run (device memory less a framework reserve).")
    cpu_bytes: float = Field(ge=0, description="Host memory for the run (DRAM less the OS share, or --cpu-mem).")
    disk_bytes: float = Field(ge=0, description="Disk space for the run.")

    def as_array(self) -> np.ndarray:
        """Capacities per memory constraint: GPU (prefill peak), GPU (decode peak), CPU, disk."""
        return np.array([self.gpu_bytes, self.gpu_bytes, self.cpu_bytes, self.disk_bytes])


# CUDA context, cuBLAS workspaces and allocator fragmentation: a share of device memory no tensor can use.
GPU_RESERVE_FRACTION = 0.05
# Operating system, page cache and the runtime itself: a share of DRAM the run cannot use (FlexGen's own
# cost model plans with 204 of the T4 machine's 208 GB; 5% leaves ~10 GiB there).
HOST_RESERVE_FRACTION = 0.05


def default_capacities(system: SystemSpec, *, gpu_mem: float | None = None, cpu_mem: float | None = None,
                       disk: float | None = None) -> Capacities:
    """Tier capacities: the machine's, less reserves; explicit sizes are taken as given."""
    return Capacities(
        gpu_bytes=gpu_mem if gpu_mem is not None else system.gpu.memory_bytes * (1 - GPU_RESERVE_FRACTION),
        cpu_bytes=cpu_mem if cpu_mem is not None else system.host_memory_bytes * (1 - HOST_RESERVE_FRACTION),
        disk_bytes=disk if disk is not None else system.disk_bytes,
    )


@dataclass(frozen=True, slots=True)
class Knobs:
    """Batch and runtime knobs of many candidate rows (one entry per row), for vectorised tables."""

    gpu_batch: np.ndarray  # sequences per GPU batch, b
    num_batches: np.ndarray  # GPU batches per block, K
    cpu_attention: np.ndarray  # bool
    compress_weights: np.ndarray  # bool
    compress_kv: np.ndarray  # bool
    pin_weights: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.gpu_batch)

    @classmethod
    def of(cls, *, gpu_batch: np.ndarray | list[int], num_batches: np.ndarray | list[int],
           cpu_attention: np.ndarray | list[bool], compress_weights: np.ndarray | list[bool],
           compress_kv: np.ndarray | list[bool], pin_weights: np.ndarray | list[bool] | None = None) -> Knobs:
        b = np.asarray(gpu_batch, dtype=np.int64)
        pin = np.ones(len(b), dtype=bool) if pin_weights is None else np.asarray(pin_weights, dtype=bool)
        return cls(b, np.asarray(num_batches, dtype=np.int64), np.asarray(cpu_attention, dtype=bool),
                   np.asarray(compress_weights, dtype=bool), np.asarray(compress_kv, dtype=bool), pin)

    @classmethod
    def from_policy(cls, p: OffloadPolicy) -> Knobs:
        return cls.of(gpu_batch=[p.gpu_batch_size], num_batches=[p.num_gpu_batches], cpu_attention=[p.cpu_attention],
                      compress_weights=[p.compress_weights], compress_kv=[p.compress_kv_cache],
                      pin_weights=[p.pin_weights])

    def take(self, idx: np.ndarray) -> Knobs:
        return Knobs(*(getattr(self, f)[idx] for f in self.__slots__))

    @property
    def block(self) -> np.ndarray:
        return self.gpu_batch * self.num_batches


def check_system(system: SystemSpec) -> None:
    """Offloading plans for one GPU of a system whose host has memory and a PCIe link."""
    if system.pcie.effective_bytes_per_s <= 0:
        raise ShardplanError(f"{system.name} has no host link to offload over", field="hardware")
