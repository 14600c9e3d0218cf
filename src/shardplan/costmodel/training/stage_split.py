"""Per-pipeline-rank costs of one global layout, as functions of the rank's layers, recompute and offload.

The uniform rule of ``stages.py`` costs three representative stages; here every pipeline rank ``i`` of one
global layout (TP, PP, DP, CP, EP, microbatch, interleave ``v``, SP, ZeRO) gets its own layer count ``n_i``,
fully recomputed layers ``k_i`` (under ``--recompute full``) and share of stored activations on the CPU
(integer percent ``f_i``). A rank's time per microbatch and its memory come from the same ``_stage`` formula
``train_cost`` uses, on a synthetic stage shape: rank 0 holds the embedding, rank ``p−1`` the LM head;
with ``v > 1`` a rank's ``n_i`` layers form ``v`` chunks (the first chunks take the remainder).

Step composition is ``train_cost``'s: ``(m + (p−1)/v)·max_i t_i`` for the pipeline (times the simulated
schedule's excess when a rank's layers do not divide into its chunks: ``pipeline_sim.chunk_factor``), plus rank 0's
data-parallel sync, ZeRO-3 gathers and optimizer step (rank 0 finishes its last backward last in 1F1B and
interleaved schedules), times ``1 + step_overhead``, plus a calibration's per-microbatch and per-step overheads.
With the uniform split it equals ``train_cost``.

MoE placement: every layer after ``first_dense_layers`` is MoE (``layer_freq == 1``), and a rank's layers are one
contiguous range of the model, as the uniform rule counts them too. The per-stage search keeps all dense-first layers
on rank 0 (``n_0 ≥ first_dense_layers``), so a rank's MoE count depends on its own ``n_i`` only; a pinned split
(``evaluate_split``) may spread them over the first ranks (``dense_first_per_rank``). Without interleaving that is
Megatron's placement; with ``v`` chunks Megatron fills chunk 0 of every rank first, so dense-first layers beyond rank
0's first chunk sit on the next ranks' first chunks: not modelled (it moves expert weights between the first ranks'
memory; a dense and an MoE layer of DeepSeek-V3 do the same GEMM FLOPs, so step time barely moves).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core.layouts import uniform_kinds
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.dp_sync import data_parallel, optimizer_time
from shardplan.costmodel.training.evaluate import gpu_capacity, host_capacity
from shardplan.costmodel.training.layout import (
    LayoutArrays,
    TrainLayout,
    TrainWorkload,
    fill_drain_slots,
    pipeline_schedules,
)
from shardplan.costmodel.training.pipeline_sim import chunk_factor, uneven_chunks
from shardplan.costmodel.training.stages import KindCost, StageShape, kind_costs
from shardplan.costmodel.training.step import StageCost, _stage
from shardplan.errors import ShardplanError
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec


def supports_stage_split(model: ModelSpec) -> bool:
    """Per-rank layer kinds are a function of the rank's own layer count only when every layer has the same token
    mixer (no layer pattern) and MoE layers are contiguous."""
    return model.layer_pattern is None and (model.moe is None or model.moe.layer_freq == 1)


def min_first_layers(model: ModelSpec) -> int:
    """The per-stage search keeps every dense-first layer of an MoE model on rank 0 (so later ranks are all MoE)."""
    return model.moe.first_dense_layers if model.moe is not None else 0


@dataclass(frozen=True, slots=True)
class RankCosts:
    """Options of pipeline ranks (one entry per option): time per microbatch, rank-0 tail, memory."""

    rank: np.ndarray
    layers: np.ndarray
    recompute_layers: np.ndarray  # fully recomputed layers (meaningful under --recompute full)
    offload_pct: np.ndarray  # integer percent of stored activations on the CPU
    per_mb_s: np.ndarray  # forward + backward (+ recompute, sends, exposed offload) per microbatch
    tail_s: np.ndarray  # DP sync + ZeRO-3 gathers + optimizer step if this rank were rank 0 of the step
    dp_s: np.ndarray  # the three parts of tail_s
    zero3_s: np.ndarray
    optimizer_s: np.ndarray
    memory_bytes: np.ndarray  # GPU bytes
    host_bytes: np.ndarray  # offloaded bytes per GPU in host memory
    stored_inflight_bytes: np.ndarray  # activation bytes an offload percent point moves (×100)
    stage: StageCost

    def __len__(self) -> int:
        return len(self.rank)


def dense_first_per_rank(model: ModelSpec, stage_layers: list[int]) -> list[int]:
    """Dense-first layers on each rank of a fixed split, its layers taken as one contiguous range (see the module
    docstring): rank i holds those of ``[0, first_dense_layers)`` in ``[n_0 + … + n_{i−1}, … + n_i)``."""
    fd = model.moe.first_dense_layers if model.moe is not None else 0
    starts = np.concatenate([[0], np.cumsum(stage_layers)[:-1]])
    return [int(max(0, min(a + n, fd) - a)) for a, n in zip(starts, stage_layers, strict=True)]


def moe_layers_of(model: ModelSpec, rank: np.ndarray, layers: np.ndarray,
                  dense_first: np.ndarray | None = None) -> np.ndarray:
    """MoE layers of each option: its layers less its dense-first ones (``dense_first`` per option, else all of
    them on rank 0)."""
    if model.moe is None:
        return np.zeros_like(layers, dtype=float)
    if dense_first is None:
        dense_first = np.where(rank == 0, np.minimum(layers, model.moe.first_dense_layers), 0)
    return (layers - dense_first).astype(float)


def rank_shape(name: str, model: ModelSpec, rank: np.ndarray, layers: np.ndarray, p: int,
               dense_first: np.ndarray | None = None) -> StageShape:
    """One pipeline rank as a stage shape: its layers, their kinds, the embedding on rank 0, the head on the last."""
    moe = moe_layers_of(model, np.asarray(rank).astype(np.int64), layers, dense_first)
    layers = np.asarray(layers, dtype=float)
    return StageShape(name, np.asarray(rank, dtype=float), layers, moe, rank == 0, rank == p - 1,
                      np.ones(np.shape(layers), dtype=bool), uniform_kinds(model, layers, moe))


def layout_kinds(model: ModelSpec, system: SystemSpec, work: TrainWorkload, layout: TrainLayout
                 ) -> dict[str, KindCost]:
    """Per-layer-kind costs of one layout (one row; they broadcast over a rank's options)."""
    return kind_costs(Ctx(model, system, work, LayoutArrays.from_layouts([layout], work.global_batch)))


def rank_costs(model: ModelSpec, system: SystemSpec, work: TrainWorkload, layout: TrainLayout,
               rank: np.ndarray, layers: np.ndarray, recompute_layers: np.ndarray,
               offload_pct: np.ndarray, kinds: dict[str, KindCost] | None = None,
               dense_first: np.ndarray | None = None) -> RankCosts:
    """Cost every option (rank, layers, full-recompute layers, activation offload %) of one global layout
    (``kinds``: ``layout_kinds`` of it, when the caller has them; ``dense_first``: each option's dense-first
    layers, else rank 0 holds them all)."""
    rank, layers = np.asarray(rank, dtype=np.int64), np.asarray(layers, dtype=np.int64)
    rk, pct = np.asarray(recompute_layers, dtype=np.int64), np.asarray(offload_pct, dtype=np.int64)
    n = len(rank)
    base = LayoutArrays.from_layouts([layout], work.global_batch)
    rows = base.take(np.zeros(n, dtype=np.int64)).replace(rk=rk, f_act=pct / 100.0)
    ctx = Ctx(model, system, work, rows)
    kinds = kinds if kinds is not None else layout_kinds(model, system, work, layout)
    p = layout.pp
    fl = layers.astype(float)
    shape = rank_shape("rank", model, rank, fl, p, dense_first)
    m = (rows.gb / (rows.dp * rows.mb)).astype(float)
    st = _stage(ctx, kinds, shape, m)
    dp_exposed, z3 = data_parallel(ctx, st, m)
    opt = optimizer_time(ctx, st)
    per_mb = st.per_microbatch_s + system.calibration.microbatch_overhead_s  # as train_cost: per microbatch slot
    return RankCosts(rank, layers, rk, pct, per_mb, dp_exposed + z3 + opt, dp_exposed, z3, opt,
                     st.total, st.cpu_bytes, st.stored_mb * st.inflight, st)


def fill_slots(layout: TrainLayout, work: TrainWorkload) -> float:
    """Fill and drain slots per step, ``n·(p−1)/v`` (``layout.fill_drain_slots``)."""
    return float(fill_drain_slots(work.global_batch, layout.dp, layout.pp, layout.interleave, work.local_batch))


def pipeline_factor(layout: TrainLayout, work: TrainWorkload) -> float:
    """``m + n·(p−1)/v``: how many per-microbatch times of the slowest rank the pipeline takes."""
    return work.global_batch / (layout.dp * layout.microbatch) + fill_slots(layout, work)


@dataclass(frozen=True, slots=True)
class StageSplitCost:
    """One per-stage plan of one global layout, evaluated in floating point."""

    stage_layers: list[int]
    recompute_layers: list[int]
    offload_pct: list[int]
    per_mb_s: list[float]
    memory_bytes: list[float]
    host_bytes_per_node: float
    pipeline_s: float
    bubble_s: float
    schedule_excess_s: float  # the pipeline's share from unequal model chunks (pipeline_sim.chunk_factor)
    tail_s: float
    step_time_s: float
    fits: bool
    costs: RankCosts


def check_split(model: ModelSpec, layout: TrainLayout, stage_layers: list[int]) -> None:
    """A pinned split must cover the model and give every model chunk a layer."""
    p, v = layout.pp, layout.interleave
    if len(stage_layers) != p:
        raise ShardplanError(f"stage-layers needs {p} counts (one per pipeline rank), got {len(stage_layers)}",
                             field="stage-layers")
    if sum(stage_layers) != model.num_layers:
        raise ShardplanError(f"stage-layers must sum to num_layers ({model.num_layers}), got {sum(stage_layers)}",
                             field="stage-layers")
    if min(stage_layers) < v:
        raise ShardplanError(f"stage-layers: every rank needs ≥ {v} layers (one per model chunk)",
                             field="stage-layers")
    if not supports_stage_split(model):
        raise ShardplanError("stage-layers: uneven splits need contiguous MoE layers (moe layer_freq 1)",
                             field="stage-layers")


def evaluate_split(model: ModelSpec, system: SystemSpec, work: TrainWorkload, layout: TrainLayout,
                   stage_layers: list[int], recompute_layers: list[int] | None = None,
                   offload_pct: list[int] | None = None, kinds: dict[str, KindCost] | None = None
                   ) -> StageSplitCost:
    """Step time and per-rank memory of ``layout`` with ``stage_layers`` layers on each pipeline rank.

    ``recompute_layers`` (per rank) defaults to the layout's count (all layers when unset); ``offload_pct``
    (per rank) to the layout's activation offload.
    """
    check_split(model, layout, stage_layers)
    p = layout.pp
    every = layout.recompute_layers if layout.recompute_layers is not None else 10**9
    rk = recompute_layers if recompute_layers is not None else [min(every, n) for n in stage_layers]
    pct = offload_pct if offload_pct is not None else [round(layout.offload_activations * 100)] * p
    c = rank_costs(model, system, work, layout, np.arange(p), np.array(stage_layers), np.array(rk), np.array(pct),
                   kinds, np.array(dense_first_per_rank(model, stage_layers)))
    worst = float(np.max(c.per_mb_s))
    m = work.global_batch // (layout.dp * layout.microbatch)
    chunks = 1.0
    if uneven_chunks(tuple(stage_layers), layout.interleave):  # train_cost's pipeline_sim factor, for this split
        m_s = round(m / float(pipeline_schedules(work.global_batch, layout.dp, layout.pp, work.local_batch)))
        chunks = chunk_factor(tuple(stage_layers), layout.interleave, m_s)
    pipeline = pipeline_factor(layout, work) * worst * chunks
    bubble = pipeline - m * worst
    tail = float(c.tail_s[0])
    step = (pipeline + tail) * (1 + system.software.step_overhead_fraction) + system.calibration.step_overhead_s
    host = float(np.max(c.host_bytes)) * system.gpus_per_node
    ok = bool(np.all(c.memory_bytes <= gpu_capacity(system, work))) and host <= host_capacity(system, work)
    return StageSplitCost(list(stage_layers), [int(min(k, n)) for k, n in zip(rk, stage_layers, strict=True)],
                          [int(x) for x in pct], [float(x) for x in c.per_mb_s],
                          [float(x) for x in c.memory_bytes], host, pipeline, bubble, pipeline * (1 - 1 / chunks), tail,
                          step, ok, c)

