"""Typed results of a training estimate: what the CLI renders and ``--json`` prints.

Field names follow the JSON contract of DESIGN.md (``status plan metrics memory`` plus ``layers`` and
``stages``); SI units, bytes per GPU.
"""

from __future__ import annotations

from pydantic import Field

from shardplan.costmodel.core.result import Out, ResultHead


class OffloadOut(Out):
    weights: float = Field(description="Fraction of weights kept on the CPU and streamed in.")
    optimizer: float = Field(description="Fraction of optimizer state (and its update) on the CPU.")
    activations: float = Field(description="Fraction of stored activations kept on the CPU.")


class TrainPlanOut(Out):
    tp: int
    pp: int
    dp: int
    ep: int
    cp: int
    microbatch_size: int
    num_microbatches: int
    global_batch: int
    interleave: int
    recompute: str
    recompute_layers: int | None = Field(description="Fully recomputed layers per stage (None: all).")
    zero_stage: int
    sequence_parallel: bool
    offload: OffloadOut


class TrainMetrics(Out):
    step_time_s: float
    tokens_per_s: float
    mfu: float = Field(description="Model FLOPs (no recompute, full attention) / (time · GPUs · peak).")
    hfu: float = Field(description="Executed FLOPs (with recompute) / (time · GPUs · peak).")
    tflops_per_gpu: float = Field(description="Executed TFLOP/s per GPU (Narayanan et al. 2021 convention).")
    bubble_fraction: float
    pipeline_s: float
    bubble_s: float
    tp_exposed_s: float
    pp_exposed_s: float
    dp_exposed_s: float
    zero3_exposed_s: float
    ep_exposed_s: float
    cp_exposed_s: float
    optimizer_s: float


class MemoryOut(Out):
    stage: str = Field(description="The stage whose memory binds (first, middle, last).")
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    kv_cache_bytes: float = 0.0
    framework_bytes: float
    total_bytes: float
    capacity_bytes: float
    cpu_bytes: float = Field(description="Offloaded bytes per GPU in host memory.")
    host_bytes_per_node: float
    host_capacity_bytes: float


class LayerRow(Out):
    stage: str
    kind: str
    count: int
    fwd_flops: float
    bwd_flops: float
    recompute_flops: float
    fwd_time_s: float
    bwd_time_s: float
    recompute_time_s: float
    hbm_bytes: float
    comm_tp_s: float
    comm_cp_s: float
    comm_ep_s: float
    params: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float


class StageRow(Out):
    stage: str
    index: int
    layers: int
    moe_layers: int
    fwd_time_s: float = Field(description="Per microbatch, including pipeline sends.")
    bwd_time_s: float = Field(description="Per microbatch, including recompute and pipeline sends.")
    recompute_time_s: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    framework_bytes: float
    total_bytes: float
    capacity_bytes: float
    fits: bool


class TrainReport(ResultHead):
    num_gpus: int
    seq_len: int
    plan: TrainPlanOut
    metrics: TrainMetrics
    memory: MemoryOut
    stages: list[StageRow]
    layers: list[LayerRow]
