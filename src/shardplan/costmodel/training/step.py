"""Training step time and memory of many layouts at once (numpy columns, one row per layout).

``train_cost`` is the single implementation: ``evaluate.estimate_training`` calls it with one row and
``table.build_train_table`` with thousands, so a table row equals the evaluation of that layout.

Step composition (per iteration):
- pipeline: ``(m + n·(p−1)/v)·max_s(F_s + B_s)`` for m microbatches, p stages, v interleaved chunks, n schedules
  per step (``layout.pipeline_schedules``; Narayanan et al. 2021 §2.2: bubble fraction ``(p−1)/(v·m)``), where
  F/B are a stage's forward and backward time per microbatch including recompute, exposed TP/CP/EP collectives,
  pipeline sends and exposed offload transfers; times the simulated schedule's excess when a rank's layers do not
  divide into its v chunks (``pipeline_sim.chunk_factor``);
- data-parallel gradient reduction (all-reduce, or reduce-scatter + all-gather with ZeRO), exposed
  unless overlapped with the last backward; ZeRO-3 parameter gathers per microbatch;
- the optimizer step, memory-bound on the GPU or on the CPU for offloaded state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.dp_sync import data_parallel, optimizer_time
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload
from shardplan.costmodel.training.pipeline_sim import chunk_factors
from shardplan.costmodel.training.recompute_modules import MODULES
from shardplan.costmodel.training.schedule_overlap import pipeline_send_s
from shardplan.costmodel.training.stage_memory import full_recompute, memory_of, once, row_masks, sums_of
from shardplan.costmodel.training.stage_sums import FlopSums, SharedSums, StageSums, comm_sums, flop_sums, stage_sums
from shardplan.costmodel.training.stages import (
    KindCost,
    KindTable,
    StageShape,
    kind_costs,
    kind_table,
    model_counts,
    model_flops_parts,
    stage_shapes,
)
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class StageCost:
    """One representative stage of every row: time per microbatch and memory per GPU by category."""

    shape: StageShape
    fwd_s: np.ndarray
    bwd_s: np.ndarray  # includes recompute
    recompute_s: np.ndarray
    p2p_s: np.ndarray
    offload_exposed_s: np.ndarray
    weights: np.ndarray
    grads: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    framework: np.ndarray
    params: np.ndarray  # parameters held (before ZeRO sharding)
    expert_params: np.ndarray  # of which expert weights (sharded over the expert-data-parallel ranks)
    cpu_bytes: np.ndarray  # offloaded to host memory
    # What the planner's closed-form memory fixes need (bytes per GPU):
    inflight: np.ndarray  # microbatches whose activations are stored at once
    stored_mb: np.ndarray  # stored activations of one microbatch (all layers of the stage)
    save_dense: np.ndarray  # bytes a dense layer stores beyond its input (saved by recomputing it)
    save_moe: np.ndarray  # the same for an MoE layer (0 without MoE)
    weights_on_gpu_if_kept: np.ndarray  # weights bytes without weight offload
    optimizer_if_kept: np.ndarray  # optimizer bytes without optimizer offload

    @property
    def total(self) -> np.ndarray:
        return self.weights + self.grads + self.optimizer + self.activations + self.framework

    @property
    def per_microbatch_s(self) -> np.ndarray:
        return self.fwd_s + self.bwd_s + self.offload_exposed_s


@dataclass(frozen=True, slots=True)
class TrainCost:
    """Everything the planner and the report need, one entry per row."""

    ctx: Ctx
    kinds: dict[str, KindCost]
    stages: list[StageCost]
    num_microbatches: np.ndarray
    pipeline_s: np.ndarray
    bubble_s: np.ndarray
    dp_exposed_s: np.ndarray
    zero3_exposed_s: np.ndarray
    optimizer_s: np.ndarray
    step_time_s: np.ndarray
    model_flops: np.ndarray  # per step, whole cluster (no recompute, full s×s attention)
    hardware_flops: np.ndarray  # model FLOPs plus recompute, same convention (HFU)
    executed_flops: np.ndarray  # per step, whole cluster, as the kernels run them (causal skipping, recompute)
    peak_memory: np.ndarray  # max over stages, bytes per GPU
    host_bytes_per_node: np.ndarray
    tp_exposed_s: np.ndarray
    cp_exposed_s: np.ndarray
    ep_exposed_s: np.ndarray
    host_s: np.ndarray  # GPU idle on MoE host synchronisations, the slowest stage's
    pp_exposed_s: np.ndarray

    @property
    def binding_stage(self) -> np.ndarray:
        totals = np.stack([np.where(s.shape.exists, s.total, -1.0) for s in self.stages])
        return np.argmax(totals, axis=0)


@dataclass(frozen=True, slots=True)
class StageTimes:
    """One representative stage's time per microbatch: forward, backward and recompute (without the sends), one
    direction's pipeline sends; with what the stage's memory reads of its recompute (``_stage``)."""

    fwd: np.ndarray
    bwd: np.ndarray
    rc: np.ndarray
    p2p: np.ndarray
    rc_dense: np.ndarray  # fully recomputed dense layers
    rc_moe: np.ndarray  # fully recomputed MoE layers

    @property
    def work_s(self) -> np.ndarray:
        """Forward plus backward per microbatch, recompute and sends included (``StageCost.fwd_s + bwd_s``)."""
        return (self.fwd + self.p2p) + (self.bwd + self.rc + self.p2p)


def stage_times(ctx: Ctx, k: dict[str, KindCost] | None, shape: StageShape, m: np.ndarray,
                sums: StageSums | None = None) -> StageTimes:
    """The time part of ``_stage`` (bounds that need no memory take it alone); ``sums``: the stage's sums over the
    rows' per-kind costs ``k`` when the caller has them (``stage_sums``)."""
    r = ctx.rows
    sums = sums_of(ctx, k, shape, sums)
    # Recompute: selective reruns core attention in every layer; full reruns the forward of the stage's first rk
    # layers (Megatron's uniform/block method), dense layers first as they precede MoE layers.
    full_layers, rc_dense, rc_moe = full_recompute(r, shape)
    # the recomputed layers' token mixers: the stage's mixer kinds in proportion (one kind: exactly its layers)
    full_rerun = full_layers * sums.mixer_rerun + rc_dense * sums.mlp_rerun \
        + (rc_moe * sums.moe_rerun if sums.moe_rerun is not None else 0.0)
    # selective: core attention, and Megatron's --recompute-modules beyond its default (core_attn)
    rc = np.where(r.rc == 1, sums.selective_s, np.where(r.rc == 2, full_rerun, 0.0))
    p2p = once(ctx, "p2p", lambda: pipeline_send_s(ctx, m), m)  # one direction per microbatch, as the schedule sees
    return StageTimes(sums.fwd, sums.bwd, rc, p2p, rc_dense, rc_moe)


def _stage(ctx: Ctx, k: dict[str, KindCost] | None, shape: StageShape, m: np.ndarray,
           sums: StageSums | None = None) -> StageCost:
    r, sysm = ctx.rows, ctx.system
    sums = sums_of(ctx, k, shape, sums)
    t = stage_times(ctx, k, shape, m, sums)
    fwd, bwd, rc, p2p = t.fwd, t.bwd, t.rc, t.p2p
    mem = memory_of(ctx, sums, shape, m, t.rc_dense, t.rc_moe)
    stored, inflight, weights_full = mem.stored_mb, mem.inflight, mem.weights_full

    # Offload traffic per microbatch over PCIe (weights streamed for every pass, activations out and back).
    passes = 2 + ((r.rc == 2) & (r.rk > 0))  # full recompute of no layer streams no third time
    pcie_bw = sysm.pcie.effective_bytes_per_s
    xfer = (weights_full * r.f_w * passes + 2 * stored * r.f_act) / pcie_bw
    off_exposed = np.maximum(xfer - (fwd + bwd + rc), 0.0)
    cpu = mem.optimizer_if_kept * r.f_opt + weights_full * r.f_w + stored * inflight * r.f_act
    return StageCost(shape, fwd + p2p, bwd + rc + p2p, rc, 2 * p2p, off_exposed, mem.weights, mem.grads,
                     mem.optimizer, mem.activations, mem.framework, mem.dense_params + mem.expert_params,
                     mem.expert_params, cpu, inflight, stored, mem.save_dense, mem.save_moe,
                     mem.weights_on_gpu_if_kept, mem.optimizer_if_kept)


def _flops(ctx: Ctx, k: dict[str, KindCost], m: np.ndarray, sums: FlopSums | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FLOPs per step, whole cluster: model, hardware, and as executed by the kernels.

    Model FLOPs (MFU; Megatron/PaLM convention, Narayanan et al. 2021 Eq. 3 without recompute): 6 per active
    weight per token, 12·L·s·a·d per token for attention scores and context over the whole s×s matrix (causal
    masking is not discounted, as PaLM, torchtitan and Megatron-LM before 8873b55d6a (2025-03-06) count), 6·V·h for
    the LM head. Hardware FLOPs
    (HFU; Korthikanti et al. 2022 §6.3): the same count plus the forward work recompute reruns: full recompute and
    core_attn in the model convention, the other recompute modules and policies as executed (the same count for
    GEMMs; attention a policy reruns at its kernel's executed FLOPs), so HFU ≥ MFU. Executed FLOPs: what the
    kernels run (flash skips the masked half), for the per-layer table.
    """
    mdl, r, w = ctx.model, ctx.rows, ctx.work
    tokens = r.gb * w.seq_len
    f = model_flops_parts(mdl, w.seq_len, w.mtp_layers)
    model = tokens * f.total
    # Recompute in the same convention: full reruns the forward of the recomputed layers (2 per weight per
    # token plus the token mixers' forward); selective with core_attn reruns core attention's forward, flash or
    # unfused (Megatron-Core checkpoints it whatever the kernel).
    full_frac = np.minimum(r.rk * r.pp, mdl.num_layers) / mdl.num_layers
    core_on = (r.sel >> MODULES.index("core_attn") & 1) == 1
    f_rc = model_flops_parts(mdl, w.seq_len) if w.mtp_layers else f  # the MTP modules are not recomputed
    fs = sums if sums is not None else flop_sums(k, model_counts(mdl), row_masks(ctx), np.shape(r.sel))
    per_mb, fwd_all, core = fs.per_mb, fs.fwd_all, fs.core  # core: core attention's rerun, as executed
    mods = fs.mods  # the set's change from the default (less core when dropped)
    gpus = m * r.dp * r.cp * r.tp
    # early stop's skipped GEMMs (``layers.full_rerun_ops``) count the same in both conventions; spread over the
    # layers in proportion, as the rerun's other FLOPs are (the stages recompute dense layers first: with partial
    # recompute of a dense-first MoE model the two differ by about 0.1%)
    skipped = full_frac * fs.skipped
    rc = np.where(r.rc == 1, tokens * np.where(core_on, f_rc.attention_fwd, 0.0),
                  np.where(r.rc == 2, tokens * full_frac * f_rc.layers_fwd - gpus * skipped, 0.0))
    rc_exec = np.where(r.rc == 1, core + mods, np.where(r.rc == 2, full_frac * fwd_all - skipped, 0.0))
    executed = gpus * (per_mb + rc_exec)
    others = mods + np.where(core_on, 0.0, core)  # the other modules alone (a set without core_attn drops its rerun)
    return model, model + rc + np.where(r.rc == 1, gpus * others, 0.0), executed


def spread_sums(ctx: Ctx, table: KindTable) -> tuple[list[StageShape], list[StageSums]]:
    """The rows' representative stages (``stages.stage_shapes``) and their sums (``stage_sums``), summed once per
    group of rows with the same per-kind costs (``table``: the rows') and module set and spread to the rows: the same
    arrays as summing on every row (a stage's shape follows from the row's pp)."""
    shapes, sums, _, _ = _spread(ctx, table, everything=False)
    return shapes, sums


def _spread(ctx: Ctx, table: KindTable, *, everything: bool
            ) -> tuple[list[StageShape], list[StageSums], list[dict[str, np.ndarray]], FlopSums | None]:
    """``spread_sums``, with (``everything``) the stages' collective sums and the model's FLOP sums."""
    shared = SharedSums.of(table, ctx.rows.sel, [])
    n, masks, spread = len(shared.first), shared.masks, shared.spread
    bases = stage_shapes(Ctx(ctx.model, ctx.system, ctx.work, ctx.rows.take(shared.first)))
    shapes = [spread(shape) for shape in bases]
    sums = [spread(stage_sums(shared.kinds, shape, masks, (n,))) for shape in bases]
    if not everything:
        return shapes, sums, [], None
    comm = [spread(comm_sums(shared.kinds, shape)) for shape in bases]
    return shapes, sums, comm, spread(flop_sums(shared.kinds, model_counts(ctx.model), masks, (n,)))


def train_cost(model: ModelSpec, system: SystemSpec, work: TrainWorkload, rows: LayoutArrays, *,
               ops: bool = True, kinds: dict[str, KindCost] | KindTable | None = None) -> TrainCost:
    """Time and memory of every layout row (valid: ``space.validate_layout``); ``ops``: see ``kind_costs``.
    ``kinds``: the rows' per-kind costs when the caller has them (rows that differ only in recompute, module set
    or offload share them: ``stages.KIND_COLUMNS``), or a ``stages.KindTable`` of them, whose distinct rows are then
    the cost's ``kinds`` (their ``index`` names each row's).

    Without operator lists the stages' sums over their layers (``stage_sums``), which depend on the per-kind costs
    and the stage's shape alone, are summed once per distinct row and spread to the rows: the same arithmetic."""
    ctx = Ctx(model, system, work, rows)
    table = kinds if isinstance(kinds, KindTable) else kind_table(ctx) if kinds is None and not ops \
        and len(rows) > 1 else None
    m = (rows.gb / (rows.dp * rows.mb)).astype(float)
    masks, row_shape = row_masks(ctx), np.shape(rows.sel)
    if table is None:
        k = kind_costs(ctx, ops=ops) if kinds is None else kinds
        shapes = stage_shapes(ctx)
        sums = [stage_sums(k, shape, masks, row_shape) for shape in shapes]
        comm = [comm_sums(k, shape) for shape in shapes]
        fsums = flop_sums(k, model_counts(model), masks, row_shape)
    else:
        k = table.kinds if kinds is table else table.expand()
        shapes, sums, comm, fsums = _spread(ctx, table, everything=True)
    stages = [_stage(ctx, k, shape, m, ss) for shape, ss in zip(shapes, sums, strict=True)]
    per_mb = np.max(np.stack([np.where(s.shape.exists, s.per_microbatch_s, 0.0) for s in stages]), axis=0)
    cal = system.calibration
    per_mb = per_mb + cal.microbatch_overhead_s  # calibrated: per microbatch per stage slot
    slots = m + ctx.fill_slots  # m microbatch slots plus (p−1)/v of fill and drain per schedule
    # Model chunks of unequal size (a rank's layers not a multiple of v) stall the interleaved schedule in the
    # steady state too: the simulated schedule's excess over the closed form (pipeline_sim), counted as bubble.
    chunks = chunk_factors(model.num_layers, rows.pp, rows.v, m / ctx.schedules)
    pipeline = slots * per_mb * chunks
    bubble = pipeline - m * per_mb
    dp_exposed, z3 = data_parallel(ctx, first := stages[0], m)
    opt = optimizer_time(ctx, first)
    base = pipeline + dp_exposed + z3 + opt
    step = base * (1 + system.software.step_overhead_fraction) + cal.step_overhead_s
    model_flops, hw_flops, exec_flops = _flops(ctx, k, m, fsums)
    peak = np.max(np.stack([np.where(s.shape.exists, s.total, 0.0) for s in stages]), axis=0)
    host_gpu = np.max(np.stack([np.where(s.shape.exists, s.cpu_bytes, 0.0) for s in stages]), axis=0)

    # Exposed collectives are the slowest stage's (the one that sets the pipeline's pace), so that a step's parts
    # (validation.optimum.step_parts) add up along the path that times it.
    slowest = np.argmax(np.stack([np.where(s.shape.exists, s.per_microbatch_s, -np.inf) for s in stages]), axis=0)

    def comm_exposed(attr: str) -> np.ndarray:
        per_stage = np.stack([c[attr] + np.zeros_like(m) for c in comm])
        return slots * np.take_along_axis(per_stage, slowest[None, :], axis=0)[0]
    return TrainCost(
        ctx=ctx, kinds=k, stages=stages, num_microbatches=m, pipeline_s=pipeline, bubble_s=bubble,
        dp_exposed_s=dp_exposed, zero3_exposed_s=z3, optimizer_s=opt, step_time_s=step,
        model_flops=model_flops, hardware_flops=hw_flops, executed_flops=exec_flops, peak_memory=peak,
        host_bytes_per_node=host_gpu * system.gpus_per_node,
        tp_exposed_s=comm_exposed("comm_tp"), cp_exposed_s=comm_exposed("comm_cp"),
        ep_exposed_s=comm_exposed("comm_ep"), pp_exposed_s=slots * first.p2p_s, host_s=comm_exposed("host"),
    )
