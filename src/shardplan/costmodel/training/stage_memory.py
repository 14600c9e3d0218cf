"""A representative stage's memory per GPU, for many layouts at once: parameters, gradients and optimizer state with
ZeRO sharding and offload, stored activations with recompute and microbatches in flight, transients, framework.

``step._stage`` composes it with the stage's time; ``stage_memory`` gives it alone (the same arrays), for the
table's recompute-layer fix and the per-stage bounds' fit test, which read no time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardplan.costmodel.core.layouts import layer_kind_names
from shardplan.costmodel.training.cp_comm import gather_transient
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.dp_sync import fsdp_under_pp
from shardplan.costmodel.training.layers import core_attention
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload
from shardplan.costmodel.training.memory import (
    cached_mtp_params,
    cached_weight_bytes,
    embedding_activations,
    framework_memory,
    head_activations,
    mtp_activations,
    mtp_params,
    primary_weight_bytes,
)
from shardplan.costmodel.training.recompute_modules import module_masks
from shardplan.costmodel.training.stage_sums import StageSums, stage_sums
from shardplan.costmodel.training.stages import KindCost, StageShape, stage_counts
from shardplan.units import DTYPE_BYTES


def weight_bytes(work: TrainWorkload) -> float:
    """Bytes per stored weight: 16-bit copies for mixed precision, fp32 for fp32 training. A transformer layer's
    quantized copies, beside its 16-bit weight or in its place (fp8 primary weights), are ``memory.cached_weight_bytes``
    (the embedding and the LM head stay 16-bit)."""
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
    return _param_memory(ctx, dense, expert, (offloaded,))[0]


def _param_memory(ctx: Ctx, dense: np.ndarray, expert: np.ndarray, variants: tuple[bool, ...]
                  ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``param_memory`` with ``offloaded`` each of ``variants``, the parts they share computed once."""
    r, w = ctx.rows, ctx.work

    def per_row() -> tuple[np.ndarray, ...]:  # what every stage of the rows shares
        # expert-data-parallel ranks: tp·cp·dp / (etp·ep) (= dp·cp/ep when etp = tp)
        return ((r.dp * r.cp).astype(float), r.edp, fsdp_under_pp(r), r.zero >= 1, r.zero >= 2, r.zero >= 3,
                1 - r.f_w, 1 - r.f_opt)

    dpz, edpz, held, zero1, zero2, zero3, kept_w, kept_o = once(ctx, "param_rows", per_row)
    split, whole = dense / dpz + expert / edpz, dense + expert
    w_bytes = weight_bytes(w)
    w_sharded = np.where(zero3, split, whole) * w_bytes
    o_sharded = np.where(zero1, split, whole) * w.optimizer_state_bytes
    w_held = np.where(held, whole * w_bytes, 0.0)
    grads = np.where(held, whole, np.where(zero2, split, whole)) * DTYPE_BYTES[w.grad_dtype]
    out = []
    for offloaded in variants:
        keep_w = kept_w if offloaded else 1.0
        keep_o = kept_o if offloaded else 1.0
        out.append((w_sharded * keep_w + w_held, grads, o_sharded * keep_o))
    return out


def once(ctx: Ctx, key: str, make: Callable[[], Any], arg: object = None) -> Any:
    """``make()`` once per context and ``arg`` (that object), then shared (``Ctx.memo``): per-row terms every stage
    of the rows reads (a context never changes, and no caller writes into what it returns)."""
    hit = ctx.memo.get(key)
    if hit is None or hit[0] is not arg:
        hit = ctx.memo[key] = (arg, make())  # holds ``arg``: its id is not reused while the entry lives
    return hit[1]


def row_masks(ctx: Ctx) -> dict[str, np.ndarray]:
    """The rows' selective recompute modules (``recompute_modules.module_masks``), once per context."""
    return once(ctx, "module_masks", lambda: module_masks(ctx.rows.sel))


def sums_of(ctx: Ctx, k: dict[str, KindCost] | None, shape: StageShape, sums: StageSums | None) -> StageSums:
    """``sums``, or the stage's sums over the rows' own per-kind costs ``k`` (given when ``sums`` is not)."""
    if sums is not None:
        return sums
    if k is None:
        raise ValueError("a stage needs its per-kind costs or their sums")
    return stage_sums(k, shape, row_masks(ctx), np.shape(ctx.rows.sel))


def full_recompute(r: LayoutArrays, shape: StageShape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A stage's fully recomputed layers (its first ``rk``, dense layers first as they precede MoE layers), and of
    them the dense and the MoE ones."""
    counts = stage_counts(shape)
    full_layers = np.minimum(r.rk, shape.layers)
    dense, nmoe = counts["mlp"], counts["moe"]
    rc_dense = np.minimum(full_layers, dense)
    rc_moe = np.minimum(full_layers - rc_dense, nmoe)
    return full_layers, rc_dense, rc_moe


@dataclass(frozen=True, slots=True)
class StageMemory:
    """One representative stage's memory per GPU (``step.StageCost``'s memory fields, and what its offload reads)."""

    shape: StageShape
    weights: np.ndarray
    grads: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    framework: np.ndarray
    inflight: np.ndarray
    stored_mb: np.ndarray
    save_dense: np.ndarray
    save_moe: np.ndarray
    dense_params: np.ndarray
    expert_params: np.ndarray
    weights_full: np.ndarray  # 16-bit (or fp32) bytes of every weight held, before ZeRO and offload
    weights_on_gpu_if_kept: np.ndarray
    optimizer_if_kept: np.ndarray

    @property
    def total(self) -> np.ndarray:  # StageCost.total's sum, in its order
        return self.weights + self.grads + self.optimizer + self.activations + self.framework


def stage_memory(ctx: Ctx, k: dict[str, KindCost] | None, shape: StageShape, m: np.ndarray,
                 sums: StageSums | None = None) -> StageMemory:
    """``step._stage``'s memory of the stage, without its time (the same arrays, bit for bit)."""
    sums = sums_of(ctx, k, shape, sums)
    _, rc_dense, rc_moe = full_recompute(ctx.rows, shape)
    return memory_of(ctx, sums, shape, m, rc_dense, rc_moe)


def _cp_gather(ctx: Ctx) -> np.ndarray | float:
    """``cp_comm.gather_transient`` of the model's full-attention layers (none: zero)."""
    if "attention" not in layer_kind_names(ctx.model):
        return 0.0
    return gather_transient(ctx, core_attention(ctx))


def memory_of(ctx: Ctx, sums: StageSums, shape: StageShape, m: np.ndarray, rc_dense: np.ndarray,
              rc_moe: np.ndarray) -> StageMemory:
    """The stage's memory from its sums (its selective module set's terms among them) and its fully recomputed
    layers."""
    r, w = ctx.rows, ctx.work
    n = shape.layers
    emb, head = shape.has_embedding, shape.has_head

    # Parameters held, and the memory they take with ZeRO sharding and offload.
    dense_p, expert_p = sums.dense_params, sums.expert_params
    w_bytes = weight_bytes(w)
    weights_full = (dense_p + expert_p) * w_bytes
    (weights, grads, optimizer), (w_kept, _, opt_full) = _param_memory(ctx, dense_p, expert_p, (True, False))
    # what offload can move: not ZeRO-3-under-PP's whole weights kept gathered beside their shards (_param_memory)
    w_kept = w_kept - np.where(fsdp_under_pp(r), weights_full, 0.0)
    cache = once(ctx, "weight_cache", lambda: cached_weight_bytes(ctx))  # the layers' quantized copies
    if cache.any():
        mtp = once(ctx, "cached_mtp", lambda: cached_mtp_params(ctx)) if w.mtp_layers else 0.0
        linear = sums.layer_unit * n + head * mtp
        weights = weights + cache * linear
        primary = once(ctx, "primary_weight", lambda: primary_weight_bytes(ctx))
        w_kept = w_kept + primary * linear  # fp8 primary weights' copies go with an offloaded share

    # Activations: layers storing everything vs. fully recomputed ones, times microbatches in flight.
    save_dense, save_moe = sums.save_dense, sums.save_moe
    acts_none = sums.acts_none
    kept = acts_none - rc_dense * save_dense - rc_moe * save_moe  # the first rk layers keep only their input
    stored = np.where(r.rc == 0, acts_none, np.where(r.rc == 1, sums.selective_stored, kept))
    stored = stored + emb * once(ctx, "emb_acts", lambda: embedding_activations(ctx)) \
        + head * once(ctx, "mtp_acts", lambda: mtp_activations(ctx))
    p = r.pp.astype(float)
    interleave = np.where(r.v > 1, 1 + (p - 1) / (p * r.v), 1.0)  # Korthikanti et al. 2022 §4.2.3
    schedules = once(ctx, "schedules", lambda: ctx.schedules)
    inflight = np.minimum(m / schedules, p - shape.index) * interleave  # per schedule (1F1B warm-up)
    # Transients at the peak, one at a time: the layer being recomputed holds its full activations, less its
    # input (already stored as its checkpoint); the LM head's logits are freed by the loss backward before the
    # last layer is recomputed, so the two never coexist (Megatron's backward order).
    recomputed = np.where(r.rc == 2, np.maximum(np.where(rc_dense > 0, save_dense, 0.0),
                                                 np.where(rc_moe > 0, save_moe, 0.0)),
                           (r.rc == 1) * sums.selective_transient)
    # all_gather CP's gathered K/V and dK/dV live in one attention layer's backward, beside a recomputed layer's
    gather = once(ctx, "cp_gather", lambda: _cp_gather(ctx)) if n.any() else 0.0
    working = np.maximum(recomputed + np.where(n > 0, gather, 0.0),
                         head * once(ctx, "head_acts", lambda: head_activations(ctx)))
    # ZeRO-3/FSDP gathers one module (wrapping unit) at a time: a transformer layer, the embedding or the output
    # layer (torchtitan and Megatron-FSDP wrap each); the buffer is the largest unit the stage holds.
    head_unit = sums.head_params
    if w.mtp_layers:  # the head and each MTP module are separate units (memory.mtp_params: all modules)
        mtp = mtp_params(ctx).total
        head_unit = np.maximum(head_unit - mtp, mtp / w.mtp_layers)
    largest = np.maximum(sums.layer_unit, np.maximum(emb * sums.embedding_params, head * head_unit))
    gathered = np.where((r.zero >= 3) & ~fsdp_under_pp(r), largest * w_bytes, 0.0)  # under PP: all kept (weights)
    activations = stored * inflight * (1 - r.f_act) + working + gathered
    framework = once(ctx, "framework", lambda: framework_memory(ctx))
    framework = np.broadcast_to(framework, np.shape(activations)).astype(float)
    return StageMemory(shape, weights, grads, optimizer, activations, framework, inflight, stored,
                       np.broadcast_to(save_dense, n.shape), np.broadcast_to(save_moe, n.shape), dense_p, expert_p,
                       weights_full, w_kept, opt_full)
