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
from shardplan.costmodel.training.dp_sync import data_parallel, fsdp_under_pp, optimizer_time
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload
from shardplan.costmodel.training.memory import (
    embedding_activations,
    framework_memory,
    head_activations,
    mtp_activations,
    mtp_params,
)
from shardplan.costmodel.training.pipeline_sim import chunk_factors
from shardplan.costmodel.training.recompute_modules import MODULES, SelectiveTerms, selective_terms
from shardplan.costmodel.training.schedule_overlap import pipeline_send_s
from shardplan.costmodel.training.stages import (
    KindCost,
    StageShape,
    kind_costs,
    layer_sum,
    mixer_mean,
    model_counts,
    model_flops_parts,
    stage_counts,
    stage_shapes,
)
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.units import DTYPE_BYTES


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


def _phase(kind: KindCost, attr: str) -> np.ndarray:
    return getattr(kind, attr).time


def weight_bytes(work: TrainWorkload) -> float:
    """Bytes per stored weight: 16-bit copies for mixed precision, fp32 for fp32 training."""
    return DTYPE_BYTES["fp32"] if work.dtype == "fp32" else DTYPE_BYTES["bf16"]


def param_memory(ctx: Ctx, dense: np.ndarray, expert: np.ndarray, *, offloaded: bool = True
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU bytes of weights, gradients and optimizer state for ``dense`` + ``expert`` parameters held.

    ZeRO-1/2/3 shard optimizer state / + gradients / + weights over the data-parallel group (dp·cp;
    experts over the expert-data-parallel group, tp·cp·dp/(etp·ep)) (Rajbhandari et al. 2020); offloaded
    fractions live on the CPU instead.

    ZeRO-3 with pipeline parallelism is torchtitan's FSDP2 under PP (``space.ZERO2_PP``): weights are not
    resharded after forward nor after backward until the stage's last microbatch (torch pipelining
    ``backward_maybe_with_nosync``: ``set_reshard_after_backward(False)``, ``set_requires_gradient_sync(False)``),
    so the stage's unsharded weights stay gathered through the step, on top of their shards, and gradients
    accumulate unsharded (FSDP2 keeps them in the reduce dtype) until one reduce-scatter after the last backward.
    """
    r, w = ctx.rows, ctx.work
    dpz = (r.dp * r.cp).astype(float)
    edpz = r.edp  # expert-data-parallel ranks: tp·cp·dp / (etp·ep) (= dp·cp/ep when etp = tp)

    def sharded(stage_min: int) -> np.ndarray:
        return np.where(r.zero >= stage_min, dense / dpz + expert / edpz, dense + expert)

    keep_w = (1 - r.f_w) if offloaded else 1.0
    keep_o = (1 - r.f_opt) if offloaded else 1.0
    held = fsdp_under_pp(r)
    weights = sharded(3) * weight_bytes(w) * keep_w + np.where(held, (dense + expert) * weight_bytes(w), 0.0)
    grads = np.where(held, dense + expert, sharded(2)) * DTYPE_BYTES[w.grad_dtype]
    optimizer = sharded(1) * w.optimizer_state_bytes * keep_o
    return weights, grads, optimizer


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
    mods: SelectiveTerms  # the selective module set's change from the default

    @property
    def work_s(self) -> np.ndarray:
        """Forward plus backward per microbatch, recompute and sends included (``StageCost.fwd_s + bwd_s``)."""
        return (self.fwd + self.p2p) + (self.bwd + self.rc + self.p2p)


def stage_times(ctx: Ctx, k: dict[str, KindCost], shape: StageShape, m: np.ndarray) -> StageTimes:
    """The time part of ``_stage`` (bounds that need no memory take it alone)."""
    r = ctx.rows
    n, counts = shape.layers, stage_counts(shape)
    emb, head = shape.has_embedding, shape.has_head

    def per_layer(attr: str) -> np.ndarray:
        return layer_sum(k, counts, lambda c: _phase(c, attr))

    fwd = per_layer("fwd") + emb * k["embedding"].fwd.time + head * k["head"].fwd.time
    bwd = per_layer("bwd") + emb * k["embedding"].bwd.time + head * k["head"].bwd.time
    # Recompute: selective reruns core attention in every layer; full reruns the forward of the stage's first rk
    # layers (Megatron's uniform/block method), dense layers first as they precede MoE layers.
    full_layers = np.minimum(r.rk, n)
    dense, nmoe = counts["mlp"], counts["moe"]
    mlp, moe = k["mlp"], k.get("moe")
    rc_dense = np.minimum(full_layers, dense)
    rc_moe = np.minimum(full_layers - rc_dense, nmoe)
    # the recomputed layers' token mixers: the stage's mixer kinds in proportion (one kind: exactly its layers)
    full_fwd = full_layers * mixer_mean(k, counts, lambda c: c.fwd.time) + rc_dense * mlp.fwd.time \
        + (rc_moe * moe.fwd.time if moe else 0.0)
    mods = selective_terms(k, counts, r.sel)  # Megatron's --recompute-modules beyond its default, core_attn
    rc = np.where(r.rc == 1, layer_sum(k, counts, lambda c: c.selective.time) + mods.time,
                  np.where(r.rc == 2, full_fwd, 0.0))
    p2p = pipeline_send_s(ctx, m)  # one direction per microbatch, as the schedule exposes it
    return StageTimes(fwd, bwd, rc, p2p, rc_dense, rc_moe, mods)


def _stage(ctx: Ctx, k: dict[str, KindCost], shape: StageShape, m: np.ndarray) -> StageCost:
    r, w, sysm = ctx.rows, ctx.work, ctx.system
    n, counts = shape.layers, stage_counts(shape)
    emb, head = shape.has_embedding, shape.has_head
    t = stage_times(ctx, k, shape, m)
    fwd, bwd, rc, p2p, rc_dense, rc_moe, mods = t.fwd, t.bwd, t.rc, t.p2p, t.rc_dense, t.rc_moe, t.mods
    mlp, moe = k["mlp"], k.get("moe")

    # Parameters held, and the memory they take with ZeRO sharding and offload.
    def params_of(attr: str) -> np.ndarray:
        total = layer_sum(k, counts, lambda c: getattr(c.params, attr))
        return total + emb * getattr(k["embedding"].params, attr) + head * getattr(k["head"].params, attr)

    dense_p, expert_p = params_of("dense"), params_of("expert")
    w_bytes = weight_bytes(w)
    weights_full = (dense_p + expert_p) * w_bytes
    weights, grads, optimizer = param_memory(ctx, dense_p, expert_p)
    w_kept, _, opt_full = param_memory(ctx, dense_p, expert_p, offloaded=False)

    # Activations: layers storing everything vs. fully recomputed ones, times microbatches in flight.
    def acts(mode: str) -> np.ndarray:
        return layer_sum(k, counts, lambda c: getattr(c.acts, mode))

    mixer_saving = mixer_mean(k, counts, lambda c: c.acts.none - c.acts.full)

    def saving(kind: KindCost | None) -> np.ndarray | float:
        """Bytes one layer (its token mixer + this MLP kind) stores beyond its checkpointed input."""
        if kind is None:
            return 0.0
        return mixer_saving + kind.acts.none - kind.acts.full

    save_dense, save_moe = saving(mlp), saving(moe)
    kept = acts("none") - rc_dense * save_dense - rc_moe * save_moe  # the first rk layers keep only their input
    stored = np.where(r.rc == 0, acts("none"), np.where(r.rc == 1, acts("selective") - mods.freed, kept))
    stored = stored + emb * embedding_activations(ctx) + head * mtp_activations(ctx)
    p = r.pp.astype(float)
    interleave = np.where(r.v > 1, 1 + (p - 1) / (p * r.v), 1.0)  # Korthikanti et al. 2022 §4.2.3
    inflight = np.minimum(m / ctx.schedules, p - shape.index) * interleave  # per schedule (1F1B warm-up)
    # Transients at the peak, one at a time: the layer being recomputed holds its full activations, less its
    # input (already stored as its checkpoint); the LM head's logits are freed by the loss backward before the
    # last layer is recomputed, so the two never coexist (Megatron's backward order).
    recomputed = np.where(r.rc == 2, np.maximum(np.where(rc_dense > 0, save_dense, 0.0),
                                                 np.where(rc_moe > 0, save_moe, 0.0)), (r.rc == 1) * mods.transient)
    working = np.maximum(recomputed, head * head_activations(ctx))
    # ZeRO-3/FSDP gathers one module (wrapping unit) at a time: a transformer layer, the embedding or the output
    # layer (torchtitan and Megatron-FSDP wrap each); the buffer is the largest unit the stage holds.
    layer_unit = layer_sum(k, counts, lambda c: c.params.dense + c.params.expert) / np.maximum(n, 1)
    head_unit = k["head"].params.total
    if w.mtp_layers:  # the head and each MTP module are separate units (memory.mtp_params: all modules)
        mtp = mtp_params(ctx).total
        head_unit = np.maximum(head_unit - mtp, mtp / w.mtp_layers)
    largest = np.maximum(layer_unit, np.maximum(emb * k["embedding"].params.total, head * head_unit))
    gathered = np.where((r.zero >= 3) & ~fsdp_under_pp(r), largest * w_bytes, 0.0)  # under PP: all kept (weights)
    activations = stored * inflight * (1 - r.f_act) + working + gathered
    framework = np.broadcast_to(framework_memory(ctx), np.shape(activations)).astype(float)

    # Offload traffic per microbatch over PCIe (weights streamed for every pass, activations out and back).
    passes = 2 + ((r.rc == 2) & (r.rk > 0))  # full recompute of no layer streams no third time
    pcie_bw = sysm.pcie.effective_bytes_per_s
    xfer = (weights_full * r.f_w * passes + 2 * stored * r.f_act) / pcie_bw
    off_exposed = np.maximum(xfer - (fwd + bwd + rc), 0.0)
    cpu = opt_full * r.f_opt + weights_full * r.f_w + stored * inflight * r.f_act
    return StageCost(shape, fwd + p2p, bwd + rc + p2p, rc, 2 * p2p, off_exposed, weights, grads, optimizer,
                     activations, framework, dense_p + expert_p, expert_p, cpu, inflight, stored,
                     np.broadcast_to(save_dense, n.shape), np.broadcast_to(save_moe, n.shape), w_kept, opt_full)


def _flops(ctx: Ctx, k: dict[str, KindCost], m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    rc = tokens * np.where(r.rc == 1, np.where(core_on, f_rc.attention_fwd, 0.0),
                           np.where(r.rc == 2, full_frac * f_rc.layers_fwd, 0.0))
    counts = model_counts(mdl)
    per_mb = layer_sum(k, counts, lambda c: c.fwd.flops + c.bwd.flops)
    fwd_all = layer_sum(k, counts, lambda c: c.fwd.flops)
    per_mb = per_mb + sum(k[x].fwd.flops + k[x].bwd.flops for x in ("embedding", "head"))
    core = layer_sum(k, counts, lambda c: c.selective.flops)  # core attention's rerun, as executed
    mods = selective_terms(k, counts, r.sel).flops  # the set's change from the default (less core when dropped)
    rc_exec = np.where(r.rc == 1, core + mods, np.where(r.rc == 2, full_frac * fwd_all, 0.0))
    executed = m * r.dp * r.cp * r.tp * (per_mb + rc_exec)
    others = mods + np.where(core_on, 0.0, core)  # the other modules alone (a set without core_attn drops its rerun)
    return model, model + rc + np.where(r.rc == 1, m * r.dp * r.cp * r.tp * others, 0.0), executed


def train_cost(model: ModelSpec, system: SystemSpec, work: TrainWorkload, rows: LayoutArrays, *,
               ops: bool = True, kinds: dict[str, KindCost] | None = None) -> TrainCost:
    """Time and memory of every layout row (valid: ``space.validate_layout``); ``ops``: see ``kind_costs``.
    ``kinds``: the rows' per-kind costs when the caller has them (rows that differ only in recompute, module set
    or offload share them: ``stages.KIND_COLUMNS``)."""
    ctx = Ctx(model, system, work, rows)
    k = kind_costs(ctx, ops=ops) if kinds is None else kinds
    m = (rows.gb / (rows.dp * rows.mb)).astype(float)
    stages = [_stage(ctx, k, shape, m) for shape in stage_shapes(ctx)]
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
    model_flops, hw_flops, exec_flops = _flops(ctx, k, m)
    peak = np.max(np.stack([np.where(s.shape.exists, s.total, 0.0) for s in stages]), axis=0)
    host_gpu = np.max(np.stack([np.where(s.shape.exists, s.cpu_bytes, 0.0) for s in stages]), axis=0)

    # Exposed collectives are the slowest stage's (the one that sets the pipeline's pace), so that a step's parts
    # (validation.optimum.step_parts) add up along the path that times it.
    slowest = np.argmax(np.stack([np.where(s.shape.exists, s.per_microbatch_s, -np.inf) for s in stages]), axis=0)

    def comm_exposed(attr: str) -> np.ndarray:
        def both(kind: str) -> np.ndarray:
            return getattr(k[kind].fwd, attr) + getattr(k[kind].bwd, attr)
        # the layers' collectives and, on the stages that hold them, the embedding's and the LM head's (vocab-parallel
        # lookup all-reduce, the head's SP gather and loss all-reduces), as the stage times count them
        per_stage = np.stack([layer_sum(k, stage_counts(s.shape), lambda c: getattr(c.fwd, attr) + getattr(c.bwd, attr))
                              + s.shape.has_embedding * both("embedding") + s.shape.has_head * both("head")
                              + np.zeros_like(m) for s in stages])
        return slots * np.take_along_axis(per_stage, slowest[None, :], axis=0)[0]
    return TrainCost(
        ctx=ctx, kinds=k, stages=stages, num_microbatches=m, pipeline_s=pipeline, bubble_s=bubble,
        dp_exposed_s=dp_exposed, zero3_exposed_s=z3, optimizer_s=opt, step_time_s=step,
        model_flops=model_flops, hardware_flops=hw_flops, executed_flops=exec_flops, peak_memory=peak,
        host_bytes_per_node=host_gpu * system.gpus_per_node,
        tp_exposed_s=comm_exposed("comm_tp"), cp_exposed_s=comm_exposed("comm_cp"),
        ep_exposed_s=comm_exposed("comm_ep"), pp_exposed_s=slots * first.p2p_s, host_s=comm_exposed("host"),
    )
