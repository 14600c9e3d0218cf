"""Typed results of an offload estimate (what the CLI renders and ``--json`` prints).

Field names follow DESIGN.md's JSON contract for the offload job: ``plan`` (fractions 0–1 per tier),
``metrics.tokens_per_s`` and ``memory`` (GPU side, plus ``cpu_bytes`` and ``disk_bytes``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shardplan.costmodel.core.result import Out, ResultHead


class TierSplit(Out):
    gpu: float = Field(description="Fraction on the GPU.")
    cpu: float = Field(description="Fraction in CPU memory.")
    disk: float = Field(description="Fraction on disk.")


class OffloadPlanOut(Out):
    gpu_batch_size: int
    num_gpu_batches: int
    block_size: int = Field(description="Sequences generated together: gpu_batch_size × num_gpu_batches.")
    weights: TierSplit
    kv_cache: TierSplit
    activations: TierSplit
    cpu_attention: bool = Field(description="Decode attention over the CPU/disk KV cache runs on the CPU.")
    compression: bool = Field(description="4-bit group-wise compression of weights or KV cache is used.")
    compress_weights: bool
    compress_kv_cache: bool
    pin_weights: bool


class OffloadMetrics(Out):
    tokens_per_s: float = Field(description="Generated tokens per second: block × gen_len / (prefill + decode).")
    prefill_s: float = Field(description="Prefill of the whole block (all layers).")
    decode_s: float = Field(description="All decode steps of the whole block.")
    total_s: float = Field(description="prefill_s + decode_s: the latency of every request in the block.")
    prefill_tokens_per_s: float = Field(description="Prompt tokens processed per second in prefill.")
    decode_tokens_per_s: float = Field(description="Tokens generated per second in the decode steps.")
    layer_prefill_s: float = Field(description="One layer's prefill for the block.")
    layer_decode_s: float = Field(description="One layer's decode step for the block (mean over steps).")


class ResourceRow(Out):
    phase: Literal["prefill", "decode"]
    resource: str = Field(description="gpu, cpu, pcie_h2d, pcie_d2h, disk_read, disk_write.")
    busy_s: float = Field(description="Time the resource is busy in the phase (whole run).")
    binding_s: float = Field(description="Time the phase waits on this resource (it is the slowest one).")


class TierMemory(Out):
    tier: Literal["gpu", "cpu", "disk"]
    weights_bytes: float
    kv_cache_bytes: float
    activations_bytes: float
    working_bytes: float = Field(description="Buffers: streamed weights/KV/hidden states, intermediates, workspaces.")
    total_bytes: float
    capacity_bytes: float
    phase: str = Field("", description="For the GPU: the phase whose peak binds (prefill or decode).")


class OffloadMemoryOut(Out):
    weights_bytes: float = Field(description="GPU-resident weights.")
    gradients_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    activations_bytes: float = Field(description="GPU-resident hidden states of the block.")
    kv_cache_bytes: float = Field(description="GPU-resident KV cache.")
    working_bytes: float = Field(description="GPU buffers and intermediates at the binding phase.")
    total_bytes: float = Field(description="GPU peak.")
    capacity_bytes: float = Field(description="GPU memory available to the run.")
    cpu_bytes: float
    cpu_capacity_bytes: float
    disk_bytes: float
    disk_capacity_bytes: float
    tiers: list[TierMemory]


class OffloadReport(ResultHead):
    prompt_len: int
    gen_len: int
    plan: OffloadPlanOut
    metrics: OffloadMetrics
    bottleneck: dict[str, str] = Field(description="Per phase, the resource that bounds it.")
    resources: list[ResourceRow]
    memory: OffloadMemoryOut
